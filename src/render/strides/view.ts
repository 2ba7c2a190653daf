/**
 * The stride/view diagram: each tensor's logical grid above the storage strip it
 * reads, with the address mapping shown on hover and focus.
 * Pure DOM/SVG; imports nothing from Jupyter or anywidget.
 *
 * The parts, all sharing one StridesContext (state.ts): data.ts (the words: sizes, verdicts,
 * labels, readouts), layout.ts (address math and geometry), draw.ts (a tensor's grid, hover
 * marks) and draw-strip.ts (a storage strip) as SVG, group.ts (a strip and its tensors: section
 * and redraw), panel.ts (cards: facts, verdicts, try an op; pagers), transcript.ts, windows.ts
 * (the windows drawn and fetching their values), hot.ts (the hover/focus mapping), keys.ts,
 * events.ts, export.ts; the chrome comes from common/chrome.ts.
 */
import type { StrideLayout, StridesViewState, ValueWindow, ViewVerdict } from '../../model/wire';
import { button, buttonGroup, errorMessage, exportButtons, toolbar, viewRoot } from '../common/chrome';
import { h } from '../common/dom';
import { exportSize, exportSVG } from './export';
import { bindEvents } from './events';
import { makeGroup, renderGroup } from './group';
import { renderTranscript } from './transcript';
import { computeReaders, SState, setReadout, showStatus, stripState, StridesContext, tensorState, TState } from './state';
import { applyViewState, pinnedCellOf, repin, viewState } from './viewstate';
import { moveTensorBox } from './windows';

export { bytesText, overlapText, TENSOR_COLORS, TENSOR_DASHES, verdictCall, verdictSummary } from './data';
export { renderVerdict } from './panel';

export interface StridesViewOptions {
  requestValues(tensor: number, start: number[], size: number[]): Promise<ValueWindow>;
  requestStorage(strip: number, start: number, count: number): Promise<{ start: number; values: string[] }>;
  tryOp(tensor: number, op: 'view' | 'reshape', shape: number[]): Promise<ViewVerdict>;
  /** The pinned cell or the units changed (``viewState()`` says what they are now). */
  onViewState?(): void;
}

export interface StridesView {
  setLayout(layout: StrideLayout): void;
  setWarnings(warnings: string[]): void;
  exportSVG(): string;
  /** The units and pinned cell, as the wire's StridesViewState. */
  viewState(): StridesViewState;
  /** Show a saved or exported state; throws saying what is wrong with it (and changes nothing). */
  applyViewState(state: unknown): void;
  destroy(): void;
}

/** Build the state of a new layout, one group per strip (then the tensors without one), and draw it. */
function setLayout(ctx: StridesContext, lay: StrideLayout) {
  const { el, ui } = ctx;
  const pinnedBefore = ctx.pinned ? pinnedCellOf(ctx, ctx.pinned) : null;
  ctx.layout = lay;
  ctx.maxWindow = Math.max(1, lay.max_window || 1024);
  ctx.tensors.clear();
  ctx.strips.clear();
  lay.tensors.forEach((t, i) => ctx.tensors.set(t.id, tensorState(t, i, ctx.maxWindow)));
  for (const sp of lay.strips) {
    ctx.strips.set(sp.id, stripState(ctx, sp));
  }
  for (const ts of ctx.tensors.values()) {
    computeReaders(ctx, ts);
  }
  ctx.groups = [];
  const placed = new Set<number>();
  lay.strips.forEach((sp, i) => {
    const list = [...ctx.tensors.values()].filter(ts => ts.t.strip === i);
    list.forEach(ts => placed.add(ts.t.id));
    ctx.groups.push(makeGroup(ctx, ctx.strips.get(sp.id) as SState, list, `storage ${sp.id} and the tensors that read it`));
  });
  const rest: TState[] = [...ctx.tensors.values()].filter(ts => !placed.has(ts.t.id));
  if (rest.length) {
    ctx.groups.push(makeGroup(ctx, null, rest, 'tensors without a storage to draw'));
  }
  ui.groupsEl.replaceChildren(...ctx.groups.map(g => g.section));
  ui.unitsBtn.hidden = lay.strips.length === 0;
  ctx.hot = null;
  ctx.pinned = null;
  for (const g of ctx.groups) {
    renderGroup(ctx, g);
  }
  for (const ts of ctx.tensors.values()) {
    if (ts.t.has_data && !ts.t.window && ts.box) {
      moveTensorBox(ctx, ts, ts.box, null, true);
    }
  }
  repin(ctx, pinnedBefore);
  ui.message.hidden = !lay.message;
  ui.message.textContent = lay.message ?? '';
  renderTranscript(ctx);
  showStatus(ctx, null);
  el.setAttribute('data-fv-state', 'ready');
}

export function createStridesView(el: HTMLElement, opts: StridesViewOptions): StridesView {
  const doc = el.ownerDocument;
  el.setAttribute('data-fv-pending', '0');

  // ---- chrome -----------------------------------------------------------------------------
  const { warnings, status } = viewRoot(el, 'fv-strides', 'error');
  const unitsBtn = button(doc, 'fv-units', 'Units: elements', 'Show storage in elements or in bytes');
  unitsBtn.setAttribute('aria-pressed', 'false');
  const exported = exportButtons(doc, status, {
    what: 'the diagram',
    fileName: 'forgeviz-strides',
    svg: () => exportSVG(ctx),
    png: () => {
      const { w, hgt } = exportSize(ctx);
      return { text: exportSVG(ctx), w: w + 28, h: hgt + 28 };
    }
  });
  const readout = h(doc, 'div', { class: 'fv-readout', role: 'status', 'aria-live': 'polite', 'data-empty': 'true' });
  const bar = toolbar(doc, 'Stride diagram tools', buttonGroup(doc, 'div', unitsBtn), buttonGroup(doc, 'div', exported.svg, exported.png), readout);
  const message = h(doc, 'div', { class: 'fv-message', hidden: true });
  const groupsEl = h(doc, 'div', { class: 'fv-sd-groups' });
  const transcript = h(doc, 'details', { class: 'fv-transcript' });
  el.replaceChildren(warnings.el, bar, status.el, message, groupsEl, transcript);

  const ctx: StridesContext = {
    doc,
    el,
    opts,
    ui: { readout, status, message, groupsEl, transcript, unitsBtn },
    layout: null,
    maxWindow: 1024,
    bytesMode: false,
    groups: [],
    tensors: new Map(),
    strips: new Map(),
    hot: null,
    pinned: null,
    pendingFocus: null,
    pending: 0,
    destroyed: false,
    rendering: false,
    redraw: g => renderGroup(ctx, g)
  };
  setReadout(ctx, null);
  const unbind = bindEvents(ctx);

  return {
    setLayout(lay: StrideLayout) {
      try {
        setLayout(ctx, lay);
      } catch (err) {
        el.setAttribute('data-fv-state', 'error');
        showStatus(ctx, `Could not draw the stride diagram: ${errorMessage(err)}`);
      }
    },
    exportSVG: () => exportSVG(ctx),
    viewState: () => viewState(ctx),
    applyViewState: state => applyViewState(ctx, state),
    setWarnings: list => warnings.set(list),
    destroy() {
      ctx.destroyed = true;
      unbind();
      el.replaceChildren();
      el.classList.remove('fv-root', 'fv-strides');
      el.removeAttribute('data-fv-state');
      el.removeAttribute('data-fv-pending');
    }
  };
}
