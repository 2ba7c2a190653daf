/**
 * What only a CUDA allocator history adds to the memory timeline: the reserved bytes (a step line
 * over the stacked allocated area: the gap is the allocator's cache), the segments it returned to
 * CUDA (empty_cache), OOMs with the state at that moment, and a table of segments with their
 * fragmentation. Pure geometry and DOM; costs follow steps and marks, never events.
 */
import type { CudaOomMark, CudaState } from '../../model/wire';
import { h, r2, s } from '../common/dom';
import { lowerBound, type MemoryStore, type XMode } from './data';
import { bytesExact, bytesLabel, timeText } from './geom';

export interface CudaMark {
  kind: 'oom' | 'release';
  x: number;
  y: number;
  label: string;
}

export interface CudaOverlay {
  /** reserved bytes as a polyline in plot coordinates (horizontal and vertical steps) */
  xs: number[];
  ys: number[];
  /** the largest reserved value in view (the y axis must reach it) */
  maxInView: number;
  marks: CudaMark[];
}

interface PlotBox {
  left: number;
  right: number;
  top: number;
  bottom: number;
  x0: number;
  x1: number;
  yMax: number;
}

/** The time of the history's last entry that the overlay draws (a step, a release or an OOM). */
export function cudaLastTime(cuda: CudaState): number {
  let last = -Infinity;
  for (const t of cuda.reserved_time) {
    last = Math.max(last, t);
  }
  for (const [t] of cuda.released) {
    last = Math.max(last, t);
  }
  for (const o of cuda.ooms) {
    last = Math.max(last, o.time);
  }
  return last;
}

/** Where a time lands on the x axis: itself, or the first event at or after it (index mode). */
export function timeToX(store: MemoryStore, mode: XMode, time: number): number {
  return mode === 'time' ? time : lowerBound(store.cols.time, store.n, time);
}

/** The largest reserved value over [x0, x1] (the step holding at x0 included). */
export function reservedMaxIn(cuda: CudaState, store: MemoryStore, mode: XMode, x0: number, x1: number): number {
  let max = 0;
  const n = cuda.reserved_time.length;
  for (let i = 0; i < n; i++) {
    const a = timeToX(store, mode, cuda.reserved_time[i]);
    const b = i + 1 < n ? timeToX(store, mode, cuda.reserved_time[i + 1]) : Infinity;
    if (b >= x0 && a <= x1 && cuda.reserved_bytes[i] > max) {
      max = cuda.reserved_bytes[i];
    }
  }
  return max;
}

/** The overlay for a plot box whose yMax is already final. */
export function cudaOverlay(cuda: CudaState, store: MemoryStore, mode: XMode, box: PlotBox): CudaOverlay {
  const px = (v: number) => box.left + ((v - box.x0) / (box.x1 - box.x0 || 1)) * (box.right - box.left);
  const py = (v: number) => box.bottom - (Math.min(v, box.yMax) / (box.yMax || 1)) * (box.bottom - box.top);
  const clampX = (x: number) => Math.max(box.left, Math.min(box.right, x));
  const xs: number[] = [];
  const ys: number[] = [];
  const n = cuda.reserved_time.length;
  for (let i = 0; i < n; i++) {
    const a = timeToX(store, mode, cuda.reserved_time[i]);
    const b = i + 1 < n ? timeToX(store, mode, cuda.reserved_time[i + 1]) : box.x1;
    if (b < box.x0 || a > box.x1) {
      continue;
    }
    const y = py(cuda.reserved_bytes[i]);
    const xa = clampX(px(Math.max(a, box.x0)));
    const xb = clampX(px(Math.min(Math.max(b, a), box.x1)));
    xs.push(xa, xb);
    ys.push(y, y);
  }
  const marks: CudaMark[] = [];
  const inView = (v: number) => v >= box.x0 && v <= box.x1;
  for (const [time, bytes] of cuda.released) {
    const v = timeToX(store, mode, time);
    if (inView(v)) {
      marks.push({ kind: 'release', x: px(v), y: box.top + 6, label: `segment freed: ${bytesLabel(bytes)}` });
    }
  }
  for (const o of cuda.ooms) {
    const v = timeToX(store, mode, o.time);
    if (inView(v)) {
      marks.push({
        kind: 'oom',
        x: px(v),
        y: py(o.reserved),
        label: oomText(o)
      });
    }
  }
  return { xs, ys, maxInView: reservedMaxIn(cuda, store, mode, box.x0, box.x1), marks };
}

const OOM_COLOR = '#D55E00';

function oomText(o: CudaOomMark): string {
  return `OOM${o.cell ? ` in cell [${o.cell}]` : ''}: asked ${bytesLabel(o.requested)}, CUDA had ${bytesLabel(o.device_free)} free; allocated ${bytesLabel(o.allocated)}, reserved ${bytesLabel(o.reserved)}`;
}

