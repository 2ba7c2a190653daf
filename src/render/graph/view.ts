/**
 * The autograd graph view: the graph folded by module (fold.ts), turned into DOT for what is
 * visible (dotgen.ts), laid out by Graphviz, drawn as our own SVG.
 * Pure DOM/SVG; imports nothing from Jupyter or anywidget.
 *
 * This file wires the toolbar, the pointer and the public API to the parts: parts.ts (the DOM),
 * core.ts (the graph shown, its fold and selection; relayout, expand and collapse), stage.ts
 * (the SVG: where things are, centring, fitting, culling, export), attach.ts (a big drawing goes
 * on the page frame by frame), search.ts, crumbs.ts (the module path), state.ts (what a backward
 * changed). Below them: fold.ts (what is visible for the expanded modules), dotgen.ts (its DOT),
 * draw.ts (layout → SVG, decoration), inspector.ts (the inspector), interaction.ts (click, keys,
 * focus), transcript.ts (the text description), layout.ts (Graphviz JSON → boxes and paths),
 * panzoom.ts; the chrome comes from common/chrome.ts. A big view (past ``BIG_VIEW_ITEMS`` boxes) is
 * laid out by layered.ts (in a worker: src/layout-worker.ts) and drawn by window.ts.
 *
 * Stable hooks for tests and notebooks (documented in the README):
 *   .fv-root[data-fv-state="ready"]   painted (also after each expand or collapse)
 *   [data-fv-node="<id>"]             a drawn Node's group (as is [data-node-id="<id>"])
 *   [data-fv-module="<path>"]         a collapsed module's box, and an expanded module's cluster
 *   [data-fv-repeat="<count>"]        a stack of <count> repeated modules
 */
import type { Graph, GraphState, RunSteps } from '../../model/wire';
import { button, buttonGroup, errorMessage, exportButtons, stepSlider, toolbar, viewRoot } from '../common/chrome';
import { h } from '../common/dom';
import { download } from '../common/export';
import { createCore, type GraphViewOptions } from './core';
import { allModules, defaultExpanded, expandedToDepth, moduleOfItem, orderedIds, withCollapsed, withExpanded } from './fold';
import { bindNodeEvents, type InteractionState } from './interaction';
import { createBody, type GraphUi, legend } from './parts';
import { createSearch } from './search';
import { createStage, type Ref } from './stage';

export { MAX_DRAWN_ITEMS, type GraphViewOptions } from './core';
export { nodeAriaLabel } from './draw';
export { BIG_VIEW_ITEMS } from './window';

export interface GraphView {
  /** Show a graph (its structure changed): fold it, lay it out, draw it. */
  setGraph(g: Graph): Promise<void>;
  /** Apply what a backward changed (gradients, freed, non-finite, module norms) with no new layout. */
  setState(state: GraphState): void;
  /** Expand exactly these Modules (the ``expanded`` trait; [] is the first folded view). */
  setExpanded(ids: readonly string[]): Promise<void>;
  /** The expanded Module ids, in ``graph.modules`` order. */
  expanded(): string[];
  /** Expand a Module (and what encloses it) in place; the clicked box keeps its screen position. */
  expand(moduleId: string): Promise<void>;
  /** Collapse a Module back into its box (or its stack). */
  collapse(moduleId: string): Promise<void>;
  expandAll(): Promise<void>;
  /** Back to the first folded view. */
  collapseAll(): Promise<void>;
  /** Expand the Modules shallower than ``depth`` (1: the root modules only). */
  expandToDepth(depth: number): Promise<void>;
  /** Find Nodes and Modules; the first match is revealed and centred. Returns the number of matches. */
  search(query: string): Promise<number>;
  /** Reveal, centre and mark the next match (wrapping). */
  nextMatch(): Promise<void>;
  select(nodeId: number): Promise<void>;
  /** Show a Module in the inspector (asks ``requestModule``). */
  selectModule(moduleId: string): Promise<void>;
  exportSVG(): string;
  /** Show faults inside forgeviz as a visible warning strip (empty list hides it). */
  setWarnings(warnings: string[]): void;
  /**
   * A recorded run's steps and ranks (the ``steps`` trait): the toolbar's step slider (and rank
   * selector, for several ranks) shows them; null or no steps hides it. Moving it calls
   * ``requestStep`` (none: the slider is shown, disabled, as in a saved output).
   */
  setSteps(steps: RunSteps | null): void;
  destroy(): void;
}

