/**
 * The memory timeline: live bytes stacked by category over time on a canvas, each storage as a
 * block once zoomed in, hover details fetched from the kernel, click to pin (and highlight the
 * autograd node), SVG/PNG export and a text transcript.
 * Pure DOM/canvas; imports nothing from Jupyter or anywidget.
 *
 * This file wires the parts together around one MemoryContext (context.ts):
 *   parts.ts       the DOM (toolbar, status, warnings, legend, stage, panels)
 *   painter.ts     frame cache, canvas painting, redraw scheduling
 *   stream.ts      timeline and event columns in; summary, status, legend, transcript out
 *   legend.ts, transcript.ts
 *   hit.ts         hit-testing and locating a storage
 *   details.ts     tooltip/pinned content and the kernel's details
 *   tooltip.ts, pinned.ts
 *   zoom.ts        x range and x mode; pointer.ts: mouse, wheel and keys
 *   viewstate.ts   x mode, range and pin as the wire MemoryViewState, read and shown again
 *   export.ts      SVG and PNG (with the zoom and the pinned storage)
 * Pure parts: data.ts (the event store), geom.ts, draw.ts, cuda.ts.
 */
import type { MemoryTimeline, MemoryViewState } from '../../model/wire';
import type { Located, MemoryContext, MemoryHit, MemoryViewOptions } from './context';
import { type EventColumns, MemoryStore, type XMode } from './data';
import { newDetailCache } from './details';
import type { Frame } from './draw';
import { bindExports, exportSVG } from './export';
import { hitTest, locate } from './hit';
import { frame, newPaintCache, render, watchLayout } from './painter';
import { buildUi } from './parts';
import { click } from './pinned';
import { bindPointer } from './pointer';
import { appendEvents, refreshText, setTimeline } from './stream';
import { hover } from './tooltip';
import { applyViewState, viewState } from './viewstate';
import { bindZoomButtons, resetZoom, setRange, setXMode, showStorage } from './zoom';

export { CANVAS_HEIGHT, type Located, type MemoryHit, type MemoryViewOptions } from './context';

export interface MemoryView {
  setTimeline(t: MemoryTimeline): void;
  /** Events from ``startIndex`` on; ``reset`` drops everything held first. */
  appendEvents(startIndex: number, columns: EventColumns, reset: boolean): void;
  setWarnings(warnings: string[]): void;
  /** What it shows: the range in view, the pinned storage's outline and details too. */
  exportSVG(): string;
  destroy(): void;
  /** The x mode, zoom range and pinned storage (``options.onViewState`` says when they change). */
  viewState(): MemoryViewState;
  /** Show a saved view state (after the data); throws, changing nothing, saying what is wrong with it. */
  applyViewState(state: unknown): void;
  // ---- for tests, benchmarks and browser drivers ----
  readonly store: MemoryStore;
  /** Compute and paint now; returns the frame. */
  draw(): Frame;
  frame(): Frame;
  setXMode(mode: XMode): void;
  /** Show [x0, x1] (seconds or event indices, per x mode). */
  setRange(x0: number, x1: number): void;
  resetZoom(): void;
  hitTest(x: number, y: number): MemoryHit | null;
  /** Hover at canvas CSS px; resolves once the storage's detail (if any) is shown. */
  hover(x: number, y: number): Promise<MemoryHit | null>;
  /** Click (pin) at canvas CSS px. */
  click(x: number, y: number): Promise<MemoryHit | null>;
  /** Where a storage is drawn now (its block, or its alloc in the area view), or null. */
  locate(storage: number): Located | null;
  /** Zoom so that the storage is drawn (as a block when few enough are visible), then locate it. */
  showStorage(storage: number): Located | null;
}

let viewCounter = 0;

export function createMemoryView(el: HTMLElement, opts: MemoryViewOptions): MemoryView {
  const doc = el.ownerDocument;
  const uid = `fv-mem-${++viewCounter}-${Math.floor(Math.random() * 1e6)}`;
  el.classList.add('fv-root', 'fv-memory');
  el.setAttribute('data-fv-state', 'loading');
  el.setAttribute('data-fv-events', '0');
  const ui = buildUi(el);
  const ctx: MemoryContext = {
    el,
    doc,
    win: doc.defaultView,
    uid,
    opts,
    ui,
    store: new MemoryStore(),
    timeline: null,
    mode: 'time',
    range: null,
    hoverHit: null,
    pinnedHit: null,
    destroyed: false,
    replayAsked: null,
    paint: newPaintCache(ui.canvas),
    details: newDetailCache()
  };
  bindZoomButtons(ctx);
  const unbindPointer = bindPointer(ctx);
  const unwatchLayout = watchLayout(ctx);
  bindExports(ctx);
  refreshText(ctx);
  render(ctx);

  /** ``fn`` with this view's context as its first argument. */
  const bind =
    <A extends unknown[], R>(fn: (c: MemoryContext, ...args: A) => R) =>
    (...args: A): R =>
      fn(ctx, ...args);
  const api: MemoryView = {
    setTimeline: bind(setTimeline),
    appendEvents: bind(appendEvents),
    setWarnings: warnings => ui.warnings.set(warnings),
    exportSVG: bind(exportSVG),
    viewState: bind(viewState),
    applyViewState: bind(applyViewState),
    destroy() {
      ctx.destroyed = true;
      if (ctx.paint.rafId !== null) {
        ctx.win?.cancelAnimationFrame?.(ctx.paint.rafId);
      }
      unwatchLayout();
      unbindPointer();
      el.replaceChildren();
      el.classList.remove('fv-root', 'fv-memory');
      for (const a of Array.from(el.attributes)) {
        if (a.name.startsWith('data-fv-')) {
          el.removeAttribute(a.name);
        }
      }
      delete (el as unknown as { forgevizMemory?: MemoryView }).forgevizMemory;
      ctx.store.reset();
    },
    store: ctx.store,
    draw: bind(render),
    frame: bind(frame),
    setXMode: bind(setXMode),
    setRange: bind(setRange),
    resetZoom: bind(resetZoom),
    hitTest: bind(hitTest),
    hover: bind(hover),
    click: bind(click),
    locate: bind(locate),
    showStorage: bind(showStorage)
  };
  (el as unknown as { forgevizMemory?: MemoryView }).forgevizMemory = api;
  return api;
}
