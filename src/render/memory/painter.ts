/**
 * The canvas: the frame (computed once per change and cached), painting it with the hover and
 * pin marks, the attributes that describe it, and redraws batched to one per animation frame.
 */
import { errorMessage } from '../common/chrome';
import { cssVar } from '../common/export';
import { eventX } from './data';
import {
  canvasPatterns,
  columnAt,
  computeFrame,
  type Frame,
  fullRange,
  type PaintState,
  paintCanvas,
  plotX,
  plotY,
  type Theme
} from './draw';
import { hitBlock } from './geom';
import { CANVAS_HEIGHT, type MemoryContext } from './context';

/** What the painter keeps between draws. */
export interface PaintCache {
  readonly g2d: CanvasRenderingContext2D | null;
  frame: Frame | null;
  /** the frame must be computed again */
  stale: boolean;
  rafId: number | null;
  patterns: { key: string; fills: (CanvasPattern | string)[] } | null;
  draws: number;
  /** the stage's last measured width: a hidden stage (Lab re-laying out, e.g. on a theme switch) measures 0 */
  lastWidth: number;
}

export function newPaintCache(canvas: HTMLCanvasElement): PaintCache {
  let g2d: CanvasRenderingContext2D | null;
  try {
    g2d = canvas.getContext('2d');
  } catch {
    g2d = null;
  }
  return { g2d, frame: null, stale: true, rafId: null, patterns: null, draws: 0, lastWidth: 0 };
}

export function theme(el: HTMLElement): Theme {
  return {
    bg: cssVar(el, '--fv-bg', '#ffffff'),
    fg: cssVar(el, '--fv-fg', 'rgba(0, 0, 0, 0.87)'),
    fg2: cssVar(el, '--fv-fg2', 'rgba(0, 0, 0, 0.54)'),
    grid: cssVar(el, '--fv-grid', 'rgba(0, 0, 0, 0.1)'),
    font: cssVar(el, '--fv-font', 'system-ui, sans-serif'),
    ink: cssVar(el, '--fv-ink', 'rgba(0, 0, 0, 0.35)')
  };
}

export function size(ctx: MemoryContext): { W: number; dpr: number } {
  const pc = ctx.paint;
  pc.lastWidth = ctx.ui.stage.clientWidth || ctx.el.clientWidth || pc.lastWidth;
  const W = Math.max(240, Math.floor(pc.lastWidth || 800));
  const dpr = Math.min(3, Math.max(1, ctx.win?.devicePixelRatio || 1));
  return { W, dpr };
}

export function currentRange(ctx: MemoryContext): [number, number] {
  return ctx.range ?? fullRange(ctx.store, ctx.mode, ctx.timeline?.cuda);
}

/** The current frame: computed again only when the data, range, mode or width changed. */
export function frame(ctx: MemoryContext): Frame {
  const pc = ctx.paint;
  const { W, dpr } = size(ctx);
  if (pc.stale || !pc.frame || pc.frame.W !== W) {
    const [x0, x1] = currentRange(ctx);
    pc.frame = computeFrame(
      { store: ctx.store, timeline: ctx.timeline, mode: ctx.mode, x0, x1, W, H: CANVAS_HEIGHT, density: Math.min(2, dpr), zoomed: ctx.range !== null },
      pc.frame
    );
    pc.stale = false;
  }
  return pc.frame;
}

function paint(ctx: MemoryContext, f: Frame): void {
  const { canvas } = ctx.ui;
  const pc = ctx.paint;
  const { dpr } = size(ctx);
  const pw = Math.round(f.W * dpr);
  const ph = Math.round(f.H * dpr);
  if (canvas.width !== pw || canvas.height !== ph) {
    canvas.width = pw;
    canvas.height = ph;
  }
  canvas.style.width = `${f.W}px`;
  canvas.style.height = `${f.H}px`;
  const g = pc.g2d;
  if (!g) {
    return;
  }
  const th = theme(ctx.el);
  const key = `${th.ink}|${dpr}`;
  if (!pc.patterns || pc.patterns.key !== key) {
    pc.patterns = { key, fills: canvasPatterns(ctx.doc, th, dpr) };
  }
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  const hoverHit = ctx.hoverHit;
  const st: PaintState = { hoverX: null, hoverRect: -1, hoverEvent: null, pinnedSlot: ctx.pinnedHit?.slot ?? -1 };
  if (hoverHit) {
    st.hoverX = hoverHit.kind === 'band' ? hoverHit.x : null;
    if (hoverHit.kind === 'block') {
      st.hoverRect = hitBlock(f.blocks, hoverHit.x, hoverHit.y, 1);
    } else if (hoverHit.event >= 0) {
      st.hoverEvent = eventPoint(ctx, f, hoverHit.event, hoverHit.category);
    }
  }
  paintCanvas(g, f, th, pc.patterns.fills, st);
}

