/**
 * One frame of the memory timeline: computed once (geometry, per-pixel envelope or visible
 * blocks, ticks, marks), then painted on a canvas or written as SVG. Every cost here follows
 * pixels (columns, visible blocks), never the number of events.
 */
import { CATEGORIES, type CudaState, NO_ID, type MemoryTimeline } from '../../model/wire';
import { r2, s } from '../common/dom';
import { type CudaOverlay, cudaLastTime, cudaOverlay, cudaOverlaySvg, paintCudaOverlay, reservedMaxIn } from './cuda';
import {
  columnBounds,
  type Envelope,
  envelope,
  eventX,
  type MemoryStore,
  NCAT,
  upperBound,
  type XMode
} from './data';
import {
  type BlockRects,
  bytesLabel,
  byteTicks,
  CATEGORY_COLORS,
  CATEGORY_PATTERNS,
  countText,
  decimalTicks,
  newBlockRects,
  niceByteMax,
  type PatternKind,
  pushRect,
  timeText
} from './geom';

/** Above this many visible storages the zoomed view stays a stacked area. */
export const BLOCK_LIMIT = 2000;
export const MARGIN = { left: 66, right: 14, top: 24, bottom: 30 };

export interface Theme {
  bg: string;
  fg: string;
  fg2: string;
  grid: string;
  font: string;
  /** the lines of the patterns drawn over each band's colour */
  ink: string;
}

export interface Frame {
  W: number;
  H: number;
  left: number;
  top: number;
  right: number;
  bottom: number;
  mode: XMode;
  x0: number;
  x1: number;
  cols: number;
  bounds: Int32Array;
  view: 'area' | 'blocks' | 'empty';
  env: Envelope | null;
  blocks: BlockRects;
  yMax: number;
  xTicks: { x: number; label: string }[];
  yTicks: { y: number; label: string }[];
  /** a cell's start; its label sits right of the line, or left of it (end) where it would leave the canvas */
  cells: { x: number; label: string; cell: number; end: boolean }[];
  peak: { x: number; y: number; label: string; index: number } | null;
  /** a CUDA history's reserved bytes, segment releases and OOMs (area view only) */
  cuda: CudaOverlay | null;
  /** first and last state index the frame covers */
  lo: number;
  hi: number;
}

export interface FrameInput {
  store: MemoryStore;
  timeline: MemoryTimeline | null;
  mode: XMode;
  x0: number;
  x1: number;
  W: number;
  H: number;
  /** columns per CSS pixel (the device pixel ratio, capped) */
  density: number;
  /** the blocks view only when zoomed in */
  zoomed: boolean;
  blockLimit?: number;
}

export function plotX(f: Pick<Frame, 'left' | 'right' | 'x0' | 'x1'>, v: number): number {
  return f.left + ((v - f.x0) / (f.x1 - f.x0 || 1)) * (f.right - f.left);
}
export function plotY(f: Pick<Frame, 'top' | 'bottom' | 'yMax'>, v: number): number {
  return f.bottom - (v / (f.yMax || 1)) * (f.bottom - f.top);
}
/** The x value (seconds or event index) under canvas x ``px``. */
export function valueAtX(f: Pick<Frame, 'left' | 'right' | 'x0' | 'x1'>, px: number): number {
  return f.x0 + ((px - f.left) / (f.right - f.left || 1)) * (f.x1 - f.x0);
}

/** The full x range of the data in ``mode`` (with a CUDA history: up to its last entry, often an OOM). */
export function fullRange(store: MemoryStore, mode: XMode, cuda?: CudaState | null): [number, number] {
  const n = store.n;
  if (!n) {
    return [0, 1];
  }
  const last = cuda ? cudaLastTime(cuda) : -Infinity;
  if (mode === 'index') {
    // a CUDA entry after the last event lands one index past it
    return [0, Math.max(1, last > store.cols.time[n - 1] ? n : n - 1)];
  }
  const t0 = store.cols.time[0];
  const t1 = Math.max(store.cols.time[n - 1], last);
  return t1 > t0 ? [t0, t1] : [t0, t0 + 1e-3];
}

