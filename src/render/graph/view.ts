/**
 * The autograd graph view: Graphviz lays the DOT out, we draw our own SVG.
 * Pure DOM/SVG; imports nothing from Jupyter or anywidget.
 *
 * The parts: draw.ts (layout → SVG, node decoration), inspector.ts (the node inspector),
 * interaction.ts (click, keys, focus), transcript.ts (the text description), layout.ts
 * (Graphviz JSON → boxes and paths), panzoom.ts; the chrome comes from common/chrome.ts.
 */
import type { Graph, NodeDetail } from '../../model/wire';
import { button, buttonGroup, createStatusLine, createWarningStrip, errorMessage, exportButtons, toolbar } from '../common/chrome';
import { h, s } from '../common/dom';
import { download, standaloneSvg } from '../common/export';
import { decorateAll, DrawnGraph, drawGraph } from './draw';
import { createInspectorPanel } from './inspector';
import { bindNodeEvents } from './interaction';
import { createLayoutCache, Layout } from './layout';
import { createPanZoom, PanZoom } from './panzoom';
import { renderTranscript } from './transcript';

export { nodeAriaLabel } from './draw';

export interface GraphViewOptions {
  /** Lay out DOT; returns Graphviz `json` output of the `dot` engine. */
  layout: (dot: string) => Promise<string>;
  /** Fetch everything the inspector shows for one node. */
  requestDetail: (nodeId: number) => Promise<NodeDetail>;
  /** Fetch the DOT source for export. */
  requestDot: () => Promise<string>;
}

export interface GraphView {
  setGraph(g: Graph): Promise<void>;
  select(nodeId: number): Promise<void>;
  exportSVG(): string;
  /** Show faults inside forgeviz as a visible warning strip (empty list hides it). */
  setWarnings(warnings: string[]): void;
  destroy(): void;
}

const LAYOUT_CACHE_SIZE = 8;

