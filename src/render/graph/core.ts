/**
 * What the graph view shows and what changes it: the graph shown (our copy) and its fold index,
 * the expanded Modules, what is visible of them, the selection; setGraph, setState, relayout
 * (fold, lay out, draw), expanding and collapsing (changeTo), selecting a Node or a Module. The
 * stage (stage.ts) draws, search.ts finds: view.ts makes them and this, and wires the toolbar
 * and the pointer to them.
 */
import type { Graph, GraphState, ModuleDetail, Node as GraphNode, NodeDetail } from '../../model/wire';
import { errorMessage } from '../common/chrome';
import { h } from '../common/dom';
import { focusModule, showCrumbs } from './crumbs';
import { toDot, toLayered } from './dotgen';
import { decorateAll } from './draw';
import { defaultExpanded, type FoldIndex, foldGraph, indexGraph, orderedIds, revealNode, type VisibleGraph } from './fold';
import type { InteractionState } from './interaction';
import type { LayeredInput } from './layered';
import { createLayoutCache, type Layout } from './layout';
import type { GraphUi } from './parts';
import type { Search } from './search';
import type { Anchor, Ref, Stage } from './stage';
import { applyState } from './state';
import { lazyTranscript } from './transcript';
import { BIG_VIEW_ITEMS } from './window';

/** The most boxes one view lays out: past this an expansion is refused with a message. The kernel
 * sends at most ``max_nodes`` (20,000 by default) Nodes; their module boxes come on top. */
export const MAX_DRAWN_ITEMS = 25_000;

const LAYOUT_CACHE_SIZE = 8;

export interface GraphViewOptions {
  /** Lay out DOT; returns Graphviz `json` output of the `dot` engine. */
  layout: (dot: string) => Promise<string>;
  /** Lay out a big view (past ``BIG_VIEW_ITEMS`` boxes) with layered.ts, off the main thread (the
   * widget: in the Graphviz worker). Without it a big view says it cannot be drawn. */
  layoutLayered?: (input: LayeredInput) => Promise<Layout>;
  /** Fetch everything the inspector shows for one node. */
  requestDetail: (nodeId: number) => Promise<NodeDetail>;
  /** Fetch everything the inspector shows for one Module (by id, e.g. "model.h.0"). */
  requestModule?: (moduleId: string) => Promise<ModuleDetail>;
  /** Fetch the DOT source for export. */
  requestDot: () => Promise<string>;
  /** The expanded Module ids to start with (the widget's ``expanded`` trait; empty: the first folded view). */
  expanded?: readonly string[];
  /** The user expanded or collapsed something: the expanded Module ids now ([] after "Collapse all"). */
  onExpandedChange?: (expanded: string[]) => void;
  /** A recorded run's view: show ``step`` of ``rank`` (the kernel answers by changing the steps and state). */
  requestStep?: (step: number, rank: number) => Promise<void>;
}

/** What view.ts calls (the GraphView methods of the same names do what these do). */
export interface GraphCore {
  setGraph(g: Graph): Promise<void>;
  setState(state: GraphState): void;
  select(nodeId: number): Promise<void>;
  selectModule(moduleId: string): Promise<void>;
  /** Expand or collapse to ``next``, keeping ``ref`` (drawn as ``after`` from then on) still on screen. */
  changeTo(next: Set<string>, ref: Ref | null, after: Ref | null, tell?: boolean): Promise<void>;
  /** Tell ``onExpandedChange`` the expanded Module ids (or ``ids``). */
  notifyExpanded(ids?: string[]): void;
  /** The fold index (null: no graph) and the expanded Modules now. */
  folded(): [FoldIndex | null, Set<string>];
  /** An expansion asked for before a graph came (null: the first folded view). */
  wish(ids: string[] | null): void;
  /** What is drawn of the expanded Modules (null: nothing drawn). */
  visible(): VisibleGraph | null;
  /** Whether the last graph with Nodes has this one (a graph that is a message keeps them). */
  hasNode(nodeId: number): boolean;
  exportSVG(): string;
  /** Drop what is under way: layouts, details and searches that come back later are ignored. */
  stop(): void;
}

/** The depth menu: one entry per level of Module nesting. */
function fillDepths(doc: Document, depthSel: HTMLSelectElement, ix: FoldIndex) {
  let max = 0;
  ix.depth.forEach(d => (max = Math.max(max, d + 1)));
  depthSel.replaceChildren(h(doc, 'option', { value: '' }, 'Depth…'));
  for (let d = 1; d <= max; d++) {
    depthSel.appendChild(h(doc, 'option', { value: String(d) }, `to depth ${d}`));
  }
}