export function computeFrame(inp: FrameInput, reuse?: Frame | null): Frame {
  const { store, mode, W, H } = inp;
  const left = MARGIN.left;
  const top = MARGIN.top;
  const right = Math.max(left + 40, W - MARGIN.right);
  const bottom = Math.max(top + 40, H - MARGIN.bottom);
  const cols = Math.max(1, Math.min(4096, Math.round((right - left) * inp.density)));
  const bounds = columnBounds(store, mode, inp.x0, inp.x1, cols, reuse?.cols === cols ? reuse.bounds : undefined);
  const lo = Math.max(0, bounds[0] - 1);
  const hi = bounds[cols];
  const f: Frame = {
    W,
    H,
    left,
    top,
    right,
    bottom,
    mode,
    x0: inp.x0,
    x1: inp.x1,
    cols,
    bounds,
    view: 'empty',
    env: null,
    blocks: reuse?.blocks ?? newBlockRects(),
    yMax: 1024,
    xTicks: [],
    yTicks: [],
    cells: [],
    peak: null,
    cuda: null,
    lo,
    hi
  };
  f.blocks.n = 0;
  const limit = inp.blockLimit ?? BLOCK_LIMIT;
  if (store.n > 0 && hi > 0) {
    const slots: number[] = [];
    const few = inp.zoomed && store.liveCount[lo] <= limit && store.visibleSlots(lo, hi, limit, slots);
    if (few && slots.length) {
      f.view = 'blocks';
      blocksInto(f, store, slots);
    } else {
      f.view = 'area';
      f.env = envelope(store, bounds, cols, reuse?.env ?? undefined);
      let max = 0;
      const topBand = f.env.max[NCAT - 1];
      for (let k = 0; k < cols; k++) {
        if (topBand[k] > max) {
          max = topBand[k];
        }
      }
      const cuda = inp.timeline?.cuda;
      // the reserved line sits above the allocated area: the axis reaches it
      f.yMax = niceByteMax(cuda ? Math.max(max, reservedMaxIn(cuda, store, mode, inp.x0, inp.x1)) : max);
      if (cuda) {
        f.cuda = cudaOverlay(cuda, store, mode, f);
      }
      if (store.peakIndex >= 0) {
        const px = eventX(store, mode, store.peakIndex);
        if (px >= inp.x0 && px <= inp.x1) {
          f.peak = { x: plotX(f, px), y: plotY(f, store.peakBytes), label: `peak ${bytesLabel(store.peakBytes)}`, index: store.peakIndex };
        }
      }
    }
  }
  // ticks
  f.yTicks = byteTicks(f.yMax).map(v => ({ y: plotY(f, v), label: v === 0 ? '0' : bytesLabelShort(v) }));
  const { ticks, step } = decimalTicks(inp.x0, inp.x1, Math.max(2, Math.floor((right - left) / 90)));
  f.xTicks = ticks
    .filter(v => mode === 'time' || Number.isInteger(v))
    .map(v => ({ x: plotX(f, v), label: mode === 'time' ? timeText(v, step) : countText(v) }));
  // cells
  let lastX = -Infinity;
  for (const c of inp.timeline?.cells ?? []) {
    const v = mode === 'time' ? c.time : c.index;
    if (v < inp.x0 || v > inp.x1) {
      continue;
    }
    const x = plotX(f, v);
    const label = `[${c.cell}]`;
    const width = 7 * label.length; // about 7 px a character
    const room = x - lastX >= width + 6; // labels never overlap
    f.cells.push({ x, label: room ? label : '', cell: c.cell, end: x + 2 + width > W });
    if (room) {
      lastX = x;
    }
  }
  return f;
}

/** "4 MiB" (ticks are powers of two: no decimals needed most of the time) */
function bytesLabelShort(v: number): string {
  const l = bytesLabel(v);
  return l.replace(/\.0 /, ' ');
}

