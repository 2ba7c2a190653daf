/**
 * The autograd graph view: Graphviz lays the DOT out, we draw our own SVG.
 * Pure DOM/SVG; imports nothing from Jupyter or anywidget.
 */
import type { Graph, Node as GraphNode, NodeDetail } from '../../model/wire';
import { h, r2, s } from '../common/dom';
import { download, standaloneSvg, svgToPng } from '../common/export';
import { renderDetail } from './inspector';
import { Layout, NodeBox, parseLayout } from './layout';
import { createPanZoom, PanZoom } from './panzoom';

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
const BADGE_FONT = 9;

/** Text for the grad badge: "∇ 64". */
function badgeText(brief: string): string {
  const b = brief.trim();
  return b.startsWith('∇') ? b : `∇ ${b}`;
}

function briefValue(brief: string): string {
  return brief.trim().replace(/^∇\s*/, '');
}

/** Accessible name of a node: "x, leaf, grad 64". */
export function nodeAriaLabel(n: GraphNode): string {
  const parts = [n.label, n.kind === 'leaf' ? 'leaf' : n.name];
  if (n.grad_brief) {
    parts.push(`grad ${briefValue(n.grad_brief)}`);
  }
  if (n.freed) {
    parts.push('saved tensors freed');
  }
  if (n.first_nonfinite) {
    parts.push('first non-finite gradient');
  } else if (n.nonfinite) {
    parts.push('non-finite gradient');
  }
  return parts.join(', ');
}

function errorMessage(err: unknown): string {
  if (err instanceof Error) {
    return err.message;
  }
  return typeof err === 'string' ? err : JSON.stringify(err);
}

