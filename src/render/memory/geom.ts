/**
 * The memory timeline's pure helpers: byte and time text, axis ticks, hit-testing and the
 * tooltip's sentence. No DOM.
 */
import { CATEGORIES, CATEGORY_COLORS, CATEGORY_PATTERNS, NO_ID, NO_SMALL, type MemoryTimeline, type StorageDetail } from '../../model/wire';
import { bytesShort, scaledBytes } from '../common/format';
import { type Envelope, grown, type MemoryStore, NCAT, type XMode } from './data';

/** Okabe–Ito per category and a pattern each, so colour is never the only cue (forgeviz/model/memory.py). */
export { CATEGORY_COLORS, CATEGORY_PATTERNS };
export type PatternKind = (typeof CATEGORY_PATTERNS)[number];

export { bytesShort };

/** "12.0 MiB", "512 B": one decimal (labels such as the peak's). */
export function bytesLabel(n: number): string {
  if (!Number.isFinite(n)) {
    return '—';
  }
  const [v, u] = scaledBytes(n);
  return u === 'B' ? `${Math.round(v)} B` : `${v.toFixed(1)} ${u}`;
}

/** "1,234,567 bytes (1.18 MiB)" */
export function bytesExact(n: number): string {
  const s = `${Math.round(n).toLocaleString('en-US')} byte${n === 1 ? '' : 's'}`;
  return Math.abs(n) >= 1024 ? `${s} (${bytesShort(n)})` : s;
}

/** y ticks in bytes at power-of-two steps: 0, 32 MiB, 64 MiB, ... up to ``max``. */
export function byteTicks(max: number, target = 5): number[] {
  if (!(max > 0)) {
    return [0];
  }
  const step = 2 ** Math.ceil(Math.log2(max / target));
  const out: number[] = [];
  for (let v = 0; v <= max * (1 + 1e-9); v += step) {
    out.push(v);
  }
  return out;
}

/** The top of the y axis: the max rounded up to the next tick step. */
export function niceByteMax(max: number, target = 5): number {
  if (!(max > 0)) {
    return 1024;
  }
  const step = 2 ** Math.ceil(Math.log2(max / target));
  return Math.ceil((max * 1.04) / step) * step;
}

/** Decimal ticks (1, 2, 5 × 10^k) over [lo, hi]. */
export function decimalTicks(lo: number, hi: number, target = 6): { ticks: number[]; step: number } {
  const span = hi - lo;
  if (!(span > 0) || !Number.isFinite(span)) {
    return { ticks: [lo], step: 1 };
  }
  const raw = span / target;
  const p = 10 ** Math.floor(Math.log10(raw));
  const m = raw / p;
  const step = (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
  const ticks: number[] = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) {
    ticks.push(Math.abs(v) < step * 1e-9 ? 0 : v);
  }
  return { ticks, step };
}

/**
 * "1.5 s", "250 ms", "40 µs": the unit from the magnitude, as many decimals as ``step`` needs
 * (by default three significant digits).
 */
export function timeText(seconds: number, step?: number): string {
  if (!Number.isFinite(seconds)) {
    return '—';
  }
  const a = Math.abs(seconds);
  const st = Math.abs(step ?? (a ? 10 ** (Math.floor(Math.log10(a)) - 2) : 1)) || 1;
  const mag = Math.max(a, st);
  const [scale, unit] = mag >= 0.5 ? [1, 's'] : mag >= 0.0005 ? [1e3, 'ms'] : [1e6, 'µs'];
  const decimals = Math.max(0, Math.min(6, -Math.floor(Math.log10(st * scale) + 1e-9)));
  return `${(seconds * scale).toFixed(decimals)} ${unit}`;
}

/** "12", "1.5k", "250k", "1.2M" */
export function countText(n: number): string {
  const a = Math.abs(n);
  if (a >= 1e6) {
    return `${Number((n / 1e6).toPrecision(3))}M`;
  }
  if (a >= 1e4) {
    return `${Number((n / 1e3).toPrecision(3))}k`;
  }
  return Math.round(n).toLocaleString('en-US');
}

/**
 * The band under ``value`` (bytes) in column ``col`` of the drawn (max) envelope: the category
 * whose band spans it, or -1 (empty column, above the top, below 0).
 */
export function hitArea(env: Envelope, col: number, value: number): number {
  if (col < 0 || col >= env.cols || env.empty[col] || !(value >= 0)) {
    return -1;
  }
  let lower = 0;
  for (let c = 0; c < NCAT; c++) {
    const top = env.max[c][col];
    if (top > lower) {
      if (value <= top) {
        return c;
      }
      lower = top;
    }
  }
  return -1;
}

/** Drawn block rectangles (CSS px, canvas coordinates), in paint order. */
export interface BlockRects {
  n: number;
  slot: Int32Array;
  x0: Float64Array;
  y0: Float64Array;
  x1: Float64Array;
  y1: Float64Array;
  cat: Uint8Array;
}

export function newBlockRects(cap = 256): BlockRects {
  return {
    n: 0,
    slot: new Int32Array(cap),
    x0: new Float64Array(cap),
    y0: new Float64Array(cap),
    x1: new Float64Array(cap),
    y1: new Float64Array(cap),
    cat: new Uint8Array(cap)
  };
}