/** SVG path data of the reserved steps, and of each mark: one geometry for canvas (Path2D) and SVG. */
function reservedPath(o: CudaOverlay): string {
  let d = o.xs.length ? `M${r2(o.xs[0])} ${r2(o.ys[0])}` : '';
  for (let k = 1; k < o.xs.length; k++) {
    d += `L${r2(o.xs[k])} ${r2(o.ys[k - 1])}L${r2(o.xs[k])} ${r2(o.ys[k])}`;
  }
  return d;
}

function markPath(m: CudaMark): string {
  return m.kind === 'oom' ? `M${r2(m.x - 6)} ${r2(m.y - 6)}l12 12M${r2(m.x + 6)} ${r2(m.y - 6)}l-12 12` : `M${r2(m.x - 5)} ${r2(m.y - 4)}h10l-5 8z`;
}

const markStyle = (m: CudaMark, fg: string) => ({ stroke: m.kind === 'oom' ? OOM_COLOR : fg, width: m.kind === 'oom' ? 2.5 : 1.5 });

export function paintCudaOverlay(ctx: CanvasRenderingContext2D, o: CudaOverlay, fg: string): void {
  ctx.save();
  ctx.strokeStyle = fg;
  ctx.lineWidth = 1.5;
  ctx.setLineDash([6, 3]);
  ctx.stroke(new Path2D(reservedPath(o)));
  ctx.setLineDash([]);
  for (const m of o.marks) {
    const st = markStyle(m, fg);
    ctx.strokeStyle = st.stroke;
    ctx.lineWidth = st.width;
    ctx.stroke(new Path2D(markPath(m)));
  }
  ctx.restore();
}

export function cudaOverlaySvg(doc: Document, o: CudaOverlay, fg: string): SVGGElement {
  const g = s(doc, 'g', { class: 'fv-mem-cuda' }) as SVGGElement;
  g.appendChild(s(doc, 'path', { d: reservedPath(o), fill: 'none', stroke: fg, 'stroke-width': 1.5, 'stroke-dasharray': '6 3', 'data-series': 'reserved' }));
  for (const m of o.marks) {
    const st = markStyle(m, fg);
    const mark = s(doc, 'path', { d: markPath(m), fill: 'none', stroke: st.stroke, 'stroke-width': st.width, 'data-mark': m.kind });
    mark.appendChild(s(doc, 'title', {}, m.label));
    g.appendChild(mark);
  }
  return g;
}

/** Segments and OOMs as a table under the canvas (a few rows: one per cudaMalloc). */
export function cudaPanel(doc: Document, cuda: CudaState): HTMLElement {
  const pct = (v: number) => `${Math.round(v * 100)}%`;
  const rows = cuda.segments.map(seg =>
    h(
      doc,
      'tr',
      { 'data-address': seg.address },
      h(doc, 'td', {}, seg.address),
      h(doc, 'td', {}, seg.segment_type),
      h(doc, 'td', {}, bytesLabel(seg.total)),
      h(doc, 'td', {}, bytesLabel(seg.allocated)),
      h(doc, 'td', {}, bytesLabel(seg.total - seg.allocated)),
      h(doc, 'td', {}, bytesLabel(seg.largest_free)),
      h(doc, 'td', { class: 'fv-mem-frag', 'data-fragmentation': String(seg.fragmentation) }, pct(seg.fragmentation))
    )
  );
  const head = ['segment', 'pool', 'reserved', 'allocated', 'free', 'largest free block', 'fragmentation'];
  const total = cuda.segments.reduce((a, seg) => a + seg.total, 0);
  const summary = h(
    doc,
    'p',
    { class: 'fv-mem-cuda-summary' },
    `Reserved ${bytesExact(total)} in ${cuda.segments.length} segment${cuda.segments.length === 1 ? '' : 's'} (peak ${bytesLabel(cuda.peak_reserved)}); ` +
      `${bytesLabel(cuda.reserved_unused)} of it is cached with no tensor in it (what empty_cache() would return). ` +
      `Fragmentation: 1 − largest free block ÷ free bytes.`
  );
  const items: Node[] = [
    summary,
    h(
      doc,
      'table',
      { class: 'fv-mem-segments' },
      h(doc, 'thead', {}, h(doc, 'tr', {}, ...head.map(t => h(doc, 'th', { scope: 'col' }, t)))),
      h(doc, 'tbody', {}, ...rows)
    )
  ];
  if (cuda.ooms.length) {
    items.push(
      h(
        doc,
        'ul',
        { class: 'fv-mem-ooms' },
        ...cuda.ooms.map(o => h(doc, 'li', { 'data-requested': String(o.requested) }, `${oomText(o)} (at ${timeText(o.time)})`))
      )
    );
  }
  return h(doc, 'div', { class: 'fv-mem-cuda-panel' }, ...items);
}