function blocksInto(f: Frame, store: MemoryStore, slots: number[]): void {
  store.ensureLayout();
  let max = 0;
  for (const s of slots) {
    const t = store.slotOffset[s] + Math.max(1, store.slotBytes[s]);
    if (t > max) {
      max = t;
    }
  }
  f.yMax = niceByteMax(max);
  const n = store.n;
  const endX = eventX(store, f.mode, n - 1);
  const clampX = (x: number) => Math.max(f.left, Math.min(f.right, x));
  let rects = f.blocks;
  for (const s of slots) {
    const a = store.slotAlloc[s];
    const fr = store.slotFree[s];
    const xa = clampX(plotX(f, eventX(store, f.mode, a)));
    let xf = clampX(plotX(f, fr === NO_ID ? endX : eventX(store, f.mode, fr)));
    if (xf - xa < 1) {
      xf = xa + 1;
    }
    const off = store.slotOffset[s];
    const yb = plotY(f, off);
    let yt = plotY(f, off + Math.max(1, store.slotBytes[s]));
    if (yb - yt < 1) {
      yt = yb - 1;
    }
    // one rectangle per category the storage had while visible
    let cat = store.slotCat0[s];
    let from = xa;
    for (const [ri, rc] of store.recatsOf(s)) {
      const xr = clampX(plotX(f, eventX(store, f.mode, ri)));
      if (xr >= xf) {
        break;
      }
      if (xr > from) {
        rects = pushRect(rects, s, from, yt, xr, yb, cat);
        from = xr;
      }
      cat = rc;
    }
    rects = pushRect(rects, s, Math.min(from, xf - 1), yt, xf, yb, cat);
  }
  f.blocks = rects;
}

/** The column under canvas x, or -1. */
export function columnAt(f: Frame, px: number): number {
  if (px < f.left || px > f.right) {
    return -1;
  }
  return Math.min(f.cols - 1, Math.floor(((px - f.left) / (f.right - f.left)) * f.cols));
}

/** Last event at or before x value ``u`` (the state shown there), or -1. */
export function stateIndexAt(store: MemoryStore, mode: XMode, u: number): number {
  if (mode === 'index') {
    return Math.min(store.n - 1, Math.floor(u));
  }
  return upperBound(store.cols.time, store.n, u) - 1;
}

// ---- painting -------------------------------------------------------------------------------

/** Draw one pattern tile's lines (tile is ``size`` px square). */
function patternLines(kind: PatternKind, size: number): [number, number, number, number][] | 'dots' | null {
  const z = size;
  switch (kind) {
    case 'dashes':
      return [
        [0, z / 4, z / 2, z / 4],
        [z / 2, (3 * z) / 4, z, (3 * z) / 4]
      ];
    case 'diagonal':
      return [
        [0, z, z, 0],
        [-z / 2, z / 2, z / 2, -z / 2],
        [z / 2, z + z / 2, z + z / 2, z / 2]
      ];
    case 'backdiagonal':
      return [
        [0, 0, z, z],
        [-z / 2, z / 2, z / 2, z + z / 2],
        [z / 2, -z / 2, z + z / 2, z / 2]
      ];
    case 'horizontal':
      return [[0, z / 2, z, z / 2]];
    case 'vertical':
      return [[z / 2, 0, z / 2, z]];
    case 'cross':
      return [
        [0, z / 2, z, z / 2],
        [z / 2, 0, z / 2, z]
      ];
    case 'dots':
      return 'dots';
    default:
      return null;
  }
}

const TILE = 8;

/** Canvas patterns (colour + lines) per category; null where no canvas is available. */
export function canvasPatterns(doc: Document, theme: Theme, dpr: number): (CanvasPattern | string)[] {
  return CATEGORY_COLORS.map((color, c) => {
    const lines = patternLines(CATEGORY_PATTERNS[c], TILE);
    if (!lines) {
      return color;
    }
    const tile = doc.createElement('canvas');
    const px = Math.max(1, Math.round(TILE * dpr));
    tile.width = px;
    tile.height = px;
    const t = tile.getContext('2d');
    if (!t) {
      return color;
    }
    t.scale(px / TILE, px / TILE);
    t.fillStyle = color;
    t.fillRect(0, 0, TILE, TILE);
    t.strokeStyle = theme.ink;
    t.fillStyle = theme.ink;
    t.lineWidth = 1;
    if (lines === 'dots') {
      t.beginPath();
      t.arc(TILE / 2, TILE / 2, 1.3, 0, Math.PI * 2);
      t.fill();
    } else {
      t.beginPath();
      for (const [a, b, c2, d] of lines) {
        t.moveTo(a, b);
        t.lineTo(c2, d);
      }
      t.stroke();
    }
    const ctx = doc.createElement('canvas').getContext('2d');
    const p = ctx ? ctx.createPattern(tile, 'repeat') : null;
    if (p && dpr !== 1 && typeof DOMMatrix !== 'undefined') {
      p.setTransform(new DOMMatrix().scale(1 / dpr, 1 / dpr));
    }
    return p ?? color;
  });
}

