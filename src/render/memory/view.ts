/**
 * The memory timeline: live bytes stacked by category over time on a canvas, each storage as a
 * block once zoomed in, hover details fetched from the kernel, click to pin (and highlight the
 * autograd node), SVG/PNG export and a text transcript.
 * Pure DOM/canvas; imports nothing from Jupyter or anywidget.
 */
import { CATEGORIES, NO_ID, type MemoryTimeline, type StorageDetail } from '../../model/wire';
import { h, s } from '../common/dom';
import { cudaPanel } from './cuda';
import { cssVar, download, standaloneSvg, svgToPng } from '../common/export';
import { type EventColumns, eventX, MemoryStore, upperBound, type XMode } from './data';
import {
  canvasPatterns,
  columnAt,
  computeFrame,
  type Frame,
  frameToSvg,
  fullRange,
  type PaintState,
  paintCanvas,
  plotX,
  plotY,
  stateIndexAt,
  svgFill,
  svgPatterns,
  type Theme,
  valueAtX
} from './draw';
import {
  bytesExact,
  bytesLabel,
  bytesShort,
  type EventFacts,
  eventFacts,
  hitArea,
  hitBlock,
  nearestEventInBand,
  summaryText,
  timeText,
  titleText
} from './geom';

export interface MemoryViewOptions {
  /** What one storage is (shape, dtype, op, cell, line, ...): asked once per storage. */
  requestDetail(storage: number): Promise<StorageDetail>;
  /** Ask the kernel for the whole history again (a gap in the stream, or a reset not from 0). */
  requestReplay(): void;
}

/** What is under a point of the canvas. */
export interface MemoryHit {
  kind: 'band' | 'block';
  /** category index (CATEGORIES) of the band or block */
  category: number;
  /** the last event at or before the cursor (the state shown there) */
  stateIndex: number;
  /** area view: live bytes of the band's category after ``stateIndex`` */
  bandBytes: number | null;
  /** the event the tooltip describes (nearest in the band; the block's alloc), or -1 */
  event: number;
  storage: number | null;
  /** the storage's lifetime (slot), or -1 */
  slot: number;
  x: number;
  y: number;
  /** x value (seconds or event index) under the cursor */
  u: number;
}

export interface Located {
  view: 'area' | 'blocks';
  /** CSS px, relative to the canvas */
  x: number;
  y: number;
  /** viewport coordinates (for a real mouse) */
  clientX: number;
  clientY: number;
}

