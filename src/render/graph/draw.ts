/**
 * Drawing the autograd graph: a Graphviz layout becomes our own SVG (clusters, edges, nodes),
 * and each node is decorated with what changes on every gradient update (classes, labels,
 * badges) without laying out again. Pure SVG.
 */
import type { Graph, Node as GraphNode } from '../../model/wire';
import { r2, s } from '../common/dom';
import type { Layout, NodeBox } from './layout';

const BADGE_FONT = 9;

/** Text for the grad badge: "∇ 64". */
function badgeText(brief: string): string {
  const b = brief.trim();
  return b.startsWith('∇') ? b : `∇ ${b}`;
}

/** A grad brief without its "∇": "64". */
export function briefValue(brief: string): string {
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

/** The drawn graph: its root group, and each node's group and box by node id. */
export interface DrawnGraph {
  g: SVGGElement;
  nodeEls: Map<number, SVGGElement>;
  boxes: Map<number, NodeBox>;
}

/** A node's group: halo, box, label lines and an empty ``.fv-marks`` group for ``decorateNode``. */
function drawNode(doc: Document, b: NodeBox): SVGGElement {
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
    text.appendChild(s(doc, 'tspan', { class: i === 0 ? 'fv-line-name' : 'fv-line-sub', x: r2(w / 2), y: r2(first + i * lh) }, line));
  });
  g.appendChild(text);
  g.appendChild(s(doc, 'g', { class: 'fv-marks' }));
  return g;
}

function drawClusters(doc: Document, lay: Layout): SVGElement {
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
  return clusters;
}

function drawEdges(doc: Document, lay: Layout, graph: Graph | null): SVGElement {
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
  return edges;
}

/** Draw a layout: clusters under edges under nodes. ``graph`` names the edges' ends in their titles. */
export function drawGraph(doc: Document, lay: Layout, graph: Graph | null): DrawnGraph {
  const g = s(doc, 'g', { class: 'fv-graph' }) as SVGGElement;
  const clusters = drawClusters(doc, lay);
  const edges = drawEdges(doc, lay, graph);
  const nodes = s(doc, 'g', { class: 'fv-nodes' });
  const nodeEls = new Map<number, SVGGElement>();
  const boxes = new Map<number, NodeBox>();
  for (const b of lay.nodes) {
    const ng = drawNode(doc, b);
    nodes.appendChild(ng);
    if (!Number.isNaN(b.id)) {
      nodeEls.set(b.id, ng);
      boxes.set(b.id, b);
    }
  }
  g.append(clusters, edges, nodes);
  return { g, nodeEls, boxes };
}

function nodeClasses(n: GraphNode | undefined, selected: boolean): string {
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
  if (selected) {
    cls.push('fv-selected');
  }
  return cls.join(' ');
}

function nodeTitle(b: NodeBox, n: GraphNode | undefined): string {
  const where = n && n.cell !== null ? `\ncell [${n.cell}]${n.line !== null ? `, line ${n.line}` : ''}` : '';
  const mod = n && n.module_path ? `\nmodule ${n.module_path}` : '';
  return `${b.lines.join('\n')}${n?.grad_brief ? `\ngrad ${briefValue(n.grad_brief)}` : ''}${where}${mod}${n?.freed ? '\nsaved tensors freed' : ''}${n?.nonfinite ? '\n⚠ non-finite gradient' : ''}`;
}

/** The grad badge, the freed mark and the non-finite mark of node ``n``. */
function drawMarks(doc: Document, marks: SVGGElement, b: NodeBox, n: GraphNode): void {
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

/**
 * Classes, labels and badges of one node group that change with every gradient update (no
 * layout). ``n`` is undefined for a node the graph does not know.
 */
export function decorateNode(doc: Document, g: SVGGElement, b: NodeBox, n: GraphNode | undefined, selected: number | null): void {
  const isSelected = !!n && n.id === selected;
  g.setAttribute('class', nodeClasses(n, isSelected));
  const label = n ? n.label : b.lines[0] ?? b.name;
  g.setAttribute('data-label', label);
  g.setAttribute('aria-label', n ? nodeAriaLabel(n) : label);
  g.setAttribute('aria-pressed', isSelected ? 'true' : 'false');
  const title = g.querySelector('title');
  if (title) {
    title.textContent = nodeTitle(b, n);
  }
  const marks = g.querySelector('.fv-marks') as SVGGElement;
  marks.replaceChildren();
  if (n) {
    drawMarks(doc, marks, b, n);
  }
}

/** Decorate every drawn node from ``graph`` (see ``decorateNode``). */
export function decorateAll(doc: Document, drawn: DrawnGraph, graph: Graph | null, selected: number | null): void {
  const byId = new Map((graph?.nodes ?? []).map(n => [n.id, n]));
  for (const [id, ng] of drawn.nodeEls) {
    decorateNode(doc, ng, drawn.boxes.get(id)!, byId.get(id), selected);
  }
}