/** The x of column k's left edge. */
function colX(f: Frame, k: number): number {
  return f.left + (k * (f.right - f.left)) / f.cols;
}

/** Step outline of band c's top (max envelope): runs of non-empty columns, merged flats. */
function bandRuns(f: Frame, c: number, each: (xs: number[], ys: number[]) => void): void {
  const env = f.env!;
  const max = env.max[c];
  let xs: number[] = [];
  let ys: number[] = [];
  const flush = () => {
    if (xs.length) {
      each(xs, ys);
    }
    xs = [];
    ys = [];
  };
  for (let k = 0; k < f.cols; k++) {
    if (env.empty[k]) {
      flush();
      continue;
    }
    const y = plotY(f, max[k]);
    const x0 = colX(f, k);
    const x1 = colX(f, k + 1);
    if (ys.length && ys[ys.length - 1] === y) {
      xs[xs.length - 1] = x1; // extend the flat
    } else {
      xs.push(x0, x1);
      ys.push(y, y);
    }
  }
  flush();
}

export interface PaintState {
  hoverX: number | null;
  hoverRect: number;
  hoverEvent: { x: number; y: number } | null;
  pinnedSlot: number;
}

export function paintCanvas(ctx: CanvasRenderingContext2D, f: Frame, theme: Theme, fills: (CanvasPattern | string)[], st: PaintState): void {
  ctx.save();
  ctx.fillStyle = theme.bg;
  ctx.fillRect(0, 0, f.W, f.H);
  ctx.font = `11px ${theme.font}`;
  // grid + y labels
  ctx.strokeStyle = theme.grid;
  ctx.lineWidth = 1;
  ctx.fillStyle = theme.fg2;
  ctx.textAlign = 'right';
  ctx.textBaseline = 'middle';
  ctx.beginPath();
  for (const t of f.yTicks) {
    const y = Math.round(t.y) + 0.5;
    ctx.moveTo(f.left, y);
    ctx.lineTo(f.right, y);
  }
  ctx.stroke();
  for (const t of f.yTicks) {
    ctx.fillText(t.label, f.left - 6, t.y);
  }
  ctx.textAlign = 'center';
  ctx.textBaseline = 'top';
  for (const t of f.xTicks) {
    ctx.fillText(t.label, t.x, f.bottom + 6);
  }
  // data, clipped to the plot
  ctx.save();
  ctx.beginPath();
  ctx.rect(f.left, f.top - 1, f.right - f.left, f.bottom - f.top + 1);
  ctx.clip();
  if (f.view === 'area' && f.env) {
    // top band first: each lower band paints over the area under its own top
    let drawnTop = false;
    for (let c = NCAT - 1; c >= 0; c--) {
      if (c > 0 && bandEqualsBelow(f, c)) {
        continue;
      }
      ctx.beginPath();
      bandRuns(f, c, (xs, ys) => {
        ctx.moveTo(xs[0], f.bottom);
        for (let k = 0; k < xs.length; k++) {
          ctx.lineTo(xs[k], ys[k]);
        }
        ctx.lineTo(xs[xs.length - 1], f.bottom);
        ctx.closePath();
      });
      ctx.fillStyle = fills[c];
      ctx.fill();
      if (!drawnTop) {
        drawnTop = true;
        ctx.strokeStyle = theme.fg;
        ctx.lineWidth = 1;
        ctx.beginPath();
        bandRuns(f, c, (xs, ys) => {
          ctx.moveTo(xs[0], ys[0]);
          for (let k = 1; k < xs.length; k++) {
            ctx.lineTo(xs[k], ys[k]);
          }
        });
        ctx.stroke();
      }
    }
  } else if (f.view === 'blocks') {
    const r = f.blocks;
    for (let k = 0; k < r.n; k++) {
      ctx.fillStyle = fills[r.cat[k]];
      ctx.fillRect(r.x0[k], r.y0[k], r.x1[k] - r.x0[k], r.y1[k] - r.y0[k]);
    }
    ctx.strokeStyle = theme.bg;
    ctx.lineWidth = 1;
    ctx.beginPath();
    for (let k = 0; k < r.n; k++) {
      if (r.x1[k] - r.x0[k] >= 4 && r.y1[k] - r.y0[k] >= 4) {
        ctx.rect(r.x0[k] + 0.5, r.y0[k] + 0.5, r.x1[k] - r.x0[k] - 1, r.y1[k] - r.y0[k] - 1);
      }
    }
    ctx.stroke();
    ctx.strokeStyle = theme.fg;
    ctx.lineWidth = 2;
    for (let k = 0; k < r.n; k++) {
      if (k === st.hoverRect || (st.pinnedSlot >= 0 && r.slot[k] === st.pinnedSlot)) {
        ctx.strokeRect(r.x0[k] + 1, r.y0[k] + 1, Math.max(1, r.x1[k] - r.x0[k] - 2), Math.max(1, r.y1[k] - r.y0[k] - 2));
      }
    }
  }
  ctx.restore();
  // cells
  ctx.strokeStyle = theme.fg2;
  ctx.setLineDash([3, 3]);
  ctx.lineWidth = 1;
  ctx.beginPath();
  for (const c of f.cells) {
    const x = Math.round(c.x) + 0.5;
    ctx.moveTo(x, f.top - 4);
    ctx.lineTo(x, f.bottom);
  }
  ctx.stroke();
  ctx.setLineDash([]);
  ctx.fillStyle = theme.fg2;
  ctx.textBaseline = 'bottom';
  for (const c of f.cells) {
    if (c.label) {
      ctx.textAlign = c.end ? 'right' : 'left';
      ctx.fillText(c.label, c.end ? c.x - 2 : c.x + 2, f.top - 4);
    }
  }
  ctx.textAlign = 'left'; // as the labels below expect
  // axes
  ctx.strokeStyle = theme.fg2;
  ctx.beginPath();
  ctx.moveTo(f.left + 0.5, f.top);
  ctx.lineTo(f.left + 0.5, f.bottom + 0.5);
  ctx.lineTo(f.right, f.bottom + 0.5);
  ctx.stroke();
  // peak
  if (f.peak) {
    const p = f.peak;
    ctx.fillStyle = theme.fg;
    ctx.beginPath();
    ctx.moveTo(p.x, p.y - 1);
    ctx.lineTo(p.x - 4, p.y - 8);
    ctx.lineTo(p.x + 4, p.y - 8);
    ctx.closePath();
    ctx.fill();
    ctx.font = `bold 11px ${theme.font}`;
    ctx.textBaseline = 'bottom';
    const w = ctx.measureText(p.label).width;
    const lx = Math.min(Math.max(p.x - w / 2, f.left + 2), f.right - w - 2);
    ctx.lineWidth = 3;
    ctx.strokeStyle = theme.bg;
    ctx.strokeText(p.label, lx, Math.max(p.y - 9, f.top + 11));
    ctx.fillText(p.label, lx, Math.max(p.y - 9, f.top + 11));
  }
  if (f.cuda) {
    paintCudaOverlay(ctx, f.cuda, theme.fg);
  }
  // hover
  if (st.hoverX !== null && f.view === 'area') {
    ctx.strokeStyle = theme.fg;
    ctx.lineWidth = 1;
    ctx.beginPath();
    const x = Math.round(st.hoverX) + 0.5;
    ctx.moveTo(x, f.top);
    ctx.lineTo(x, f.bottom);
    ctx.stroke();
  }
  if (st.hoverEvent) {
    ctx.fillStyle = theme.bg;
    ctx.strokeStyle = theme.fg;
    ctx.lineWidth = 2;
    ctx.beginPath();
    ctx.arc(st.hoverEvent.x, st.hoverEvent.y, 4, 0, Math.PI * 2);
    ctx.fill();
    ctx.stroke();
  }
  ctx.restore();
}

