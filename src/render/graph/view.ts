/**
 * The autograd graph view: the graph folded by module (fold.ts), turned into DOT for what is
 * visible (dotgen.ts), laid out by Graphviz, drawn as our own SVG.
 * Pure DOM/SVG; imports nothing from Jupyter or anywidget.
 *
 * The parts: fold.ts (what is visible for the expanded modules), dotgen.ts (its DOT), draw.ts
 * (layout → SVG, decoration), inspector.ts (the inspector), interaction.ts (click, keys, focus),
 * transcript.ts (the text description), layout.ts (Graphviz JSON → boxes and paths),
 * panzoom.ts; the chrome comes from common/chrome.ts.
 *
 * Stable hooks for tests and notebooks (documented in the README):
 *   .fv-root[data-fv-state="ready"]   painted (also after each expand or collapse)
 *   [data-fv-node="<id>"]             a drawn Node's group (as is [data-node-id="<id>"])
 *   [data-fv-module="<path>"]         a collapsed module's box, and an expanded module's cluster
 *   [data-fv-repeat="<count>"]        a stack of <count> repeated modules
 */
import type { Graph, GraphState, ModuleDetail, Node as GraphNode, NodeDetail } from '../../model/wire';
import { button, buttonGroup, createStatusLine, createWarningStrip, errorMessage, exportButtons, toolbar } from '../common/chrome';
import { h, s } from '../common/dom';
import { download, standaloneSvg } from '../common/export';
import { toDot } from './dotgen';
import { decorateAll, drawGraph } from './draw';
import {
  allModules,
  ancestors,
  defaultExpanded,
  expandedToDepth,
  FoldIndex,
  foldGraph,
  indexGraph,
  moduleOfItem,
  orderedIds,
  revealMatch,
  revealNode,
  SearchMatch,
  searchGraph,
  VisibleGraph,
  withCollapsed,
  withExpanded
} from './fold';
import { createInspectorPanel } from './inspector';
import { bindNodeEvents, InteractionState } from './interaction';
import { createLayoutCache, Layout } from './layout';
import { createPanZoom, PanZoom } from './panzoom';
import { renderTranscript } from './transcript';

export { nodeAriaLabel } from './draw';

/** Past this many drawn Nodes, Nodes off-screen are hidden once a pan or zoom settles. */
export const CULL_NODES = 2000;
/** The most boxes one view lays out: past this an expansion is refused with a message (Graphviz
 * needs tens of seconds for 10,000 boxes, and nobody reads them at once: search reaches one). */
export const MAX_DRAWN_ITEMS = 3000;
/** Groups (Nodes, boxes, edges, clusters) attached per frame when a big drawing goes on the page. */
const ATTACH_PER_FRAME = 250;
/** A transcript of more items than this is written when it is opened, not at every expand. */
const EAGER_TRANSCRIPT_ITEMS = 200;

export interface GraphViewOptions {
  /** Lay out DOT; returns Graphviz `json` output of the `dot` engine. */
  layout: (dot: string) => Promise<string>;
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
}

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
  destroy(): void;
}

const LAYOUT_CACHE_SIZE = 8;

/** A point to keep still on screen across a new layout: an item, a Module (box or cluster), a Node. */
type Ref = { key: string } | { module: string } | { node: number };

/** The stage (graph SVG and message), the inspector beside it and the transcript below. */
function createBody(doc: Document) {
  const stage = h(doc, 'div', { class: 'fv-stage' });
  const svg = s(doc, 'svg', { class: 'fv-canvas', role: 'group', 'aria-label': 'autograd graph' }) as SVGSVGElement;
  const viewport = s(doc, 'g', { class: 'fv-viewport' }) as SVGGElement;
  svg.appendChild(viewport);
  const message = h(doc, 'div', { class: 'fv-message', hidden: true });
  stage.append(svg, message);
  const inspector = createInspectorPanel(doc);
  const body = h(doc, 'div', { class: 'fv-body' }, stage, inspector.el);
  const transcript = h(doc, 'details', { class: 'fv-transcript' });
  return { body, stage, svg, viewport, message, inspector, transcript };
}