export function createCore(el: HTMLElement, opts: GraphViewOptions, ui: GraphUi, io: InteractionState, stage: Stage, search: Search): GraphCore {
  const doc = el.ownerDocument;
  const { status, crumbs, inspector } = ui;
  let shown: Graph | null = null;
  let fix: FoldIndex | null = null;
  let byId = new Map<number, GraphNode>();
  let open = new Set<string>();
  /** The expansion asked for (trait or user) before a graph came; null: the first folded view. */
  let wish: string[] | null = opts.expanded && opts.expanded.length ? [...opts.expanded] : null;
  let visible: VisibleGraph | null = null;
  let selected: number | null = null;
  let selMod: string | null = null;
  /** Bumped by each layout (and stop): a layout that comes back late is dropped. */
  let generation = 0;
  /** Bumped by each select (and stop): a detail that comes back late is dropped. */
  let selectToken = 0;
  let destroyed = false;

  const getLayout = createLayoutCache(opts.layout, LAYOUT_CACHE_SIZE);
  /** Big views: the last one laid out, by its DOT (an expand of the same view again is free). */
  let bigLaid: { dot: string; layout: Layout } | null = null;
  /** Counts the graphs shown: part of a big view's layout key. */
  let graphSerial = 0;
  const layOut = async (vis: VisibleGraph, dot: string): Promise<Layout> => {
    if (vis.itemCount <= BIG_VIEW_ITEMS) {
      return getLayout(dot);
    }
    if (bigLaid?.dot === dot) {
      return bigLaid.layout;
    }
    if (!opts.layoutLayered) {
      throw new Error(`${vis.itemCount.toLocaleString('en-US')} boxes need the layered layout, which this page lacks`);
    }
    const layout = await opts.layoutLayered(toLayered(vis));
    // reading the worker's answer is one task and drawing it another: neither holds the page 100 ms
    await new Promise(resolve => setTimeout(resolve, 0));
    bigLaid = { dot, layout };
    return layout;
  };
  const writeTranscript = lazyTranscript(doc, ui.transcript);

  /** Decorate everything drawn from the graph's dynamic fields, then the search marks. */
  function redecorate() {
    if (!io.drawn) {
      return;
    }
    decorateAll(doc, io.drawn, { nodes: byId, vis: visible, selected: selected, selectedModule: selMod });
    search.mark();
  }

  function updateCrumbs() {
    showCrumbs(doc, crumbs, fix, focusModule(fix, selected, selMod), mid => stage.centreOn(visible, { module: mid }));
  }

  /**
   * Fold, lay out and draw the graph for ``open``. ``anchor`` (an item and where it was on
   * screen) keeps its screen position; else a new drawing is fitted to the stage.
   */
  async function relayout(anchor: Anchor | null, newGraph = false, folded: VisibleGraph | null = null): Promise<boolean> {
    const ix = fix;
    if (!ix) {
      return false;
    }
    const gen = ++generation;
    const overtaken = () => gen !== generation || destroyed;
    el.setAttribute('data-fv-state', 'loading');
    const vis = folded ?? foldGraph(ix, open);
    const big = vis.itemCount > BIG_VIEW_ITEMS;
    // a big view's key is what is expanded in which graph, not its DOT (10,000 lines to write)
    const dot = big ? `big ${graphSerial}\n${orderedIds(ix, open).join('\n')}` : toDot(vis);
    let lay: Layout;
    try {
      if (big) {
        await new Promise(resolve => setTimeout(resolve, 0)); // the click's task ends here
        if (overtaken()) {
          return false;
        }
      }
      lay = await layOut(vis, dot);
    } catch (err) {
      if (!overtaken()) {
        el.setAttribute('data-fv-state', 'error');
        status.show(`Could not draw the graph: ${errorMessage(err)}`, 'error');
      }
      return false;
    }
    if (overtaken()) {
      return false;
    }
    visible = vis;
    if (selected !== null && !vis.items.has(`n${selected}`)) {
      selected = null;
    }
    const attached = stage.draw(lay, vis, dot, anchor, newGraph, redecorate, overtaken);
    if (attached && !(await attached)) {
      return false;
    }
    writeTranscript(shown, vis);
    updateCrumbs();
    // (an earlier error or refusal is over)
    const hint = big ? `${vis.itemCount.toLocaleString('en-US')} boxes: zoom in to read them (each is drawn as it comes into view), or search.` : null;
    status.show([shown?.cut, hint].filter(Boolean).join(' ') || null, 'info');
    el.setAttribute('data-fv-state', 'ready');
    return true;
  }

  function notifyExpanded(ids?: string[]) {
    if (fix) {
      opts.onExpandedChange?.(ids ?? orderedIds(fix, open));
    }
  }

  async function changeTo(next: Set<string>, ref: Ref | null, after: Ref | null, tell = true): Promise<void> {
    if (!fix) {
      return;
    }
    if (fix.graph.nodes.length > BIG_VIEW_ITEMS) {
      // folding thousands of Nodes is a task of its own, not part of the click's
      const ix = fix;
      const gen = generation;
      el.setAttribute('data-fv-state', 'loading');
      await new Promise(resolve => setTimeout(resolve, 0));
      if (fix !== ix || destroyed || gen !== generation) {
        return;
      }
    }
    const vis = foldGraph(fix, next);
    const count = vis.itemCount;
    if (count > MAX_DRAWN_ITEMS && count > (visible?.itemCount ?? 0)) {
      el.setAttribute('data-fv-state', 'ready'); // nothing changed
      status.show(
        `That would draw ${count.toLocaleString('en-US')} boxes; a view draws at most ${MAX_DRAWN_ITEMS.toLocaleString('en-US')} ` +
          'at once. Expand a smaller module, or search for an op, a module or a parameter.',
        'info'
      );
      return;
    }
    open = next;
    wish = null;
    if (tell) {
      notifyExpanded();
    }
    const screen = ref ? stage.screenPoint(visible, ref) : null;
    await relayout(ref ? { ref, after: after ?? ref, screen } : null, false, vis);
  }

  async function setGraph(g: Graph): Promise<void> {
    // our own copy: setState overwrites its gradient fields
    const copy: Graph = { ...g, nodes: g.nodes.map(n => ({ ...n })), modules: g.modules.map(m => ({ ...m })) };
    shown = copy;
    graphSerial++;
    status.show(g.cut ? g.cut : null, 'info');
    if (g.message) {
      generation++;
      fix = null;
      // a graph with a message instead of nodes: hide the SVG, show the text
      stage.showMessage(g.message);
      visible = null;
      selected = null;
      selMod = null;
      crumbs.hidden = true;
      inspector.showEmpty();
      writeTranscript(copy, null); // (also drops a big transcript still waiting to be written)
      el.setAttribute('data-fv-state', 'ready');
      return;
    }
    const ix = indexGraph(copy);
    fix = ix;
    byId = ix.nodeById;
    const wished = (wish ?? (open.size ? orderedIds(ix, open) : [])).filter(id => ix.moduleById.has(id));
    open = wished.length ? new Set(wished) : defaultExpanded(ix);
    if (selected !== null && !ix.nodeById.has(selected)) {
      selected = null;
      inspector.showEmpty();
    }
    if (selMod !== null && !ix.moduleById.has(selMod)) {
      selMod = null;
    }
    search.rematch(ix);
    fillDepths(doc, ui.depthSel, ix);
    ui.foldTools.hidden = copy.modules.length === 0;
    if (await relayout(null, true)) {
      if (selected !== null) {
        void select(selected);
      }
    }
  }

  function setState(state: GraphState): void {
    const g = shown;
    if (!g || g.message) {
      return;
    }
    applyState(g, state);
    if (io.drawn) {
      redecorate();
      writeTranscript(g, visible);
    }
    if (selected !== null) {
      void select(selected);
    } else if (selMod !== null) {
      void selectModule(selMod);
    }
  }

  async function select(nodeId: number): Promise<void> {
    const token = ++selectToken;
    selected = nodeId;
    selMod = null;
    const ix = fix;
    if (ix && ix.nodeById.has(nodeId) && visible && visible.nodeItem.get(nodeId) !== `n${nodeId}`) {
      // a Node inside a collapsed module: open the way to it first
      await changeTo(revealNode(ix, open, nodeId), null, null);
      if (token !== selectToken) {
        return;
      }
    }
    redecorate();
    if (io.drawn?.window && !io.drawn.items.has(`n${nodeId}`)) {
      stage.centreOn(visible, { node: nodeId }); // a big view draws only what is in its window
    }
    updateCrumbs();
    const label = byId.get(nodeId)?.label ?? `node ${nodeId}`;
    inspector.showLoading(nodeId, label);
    try {
      const detail = await opts.requestDetail(nodeId);
      if (token !== selectToken || destroyed) {
        return;
      }
      inspector.showDetail(detail, shown);
    } catch (err) {
      if (token !== selectToken || destroyed) {
        return;
      }
      inspector.showError(`Could not inspect ${label}: ${errorMessage(err)}`);
    } finally {
      if (token === selectToken) {
        inspector.settle();
      }
    }
  }

  async function selectModule(moduleId: string): Promise<void> {
    const token = ++selectToken;
    selMod = moduleId;
    selected = null;
    redecorate();
    updateCrumbs();
    if (!opts.requestModule) {
      return;
    }
    const label = fix?.moduleById.get(moduleId)?.label ?? moduleId;
    try {
      const detail = await opts.requestModule(moduleId);
      if (token !== selectToken || destroyed) {
        return;
      }
      // showModule comes with the module inspector; older inspectors lack it
      (inspector as { showModule?: (d: ModuleDetail) => void }).showModule?.(detail);
    } catch (err) {
      if (token !== selectToken || destroyed) {
        return;
      }
      inspector.showError(`Could not inspect ${label}: ${errorMessage(err)}`);
    }
  }

  return {
    setGraph,
    setState,
    select,
    selectModule,
    changeTo,
    notifyExpanded,
    folded: () => [fix, open],
    wish: ids => {
      wish = ids;
    },
    visible: () => visible,
    hasNode: nodeId => byId.has(nodeId),
    exportSVG: () => stage.exportSVG(shown),
    stop() {
      destroyed = true;
      generation++;
      selectToken++;
      search.clear();
    }
  };
}