/** Whether band c adds nothing anywhere in view (never seen, or empty here). */
function bandEqualsBelow(f: Frame, c: number): boolean {
  const a = f.env!.max[c];
  const b = f.env!.max[c - 1];
  for (let k = 0; k < f.cols; k++) {
    if (a[k] !== b[k]) {
      return false;
    }
  }
  return true;
}

// ---- SVG ------------------------------------------------------------------------------------

/** SVG <pattern> elements per category (ids ``${prefix}-${c}``). */
export function svgPatterns(doc: Document, prefix: string, theme: Theme, only = -1): SVGElement {
  const defs = s(doc, 'defs');
  CATEGORY_COLORS.forEach((color, c) => {
    const lines = patternLines(CATEGORY_PATTERNS[c], TILE);
    if (!lines || (only >= 0 && c !== only)) {
      return;
    }
    const pat = s(doc, 'pattern', { id: `${prefix}-${c}`, width: TILE, height: TILE, patternUnits: 'userSpaceOnUse' });
    pat.appendChild(s(doc, 'rect', { width: TILE, height: TILE, fill: color }));
    if (lines === 'dots') {
      pat.appendChild(s(doc, 'circle', { cx: TILE / 2, cy: TILE / 2, r: 1.3, fill: theme.ink }));
    } else {
      pat.appendChild(s(doc, 'path', { d: lines.map(([a, b, c2, d]) => `M${a} ${b}L${c2} ${d}`).join(''), stroke: theme.ink, 'stroke-width': 1, fill: 'none' }));
    }
    defs.appendChild(pat);
  });
  return defs;
}