export function createGraphView(el: HTMLElement, opts: GraphViewOptions): GraphView {
  const doc = el.ownerDocument;
  const win = doc.defaultView;
  el.classList.add('fv-root');
  el.setAttribute('data-fv-state', 'loading');

  // ---- static chrome -------------------------------------------------------
  const warningStrip = h(doc, 'div', { class: 'fv-warning', role: 'alert', hidden: true });
  const btn = (cls: string, label: string, title: string) =>
    h(doc, 'button', { type: 'button', class: `fv-btn ${cls}`, title, 'aria-label': title }, label);
  const zoomIn = btn('fv-zoom-in', '+', 'Zoom in');
  const zoomOut = btn('fv-zoom-out', '−', 'Zoom out');
  const fitBtn = btn('fv-fit', '⤢ Fit', 'Fit the graph to the view');
  const svgBtn = btn('fv-export-svg', 'SVG', 'Download the graph as SVG');
  const pngBtn = btn('fv-export-png', 'PNG', 'Download the graph as PNG');
  const dotBtn = btn('fv-export-dot', 'DOT', 'Download the Graphviz DOT source');
  const legend = h(
    doc,
    'div',
    { class: 'fv-legend', 'aria-hidden': 'true' },
    h(doc, 'span', { class: 'fv-lg fv-lg-leaf' }, 'leaf'),
    h(doc, 'span', { class: 'fv-lg fv-lg-op' }, 'op'),
    h(doc, 'span', { class: 'fv-lg fv-lg-freed' }, 'freed'),
    h(doc, 'span', { class: 'fv-lg fv-lg-nonfinite' }, '⚠ non-finite'),
    h(doc, 'span', { class: 'fv-lg fv-lg-grad' }, '∇ grad')
  );
  const toolbar = h(
    doc,
    'div',
    { class: 'fv-toolbar', role: 'toolbar', 'aria-label': 'Graph tools' },
    h(doc, 'div', { class: 'fv-btn-group' }, zoomIn, zoomOut, fitBtn),
    h(doc, 'div', { class: 'fv-btn-group' }, svgBtn, pngBtn, dotBtn),
    legend
  );
  const status = h(doc, 'div', { class: 'fv-status', role: 'status', hidden: true });
  const stage = h(doc, 'div', { class: 'fv-stage' });
  const svg = s(doc, 'svg', {
    class: 'fv-canvas',
    role: 'group',
    'aria-label': 'autograd graph'
  }) as SVGSVGElement;
  const viewport = s(doc, 'g', { class: 'fv-viewport' }) as SVGGElement;
  svg.appendChild(viewport);
  const message = h(doc, 'div', { class: 'fv-message', hidden: true });
  stage.append(svg, message);
  const inspector = h(doc, 'aside', {
    class: 'fv-inspector',
    'aria-live': 'polite',
    'aria-label': 'node inspector',
    'data-state': 'empty'
  });
  const body = h(doc, 'div', { class: 'fv-body' }, stage, inspector);
  const transcript = h(doc, 'details', { class: 'fv-transcript' });
  el.replaceChildren(warningStrip, toolbar, status, body, transcript);
  showEmptyInspector();

  // ---- state ---------------------------------------------------------------
  let graph: Graph | null = null;
  let layout: Layout | null = null;
  let drawnDot: string | null = null;
  let content: SVGGElement | null = null;
  const nodeEls = new Map<number, SVGGElement>();
  const boxes = new Map<number, NodeBox>();
  const cache = new Map<string, Layout>();
  let selected: number | null = null;
  let generation = 0;
  let selectToken = 0;
  let autoFit = true;
  let destroyed = false;

  const pz: PanZoom = createPanZoom(svg, viewport, () => {
    autoFit = false;
  });

  const fit = () => {
    if (layout) {
      pz.fit(layout.width, layout.height);
    }
  };
  let resizeObs: ResizeObserver | null = null;
  if (win && 'ResizeObserver' in win) {
    resizeObs = new (win as Window & typeof globalThis).ResizeObserver(() => {
      if (autoFit) {
        fit();
      }
    });
    resizeObs.observe(stage);
  }

  // ---- helpers ---------------------------------------------------------------
  function showStatus(text: string | null, kind: 'error' | 'info' = 'info') {
    status.hidden = !text;
    status.textContent = text ?? '';
    status.setAttribute('data-kind', kind);
  }

  function showEmptyInspector() {
    inspector.removeAttribute('data-node-id');
    inspector.setAttribute('data-state', 'empty');
    inspector.replaceChildren(
      h(doc, 'div', { class: 'fv-hint' }, 'Select a node (click it, or Tab to it and press Enter) to see its tensors and gradients.')
    );
  }

  async function getLayout(dot: string): Promise<Layout> {
    const hit = cache.get(dot);
    if (hit) {
      cache.delete(dot);
      cache.set(dot, hit);
      return hit;
    }
    const parsed = parseLayout(await opts.layout(dot));
    cache.set(dot, parsed);
    while (cache.size > LAYOUT_CACHE_SIZE) {
      cache.delete(cache.keys().next().value as string);
    }
    return parsed;
  }

  function drawNode(b: NodeBox): SVGGElement {
    const w = b.w;
    const hgt = b.h;
    const g = s(doc, 'g', {
      class: 'fv-node',
      transform: `translate(${r2(b.cx - w / 2)},${r2(b.cy - hgt / 2)})`,
      'data-node-id': Number.isNaN(b.id) ? null : b.id,
      tabindex: 0,
      role: 'button'
    }) as SVGGElement;
    g.appendChild(s(doc, 'title'));
    g.appendChild(s(doc, 'rect', { class: 'fv-node-halo', x: -4, y: -4, width: r2(w + 8), height: r2(hgt + 8), rx: 9 }));
    g.appendChild(s(doc, 'rect', { class: 'fv-node-box', x: 0, y: 0, width: r2(w), height: r2(hgt), rx: 6 }));
    const lh = b.fontSize * 1.2;
    const first = hgt / 2 - (b.lines.length * lh) / 2 + lh * 0.75;
    const text = s(doc, 'text', { class: 'fv-node-text', 'text-anchor': 'middle' });
    b.lines.forEach((line, i) => {
      text.appendChild(
        s(doc, 'tspan', { class: i === 0 ? 'fv-line-name' : 'fv-line-sub', x: r2(w / 2), y: r2(first + i * lh) }, line)
      );
    });
    g.appendChild(text);
    g.appendChild(s(doc, 'g', { class: 'fv-marks' }));
    return g;
  }

  /** Classes, labels and badges that change with every gradient update (no layout). */
  function decorate(g: SVGGElement, b: NodeBox, n: GraphNode | undefined) {
    const cls = ['fv-node'];
    if (!n) {
      cls.push('fv-unknown');
    } else {
      cls.push(n.kind === 'leaf' ? 'fv-leaf' : 'fv-op');
      if (n.freed) {
        cls.push('fv-freed');
      }
      if (n.nonfinite || n.first_nonfinite) {
        cls.push('fv-nonfinite');
      }
      if (n.first_nonfinite) {
        cls.push('fv-first-nonfinite');
      }
      if (n.grad_brief) {
        cls.push('fv-has-grad');
      }
    }
    if (n && n.id === selected) {
      cls.push('fv-selected');
    }
    g.setAttribute('class', cls.join(' '));
    const label = n ? n.label : b.lines[0] ?? b.name;
    g.setAttribute('data-label', label);
    const aria = n ? nodeAriaLabel(n) : label;
    g.setAttribute('aria-label', aria);
    g.setAttribute('aria-pressed', n && n.id === selected ? 'true' : 'false');
    const title = g.querySelector('title');
    if (title) {
      const where = n && n.cell !== null ? `\ncell [${n.cell}]${n.line !== null ? `, line ${n.line}` : ''}` : '';
      const mod = n && n.module_path ? `\nmodule ${n.module_path}` : '';
      title.textContent = `${b.lines.join('\n')}${n?.grad_brief ? `\ngrad ${briefValue(n.grad_brief)}` : ''}${where}${mod}${n?.freed ? '\nsaved tensors freed' : ''}${n?.nonfinite ? '\n⚠ non-finite gradient' : ''}`;
    }
    const marks = g.querySelector('.fv-marks') as SVGGElement;
    marks.replaceChildren();
    if (!n) {
      return;
    }
    if (n.grad_brief) {
      const t = badgeText(n.grad_brief);
      const bw = Math.max(22, t.length * BADGE_FONT * 0.58 + 10);
      const bx = b.w - bw + 10;
      const badge = s(doc, 'g', { class: 'fv-badge', transform: `translate(${r2(bx)},-8)` });
      badge.appendChild(s(doc, 'rect', { class: 'fv-badge-bg', width: r2(bw), height: 14, rx: 7 }));
      badge.appendChild(s(doc, 'text', { class: 'fv-badge-text', x: r2(bw / 2), y: 10.2, 'text-anchor': 'middle' }, t));
      marks.appendChild(badge);
    }
    if (n.freed) {
      const fm = s(doc, 'g', { class: 'fv-freed-mark', transform: `translate(6,${r2(b.h + 3)})` });
      fm.appendChild(s(doc, 'text', { class: 'fv-freed-text', x: 0, y: 0 }, '⌀ freed'));
      marks.appendChild(fm);
    }
    if (n.nonfinite || n.first_nonfinite) {
      const wm = s(doc, 'g', { class: 'fv-warn-mark', transform: 'translate(-7,-7)' });
      wm.appendChild(s(doc, 'circle', { class: 'fv-warn-bg', cx: 7, cy: 7, r: 8 }));
      wm.appendChild(s(doc, 'text', { class: 'fv-warn-glyph', x: 7, y: 11, 'text-anchor': 'middle' }, '⚠'));
      marks.appendChild(wm);
    }
  }

  function draw(lay: Layout) {
    const g = s(doc, 'g', { class: 'fv-graph' }) as SVGGElement;
    const clusters = s(doc, 'g', { class: 'fv-clusters' });
    for (const c of lay.clusters) {
      const cg = s(doc, 'g', { class: 'fv-cluster', 'data-cluster-id': c.id, 'data-depth': c.depth });
      cg.appendChild(s(doc, 'title', {}, c.label));
      cg.appendChild(s(doc, 'rect', { class: 'fv-cluster-box', x: r2(c.x), y: r2(c.y), width: r2(c.w), height: r2(c.h), rx: 8 }));
      if (c.label && c.labelPos) {
        cg.appendChild(
          s(doc, 'text', { class: 'fv-cluster-label', x: r2(c.labelPos.x), y: r2(c.labelPos.y + c.fontSize * 0.35), 'text-anchor': 'middle' }, c.label)
        );
      }
      clusters.appendChild(cg);
    }
    const edges = s(doc, 'g', { class: 'fv-edges' });
    for (const e of lay.edges) {
      const eg = s(doc, 'g', { class: 'fv-edge', 'data-src': e.src, 'data-dst': e.dst });
      const srcLabel = graph?.nodes.find(n => n.id === e.src)?.label ?? String(e.src);
      const dstLabel = graph?.nodes.find(n => n.id === e.dst)?.label ?? String(e.dst);
      eg.appendChild(s(doc, 'title', {}, `${srcLabel} → ${dstLabel}${e.label ? ` (${e.label})` : ''}`));
      eg.appendChild(s(doc, 'path', { class: 'fv-edge-path', d: e.d }));
      for (const poly of [e.head, e.tail]) {
        if (poly) {
          eg.appendChild(s(doc, 'polygon', { class: 'fv-edge-head', points: poly.map(p => `${r2(p.x)},${r2(p.y)}`).join(' ') }));
        }
      }
      if (e.label && e.labelPos) {
        eg.appendChild(
          s(doc, 'text', { class: 'fv-edge-label', x: r2(e.labelPos.x), y: r2(e.labelPos.y + e.fontSize * 0.35), 'text-anchor': 'middle' }, e.label)
        );
      }
      edges.appendChild(eg);
    }
    const nodes = s(doc, 'g', { class: 'fv-nodes' });
    nodeEls.clear();
    boxes.clear();
    for (const b of lay.nodes) {
      const ng = drawNode(b);
      nodes.appendChild(ng);
      if (!Number.isNaN(b.id)) {
        nodeEls.set(b.id, ng);
        boxes.set(b.id, b);
      }
    }
    g.append(clusters, edges, nodes);
    viewport.replaceChildren(g);
    content = g;
  }

  function decorateAll() {
    const byId = new Map((graph?.nodes ?? []).map(n => [n.id, n]));
    for (const [id, ng] of nodeEls) {
      decorate(ng, boxes.get(id)!, byId.get(id));
    }
  }

  function renderTranscript() {
    const g = graph;
    transcript.replaceChildren(h(doc, 'summary', {}, 'Text description'));
    if (!g) {
      return;
    }
    if (g.message) {
      transcript.appendChild(h(doc, 'p', {}, g.message));
      return;
    }
    const byId = new Map(g.nodes.map(n => [n.id, n]));
    const name = (id: number) => byId.get(id)?.label ?? `node ${id}`;
    transcript.appendChild(
      h(doc, 'p', {}, `${g.nodes.length} nodes, ${g.edges.length} edges, ${g.backward_passes} backward pass${g.backward_passes === 1 ? '' : 'es'} seen.`)
    );
    const nl = h(doc, 'ol', { class: 'fv-transcript-nodes' });
    for (const n of g.nodes) {
      const bits = [n.kind === 'leaf' ? 'leaf tensor' : `operation ${n.name}`];
      if (n.module_path) {
        bits.push(`in module ${n.module_path}`);
      }
      if (n.cell !== null) {
        bits.push(`from cell [${n.cell}]${n.line !== null ? ` line ${n.line}` : ''}`);
      }
      if (n.grad_brief) {
        bits.push(`gradient ${briefValue(n.grad_brief)}`);
      }
      if (n.freed) {
        bits.push('saved tensors freed');
      }
      if (n.nonfinite) {
        bits.push(n.first_nonfinite ? 'FIRST non-finite gradient' : 'non-finite gradient');
      }
      nl.appendChild(h(doc, 'li', {}, `${n.label}: ${bits.join(', ')}.`));
    }
    const el2 = h(doc, 'ul', { class: 'fv-transcript-edges' });
    for (const e of g.edges) {
      const meta = e.meta ? ` (${e.meta.shape.length ? e.meta.shape.join('×') : 'scalar'} ${e.meta.dtype.replace(/^torch\./, '')})` : '';
      el2.appendChild(h(doc, 'li', {}, `${name(e.src)} feeds ${name(e.dst)} as input ${e.input_nr}${meta}.`));
    }
    transcript.append(h(doc, 'h5', {}, 'Nodes'), nl, h(doc, 'h5', {}, 'Edges (forward direction)'), el2);
  }

  function stageHeight(lay: Layout): number {
    return Math.round(Math.min(560, Math.max(260, lay.height * 1.3 + 40)));
  }

  // ---- public API --------------------------------------------------------
  async function setGraph(g: Graph): Promise<void> {
    const gen = ++generation;
    el.setAttribute('data-fv-state', 'loading');
    graph = g;
    try {
      if (g.message) {
        layout = null;
        drawnDot = null;
        content = null;
        viewport.replaceChildren();
        nodeEls.clear();
        boxes.clear();
        svg.style.display = 'none';
        el.setAttribute('data-fv-mode', 'message');
        message.hidden = false;
        message.textContent = g.message;
        selected = null;
        showEmptyInspector();
      } else {
        const lay = await getLayout(g.dot);
        if (gen !== generation || destroyed) {
          return;
        }
        svg.style.display = '';
        el.setAttribute('data-fv-mode', 'graph');
        message.hidden = true;
        if (drawnDot !== g.dot || !content) {
          layout = lay;
          draw(lay);
          drawnDot = g.dot;
          el.style.setProperty('--fv-stage-h', `${stageHeight(lay)}px`);
          autoFit = true;
          fit();
        }
        decorateAll();
        if (selected !== null) {
          if (nodeEls.has(selected)) {
            void select(selected);
          } else {
            selected = null;
            showEmptyInspector();
          }
        }
      }
      renderTranscript();
      showStatus(null);
      el.setAttribute('data-fv-state', 'ready');
    } catch (err) {
      if (gen !== generation) {
        return;
      }
      el.setAttribute('data-fv-state', 'error');
      showStatus(`Could not draw the graph: ${errorMessage(err)}`, 'error');
    }
  }

  // A click on a memory block whose tensor a node saved selects that node here, if this graph has it.
  const onHighlight = (event: Event) => {
    const node = (event as CustomEvent<{ node?: number }>).detail?.node;
    if (typeof node === 'number' && nodeEls.has(node)) {
      void select(node);
      nodeEls.get(node)?.scrollIntoView?.({ block: 'nearest', inline: 'nearest' });
    }
  };
  doc.addEventListener('forgeviz:highlight-node', onHighlight);

  async function select(nodeId: number): Promise<void> {
    const token = ++selectToken;
    selected = nodeId;
    for (const [id, ng] of nodeEls) {
      ng.classList.toggle('fv-selected', id === nodeId);
      ng.setAttribute('aria-pressed', id === nodeId ? 'true' : 'false');
    }
    inspector.setAttribute('data-node-id', String(nodeId));
    inspector.setAttribute('data-state', 'loading');
    const label = graph?.nodes.find(n => n.id === nodeId)?.label ?? `node ${nodeId}`;
    if (!inspector.querySelector('.fv-detail')) {
      inspector.replaceChildren(h(doc, 'div', { class: 'fv-loading' }, `Loading ${label}…`));
    } else {
      inspector.classList.add('fv-refreshing');
    }
    try {
      const detail = await opts.requestDetail(nodeId);
      if (token !== selectToken || destroyed) {
        return;
      }
      inspector.replaceChildren(renderDetail(doc, detail, graph));
      inspector.setAttribute('data-state', 'ready');
    } catch (err) {
      if (token !== selectToken || destroyed) {
        return;
      }
      inspector.replaceChildren(
        h(doc, 'div', { class: 'fv-error', role: 'alert' }, `Could not inspect ${label}: ${errorMessage(err)}`)
      );
      inspector.setAttribute('data-state', 'error');
    } finally {
      if (token === selectToken) {
        inspector.classList.remove('fv-refreshing');
      }
    }
  }

  function exportSVG(): string {
    if (!content || !layout) {
      const W = 480;
      const text = graph?.message ?? 'no graph';
      const tmp = s(doc, 'g', { class: 'fv-graph' }) as SVGGElement;
      tmp.appendChild(s(doc, 'text', { x: 8, y: 20, class: 'fv-message-text' }, text));
      svg.appendChild(tmp);
      try {
        return standaloneSvg(tmp, el, W, 32, 'forgeviz: ' + text);
      } finally {
        tmp.remove();
      }
    }
    return standaloneSvg(content, el, layout.width, layout.height, 'forgeviz autograd graph');
  }

  // ---- events --------------------------------------------------------------
  const nodeFromEvent = (e: Event): number | null => {
    const t = e.target as Element | null;
    const ng = t?.closest?.('.fv-node');
    const id = ng?.getAttribute('data-node-id');
    return id === null || id === undefined ? null : Number(id);
  };
  const onClick = (e: MouseEvent) => {
    if (pz.dragged()) {
      return;
    }
    const id = nodeFromEvent(e);
    if (id !== null) {
      void select(id);
    }
  };
  const moveFocus = (from: number, key: string) => {
    const a = boxes.get(from);
    if (!a) {
      return;
    }
    let best: number | null = null;
    let bestScore = Infinity;
    for (const [id, b] of boxes) {
      if (id === from) {
        continue;
      }
      const dx = b.cx - a.cx;
      const dy = b.cy - a.cy;
      let main: number;
      let cross: number;
      if (key === 'ArrowDown') {
        [main, cross] = [dy, dx];
      } else if (key === 'ArrowUp') {
        [main, cross] = [-dy, dx];
      } else if (key === 'ArrowRight') {
        [main, cross] = [dx, dy];
      } else {
        [main, cross] = [-dx, dy];
      }
      if (main <= 1) {
        continue;
      }
      const score = main + 2 * Math.abs(cross);
      if (score < bestScore) {
        bestScore = score;
        best = id;
      }
    }
    if (best !== null) {
      nodeEls.get(best)?.focus();
    }
  };
  const onKey = (e: KeyboardEvent) => {
    const id = nodeFromEvent(e);
    if (id === null) {
      return;
    }
    if (e.key === 'Enter' || e.key === ' ' || e.key === 'Spacebar') {
      e.preventDefault();
      void select(id);
    } else if (e.key.startsWith('Arrow')) {
      e.preventDefault();
      moveFocus(id, e.key);
    }
  };
  const onFocus = (e: FocusEvent) => {
    const id = nodeFromEvent(e);
    const b = id === null ? undefined : boxes.get(id);
    if (!b) {
      return;
    }
    const w = svg.clientWidth;
    const hh = svg.clientHeight;
    if (!w || !hh) {
      return;
    }
    const t = pz.get();
    const x = b.cx * t.k + t.x;
    const y = b.cy * t.k + t.y;
    if (x < 0 || y < 0 || x > w || y > hh) {
      pz.set({ ...t, x: w / 2 - b.cx * t.k, y: hh / 2 - b.cy * t.k });
      autoFit = false;
    }
  };
  svg.addEventListener('click', onClick);
  svg.addEventListener('keydown', onKey);
  svg.addEventListener('focusin', onFocus);
  zoomIn.addEventListener('click', () => {
    pz.zoomBy(1.25);
    autoFit = false;
  });
  zoomOut.addEventListener('click', () => {
    pz.zoomBy(0.8);
    autoFit = false;
  });
  fitBtn.addEventListener('click', () => {
    autoFit = true;
    fit();
  });
  svgBtn.addEventListener('click', () => {
    try {
      download(doc, 'forgeviz-graph.svg', new Blob([exportSVG()], { type: 'image/svg+xml' }));
    } catch (err) {
      showStatus(`SVG export failed: ${errorMessage(err)}`, 'error');
    }
  });
  pngBtn.addEventListener('click', async () => {
    try {
      const w = (layout?.width ?? 480) + 28;
      const hh = (layout?.height ?? 32) + 28;
      download(doc, 'forgeviz-graph.png', await svgToPng(doc, exportSVG(), w, hh));
    } catch (err) {
      showStatus(`PNG export failed: ${errorMessage(err)}`, 'error');
    }
  });
  dotBtn.addEventListener('click', async () => {
    try {
      const dot = await opts.requestDot();
      download(doc, 'forgeviz-graph.dot', new Blob([dot], { type: 'text/vnd.graphviz' }));
    } catch (err) {
      showStatus(`DOT export failed: ${errorMessage(err)}`, 'error');
    }
  });

  return {
    setGraph,
    select,
    exportSVG,
    setWarnings(warnings: string[]) {
      const list = (warnings ?? []).filter(w => typeof w === 'string' && w.length);
      warningStrip.hidden = list.length === 0;
      warningStrip.replaceChildren(
        ...list.map(w => h(doc, 'div', { class: 'fv-warning-item' }, h(doc, 'span', { class: 'fv-warning-icon', 'aria-hidden': 'true' }, '⚠'), ` ${w}`))
      );
    },
    destroy() {
      destroyed = true;
      generation++;
      selectToken++;
      doc.removeEventListener('forgeviz:highlight-node', onHighlight);
      resizeObs?.disconnect();
      pz.destroy();
      svg.removeEventListener('click', onClick);
      svg.removeEventListener('keydown', onKey);
      svg.removeEventListener('focusin', onFocus);
      el.replaceChildren();
      el.classList.remove('fv-root');
      el.removeAttribute('data-fv-state');
    }
  };
}