export function pushRect(r: BlockRects, slot: number, x0: number, y0: number, x1: number, y1: number, cat: number): BlockRects {
  let out = r;
  if (r.n >= r.slot.length) {
    const cap = r.slot.length * 2;
    out = { n: r.n, slot: grown(r.slot, cap), x0: grown(r.x0, cap), y0: grown(r.y0, cap), x1: grown(r.x1, cap), y1: grown(r.y1, cap), cat: grown(r.cat, cap) };
  }
  const k = out.n++;
  out.slot[k] = slot;
  out.x0[k] = x0;
  out.y0[k] = y0;
  out.x1[k] = x1;
  out.y1[k] = y1;
  out.cat[k] = cat;
  return out;
}

/**
 * The rectangle under (x, y) (within ``slop`` px), or -1. Blocks never overlap, but tiny ones
 * are drawn at least a pixel big: where drawn rectangles overlap, the smallest wins (so a
 * 1-pixel block on top of a big one can still be hovered).
 */
export function hitBlock(r: BlockRects, x: number, y: number, slop = 0): number {
  let best = -1;
  let bestArea = Infinity;
  for (let k = r.n - 1; k >= 0; k--) {
    if (x >= r.x0[k] - slop && x <= r.x1[k] + slop && y >= r.y0[k] - slop && y <= r.y1[k] + slop) {
      const area = (r.x1[k] - r.x0[k]) * (r.y1[k] - r.y0[k]);
      if (area < bestArea) {
        best = k;
        bestArea = area;
      }
    }
  }
  return best;
}

/**
 * The event of category ``cat`` nearest (in x) to ``u`` around index ``i`` (the last event at or
 * before ``u``), at most ``maxDist`` x units away, or -1. Ties go to the event nearest ``i`` in
 * index, then to the earlier. Scans at most ``maxScan`` events each way.
 */
export function nearestEventInBand(store: MemoryStore, mode: XMode, i: number, u: number, cat: number, maxDist: number, maxScan = 20_000): number {
  const n = store.n;
  const { category, time } = store.cols;
  const xOf = (j: number) => (mode === 'time' ? time[j] : j);
  let best = -1;
  let bestD = Infinity;
  const start = Math.min(Math.max(i, 0), n - 1);
  for (let j = start, k = 0; j >= 0 && k < maxScan; j--, k++) {
    const d = Math.abs(xOf(j) - u);
    if (d > maxDist || d > bestD) {
      break;
    }
    if (category[j] === cat) {
      best = j; // the first found going back is the nearest (ties: the later event)
      bestD = d;
      break;
    }
  }
  for (let j = start + 1, k = 0; j < n && k < maxScan; j++, k++) {
    const d = Math.abs(xOf(j) - u);
    if (d > maxDist || d >= bestD) {
      break;
    }
    if (category[j] === cat) {
      best = j;
      bestD = d;
    }
  }
  return best;
}

/** What one event says about its storage (before the kernel's details arrive). */
export interface EventFacts {
  index: number;
  storage: number;
  bytes: number;
  category: string;
  action: string;
  op: string | null;
  module: string | null;
  cell: number | null;
  line: number | null;
  node: number | null;
}

const ACTION_NAMES = ['alloc', 'free', 'recategorize'];

export function eventFacts(store: MemoryStore, i: number, timeline: MemoryTimeline | null): EventFacts {
  const c = store.cols;
  const table = (list: string[] | undefined, k: number) => (k === NO_SMALL || !list || k >= list.length ? null : list[k]);
  return {
    index: i,
    storage: c.storage[i],
    bytes: c.bytes[i],
    category: CATEGORIES[c.category[i]] ?? 'other',
    action: ACTION_NAMES[c.action[i]] ?? 'event',
    op: table(timeline?.ops, c.op[i]),
    module: table(timeline?.modules, c.module[i]),
    cell: c.cell[i] || null,
    line: c.line[i] || null,
    node: c.node[i] === NO_ID ? null : c.node[i]
  };
}

/** "(1024, 1024) float32" */
export function shapeText(d: Pick<StorageDetail, 'shape' | 'dtype'>): string {
  const shape = d.shape.length === 1 ? `(${d.shape[0]},)` : `(${d.shape.join(', ')})`;
  return `${shape} ${d.dtype.replace(/^torch\./, '')}`;
}

/**
 * "cell [5], line 3 · activation · 4 MiB · mm · (1024, 1024) float32": where, what, how big,
 * which op, which tensor. The detail (when known) wins over the event's own columns.
 */
export function summaryText(f: EventFacts | null, d: StorageDetail | null, category?: string): string {
  const cell = d?.cell ?? f?.cell ?? null;
  const line = d?.line ?? f?.line ?? null;
  const parts: string[] = [];
  if (cell) {
    parts.push(line ? `cell [${cell}], line ${line}` : `cell [${cell}]`);
  } else if (line) {
    parts.push(`line ${line}`);
  } else {
    parts.push('before tracking');
  }
  parts.push(category ?? f?.category ?? d?.category ?? 'other');
  parts.push(bytesShort(d?.bytes ?? f?.bytes ?? 0));
  const op = d?.op ?? f?.op;
  if (op) {
    parts.push(op);
  }
  if (d && d.dtype && d.dtype !== '?') {
    parts.push(shapeText(d));
  }
  return parts.join(' · ');
}

/** "x" or "storage 17" */
export function titleText(storage: number, d: StorageDetail | null): string {
  return d?.name ? d.name : `storage ${storage}`;
}