export function svgFill(c: number, prefix: string): string {
  return CATEGORY_PATTERNS[c] === 'solid' ? CATEGORY_COLORS[c] : `url(#${prefix}-${c})`;
}

/** A pinned storage as the export draws it: its lifetime's blocks outlined, its details as a caption. */
export interface SvgPin {
  slot: number;
  lines: string[];
}

/**
 * The frame as an SVG group: envelope paths (bounded by pixel columns) or block rects; the legend
 * under it, then ``pin``'s caption: its lines 36 px, 50 px, ... below the frame (14 px each).
 */
export function frameToSvg(doc: Document, f: Frame, theme: Theme, prefix: string, title: string, pin?: SvgPin): SVGGElement {
  const g = s(doc, 'g', { class: 'fv-mem-export', 'font-family': theme.font, 'font-size': 11 }) as SVGGElement;
  g.appendChild(svgPatterns(doc, prefix, theme));
  g.appendChild(s(doc, 'text', { x: f.left, y: 10, fill: theme.fg, 'font-weight': 'bold', 'font-size': 12 }, title));
  const grid = f.yTicks.map(t => `M${f.left} ${r2(t.y)}H${r2(f.right)}`).join('');
  g.appendChild(s(doc, 'path', { d: grid, stroke: theme.grid, 'stroke-width': 1, fill: 'none' }));
  for (const t of f.yTicks) {
    g.appendChild(s(doc, 'text', { x: f.left - 6, y: r2(t.y + 4), 'text-anchor': 'end', fill: theme.fg2 }, t.label));
  }
  for (const t of f.xTicks) {
    g.appendChild(s(doc, 'text', { x: r2(t.x), y: r2(f.bottom + 17), 'text-anchor': 'middle', fill: theme.fg2 }, t.label));
  }
  const clipId = `${prefix}-clip`;
  const clip = s(doc, 'clipPath', { id: clipId });
  clip.appendChild(s(doc, 'rect', { x: f.left, y: f.top - 1, width: r2(f.right - f.left), height: r2(f.bottom - f.top + 1) }));
  g.appendChild(clip);
  const data = s(doc, 'g', { 'clip-path': `url(#${clipId})` });
  g.appendChild(data);
  if (f.view === 'area' && f.env) {
    let outline = '';
    for (let c = NCAT - 1; c >= 0; c--) {
      if (c > 0 && bandEqualsBelow(f, c)) {
        continue;
      }
      let d = '';
      const first = !outline;
      bandRuns(f, c, (xs, ys) => {
        d += `M${r2(xs[0])} ${r2(f.bottom)}`;
        for (let k = 0; k < xs.length; k++) {
          d += `L${r2(xs[k])} ${r2(ys[k])}`;
        }
        d += `L${r2(xs[xs.length - 1])} ${r2(f.bottom)}Z`;
        if (first) {
          outline += xs.map((x, k) => `${k ? 'L' : 'M'}${r2(x)} ${r2(ys[k])}`).join('');
        }
      });
      if (d) {
        data.appendChild(s(doc, 'path', { d, fill: svgFill(c, prefix), 'data-category': CATEGORIES[c] }));
      }
    }
    if (outline) {
      data.appendChild(s(doc, 'path', { d: outline, fill: 'none', stroke: theme.fg, 'stroke-width': 1 }));
    }
  } else if (f.view === 'blocks') {
    const r = f.blocks;
    for (let k = 0; k < r.n; k++) {
      data.appendChild(
        s(doc, 'rect', {
          x: r2(r.x0[k]),
          y: r2(r.y0[k]),
          width: r2(r.x1[k] - r.x0[k]),
          height: r2(r.y1[k] - r.y0[k]),
          fill: svgFill(r.cat[k], prefix),
          stroke: r.x1[k] - r.x0[k] >= 4 && r.y1[k] - r.y0[k] >= 4 ? theme.bg : 'none',
          'stroke-width': 1
        })
      );
    }
    // the pinned storage's outline over all blocks, as paintCanvas draws it
    let d = '';
    for (let k = 0; pin && k < r.n; k++) {
      if (r.slot[k] === pin.slot) {
        const w = r2(Math.max(1, r.x1[k] - r.x0[k] - 2));
        d += `M${r2(r.x0[k] + 1)} ${r2(r.y0[k] + 1)}h${w}v${r2(Math.max(1, r.y1[k] - r.y0[k] - 2))}h${-w}z`;
      }
    }
    if (d) {
      data.appendChild(s(doc, 'path', { d, fill: 'none', stroke: theme.fg, 'stroke-width': 2 }));
    }
  }
  if (f.cells.length) {
    g.appendChild(s(doc, 'path', { d: f.cells.map(c => `M${r2(c.x)} ${f.top - 4}V${f.bottom}`).join(''), stroke: theme.fg2, 'stroke-dasharray': '3 3', fill: 'none' }));
    for (const c of f.cells) {
      if (c.label) {
        const at = c.end ? { x: r2(c.x - 2), 'text-anchor': 'end' } : { x: r2(c.x + 2) };
        g.appendChild(s(doc, 'text', { ...at, y: f.top - 6, fill: theme.fg2 }, c.label));
      }
    }
  }
  g.appendChild(s(doc, 'path', { d: `M${f.left} ${f.top}V${f.bottom}H${f.right}`, stroke: theme.fg2, fill: 'none' }));
  if (f.peak) {
    const p = f.peak;
    g.appendChild(s(doc, 'path', { d: `M${r2(p.x)} ${r2(p.y - 1)}l-4 -7h8z`, fill: theme.fg }));
    g.appendChild(
      // kept inside the plot as the canvas keeps it (no text metrics here: bold 11px is about 7 px a character)
      s(doc, 'text', { x: r2(Math.min(Math.max(p.x, f.left + p.label.length * 3.5 + 2), f.right - p.label.length * 3.5 - 2)), y: r2(Math.max(p.y - 10, f.top + 10)), 'text-anchor': 'middle', 'font-weight': 'bold', fill: theme.fg, stroke: theme.bg, 'stroke-width': 3, 'paint-order': 'stroke' }, p.label)
    );
  }
  if (f.cuda) {
    g.appendChild(cudaOverlaySvg(doc, f.cuda, theme.fg));
  }
  // legend
  let x = f.left;
  const y = f.H + 6;
  CATEGORIES.forEach((name, c) => {
    g.appendChild(s(doc, 'rect', { x, y, width: 12, height: 12, fill: svgFill(c, prefix), stroke: theme.fg2, 'stroke-width': 0.5 }));
    g.appendChild(s(doc, 'text', { x: x + 16, y: y + 10, fill: theme.fg }, name));
    x += 16 + 7 * name.length + 16;
  });
  if (pin?.lines.length) {
    // lines longer than the width are cut by the SVG's edge
    const caption = s(doc, 'g', { class: 'fv-mem-export-pinned', fill: theme.fg });
    pin.lines.forEach((line, k) => caption.appendChild(s(doc, 'text', { x: f.left, y: f.H + 36 + k * 14 }, line)));
    g.appendChild(caption);
  }
  return g;
}