function legend(doc: Document): HTMLDivElement {
  return h(
    doc,
    'div',
    { class: 'fv-legend', 'aria-hidden': 'true' },
    h(doc, 'span', { class: 'fv-lg fv-lg-leaf' }, 'leaf'),
    h(doc, 'span', { class: 'fv-lg fv-lg-op' }, 'op'),
    h(doc, 'span', { class: 'fv-lg fv-lg-module' }, 'module'),
    h(doc, 'span', { class: 'fv-lg fv-lg-freed' }, 'freed'),
    h(doc, 'span', { class: 'fv-lg fv-lg-nonfinite' }, '⚠ non-finite'),
    h(doc, 'span', { class: 'fv-lg fv-lg-grad' }, '∇ grad')
  );
}

function stageHeight(lay: Layout): number {
  return Math.round(Math.min(560, Math.max(260, lay.height * 1.3 + 40)));
}

export function createGraphView(el: HTMLElement, opts: GraphViewOptions): GraphView {
  const doc = el.ownerDocument;
  const win = doc.defaultView;
  el.classList.add('fv-root');
  el.setAttribute('data-fv-state', 'loading');

  let shown: Graph | null = null;
  let fix: FoldIndex | null = null;
  let byId = new Map<number, GraphNode>();
  let open = new Set<string>();
  /** The expansion asked for (trait or user) before a graph came; null: the first folded view. */
  let wish: string[] | null = opts.expanded && opts.expanded.length ? [...opts.expanded] : null;
  let visible: VisibleGraph | null = null;
  /** The layout drawn now and the DOT it came from; null while a message shows. */
  let laid: Layout | null = null;
  let drawnDot: string | null = null;
  let selected: number | null = null;
  let selMod: string | null = null;
  /** Bumped by each layout (and destroy): a layout that comes back late is dropped. */
  let generation = 0;
  /** Bumped by each select (and destroy): a detail that comes back late is dropped. */
  let selectToken = 0;
  let destroyed = false;
  let query = '';
  let matches: SearchMatch[] = [];
  let matchIndex = 0;
  /** Node groups hidden by culling. */
  let culled: SVGGElement[] = [];
  /** What the pointer and key handlers share: the drawing, and whether to refit on resize. */
  const io: InteractionState = { drawn: null, autoFit: true };


  // ---- static chrome -------------------------------------------------------
  const warnings = createWarningStrip(doc);
  const status = createStatusLine(doc, 'info');
  const zoomIn = button(doc, 'fv-zoom-in', '+', 'Zoom in');
  const zoomOut = button(doc, 'fv-zoom-out', '−', 'Zoom out');
  const fitBtn = button(doc, 'fv-fit', '⤢ Fit', 'Fit the graph to the view');
  const exported = exportButtons(doc, status, {
    what: 'the graph',
    svgName: 'forgeviz-graph.svg',
    pngName: 'forgeviz-graph.png',
    svg: () => exportSVG(),
    png: () => ({ text: exportSVG(), w: (laid?.width ?? 480) + 28, h: (laid?.height ?? 32) + 28 })
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
  const crumbs = h(doc, 'nav', { class: 'fv-crumbs', 'aria-label': 'Module path', hidden: true });
  const { body, stage, svg, viewport, message, inspector, transcript } = createBody(doc);
  el.replaceChildren(warnings.el, tools, crumbs, status.el, body, transcript);
  inspector.showEmpty();

  const getLayout = createLayoutCache(opts.layout, LAYOUT_CACHE_SIZE);
  const pz: PanZoom = createPanZoom(
    svg,
    viewport,
    () => {
      io.autoFit = false;
    },
    () => cull()
  );
  const fit = () => {
    if (laid) {
      pz.fit(laid.width, laid.height);
    }
  };
  let resizeObs: ResizeObserver | null = null;
  if (win && 'ResizeObserver' in win) {
    resizeObs = new (win as Window & typeof globalThis).ResizeObserver(() => {
      if (io.autoFit) {
        fit();
      }
    });
    resizeObs.observe(stage);
  }

  // ---- geometry --------------------------------------------------------------
  /** Top centre of what ``ref`` is drawn as, in graph coordinates (null: not drawn). */
  function refPoint(ref: Ref, centre = false): { x: number; y: number } | null {
    const d = io.drawn;
    const vis = visible;
    if (!d || !vis) {
      return null;
    }
    let key: string | undefined;
    if ('module' in ref) {
      const c = d.clusters.get(ref.module);
      if (c) {
        return { x: c.box.x + c.box.w / 2, y: centre ? c.box.y + c.box.h / 2 : c.box.y };
      }
      key = vis.moduleItem.get(ref.module);
    } else if ('node' in ref) {
      key = vis.nodeItem.get(ref.node);
    } else {
      key = ref.key;
    }
    const b = key === undefined ? undefined : d.itemBoxes.get(key);
    return b ? { x: b.cx, y: centre ? b.cy : b.cy - b.h / 2 } : null;
  }

  /** Where ``ref`` is on screen now (px from the SVG's top left). */
  function screenPoint(ref: Ref): { x: number; y: number } | null {
    const p = refPoint(ref);
    const t = pz.get();
    return p ? { x: p.x * t.k + t.x, y: p.y * t.k + t.y } : null;
  }

  /** Pan so that ``ref`` is in the middle of the stage. */
  function centreOn(ref: Ref) {
    const p = refPoint(ref, true);
    if (!p) {
      return;
    }
    const t = pz.get();
    const w = svg.clientWidth || 0;
    const hh = svg.clientHeight || 0;
    pz.set({ k: t.k, x: w / 2 - p.x * t.k, y: hh / 2 - p.y * t.k });
    io.autoFit = false;
  }

  /** Hide the Node groups off-screen of a huge graph (exports un-hide them first). */
  function cull() {
    uncull();
    const d = io.drawn;
    if (!d || d.nodeEls.size <= CULL_NODES) {
      return;
    }
    const w = svg.clientWidth || 0;
    const hh = svg.clientHeight || 0;
    if (!w || !hh) {
      return;
    }
    const t = pz.get();
    const margin = 40 / t.k;
    const x0 = -t.x / t.k - margin;
    const y0 = -t.y / t.k - margin;
    const x1 = x0 + w / t.k + 2 * margin;
    const y1 = y0 + hh / t.k + 2 * margin;
    for (const [id, g] of d.nodeEls) {
      const b = d.boxes.get(id)!;
      if (b.cx + b.w / 2 < x0 || b.cx - b.w / 2 > x1 || b.cy + b.h / 2 < y0 || b.cy - b.h / 2 > y1) {
        g.setAttribute('visibility', 'hidden');
        culled.push(g);
      }
    }
  }
  function uncull() {
    for (const g of culled) {
      g.removeAttribute('visibility');
    }
    culled = [];
  }

  // ---- drawing ---------------------------------------------------------------
  /** A graph with a message instead of nodes: hide the SVG, show the text. */
  function showMessage(text: string) {
    laid = null;
    drawnDot = null;
    io.drawn = null;
    visible = null;
    culled = [];
    viewport.replaceChildren();
    svg.style.display = 'none';
    el.setAttribute('data-fv-mode', 'message');
    message.hidden = false;
    message.textContent = text;
    selected = null;
    selMod = null;
    crumbs.hidden = true;
    inspector.showEmpty();
  }

  /** Decorate everything drawn from the graph's dynamic fields, then the search marks. */
  /** What the closed transcript will say when opened (a big one is written only then). */
  let unwritten: (() => void) | null = null;
  function writeTranscript(g: Graph | null, vis: VisibleGraph | null) {
    const write = () => renderTranscript(doc, transcript, g, vis);
    if (transcript.open || (vis?.itemCount ?? 0) <= EAGER_TRANSCRIPT_ITEMS) {
      unwritten = null;
      write();
    } else {
      unwritten = write;
      transcript.replaceChildren(h(doc, 'summary', {}, 'Text description'));
    }
  }
  transcript.addEventListener('toggle', () => {
    if (transcript.open && unwritten) {
      const write = unwritten;
      unwritten = null;
      write();
    }
  });

  function redecorate() {
    if (!io.drawn) {
      return;
    }
    decorateAll(doc, io.drawn, { nodes: byId, vis: visible, selected: selected, selectedModule: selMod });
    markMatches();
  }

  /**
   * Put a drawn graph on the page: at once when small; a big one (an "Expand all") a few hundred
   * groups per frame, so that styling thousands of SVG elements never holds the page for one long
   * task. False when a newer layout or destroy() overtook it.
   */
  async function attach(g: SVGGElement, gen: number): Promise<boolean> {
    const parts = Array.from(g.children).map(part => [part, Array.from(part.children)] as const);
    if (parts.reduce((n, [, kids]) => n + kids.length, 0) <= ATTACH_PER_FRAME) {
      viewport.replaceChildren(g);
      return true;
    }
    for (const [part] of parts) {
      part.replaceChildren();
    }
    viewport.replaceChildren(g);
    let room = ATTACH_PER_FRAME;
    for (const [part, kids] of parts) {
      for (const kid of kids) {
        if (room-- === 0) {
          await nextFrame();
          if (gen !== generation || destroyed) {
            return false;
          }
          room = ATTACH_PER_FRAME - 1;
        }
        part.appendChild(kid);
      }
    }
    return true;
  }

  /** The next frame (a hidden page has none: then the next task). */
  function nextFrame(): Promise<void> {
    return new Promise(resolve => {
      if (win && doc.visibilityState !== 'hidden' && typeof win.requestAnimationFrame === 'function') {
        win.requestAnimationFrame(() => resolve());
      } else {
        setTimeout(resolve, 0);
      }
    });
  }

  /**
   * Fold, lay out and draw the graph for ``open``. ``anchor`` (an item and where it was on
   * screen) keeps its screen position; else a new drawing is fitted to the stage.
   */
  async function relayout(anchor: { ref: Ref; after: Ref; screen: { x: number; y: number } | null } | null, newGraph = false): Promise<boolean> {
    const ix = fix;
    if (!ix) {
      return false;
    }
    const gen = ++generation;
    el.setAttribute('data-fv-state', 'loading');
    const vis = foldGraph(ix, open);
    const dot = toDot(vis);
    let lay: Layout;
    try {
      lay = await getLayout(dot);
    } catch (err) {
      if (gen === generation && !destroyed) {
        el.setAttribute('data-fv-state', 'error');
        status.show(`Could not draw the graph: ${errorMessage(err)}`, 'error');
      }
      return false;
    }
    if (gen !== generation || destroyed) {
      return false;
    }
    svg.style.display = '';
    el.setAttribute('data-fv-mode', 'graph');
    message.hidden = true;
    visible = vis;
    if (selected !== null && !vis.items.has(`n${selected}`)) {
      selected = null;
    }
    if (drawnDot !== dot || !io.drawn) {
      laid = lay;
      culled = [];
      const drawn = drawGraph(doc, lay, vis);
      io.drawn = drawn;
      redecorate(); // while detached: the page styles each element once, when it is attached
      drawnDot = dot;
      // a new graph gets the height it needs; an expand only ever grows the stage
      const prev = parseFloat(el.style.getPropertyValue('--fv-stage-h')) || 0;
      const want = stageHeight(lay);
      el.style.setProperty('--fv-stage-h', `${newGraph ? want : Math.max(prev, want)}px`);
      const to = anchor?.screen ? refPoint(anchor.after) : null;
      if (anchor?.screen && to) {
        const t = pz.get();
        pz.set({ k: t.k, x: anchor.screen.x - to.x * t.k, y: anchor.screen.y - to.y * t.k });
        io.autoFit = false;
      } else if (newGraph || io.autoFit || !anchor) {
        io.autoFit = true;
        fit();
      }
      if (!(await attach(drawn.g, gen))) {
        return false;
      }
    } else {
      redecorate();
    }
    writeTranscript(shown, vis);
    updateCrumbs();
    status.show(shown?.cut ?? null, 'info'); // an earlier error or refusal is over
    el.setAttribute('data-fv-state', 'ready');
    return true;
  }

  function notifyExpanded(ids?: string[]) {
    if (fix) {
      opts.onExpandedChange?.(ids ?? orderedIds(fix, open));
    }
  }

  /** Expand or collapse to ``next``, keeping ``ref`` (drawn as ``after`` from then on) still on screen. */
  async function changeTo(next: Set<string>, ref: Ref | null, after: Ref | null, tell = true): Promise<void> {
    if (!fix) {
      return;
    }
    const count = foldGraph(fix, next).itemCount;
    if (count > MAX_DRAWN_ITEMS && count > (visible?.itemCount ?? 0)) {
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
    const screen = ref ? screenPoint(ref) : null;
    await relayout(ref ? { ref, after: after ?? ref, screen } : null);
  }

  // ---- the module path ---------------------------------------------------------
  function focusModule(): string | null {
    if (selMod !== null) {
      return selMod;
    }
    if (selected !== null) {
      return fix?.nodeModule.get(selected) ?? null;
    }
    return null;
  }

  function updateCrumbs() {
    const ix = fix;
    const id = focusModule();
    if (!ix || id === null || !ix.moduleById.has(id)) {
      crumbs.hidden = true;
      crumbs.replaceChildren();
      return;
    }
    const path = [...ancestors(ix, id), id];
    crumbs.hidden = false;
    crumbs.replaceChildren(
      ...path.flatMap((mid, i) => {
        const m = ix.moduleById.get(mid)!;
        const name = m.path ? m.path.split('.').pop()! : m.id;
        const b = h(doc, 'button', { type: 'button', class: 'fv-crumb', 'data-module-id': mid, title: `Centre ${m.label}` }, name);
        b.addEventListener('click', () => centreOn({ module: mid }));
        return i ? [h(doc, 'span', { class: 'fv-crumb-sep', 'aria-hidden': 'true' }, '›'), b] : [b];
      })
    );
  }

  // ---- search ---------------------------------------------------------------------
  function markMatches() {
    const d = io.drawn;
    const vis = visible;
    if (!d || !vis) {
      return;
    }
    d.g.querySelectorAll('.fv-match, .fv-match-inside, .fv-match-current').forEach(e => e.classList.remove('fv-match', 'fv-match-inside', 'fv-match-current'));
    matches.forEach((m, i) => {
      let target: Element | undefined;
      let inside = false;
      if (m.kind === 'node') {
        const key = vis.nodeItem.get(m.id);
        target = key === undefined ? undefined : d.items.get(key)?.el;
        inside = key !== `n${m.id}`;
      } else {
        const c = d.clusters.get(m.id);
        const key = vis.moduleItem.get(m.id);
        const item = key === undefined ? undefined : vis.items.get(key);
        target = c?.el ?? (key === undefined ? undefined : d.items.get(key)?.el);
        inside = !c && !(item?.kind === 'module' && item.module.id === m.id);
      }
      if (target) {
        target.classList.add(inside ? 'fv-match-inside' : 'fv-match');
        if (i === matchIndex && !inside) {
          target.classList.add('fv-match-current');
        }
      }
    });
    searchCount.textContent = !query ? '' : matches.length ? `${matchIndex + 1} of ${matches.length} matches` : 'no matches';
  }

  async function goToMatch(i: number) {
    const ix = fix;
    const m = matches[i];
    if (!ix || !m) {
      return;
    }
    matchIndex = i;
    const next = revealMatch(ix, open, m);
    if (next.size !== open.size) {
      await changeTo(next, null, null);
    }
    markMatches();
    centreOn(m.kind === 'node' ? { node: m.id } : { module: m.id });
  }

  async function search(text: string): Promise<number> {
    query = text.trim();
    matches = fix ? searchGraph(fix, query) : [];
    matchIndex = 0;
    if (matches.length) {
      await goToMatch(0);
    } else {
      markMatches();
    }
    return matches.length;
  }

  // ---- public API --------------------------------------------------------
  async function setGraph(g: Graph): Promise<void> {
    // our own copy: setState overwrites its gradient fields
    const copy: Graph = { ...g, nodes: g.nodes.map(n => ({ ...n })), modules: g.modules.map(m => ({ ...m })) };
    shown = copy;
    status.show(g.cut ? g.cut : null, 'info');
    if (g.message) {
      generation++;
      fix = null;
      showMessage(g.message);
      renderTranscript(doc, transcript, copy);
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
    matches = query ? searchGraph(ix, query) : [];
    matchIndex = 0;
    fillDepths(ix);
    foldTools.hidden = copy.modules.length === 0;
    if (await relayout(null, true)) {
      if (selected !== null) {
        void select(selected);
      }
    }
  }

  function fillDepths(ix: FoldIndex) {
    let max = 0;
    ix.depth.forEach(d => (max = Math.max(max, d + 1)));
    depthSel.replaceChildren(h(doc, 'option', { value: '' }, 'Depth…'));
    for (let d = 1; d <= max; d++) {
      depthSel.appendChild(h(doc, 'option', { value: String(d) }, `to depth ${d}`));
    }
  }

  function setState(state: GraphState): void {
    const g = shown;
    if (!g || g.message) {
      return;
    }
    const at = new Map(state.ids.map((id, i) => [id, i]));
    const freed = new Set(state.freed);
    const bad = new Set(state.nonfinite);
    const first = new Set(state.first_nonfinite);
    for (const n of g.nodes) {
      const i = at.get(n.id);
      n.grad_passes = i === undefined ? 0 : state.grad_passes[i];
      n.grad_brief = i === undefined ? null : state.grad_briefs[i];
      n.freed = freed.has(n.id);
      n.nonfinite = bad.has(n.id);
      n.first_nonfinite = first.has(n.id);
    }
    const mi = new Map(state.module_ids.map((id, i) => [id, i]));
    for (const m of g.modules) {
      const i = mi.get(m.id);
      m.grad_norm = i === undefined ? null : state.module_grad_norms[i];
      m.param_grad_norm = i === undefined ? null : state.module_param_grad_norms[i];
    }
    g.backward_passes = state.backward_passes;
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

  async function setExpanded(ids: readonly string[]): Promise<void> {
    const ix = fix;
    if (!ix) {
      wish = ids.length ? [...ids] : null;
      return;
    }
    const known = ids.filter(id => ix.moduleById.has(id));
    const next = known.length ? new Set(known) : defaultExpanded(ix);
    const same = next.size === open.size && [...next].every(id => open.has(id));
    if (!same) {
      await changeTo(next, null, null, false);
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

  async function expand(moduleId: string, from?: Ref): Promise<void> {
    const ix = fix;
    if (!ix || !ix.moduleById.has(moduleId)) {
      return;
    }
    const ref = from ?? { module: moduleId };
    await changeTo(withExpanded(ix, open, moduleId), ref, { module: moduleId });
  }

  async function collapse(moduleId: string): Promise<void> {
    const ix = fix;
    if (!ix || !ix.moduleById.has(moduleId)) {
      return;
    }
    await changeTo(withCollapsed(ix, open, moduleId), { module: moduleId }, { module: moduleId });
  }

  function exportSVG(): string {
    if (!io.drawn || !laid) {
      const W = 480;
      const text = shown?.message ?? 'no graph';
      const tmp = s(doc, 'g', { class: 'fv-graph' }) as SVGGElement;
      tmp.appendChild(s(doc, 'text', { x: 8, y: 20, class: 'fv-message-text' }, text));
      svg.appendChild(tmp);
      try {
        return standaloneSvg(tmp, el, W, 32, 'forgeviz: ' + text);
      } finally {
        tmp.remove();
      }
    }
    // the export holds the whole graph, culled Nodes too
    const wasCulled = culled.length > 0;
    uncull();
    try {
      return standaloneSvg(io.drawn.g, el, laid.width, laid.height, 'forgeviz autograd graph');
    } finally {
      if (wasCulled) {
        cull();
      }
    }
  }

  // ---- events --------------------------------------------------------------
  // A click on a memory block whose tensor a node saved selects that node here, if this graph has it.
  const onHighlight = (event: Event) => {
    const node = (event as CustomEvent<{ node?: number }>).detail?.node;
    if (typeof node === 'number' && byId.has(node) && io.drawn) {
      void select(node).then(() => io.drawn?.nodeEls.get(node)?.scrollIntoView?.({ block: 'nearest', inline: 'nearest' }));
    }
  };
  doc.addEventListener('forgeviz:highlight-node', onHighlight);
  const unbindNodes = bindNodeEvents(svg, pz, io, {
    selectNode: id => void select(id),
    openItem(key, instance) {
      const item = visible?.items.get(key);
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
    fit();
  });
  const expandAll = async () => {
    if (fix) {
      io.autoFit = true;
      await changeTo(allModules(fix), null, null);
    }
  };
  const collapseAll = async () => {
    if (fix) {
      io.autoFit = true;
      await changeTo(defaultExpanded(fix), null, null, false);
      notifyExpanded([]);
    }
  };
  const expandToDepth = async (depth: number) => {
    if (fix) {
      io.autoFit = true;
      await changeTo(expandedToDepth(fix, depth), null, null);
    }
  };
  expandAllBtn.addEventListener('click', () => void expandAll());
  collapseAllBtn.addEventListener('click', () => void collapseAll());
  depthSel.addEventListener('change', () => {
    const d = Number(depthSel.value);
    depthSel.value = '';
    if (d > 0) {
      void expandToDepth(d);
    }
  });
  let searchTimer: ReturnType<typeof setTimeout> | null = null;
  const clearSearchTimer = () => {
    if (searchTimer !== null) {
      clearTimeout(searchTimer);
      searchTimer = null;
    }
  };
  searchInput.addEventListener('input', () => {
    clearSearchTimer();
    searchTimer = setTimeout(() => {
      searchTimer = null;
      void search(searchInput.value);
    }, 200);
  });
  const nextMatch = async () => {
    if (searchInput.value.trim() !== query || !matches.length) {
      await search(searchInput.value);
    } else {
      await goToMatch((matchIndex + 1) % matches.length);
    }
  };
  searchInput.addEventListener('keydown', (e: KeyboardEvent) => {
    if (e.key === 'Enter') {
      e.preventDefault();
      clearSearchTimer();
      void nextMatch();
    } else if (e.key === 'Escape') {
      e.preventDefault();
      clearSearchTimer();
      searchInput.value = '';
      void search('');
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
    setGraph,
    setState,
    setExpanded,
    expanded: () => (fix ? orderedIds(fix, open) : []),
    expand: id => expand(id),
    collapse,
    expandAll,
    collapseAll,
    expandToDepth,
    search,
    nextMatch,
    select,
    selectModule,
    exportSVG,
    setWarnings: warnings.set,
    destroy() {
      destroyed = true;
      generation++;
      selectToken++;
      clearSearchTimer();
      doc.removeEventListener('forgeviz:highlight-node', onHighlight);
      resizeObs?.disconnect();
      pz.destroy();
      unbindNodes();
      el.replaceChildren();
      el.classList.remove('fv-root');
      el.removeAttribute('data-fv-state');
    }
  };
}