export function createGraphView(el: HTMLElement, opts: GraphViewOptions): GraphView {
  const doc = el.ownerDocument;
  /** What the pointer and key handlers share: the drawing, and whether to refit on resize. */
  const io: InteractionState = { drawn: null, autoFit: true };

  // ---- static chrome -------------------------------------------------------
  const { warnings, status } = viewRoot(el, null, 'info');
  const zoomIn = button(doc, 'fv-zoom-in', '+', 'Zoom in');
  const zoomOut = button(doc, 'fv-zoom-out', '−', 'Zoom out');
  const fitBtn = button(doc, 'fv-fit', '⤢ Fit', 'Fit the graph to the view');
  const exported = exportButtons(doc, status, {
    what: 'the graph',
    fileName: 'forgeviz-graph',
    svg: () => exportSVG(),
    png: () => ({ text: exportSVG(), w: (stage.laid()?.width ?? 480) + 28, h: (stage.laid()?.height ?? 32) + 28 })
  });
  const dotBtn = button(doc, 'fv-export-dot', 'DOT', 'Download the Graphviz DOT source');
  const expandAllBtn = button(doc, 'fv-expand-all', 'Expand all', 'Expand every module');
  const collapseAllBtn = button(doc, 'fv-collapse-all', 'Collapse all', 'Back to the first folded view');
  const depthSel = h(doc, 'select', { class: 'fv-depth', 'aria-label': 'Expand modules to depth' });
  const foldTools = buttonGroup(doc, 'div', expandAllBtn, collapseAllBtn, depthSel);
  const searchInput = h(doc, 'input', {
    class: 'fv-search',
    type: 'search',
    placeholder: 'Find op, module, parameter',
    'aria-label': 'Find ops, modules and parameters (Enter: next match, Escape: clear)'
  });
  const searchCount = h(doc, 'span', { class: 'fv-search-count', 'aria-live': 'polite' });
  const tools = toolbar(
    doc,
    'Graph tools',
    buttonGroup(doc, 'div', zoomIn, zoomOut, fitBtn),
    foldTools,
    h(doc, 'div', { class: 'fv-search-box' }, searchInput, searchCount),
    buttonGroup(doc, 'div', exported.svg, exported.png, dotBtn),
    legend(doc)
  );
  // A recorded run's step slider and rank selector: hidden unless the graph has steps (setSteps).
  let run: RunSteps | null = null;
  const stepper = stepSlider(doc, 'step', step => void pickStep(step, run?.rank ?? 0));
  const rankSel = h(doc, 'select', { class: 'fv-rank', 'aria-label': 'Rank', hidden: true });
  stepper.el.appendChild(rankSel);
  tools.insertBefore(stepper.el, tools.firstChild);
  const crumbs = h(doc, 'nav', { class: 'fv-crumbs', 'aria-label': 'Module path', hidden: true });
  const body = createBody(doc);
  el.replaceChildren(warnings.el, tools, crumbs, status.el, body.body, body.transcript);
  body.inspector.showEmpty();
  const ui: GraphUi = { ...body, status, crumbs, depthSel, foldTools };

  // ---- the parts -----------------------------------------------------------------------
  const stage = createStage(doc, el, ui, io);
  const { pz } = stage;
  // search asks the core (made next) what is folded and visible, and to reveal a match
  const search = createSearch(
    searchInput,
    searchCount,
    io,
    () => folded(),
    () => visible(),
    next => changeTo(next, null, null),
    ref => stage.centreOn(visible(), ref)
  );
  const core = createCore(el, opts, ui, io, stage, search);
  const { select, selectModule, changeTo, folded, visible, exportSVG } = core;

  // ---- a recorded run's steps ----------------------------------------------------------
  function setSteps(steps: RunSteps | null): void {
    run = steps && steps.steps.length ? steps : null;
    if (!run) {
      stepper.set([], NaN);
      return;
    }
    const live = !!opts.requestStep;
    stepper.set(run.steps, run.step, live, 'a saved output: this step only (open the run with forgeviz.open for the others)');
    rankSel.hidden = run.ranks.length < 2;
    rankSel.disabled = !live;
    rankSel.replaceChildren(...run.ranks.map(r => h(doc, 'option', { value: r, selected: r === run?.rank }, `rank ${r}`)));
    el.setAttribute('data-fv-step', String(run.step));
    el.setAttribute('data-fv-rank', String(run.rank));
  }
  /** Ask for another step or rank; the ``steps`` and ``state`` traits it changes come back (setSteps, setState). */
  async function pickStep(step: number, rank: number): Promise<void> {
    const shown = run;
    if (!shown || !opts.requestStep) {
      return;
    }
    stepper.set(shown.steps, shown.step, false, 'loading…');
    try {
      await opts.requestStep(step, rank);
      status.show(null);
    } catch (err) {
      status.show(`Could not show step ${step} of rank ${rank}: ${errorMessage(err)}`, 'error');
      setSteps(run);
    }
  }
  rankSel.addEventListener('change', () => void pickStep(run?.step ?? NaN, Number(rankSel.value)));

  // ---- expand and collapse -------------------------------------------------------------
  async function setExpanded(ids: readonly string[]): Promise<void> {
    const [ix, open] = folded();
    if (!ix) {
      core.wish(ids.length ? [...ids] : null);
      return;
    }
    const known = ids.filter(id => ix.moduleById.has(id));
    const next = known.length ? new Set(known) : defaultExpanded(ix);
    const same = next.size === open.size && [...next].every(id => open.has(id));
    if (!same) {
      await changeTo(next, null, null, false);
    }
  }
  async function expand(moduleId: string, from?: Ref): Promise<void> {
    const [ix, open] = folded();
    if (!ix || !ix.moduleById.has(moduleId)) {
      return;
    }
    const ref = from ?? { module: moduleId };
    await changeTo(withExpanded(ix, open, moduleId), ref, { module: moduleId });
  }
  async function collapse(moduleId: string): Promise<void> {
    const [ix, open] = folded();
    if (!ix || !ix.moduleById.has(moduleId)) {
      return;
    }
    await changeTo(withCollapsed(ix, open, moduleId), { module: moduleId }, { module: moduleId });
  }
  const expandAll = async () => {
    const [ix] = folded();
    if (ix) {
      io.autoFit = true;
      await changeTo(allModules(ix), null, null);
    }
  };
  const collapseAll = async () => {
    const [ix] = folded();
    if (ix) {
      io.autoFit = true;
      await changeTo(defaultExpanded(ix), null, null, false);
      core.notifyExpanded([]);
    }
  };
  const expandToDepth = async (depth: number) => {
    const [ix] = folded();
    if (ix) {
      io.autoFit = true;
      await changeTo(expandedToDepth(ix, depth), null, null);
    }
  };

  // ---- events --------------------------------------------------------------
  // A click on a memory block whose tensor a node saved selects that node here, if this graph has it.
  const onHighlight = (event: Event) => {
    const node = (event as CustomEvent<{ node?: number }>).detail?.node;
    if (typeof node === 'number' && core.hasNode(node) && io.drawn) {
      void select(node).then(() => io.drawn?.nodeEls.get(node)?.scrollIntoView?.({ block: 'nearest', inline: 'nearest' }));
    }
  };
  doc.addEventListener('forgeviz:highlight-node', onHighlight);
  const unbindNodes = bindNodeEvents(body.svg, pz, io, {
    selectNode: id => void select(id),
    openItem(key, instance) {
      const item = visible()?.items.get(key);
      const m = item ? moduleOfItem(item, instance) : null;
      if (m) {
        void expand(m.id, { key });
        void selectModule(m.id);
      }
    },
    closeModule(id) {
      void collapse(id);
      void selectModule(id);
    }
  });
  zoomIn.addEventListener('click', () => {
    pz.zoomBy(1.25);
    io.autoFit = false;
  });
  zoomOut.addEventListener('click', () => {
    pz.zoomBy(0.8);
    io.autoFit = false;
  });
  fitBtn.addEventListener('click', () => {
    io.autoFit = true;
    stage.fit();
  });
  expandAllBtn.addEventListener('click', () => void expandAll());
  collapseAllBtn.addEventListener('click', () => void collapseAll());
  depthSel.addEventListener('change', () => {
    const d = Number(depthSel.value);
    depthSel.value = '';
    if (d > 0) {
      void expandToDepth(d);
    }
  });
  dotBtn.addEventListener('click', async () => {
    try {
      const dot = await opts.requestDot();
      download(doc, 'forgeviz-graph.dot', new Blob([dot], { type: 'text/vnd.graphviz' }));
    } catch (err) {
      status.show(`DOT export failed: ${errorMessage(err)}`, 'error');
    }
  });

  return {
    setGraph: core.setGraph,
    setState: core.setState,
    setExpanded,
    expanded: () => {
      const [ix, open] = folded();
      return ix ? orderedIds(ix, open) : [];
    },
    expand: id => expand(id),
    collapse,
    expandAll,
    collapseAll,
    expandToDepth,
    search: search.search,
    nextMatch: search.next,
    select,
    selectModule,
    exportSVG,
    setWarnings: warnings.set,
    setSteps,
    destroy() {
      core.stop();
      doc.removeEventListener('forgeviz:highlight-node', onHighlight);
      stage.destroy();
      unbindNodes();
      el.replaceChildren();
      el.classList.remove('fv-root');
      el.removeAttribute('data-fv-state');
    }
  };
}