/** Canvas point of event i in band ``cat`` (area view): at its x, mid-band. */
export function eventPoint(ctx: MemoryContext, f: Frame, i: number, cat: number): { x: number; y: number } | null {
  const x = plotX(f, eventX(ctx.store, ctx.mode, i));
  const col = columnAt(f, x);
  if (col < 0 || !f.env) {
    return null;
  }
  let lower = 0;
  for (let c = cat - 1; c >= 0; c--) {
    if (f.env.max[c][col] < f.env.max[cat][col]) {
      lower = f.env.max[c][col];
      break;
    }
  }
  return { x, y: plotY(f, (lower + f.env.max[cat][col]) / 2) };
}

/** Compute (if needed) and paint now. */
export function render(ctx: MemoryContext): Frame {
  const pc = ctx.paint;
  if (pc.rafId !== null && ctx.win) {
    ctx.win.cancelAnimationFrame?.(pc.rafId);
    pc.rafId = null;
  }
  const t0 = performance.now();
  const f = frame(ctx);
  paint(ctx, f);
  pc.draws++;
  describeFrame(ctx, f, performance.now() - t0);
  return f;
}

/** The attributes (for tests and tools) and the hint line that say what the frame shows. */
function describeFrame(ctx: MemoryContext, f: Frame, ms: number): void {
  const { el } = ctx;
  const { canvas } = ctx.ui;
  el.setAttribute('data-fv-view', f.view);
  el.setAttribute('data-fv-xmode', ctx.mode);
  el.setAttribute('data-fv-zoomed', String(ctx.range !== null));
  el.setAttribute('data-fv-blocks', f.view === 'blocks' ? String(new Set(Array.from(f.blocks.slot.subarray(0, f.blocks.n))).size) : '0');
  el.setAttribute('data-fv-draws', String(ctx.paint.draws));
  el.setAttribute('data-fv-draw-ms', ms.toFixed(2));
  if (f.peak) {
    canvas.setAttribute('data-fv-peak-x', f.peak.x.toFixed(1));
    canvas.setAttribute('data-fv-peak-y', f.peak.y.toFixed(1));
  } else {
    canvas.removeAttribute('data-fv-peak-x');
    canvas.removeAttribute('data-fv-peak-y');
  }
  // a CUDA history: how many reserved steps and OOM marks this frame draws (for tests and tools)
  canvas.setAttribute('data-fv-reserved-steps', String(f.cuda ? f.cuda.xs.length / 2 : 0));
  canvas.setAttribute('data-fv-ooms', String(f.cuda ? f.cuda.marks.filter(m => m.kind === 'oom').length : 0));
  const oom = f.cuda?.marks.find(m => m.kind === 'oom');
  if (oom) {
    canvas.setAttribute('data-fv-oom-x', oom.x.toFixed(1));
    canvas.setAttribute('data-fv-oom-y', oom.y.toFixed(1));
  }
  ctx.ui.modeHint.textContent =
    f.view === 'blocks'
      ? 'Each storage is a block from its allocation to its free, at a fixed offset (first fit). Hover for details, click to pin.'
      : f.view === 'area'
        ? 'Live bytes stacked by category (each pixel shows the highest value in its slice). Drag to pan, wheel or +/− to zoom; zoomed in far enough, each storage becomes a block.' +
          (f.cuda ? ' The dashed line is what the CUDA caching allocator reserved; ▽ marks a segment it returned, ✕ an OOM.' : '')
        : 'No allocations recorded yet.';
}

/** Draw at the next animation frame (``recompute``: the frame changed, not only the hover). */
export function schedule(ctx: MemoryContext, recompute = true): void {
  const pc = ctx.paint;
  if (recompute) {
    pc.stale = true;
  }
  if (ctx.destroyed || pc.rafId !== null) {
    return;
  }
  const win = ctx.win;
  const raf = win?.requestAnimationFrame?.bind(win);
  if (raf) {
    pc.rafId = raf(() => {
      pc.rafId = null;
      if (!ctx.destroyed) {
        safeRender(ctx);
      }
    });
  } else {
    setTimeout(() => !ctx.destroyed && safeRender(ctx), 16);
  }
}

function safeRender(ctx: MemoryContext): void {
  try {
    render(ctx);
  } catch (err) {
    ctx.el.setAttribute('data-fv-state', 'error');
    ctx.ui.status.show(`Could not draw the memory timeline: ${errorMessage(err)}`);
  }
}

/** Redraw when the stage is resized or Lab's theme changes; returns the disconnect. */
export function watchLayout(ctx: MemoryContext): () => void {
  const { win, doc } = ctx;
  const resize = win && 'ResizeObserver' in win ? new (win as unknown as { ResizeObserver: typeof ResizeObserver }).ResizeObserver(() => schedule(ctx)) : null;
  resize?.observe(ctx.ui.stage);
  // Lab's theme switch changes the --jp-* colours the canvas reads
  const themeWatch = win && 'MutationObserver' in win && doc.body ? new (win as unknown as { MutationObserver: typeof MutationObserver }).MutationObserver(() => schedule(ctx)) : null;
  themeWatch?.observe(doc.body, { attributes: true, attributeFilter: ['data-jp-theme-light', 'data-jp-theme-name', 'class'] });
  return () => {
    resize?.disconnect();
    themeWatch?.disconnect();
  };
}