export interface MemoryView {
  setTimeline(t: MemoryTimeline): void;
  /** Events from ``startIndex`` on; ``reset`` drops everything held first. */
  appendEvents(startIndex: number, columns: EventColumns, reset: boolean): void;
  setWarnings(warnings: string[]): void;
  exportSVG(): string;
  destroy(): void;
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

export const CANVAS_HEIGHT = 320;
/** Events scanned each way for the hovered band's nearest event. */
const HOVER_SCAN = 20_000;
const MIN_INDEX_SPAN = 8;

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

let viewCounter = 0;

export function createMemoryView(el: HTMLElement, opts: MemoryViewOptions): MemoryView {
  const doc = el.ownerDocument;
  const win = doc.defaultView;
  const uid = `fv-mem-${++viewCounter}-${Math.floor(Math.random() * 1e6)}`;
  el.classList.add('fv-root', 'fv-memory');
  el.setAttribute('data-fv-state', 'loading');
  el.setAttribute('data-fv-events', '0');

  // ---- chrome -------------------------------------------------------------------------------
  const warningStrip = h(doc, 'div', { class: 'fv-warning', role: 'alert', hidden: true });
  const btn = (cls: string, label: string, title: string) => h(doc, 'button', { type: 'button', class: `fv-btn ${cls}`, title, 'aria-label': title }, label);
  const xmodeBtn = btn('fv-mem-xmode', 'x: time', 'Switch the x axis between wall time and event index');
  xmodeBtn.setAttribute('data-mode', 'time');
  const zoomIn = btn('fv-mem-zoom-in', '+', 'Zoom in');
  const zoomOut = btn('fv-mem-zoom-out', '−', 'Zoom out');
  const zoomReset = btn('fv-mem-zoom-reset', 'Reset', 'Show the whole timeline');
  const svgBtn = btn('fv-export-svg', 'SVG', 'Download the current view as SVG');
  const pngBtn = btn('fv-export-png', 'PNG', 'Download the current view as PNG');
  const summary = h(doc, 'span', { class: 'fv-mem-summary', role: 'status', 'aria-live': 'polite' });
  const toolbar = h(
    doc,
    'div',
    { class: 'fv-toolbar', role: 'toolbar', 'aria-label': 'Memory timeline tools' },
    h(doc, 'span', { class: 'fv-btn-group' }, xmodeBtn),
    h(doc, 'span', { class: 'fv-btn-group' }, zoomIn, zoomOut, zoomReset),
    h(doc, 'span', { class: 'fv-btn-group' }, svgBtn, pngBtn),
    summary
  );
  const status = h(doc, 'div', { class: 'fv-status', role: 'status', hidden: true });
  const message = h(doc, 'div', { class: 'fv-message', hidden: true });
  const note = h(doc, 'div', { class: 'fv-mem-note', hidden: true });
  const legend = h(doc, 'ul', { class: 'fv-mem-legend', 'aria-label': 'Categories' });
  const canvas = h(doc, 'canvas', { class: 'fv-mem-canvas', tabindex: 0, role: 'img', 'aria-label': 'Memory timeline' });
  const tooltip = h(doc, 'div', { class: 'fv-mem-tooltip', role: 'tooltip', hidden: true });
  const modeHint = h(doc, 'div', { class: 'fv-mem-hint' });
  const stage = h(doc, 'div', { class: 'fv-mem-stage' }, canvas, tooltip);
  const pinned = h(doc, 'div', { class: 'fv-mem-pinned', hidden: true, 'aria-live': 'polite' });
  const transcript = h(doc, 'details', { class: 'fv-transcript' });
  const cudaBox = h(doc, 'div', { class: 'fv-mem-cuda-box', hidden: true });
  el.replaceChildren(warningStrip, toolbar, status, message, note, legend, stage, modeHint, cudaBox, pinned, transcript);

  // ---- state ----------------------------------------------------------------------------------
  const store = new MemoryStore();
  let timeline: MemoryTimeline | null = null;
  let mode: XMode = 'time';
  let range: [number, number] | null = null; // null: the whole timeline (follows new events)
  let frameCache: Frame | null = null;
  let stale = true;
  let destroyed = false;
  let rafId: number | null = null;
  /** when we asked for a replay that no reset has answered yet */
  let replayAsked: number | null = null;
  let hoverHit: MemoryHit | null = null;
  let pinnedHit: MemoryHit | null = null;
  let patterns: { key: string; fills: (CanvasPattern | string)[] } | null = null;
  const details = new Map<number, Promise<StorageDetail>>();
  const known = new Map<number, StorageDetail | Error>();
  let draws = 0;

  const ctx = (() => {
    try {
      return canvas.getContext('2d');
    } catch {
      return null;
    }
  })();

  function showStatus(text: string | null, kind: 'info' | 'error' = 'error') {
    status.hidden = !text;
    status.textContent = text ?? '';
    status.setAttribute('data-kind', kind);
  }

  function theme(): Theme {
    return {
      bg: cssVar(el, '--fv-bg', '#ffffff'),
      fg: cssVar(el, '--fv-fg', 'rgba(0, 0, 0, 0.87)'),
      fg2: cssVar(el, '--fv-fg2', 'rgba(0, 0, 0, 0.54)'),
      grid: cssVar(el, '--fv-grid', 'rgba(0, 0, 0, 0.1)'),
      font: cssVar(el, '--fv-font', 'system-ui, sans-serif'),
      ink: cssVar(el, '--fv-ink', 'rgba(0, 0, 0, 0.35)')
    };
  }

  /** the stage's last measured width: a hidden stage (Lab re-laying out, e.g. on a theme switch) measures 0 */
  let lastWidth = 0;
  function size(): { W: number; dpr: number } {
    lastWidth = stage.clientWidth || el.clientWidth || lastWidth;
    const W = Math.max(240, Math.floor(lastWidth || 800));
    const dpr = Math.min(3, Math.max(1, win?.devicePixelRatio || 1));
    return { W, dpr };
  }

  function currentRange(): [number, number] {
    return range ?? fullRange(store, mode, timeline?.cuda);
  }

  function frame(): Frame {
    const { W, dpr } = size();
    if (stale || !frameCache || frameCache.W !== W) {
      const [x0, x1] = currentRange();
      frameCache = computeFrame(
        { store, timeline, mode, x0, x1, W, H: CANVAS_HEIGHT, density: Math.min(2, dpr), zoomed: range !== null },
        frameCache
      );
      stale = false;
    }
    return frameCache;
  }

  function paint(f: Frame) {
    const { dpr } = size();
    const pw = Math.round(f.W * dpr);
    const ph = Math.round(f.H * dpr);
    if (canvas.width !== pw || canvas.height !== ph) {
      canvas.width = pw;
      canvas.height = ph;
    }
    canvas.style.width = `${f.W}px`;
    canvas.style.height = `${f.H}px`;
    if (!ctx) {
      return;
    }
    const th = theme();
    const key = `${th.ink}|${dpr}`;
    if (!patterns || patterns.key !== key) {
      patterns = { key, fills: canvasPatterns(doc, th, dpr) };
    }
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    const st: PaintState = { hoverX: null, hoverRect: -1, hoverEvent: null, pinnedSlot: pinnedHit?.slot ?? -1 };
    if (hoverHit) {
      st.hoverX = hoverHit.kind === 'band' ? hoverHit.x : null;
      if (hoverHit.kind === 'block') {
        st.hoverRect = hitBlock(f.blocks, hoverHit.x, hoverHit.y, 1);
      } else if (hoverHit.event >= 0) {
        st.hoverEvent = eventPoint(f, hoverHit.event, hoverHit.category);
      }
    }
    paintCanvas(ctx, f, th, patterns.fills, st);
  }

  /** Canvas point of event i in band ``cat`` (area view): at its x, mid-band. */
  function eventPoint(f: Frame, i: number, cat: number): { x: number; y: number } | null {
    const x = plotX(f, eventX(store, mode, i));
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

  function render(): Frame {
    if (rafId !== null && win) {
      win.cancelAnimationFrame?.(rafId);
      rafId = null;
    }
    const t0 = performance.now();
    const f = frame();
    paint(f);
    draws++;
    el.setAttribute('data-fv-view', f.view);
    el.setAttribute('data-fv-xmode', mode);
    el.setAttribute('data-fv-zoomed', String(range !== null));
    el.setAttribute('data-fv-blocks', f.view === 'blocks' ? String(new Set(Array.from(f.blocks.slot.subarray(0, f.blocks.n))).size) : '0');
    el.setAttribute('data-fv-draws', String(draws));
    el.setAttribute('data-fv-draw-ms', (performance.now() - t0).toFixed(2));
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
    modeHint.textContent =
      f.view === 'blocks'
        ? 'Each storage is a block from its allocation to its free, at a fixed offset (first fit). Hover for details, click to pin.'
        : f.view === 'area'
          ? 'Live bytes stacked by category (each pixel shows the highest value in its slice). Drag to pan, wheel or +/− to zoom; zoomed in far enough, each storage becomes a block.' +
            (f.cuda ? ' The dashed line is what the CUDA caching allocator reserved; ▽ marks a segment it returned, ✕ an OOM.' : '')
          : 'No allocations recorded yet.';
    return f;
  }

  function schedule(recompute = true) {
    if (recompute) {
      stale = true;
    }
    if (destroyed || rafId !== null) {
      return;
    }
    const raf = win?.requestAnimationFrame?.bind(win);
    if (raf) {
      rafId = raf(() => {
        rafId = null;
        if (!destroyed) {
          safeRender();
        }
      });
    } else {
      setTimeout(() => !destroyed && safeRender(), 16);
    }
  }

  function safeRender() {
    try {
      render();
    } catch (err) {
      el.setAttribute('data-fv-state', 'error');
      showStatus(`Could not draw the memory timeline: ${errorMessage(err)}`);
    }
  }

  // ---- chrome updates --------------------------------------------------------------------------
  function updateChrome() {
    const n = store.n;
    el.setAttribute('data-fv-events', String(n));
    const expected = timeline?.count ?? 0;
    el.setAttribute('data-fv-expected', String(expected));
    el.setAttribute('data-fv-complete', String(n >= expected));
    if (timeline && n < expected) {
      showStatus(`Loading events… ${n.toLocaleString('en-US')} of ${expected.toLocaleString('en-US')}`, 'info');
    } else if (status.getAttribute('data-kind') === 'info') {
      showStatus(null);
    }
    const live = store.totalAt(n - 1);
    summary.textContent = n
      ? `peak ${bytesLabel(store.peakBytes)} · live ${bytesLabel(live)} · ${n.toLocaleString('en-US')} event${n === 1 ? '' : 's'}` +
        (timeline?.cuda ? ` · reserved peak ${bytesLabel(timeline.cuda.peak_reserved)}` : '')
      : 'no events yet';
    canvas.setAttribute(
      'aria-label',
      n ? `Memory timeline: ${n.toLocaleString('en-US')} events, peak ${bytesLabel(store.peakBytes)}, live ${bytesLabel(live)} at the end` : 'Memory timeline (empty)'
    );
    renderLegend();
    renderTranscript();
  }

  function renderLegend() {
    const n = store.n;
    const th = theme();
    legend.replaceChildren(
      ...CATEGORIES.map((name, c) => {
        const sw = s(doc, 'svg', { class: 'fv-mem-swatch', width: 14, height: 14, viewBox: '0 0 14 14', 'aria-hidden': 'true' });
        sw.appendChild(svgPatterns(doc, `${uid}-lg${c}`, th, c));
        sw.appendChild(s(doc, 'rect', { x: 0.5, y: 0.5, width: 13, height: 13, fill: svgFill(c, `${uid}-lg${c}`) }));
        const present = !!store.stack[c];
        return h(
          doc,
          'li',
          { class: 'fv-mem-legend-item', 'data-category': name, 'data-present': String(present) },
          sw,
          h(doc, 'span', { class: 'fv-mem-legend-name' }, name),
          h(doc, 'span', { class: 'fv-mem-legend-bytes' }, present ? bytesShort(store.liveAt(n - 1, c)) : '—')
        );
      })
    );
  }

  function renderTranscript() {
    const n = store.n;
    const t = timeline;
    const items: Node[] = [h(doc, 'summary', {}, 'Text description')];
    const device = t?.device ?? 'cpu';
    const dropped = t?.dropped ?? 0;
    const parts = [`${device} memory timeline: ${n.toLocaleString('en-US')} events`];
    if (dropped) {
      parts.push(` (${dropped.toLocaleString('en-US')} older ones merged away)`);
    }
    parts.push('.');
    if (store.peakIndex >= 0) {
      parts.push(` Peak ${bytesExact(store.peakBytes)} at ${timeText(store.cols.time[store.peakIndex])} (event ${store.peakIndex.toLocaleString('en-US')}).`);
    }
    if (n) {
      parts.push(` Live at the end: ${bytesExact(store.totalAt(n - 1))}`);
      parts.push(t ? `; ${bytesExact(t.baseline_bytes)} existed before tracking.` : '.');
    }
    items.push(h(doc, 'p', { class: 'fv-mem-tr-summary' }, parts.join('')));
    items.push(h(doc, 'h5', {}, 'Live bytes per category at the end'));
    items.push(
      h(doc, 'ul', { class: 'fv-mem-tr-categories' }, ...CATEGORIES.map((name, c) => h(doc, 'li', { 'data-category': name }, `${name}: ${bytesExact(store.liveAt(n - 1, c))}`)))
    );
    const cells = t?.cells ?? [];
    if (cells.length) {
      items.push(h(doc, 'h5', {}, 'Cells'));
      const shown = cells.slice(0, 100);
      items.push(
        h(
          doc,
          'ul',
          { class: 'fv-mem-tr-cells' },
          ...shown.map(c => h(doc, 'li', {}, `[${c.cell}] starts at ${timeText(c.time)} (event ${c.index.toLocaleString('en-US')})`)),
          cells.length > shown.length ? h(doc, 'li', {}, `… and ${cells.length - shown.length} more`) : null
        )
      );
    }
    const open = transcript.open;
    transcript.replaceChildren(...items);
    transcript.open = open;
  }

  // ---- details, tooltip, pin ------------------------------------------------------------------
  function fetchDetail(storage: number): Promise<StorageDetail> {
    let p = details.get(storage);
    if (!p) {
      p = opts.requestDetail(storage);
      details.set(storage, p);
      p.then(
        d => known.set(storage, d),
        err => known.set(storage, err instanceof Error ? err : new Error(String(err)))
      );
    }
    return p;
  }

  function slotAlive(hit: MemoryHit): boolean | null {
    if (hit.slot < 0) {
      return null;
    }
    return store.slotFree[hit.slot] === NO_ID;
  }

  function lifetimeText(hit: MemoryHit): string {
    if (hit.slot < 0) {
      return '';
    }
    const a = store.slotAlloc[hit.slot];
    const fr = store.slotFree[hit.slot];
    const at = (i: number) => (mode === 'time' ? timeText(store.cols.time[i]) : `event ${i.toLocaleString('en-US')}`);
    if (fr === NO_ID) {
      return `allocated at ${at(a)}, still alive`;
    }
    const dt = store.cols.time[fr] - store.cols.time[a];
    return `allocated at ${at(a)}, freed at ${at(fr)} (lived ${timeText(dt)})`;
  }

  /** A time at the precision of the current view (a hundredth of its span). */
  function hoverTime(t: number): string {
    const f = frame();
    return timeText(t, mode === 'time' ? (f.x1 - f.x0) / 100 : undefined);
  }

  /** The tooltip/pinned content for a hit: band line, title, summary, more. */
  function hitContent(hit: MemoryHit, full: boolean): Node[] {
    const out: Node[] = [];
    const catName = CATEGORIES[hit.category];
    if (hit.kind === 'band') {
      const where = mode === 'time' ? `at ${hoverTime(hit.u)}` : `after event ${Math.max(0, hit.stateIndex).toLocaleString('en-US')}`;
      out.push(h(doc, 'div', { class: 'fv-mem-tip-band', 'data-category': catName }, `${catName}: ${bytesLabel(hit.bandBytes ?? 0)} live ${where}`));
    }
    if (hit.storage === null || hit.event < 0) {
      return out;
    }
    const facts: EventFacts = eventFacts(store, hit.event, timeline);
    const k = known.get(hit.storage);
    const d = k && !(k instanceof Error) ? k : null;
    const alive = slotAlive(hit);
    const title = titleText(hit.storage, d);
    out.push(
      h(
        doc,
        'div',
        { class: 'fv-mem-tip-title' },
        title,
        alive === false ? h(doc, 'span', { class: 'fv-mem-tip-state' }, ' (freed)') : null,
        hit.kind === 'band' ? h(doc, 'span', { class: 'fv-mem-tip-action' }, ` · ${facts.action} at ${mode === 'time' ? hoverTime(store.cols.time[hit.event]) : `event ${hit.event.toLocaleString('en-US')}`}`) : null
      )
    );
    const cat = hit.kind === 'block' ? catName : facts.category;
    out.push(h(doc, 'div', { class: 'fv-mem-tip-summary' }, summaryText(facts, d, cat)));
    const more: string[] = [];
    const module = d?.module ?? facts.module;
    if (module) {
      more.push(`module ${module}`);
    }
    const node = d?.node ?? facts.node;
    if (full && node !== null && node !== undefined) {
      more.push(`autograd node ${d?.node_name ? `${d.node_name} ` : ''}#${node}`);
    }
    const life = lifetimeText(hit);
    if (life) {
      more.push(life);
    }
    if (more.length) {
      out.push(h(doc, 'div', { class: 'fv-mem-tip-more' }, more.join(' · ')));
    }
    if (d?.source) {
      out.push(h(doc, 'pre', { class: 'fv-mem-tip-source' }, d.source));
    }
    if (!k) {
      out.push(h(doc, 'div', { class: 'fv-mem-tip-loading' }, 'asking the kernel for details…'));
    } else if (k instanceof Error) {
      out.push(h(doc, 'div', { class: 'fv-mem-tip-error' }, `details unavailable: ${k.message}`));
    }
    return out;
  }

  function showTooltip(hit: MemoryHit | null) {
    if (!hit) {
      tooltip.hidden = true;
      tooltip.replaceChildren();
      el.removeAttribute('data-fv-hover-storage');
      return;
    }
    tooltip.replaceChildren(...hitContent(hit, false));
    tooltip.hidden = false;
    tooltip.setAttribute('data-kind', hit.kind);
    if (hit.storage !== null) {
      tooltip.setAttribute('data-storage', String(hit.storage));
      el.setAttribute('data-fv-hover-storage', String(hit.storage));
    } else {
      tooltip.removeAttribute('data-storage');
      el.removeAttribute('data-fv-hover-storage');
    }
    const W = frame().W;
    const left = hit.x + 16 + 300 > W ? Math.max(0, hit.x - 16 - 300) : hit.x + 16;
    tooltip.style.left = `${Math.round(left)}px`;
    tooltip.style.top = `${Math.round(Math.min(hit.y + 12, CANVAS_HEIGHT - 40))}px`;
  }

  function hitTest(x: number, y: number): MemoryHit | null {
    const f = frame();
    if (f.view === 'empty' || x < f.left || x > f.right || y < f.top - 2 || y > f.bottom + 2) {
      return null;
    }
    const u = valueAtX(f, x);
    const stateIndex = stateIndexAt(store, mode, u);
    if (f.view === 'blocks') {
      const k = hitBlock(f.blocks, x, y, 1);
      if (k < 0) {
        return null;
      }
      const slot = f.blocks.slot[k];
      return {
        kind: 'block',
        category: f.blocks.cat[k],
        stateIndex,
        bandBytes: null,
        event: store.slotAlloc[slot],
        storage: store.slotSid[slot],
        slot,
        x,
        y,
        u
      };
    }
    const col = columnAt(f, x);
    const value = ((f.bottom - y) / (f.bottom - f.top)) * f.yMax;
    const cat = f.env ? hitArea(f.env, col, Math.max(0, value)) : -1;
    if (cat < 0 || stateIndex < 0) {
      return null;
    }
    // the band's event nearest in x (any distance: its time is in the tooltip), scanning a bounded number of events
    const ev = nearestEventInBand(store, mode, stateIndex, u, cat, Infinity, HOVER_SCAN);
    const storage = ev >= 0 ? store.cols.storage[ev] : null;
    return {
      kind: 'band',
      category: cat,
      stateIndex,
      bandBytes: store.liveAt(stateIndex, cat),
      event: ev,
      storage,
      slot: storage === null ? -1 : store.slotAt(storage, ev),
      x,
      y,
      u
    };
  }

  async function hover(x: number, y: number): Promise<MemoryHit | null> {
    const hit = hitTest(x, y);
    hoverHit = hit;
    showTooltip(hit);
    schedule(false);
    if (hit && hit.storage !== null) {
      const sid = hit.storage;
      try {
        await fetchDetail(sid);
      } catch {
        // shown in the tooltip
      }
      await Promise.resolve();
      if (!destroyed && hoverHit === hit) {
        showTooltip(hit);
      }
      if (!destroyed && pinnedHit && pinnedHit.storage === sid) {
        renderPinned();
      }
    }
    return hit;
  }

  function leave() {
    hoverHit = null;
    showTooltip(null);
    schedule(false);
  }

  function renderPinned() {
    const hit = pinnedHit;
    if (!hit || hit.storage === null) {
      pinned.hidden = true;
      pinned.replaceChildren();
      pinned.removeAttribute('data-storage');
      return;
    }
    const close = h(doc, 'button', { type: 'button', class: 'fv-btn fv-mem-unpin', title: 'Unpin', 'aria-label': 'Unpin' }, '×');
    close.addEventListener('click', () => {
      pinnedHit = null;
      renderPinned();
      schedule(false);
    });
    pinned.replaceChildren(close, ...hitContent(hit, true));
    pinned.hidden = false;
    pinned.setAttribute('data-storage', String(hit.storage));
  }

  function highlight(node: number) {
    doc.dispatchEvent(new (win?.CustomEvent ?? CustomEvent)('forgeviz:highlight-node', { detail: { node } }));
  }

  async function click(x: number, y: number): Promise<MemoryHit | null> {
    const hit = hitTest(x, y);
    if (!hit || hit.storage === null || hit.event < 0) {
      pinnedHit = null;
      renderPinned();
      schedule(false);
      return hit;
    }
    pinnedHit = hit;
    renderPinned();
    schedule(false);
    const node = store.cols.node[hit.event];
    if (node !== NO_ID) {
      highlight(node);
    }
    try {
      const d = await fetchDetail(hit.storage);
      if (node === NO_ID && d.node !== null && d.node !== undefined && pinnedHit === hit) {
        highlight(d.node);
      }
    } catch {
      // shown in the panel
    }
    await Promise.resolve();
    if (!destroyed && pinnedHit === hit) {
      renderPinned();
    }
    return hit;
  }

  // ---- zoom and pan -----------------------------------------------------------------------------
  function setRangeClamped(x0: number, x1: number) {
    const [f0, f1] = fullRange(store, mode, timeline?.cuda);
    const full = f1 - f0;
    const minSpan = mode === 'index' ? MIN_INDEX_SPAN : Math.max(1e-6, full * 1e-9);
    let span = Math.max(minSpan, x1 - x0);
    if (span >= full) {
      range = null;
    } else {
      let a = x0;
      if (x1 - x0 < minSpan) {
        a = (x0 + x1) / 2 - minSpan / 2;
      }
      span = Math.min(span, full);
      a = Math.max(f0, Math.min(f1 - span, a));
      range = [a, a + span];
    }
    el.setAttribute('data-fv-zoomed', String(range !== null));
    hoverHit = null;
    showTooltip(null);
    schedule();
  }

  function zoomBy(factor: number, anchor?: number) {
    const [x0, x1] = currentRange();
    const c = anchor ?? (x0 + x1) / 2;
    const span = (x1 - x0) * factor;
    const t = (c - x0) / (x1 - x0 || 1);
    setRangeClamped(c - t * span, c - t * span + span);
  }

  function panBy(px: number) {
    const f = frame();
    const [x0, x1] = currentRange();
    const dv = (px / (f.right - f.left)) * (x1 - x0);
    if (range) {
      setRangeClamped(x0 + dv, x1 + dv);
    }
  }

  function setXMode(next: XMode) {
    if (next === mode) {
      return;
    }
    if (range && store.n) {
      const [x0, x1] = range;
      const n = store.n;
      if (next === 'index') {
        const i0 = Math.max(0, upperBound(store.cols.time, n, x0) - 1);
        const i1 = Math.max(i0 + MIN_INDEX_SPAN, upperBound(store.cols.time, n, x1) - 1);
        mode = next;
        setRangeClamped(i0, i1);
      } else {
        const t0 = store.cols.time[Math.max(0, Math.min(n - 1, Math.floor(x0)))];
        const t1 = store.cols.time[Math.max(0, Math.min(n - 1, Math.ceil(x1)))];
        mode = next;
        setRangeClamped(t0, t1 > t0 ? t1 : t0 + 1e-6);
      }
    } else {
      mode = next;
    }
    xmodeBtn.setAttribute('data-mode', mode);
    xmodeBtn.textContent = mode === 'time' ? 'x: time' : 'x: events';
    el.setAttribute('data-fv-xmode', mode);
    hoverHit = null;
    showTooltip(null);
    schedule();
  }

  xmodeBtn.addEventListener('click', () => setXMode(mode === 'time' ? 'index' : 'time'));
  zoomIn.addEventListener('click', () => zoomBy(0.5));
  zoomOut.addEventListener('click', () => zoomBy(2));
  zoomReset.addEventListener('click', () => setRangeClamped(-Infinity, Infinity));

  // ---- pointer ------------------------------------------------------------------------------------
  const local = (e: { clientX: number; clientY: number }) => {
    const r = canvas.getBoundingClientRect();
    return { x: e.clientX - r.left, y: e.clientY - r.top };
  };
  let drag: { x: number; moved: boolean; id: number } | null = null;
  let suppressClick = false;
  const onDown = (e: PointerEvent) => {
    if (e.button !== 0) {
      return;
    }
    drag = { x: e.clientX, moved: false, id: e.pointerId };
    suppressClick = false;
  };
  const onMove = (e: PointerEvent) => {
    if (drag && (e.buttons & 1) === 1) {
      const dx = e.clientX - drag.x;
      if (drag.moved || Math.abs(dx) > 3) {
        if (!drag.moved) {
          try {
            canvas.setPointerCapture?.(drag.id);
          } catch {
            // not capturable (synthetic events)
          }
        }
        drag.moved = true;
        drag.x = e.clientX;
        el.setAttribute('data-fv-dragging', 'true');
        panBy(-dx);
        return;
      }
    }
    const p = local(e);
    void hover(p.x, p.y);
  };
  const onUp = () => {
    if (drag?.moved) {
      suppressClick = true;
    }
    drag = null;
    el.removeAttribute('data-fv-dragging');
  };
  const onClick = (e: MouseEvent) => {
    if (suppressClick) {
      suppressClick = false;
      return;
    }
    const p = local(e);
    void click(p.x, p.y);
  };
  const onWheel = (e: WheelEvent) => {
    if (!store.n) {
      return;
    }
    e.preventDefault();
    const f = frame();
    const p = local(e);
    const unit = e.deltaMode === 1 ? 16 : e.deltaMode === 2 ? 400 : 1;
    const dy = (e.deltaY || 0) * unit;
    const dx = (e.deltaX || 0) * unit;
    if (Math.abs(dx) > Math.abs(dy)) {
      panBy(dx);
      return;
    }
    const px = Number.isFinite(p.x) ? Math.max(f.left, Math.min(f.right, p.x)) : (f.left + f.right) / 2;
    zoomBy(Math.exp(dy * 0.002), valueAtX(f, px));
  };
  const onKey = (e: KeyboardEvent) => {
    const f = frame();
    if (e.key === 'ArrowLeft') {
      panBy(-(f.right - f.left) * 0.1);
    } else if (e.key === 'ArrowRight') {
      panBy((f.right - f.left) * 0.1);
    } else if (e.key === '+' || e.key === '=') {
      zoomBy(0.5);
    } else if (e.key === '-' || e.key === '_') {
      zoomBy(2);
    } else if (e.key === '0') {
      setRangeClamped(-Infinity, Infinity);
    } else if (e.key === 'Escape') {
      pinnedHit = null;
      renderPinned();
      leave();
    } else {
      return;
    }
    e.preventDefault();
  };
  canvas.addEventListener('pointerdown', onDown);
  canvas.addEventListener('pointermove', onMove);
  canvas.addEventListener('pointerup', onUp);
  canvas.addEventListener('pointercancel', onUp);
  canvas.addEventListener('pointerleave', leave);
  canvas.addEventListener('click', onClick);
  canvas.addEventListener('wheel', onWheel, { passive: false });
  canvas.addEventListener('keydown', onKey);
  const resize = win && 'ResizeObserver' in win ? new (win as unknown as { ResizeObserver: typeof ResizeObserver }).ResizeObserver(() => schedule()) : null;
  resize?.observe(stage);
  // Lab's theme switch changes the --jp-* colours the canvas reads
  const themeWatch = win && 'MutationObserver' in win && doc.body ? new (win as unknown as { MutationObserver: typeof MutationObserver }).MutationObserver(() => schedule()) : null;
  themeWatch?.observe(doc.body, { attributes: true, attributeFilter: ['data-jp-theme-light', 'data-jp-theme-name', 'class'] });

  // ---- locate (for drivers) ---------------------------------------------------------------------
  function lastSlotOf(storage: number): number {
    for (let k = store.nSlots - 1; k >= 0; k--) {
      if (store.slotSid[k] === storage) {
        return k;
      }
    }
    return -1;
  }

  function toClient(x: number, y: number): { clientX: number; clientY: number } {
    const r = canvas.getBoundingClientRect();
    return { clientX: r.left + x, clientY: r.top + y };
  }

  function locate(storage: number): Located | null {
    const f = frame();
    if (f.view === 'blocks') {
      let best = -1;
      for (let k = 0; k < f.blocks.n; k++) {
        if (store.slotSid[f.blocks.slot[k]] === storage && (best < 0 || f.blocks.x1[k] - f.blocks.x0[k] > f.blocks.x1[best] - f.blocks.x0[best])) {
          best = k;
        }
      }
      if (best < 0) {
        return null;
      }
      // a point inside the block that hovers it (the centre first, then a grid)
      const x0 = Math.max(f.left, f.blocks.x0[best]);
      const x1 = Math.min(f.right, f.blocks.x1[best]);
      const y0 = Math.max(f.top, f.blocks.y0[best]);
      const y1 = Math.min(f.bottom, f.blocks.y1[best]);
      for (const [fx, fy] of [[0.5, 0.5], [0.25, 0.5], [0.75, 0.5], [0.5, 0.25], [0.5, 0.75], [0.1, 0.5], [0.9, 0.5]]) {
        const x = x0 + (x1 - x0) * fx;
        const y = y0 + (y1 - y0) * fy;
        const k = hitBlock(f.blocks, x, y, 1);
        if (k >= 0 && store.slotSid[f.blocks.slot[k]] === storage) {
          return { view: 'blocks', x, y, ...toClient(x, y) };
        }
      }
      return null;
    }
    if (f.view !== 'area') {
      return null;
    }
    const slot = lastSlotOf(storage);
    if (slot < 0) {
      return null;
    }
    const a = store.slotAlloc[slot];
    const p = eventPoint(f, a, store.slotCat0[slot]);
    return p ? { view: 'area', x: p.x, y: p.y, ...toClient(p.x, p.y) } : null;
  }

  function showStorage(storage: number): Located | null {
    const slot = lastSlotOf(storage);
    if (slot < 0) {
      return null;
    }
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
    setRangeClamped(x0, x1);
    render();
    if (frame().view !== 'blocks') {
      const [y0, y1] = around(a - 8, a + 8);
      setRangeClamped(y0 - pad, y1 + pad);
      render();
    }
    return locate(storage);
  }

  // ---- export ---------------------------------------------------------------------------------------
  function exportFrame(): { text: string; w: number; h: number } {
    const th = theme();
    const t = timeline;
    const title = `forgeviz memory timeline${t?.device ? ` (${t.device})` : ''}: peak ${bytesLabel(store.peakBytes)}, ${store.n.toLocaleString('en-US')} events`;
    // export at one column per CSS pixel: the paths are bounded by the width, not the events
    const { W } = size();
    const [x0, x1] = currentRange();
    const ef = computeFrame({ store, timeline, mode, x0, x1, W, H: CANVAS_HEIGHT, density: 1, zoomed: range !== null });
    // every colour and font is an attribute already: serialised detached, no computed style is
    // inlined, which keeps a blocks view of 2,000 rectangles small
    const g = frameToSvg(doc, ef, th, `${uid}-x`, title);
    const h2 = ef.H + 24;
    return { text: standaloneSvg(g, el, ef.W, h2, title), w: ef.W + 28, h: h2 + 28 };
  }

  function exportSVG(): string {
    return exportFrame().text;
  }

  svgBtn.addEventListener('click', () => {
    try {
      download(doc, 'forgeviz-memory.svg', new Blob([exportSVG()], { type: 'image/svg+xml' }));
    } catch (err) {
      showStatus(`SVG export failed: ${errorMessage(err)}`);
    }
  });
  pngBtn.addEventListener('click', async () => {
    try {
      const e = exportFrame();
      download(doc, 'forgeviz-memory.png', await svgToPng(doc, e.text, e.w, e.h));
    } catch (err) {
      showStatus(`PNG export failed: ${errorMessage(err)}`);
    }
  });

  // ---- public API ----------------------------------------------------------------------------------
  function setTimeline(t: MemoryTimeline) {
    // more history merged away since we last looked: the event indices we hold are stale
    if (timeline && store.n && (t.dropped ?? 0) > (timeline.dropped ?? 0)) {
      askReplay();
    }
    timeline = t;
    cudaBox.hidden = !t.cuda;
    cudaBox.replaceChildren(...(t.cuda ? [cudaPanel(doc, t.cuda)] : []));
    message.hidden = !t.message;
    message.textContent = t.message ?? '';
    note.hidden = !t.dropped;
    note.textContent = t.dropped
      ? `Older history was merged to stay within ${t.max_events.toLocaleString('en-US')} events: ${t.dropped.toLocaleString('en-US')} events dropped (storages allocated and freed there no longer show; the ones still alive start at the cut).` +
        (t.peak_bytes > store.peakBytes ? ` The all-time peak was ${bytesLabel(t.peak_bytes)}.` : '')
      : '';
    updateChrome();
    el.setAttribute('data-fv-state', 'ready');
    schedule();
  }

  function appendEvents(startIndex: number, columns: EventColumns, reset: boolean) {
    const count = columns.time.length;
    if (reset) {
      replayAsked = null;
      store.reset();
      details.clear();
      known.clear();
      hoverHit = null;
      pinnedHit = null;
      range = null;
      showTooltip(null);
      renderPinned();
      if (startIndex !== 0) {
        askReplay();
        updateChrome();
        schedule();
        return;
      }
      store.append(columns, 0, count);
    } else {
      const n = store.n;
      if (startIndex > n) {
        askReplay(); // a gap: we missed events
        return;
      }
      const skip = n - startIndex; // events we already hold (a replay overlapping the stream)
      if (skip < count) {
        store.append(columns, skip, count);
      }
    }
    updateChrome();
    schedule();
  }

  /** Ask for the whole history again, unless an earlier ask is still unanswered (for 10 s). */
  function askReplay() {
    const now = Date.now();
    if (replayAsked !== null && now - replayAsked < 10_000) {
      return;
    }
    replayAsked = now;
    try {
      opts.requestReplay();
    } catch (err) {
      showStatus(`Could not ask the kernel for the events: ${errorMessage(err)}`);
    }
  }

  updateChrome();
  render();

  const api: MemoryView = {
    setTimeline,
    appendEvents,
    setWarnings(warnings: string[]) {
      const list = (warnings ?? []).filter(w => typeof w === 'string' && w.length);
      warningStrip.hidden = list.length === 0;
      warningStrip.replaceChildren(...list.map(w => h(doc, 'div', { class: 'fv-warning-item' }, h(doc, 'span', { class: 'fv-warning-icon', 'aria-hidden': 'true' }, '⚠'), ` ${w}`)));
    },
    exportSVG,
    destroy() {
      destroyed = true;
      if (rafId !== null) {
        win?.cancelAnimationFrame?.(rafId);
      }
      resize?.disconnect();
      themeWatch?.disconnect();
      canvas.removeEventListener('pointerdown', onDown);
      canvas.removeEventListener('pointermove', onMove);
      canvas.removeEventListener('pointerup', onUp);
      canvas.removeEventListener('pointercancel', onUp);
      canvas.removeEventListener('pointerleave', leave);
      canvas.removeEventListener('click', onClick);
      canvas.removeEventListener('wheel', onWheel);
      canvas.removeEventListener('keydown', onKey);
      el.replaceChildren();
      el.classList.remove('fv-root', 'fv-memory');
      for (const a of Array.from(el.attributes)) {
        if (a.name.startsWith('data-fv-')) {
          el.removeAttribute(a.name);
        }
      }
      delete (el as unknown as { forgevizMemory?: MemoryView }).forgevizMemory;
      store.reset();
    },
    store,
    draw: () => render(),
    frame,
    setXMode,
    setRange(x0: number, x1: number) {
      setRangeClamped(x0, x1);
    },
    resetZoom() {
      setRangeClamped(-Infinity, Infinity);
    },
    hitTest,
    hover,
    click,
    locate,
    showStorage
  };
  (el as unknown as { forgevizMemory?: MemoryView }).forgevizMemory = api;
  return api;
}
