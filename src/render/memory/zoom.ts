/** The x range (zoom and pan, clamped to the data), the x mode (time or event index), and zooming to a storage. */
import { NO_ID } from '../../model/wire';
import { upperBound, type XMode } from './data';
import { fullRange } from './draw';
import type { Located, MemoryContext } from './context';
import { lastSlotOf, locate } from './hit';
import { currentRange, frame, render, schedule } from './painter';
import { showTooltip } from './tooltip';

const MIN_INDEX_SPAN = 8;

/** Show [x0, x1] (seconds or event indices, per x mode), no narrower than a minimum and inside the data; the whole of it: follow new events. */
export function setRange(ctx: MemoryContext, x0: number, x1: number): void {
  const { mode } = ctx;
  const [f0, f1] = fullRange(ctx.store, mode, ctx.timeline?.cuda);
  const full = f1 - f0;
  const minSpan = mode === 'index' ? MIN_INDEX_SPAN : Math.max(1e-6, full * 1e-9);
  let span = Math.max(minSpan, x1 - x0);
  if (span >= full) {
    ctx.range = null;
  } else {
    let a = x0;
    if (x1 - x0 < minSpan) {
      a = (x0 + x1) / 2 - minSpan / 2;
    }
    span = Math.min(span, full);
    a = Math.max(f0, Math.min(f1 - span, a));
    ctx.range = [a, a + span];
  }
  ctx.el.setAttribute('data-fv-zoomed', String(ctx.range !== null));
  // the entry waits for a quiet moment before it tells the kernel: no need to check for a change
  ctx.opts.onViewState?.();
  ctx.hoverHit = null;
  showTooltip(ctx, null);
  schedule(ctx);
}

/** Show the whole timeline (and follow new events). */
export function resetZoom(ctx: MemoryContext): void {
  setRange(ctx, -Infinity, Infinity);
}

/** Scale the span by ``factor`` about ``anchor`` (default: the middle). */
export function zoomBy(ctx: MemoryContext, factor: number, anchor?: number): void {
  const [x0, x1] = currentRange(ctx);
  const c = anchor ?? (x0 + x1) / 2;
  const span = (x1 - x0) * factor;
  const t = (c - x0) / (x1 - x0 || 1);
  setRange(ctx, c - t * span, c - t * span + span);
}

/** Move a zoomed view by ``px`` CSS pixels. */
export function panBy(ctx: MemoryContext, px: number): void {
  const f = frame(ctx);
  const [x0, x1] = currentRange(ctx);
  const dv = (px / (f.right - f.left)) * (x1 - x0);
  if (ctx.range) {
    setRange(ctx, x0 + dv, x1 + dv);
  }
}

/** Switch the x axis, keeping a zoomed range on the same events. */
export function setXMode(ctx: MemoryContext, next: XMode): void {
  if (next === ctx.mode) {
    return;
  }
  const { store, range } = ctx;
  if (range && store.n) {
    const [x0, x1] = range;
    const n = store.n;
    if (next === 'index') {
      const i0 = Math.max(0, upperBound(store.cols.time, n, x0) - 1);
      const i1 = Math.max(i0 + MIN_INDEX_SPAN, upperBound(store.cols.time, n, x1) - 1);
      ctx.mode = next;
      setRange(ctx, i0, i1);
    } else {
      const t0 = store.cols.time[Math.max(0, Math.min(n - 1, Math.floor(x0)))];
      const t1 = store.cols.time[Math.max(0, Math.min(n - 1, Math.ceil(x1)))];
      ctx.mode = next;
      setRange(ctx, t0, t1 > t0 ? t1 : t0 + 1e-6);
    }
  } else {
    ctx.mode = next;
  }
  const { xmodeBtn } = ctx.ui;
  xmodeBtn.setAttribute('data-mode', ctx.mode);
  xmodeBtn.textContent = ctx.mode === 'time' ? 'x: time' : 'x: events';
  ctx.el.setAttribute('data-fv-xmode', ctx.mode);
  ctx.hoverHit = null;
  showTooltip(ctx, null);
  schedule(ctx);
  ctx.opts.onViewState?.();
}

export function bindZoomButtons(ctx: MemoryContext): void {
  const { ui } = ctx;
  ui.xmodeBtn.addEventListener('click', () => setXMode(ctx, ctx.mode === 'time' ? 'index' : 'time'));
  ui.zoomIn.addEventListener('click', () => zoomBy(ctx, 0.5));
  ui.zoomOut.addEventListener('click', () => zoomBy(ctx, 2));
  ui.zoomReset.addEventListener('click', () => resetZoom(ctx));
}

/** Zoom so that the storage is drawn (as a block when few enough are visible), then locate it. */
export function showStorage(ctx: MemoryContext, storage: number): Located | null {
  const slot = lastSlotOf(ctx, storage);
  if (slot < 0) {
    return null;
  }
  const { store, mode } = ctx;
  const n = store.n;
  const a = store.slotAlloc[slot];
  const fr = store.slotFree[slot] === NO_ID ? n - 1 : store.slotFree[slot];
  const around = (lo: number, hi: number): [number, number] => {
    const i0 = Math.max(0, lo);
    const i1 = Math.min(n - 1, hi);
    return mode === 'index' ? [i0 - 0.5, i1 + 0.5] : [store.cols.time[i0], store.cols.time[i1]];
  };
  // the whole lifetime if few enough storages show there; else a few events around its alloc
  const life = store.liveCount[a] <= 2000 ? around(a - 4, fr + 4) : around(a - 8, a + 8);
  let [x0, x1] = life;
  const pad = Math.max((x1 - x0) * 0.1, mode === 'index' ? 1 : 1e-6);
  x0 -= pad;
  x1 += pad;
  setRange(ctx, x0, x1);
  render(ctx);
  if (frame(ctx).view !== 'blocks') {
    const [y0, y1] = around(a - 8, a + 8);
    setRange(ctx, y0 - pad, y1 + pad);
    render(ctx);
  }
  return locate(ctx, storage);
}