/** Everything the view's helpers share; one per view. */
interface GraphState {
  graph: Graph | null;
  /** The layout drawn now, the DOT it came from and its SVG; null while a message shows. */
  layout: Layout | null;
  drawnDot: string | null;
  drawn: DrawnGraph | null;
  selected: number | null;
  /** Bumped by each setGraph (and destroy): a layout that comes back late is dropped. */
  generation: number;
  /** Bumped by each select (and destroy): a detail that comes back late is dropped. */
  selectToken: number;
  /** Fit the graph to the stage on resize, until the user pans or zooms. */
  autoFit: boolean;
  destroyed: boolean;
}

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

  const st: GraphState = {
    graph: null,
    layout: null,
    drawnDot: null,
    drawn: null,
    selected: null,
    generation: 0,
    selectToken: 0,
    autoFit: true,
    destroyed: false
  };

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
    png: () => ({ text: exportSVG(), w: (st.layout?.width ?? 480) + 28, h: (st.layout?.height ?? 32) + 28 })
  });
  const dotBtn = button(doc, 'fv-export-dot', 'DOT', 'Download the Graphviz DOT source');
  const tools = toolbar(
    doc,
    'Graph tools',
    buttonGroup(doc, 'div', zoomIn, zoomOut, fitBtn),
    buttonGroup(doc, 'div', exported.svg, exported.png, dotBtn),
    legend(doc)
  );
  const { body, stage, svg, viewport, message, inspector, transcript } = createBody(doc);
  el.replaceChildren(warnings.el, tools, status.el, body, transcript);
  inspector.showEmpty();

  const getLayout = createLayoutCache(opts.layout, LAYOUT_CACHE_SIZE);
  const pz: PanZoom = createPanZoom(svg, viewport, () => {
    st.autoFit = false;
  });
  const fit = () => {
    if (st.layout) {
      pz.fit(st.layout.width, st.layout.height);
    }
  };
  let resizeObs: ResizeObserver | null = null;
  if (win && 'ResizeObserver' in win) {
    resizeObs = new (win as Window & typeof globalThis).ResizeObserver(() => {
      if (st.autoFit) {
        fit();
      }
    });
    resizeObs.observe(stage);
  }

  // ---- drawing ---------------------------------------------------------------
  /** A graph with a message instead of nodes: hide the SVG, show the text. */
  function showMessage(text: string) {
    st.layout = null;
    st.drawnDot = null;
    st.drawn = null;
    viewport.replaceChildren();
    svg.style.display = 'none';
    el.setAttribute('data-fv-mode', 'message');
    message.hidden = false;
    message.textContent = text;
    st.selected = null;
    inspector.showEmpty();
  }

  /** Draw ``lay`` unless it is drawn already, decorate the nodes from ``g`` and keep the selection. */
  function showGraph(g: Graph, lay: Layout) {
    svg.style.display = '';
    el.setAttribute('data-fv-mode', 'graph');
    message.hidden = true;
    if (st.drawnDot !== g.dot || !st.drawn) {
      st.layout = lay;
      st.drawn = drawGraph(doc, lay, st.graph);
      viewport.replaceChildren(st.drawn.g);
      st.drawnDot = g.dot;
      el.style.setProperty('--fv-stage-h', `${stageHeight(lay)}px`);
      st.autoFit = true;
      fit();
    }
    decorateAll(doc, st.drawn, st.graph, st.selected);
    if (st.selected !== null) {
      if (st.drawn.nodeEls.has(st.selected)) {
        void select(st.selected);
      } else {
        st.selected = null;
        inspector.showEmpty();
      }
    }
  }

  // ---- public API --------------------------------------------------------
  async function setGraph(g: Graph): Promise<void> {
    const gen = ++st.generation;
    el.setAttribute('data-fv-state', 'loading');
    st.graph = g;
    try {
      if (g.message) {
        showMessage(g.message);
      } else {
        const lay = await getLayout(g.dot);
        if (gen !== st.generation || st.destroyed) {
          return;
        }
        showGraph(g, lay);
      }
      renderTranscript(doc, transcript, st.graph);
      status.show(null);
      el.setAttribute('data-fv-state', 'ready');
    } catch (err) {
      if (gen !== st.generation) {
        return;
      }
      el.setAttribute('data-fv-state', 'error');
      status.show(`Could not draw the graph: ${errorMessage(err)}`, 'error');
    }
  }

  async function select(nodeId: number): Promise<void> {
    const token = ++st.selectToken;
    st.selected = nodeId;
    for (const [id, ng] of st.drawn?.nodeEls ?? []) {
      ng.classList.toggle('fv-selected', id === nodeId);
      ng.setAttribute('aria-pressed', id === nodeId ? 'true' : 'false');
    }
    const label = st.graph?.nodes.find(n => n.id === nodeId)?.label ?? `node ${nodeId}`;
    inspector.showLoading(nodeId, label);
    try {
      const detail = await opts.requestDetail(nodeId);
      if (token !== st.selectToken || st.destroyed) {
        return;
      }
      inspector.showDetail(detail, st.graph);
    } catch (err) {
      if (token !== st.selectToken || st.destroyed) {
        return;
      }
      inspector.showError(`Could not inspect ${label}: ${errorMessage(err)}`);
    } finally {
      if (token === st.selectToken) {
        inspector.settle();
      }
    }
  }

  function exportSVG(): string {
    if (!st.drawn || !st.layout) {
      const W = 480;
      const text = st.graph?.message ?? 'no graph';
      const tmp = s(doc, 'g', { class: 'fv-graph' }) as SVGGElement;
      tmp.appendChild(s(doc, 'text', { x: 8, y: 20, class: 'fv-message-text' }, text));
      svg.appendChild(tmp);
      try {
        return standaloneSvg(tmp, el, W, 32, 'forgeviz: ' + text);
      } finally {
        tmp.remove();
      }
    }
    return standaloneSvg(st.drawn.g, el, st.layout.width, st.layout.height, 'forgeviz autograd graph');
  }

  // ---- events --------------------------------------------------------------
  // A click on a memory block whose tensor a node saved selects that node here, if this graph has it.
  const onHighlight = (event: Event) => {
    const node = (event as CustomEvent<{ node?: number }>).detail?.node;
    const ng = typeof node === 'number' ? st.drawn?.nodeEls.get(node) : undefined;
    if (ng) {
      void select(node as number);
      ng.scrollIntoView?.({ block: 'nearest', inline: 'nearest' });
    }
  };
  doc.addEventListener('forgeviz:highlight-node', onHighlight);
  const unbindNodes = bindNodeEvents(svg, pz, st, id => void select(id));
  zoomIn.addEventListener('click', () => {
    pz.zoomBy(1.25);
    st.autoFit = false;
  });
  zoomOut.addEventListener('click', () => {
    pz.zoomBy(0.8);
    st.autoFit = false;
  });
  fitBtn.addEventListener('click', () => {
    st.autoFit = true;
    fit();
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
    select,
    exportSVG,
    setWarnings: warnings.set,
    destroy() {
      st.destroyed = true;
      st.generation++;
      st.selectToken++;
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
