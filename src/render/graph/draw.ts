/**
 * Drawing the autograd graph: a Graphviz layout becomes our own SVG (clusters, edges, nodes),
 * and each node is decorated with what changes on every gradient update (classes, labels,
 * badges) without laying out again. Pure SVG.
 */
import type { Module, Node as GraphNode } from '../../model/wire';
import { r2, s } from '../common/dom';
import { formatNumber, wireNumber } from '../common/format';
import { moduleStats, stackTitle, STACK_BAR_LINES, STACK_BAR_W } from './dotgen';
import type { VisibleGraph, VisibleItem } from './fold';
import type { BoxKind, ClusterBox, Layout, NodeBox } from './layout';

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

/** A drawn item: a Node, a module box or a stack, by its key (DOT name). */
export interface DrawnItem {
  key: string;
  kind: BoxKind;
  el: SVGGElement;
  box: NodeBox;
}

/** A drawn cluster (an expanded Module). */
export interface DrawnCluster {
  el: SVGGElement;
  box: ClusterBox;
  /** The focusable label that collapses it. */
  head: SVGGElement | null;
}

/** The drawn graph: its root group, each Node's group and box by id, and every item and cluster. */
export interface DrawnGraph {
  g: SVGGElement;
  nodeEls: Map<number, SVGGElement>;
  boxes: Map<number, NodeBox>;
  /** Every drawn item by key (Nodes too). */
  items: Map<string, DrawnItem>;
  /** Boxes of every item by key, for keyboard moves between them. */
  itemBoxes: Map<string, NodeBox>;
  /** Clusters by Module id. */
  clusters: Map<string, DrawnCluster>;
  /** A big view (window.ts): only the items in the window are in ``items`` and ``nodeEls``. */
  window?: DrawWindow;
}

/** A rectangle in graph coordinates. */
export interface Rect {
  x0: number;
  y0: number;
  x1: number;
  y1: number;
}

/** The window of a big view: which items are drawn as groups (window.ts). */
export interface DrawWindow {
  /** Draw the items inside ``rect`` as groups and drop the others (null: drop all). True when items were added. */
  update(rect: Rect | null): boolean;
  /** Draw the item ``key`` as a group (a key or a search moved to it), if it is not already. */
  ensure(key: string): DrawnItem | undefined;
  /** The item whose box holds the point (graph coordinates), drawn or not. */
  hit(x: number, y: number): NodeBox | null;
}

/**
 * An item's group: halo, box, label lines and an empty ``.fv-marks`` group for decoration. A Node
 * carries ``data-node-id`` and ``data-fv-node``; a module box ``data-fv-module`` (its path), its last
 * line left for the gradient norm (``decorateBox``); a stack ``data-fv-repeat`` (the count), two
 * shadows behind and room below its text for one bar per member.
 */
export function drawItem(doc: Document, b: NodeBox, item: VisibleItem | undefined): SVGGElement {
  const id = Number.isNaN(b.id) ? null : b.id;
  const mod = item?.kind === 'module' ? item.module : null;
  const stack = item?.kind === 'stack' ? item : null;
  const g = s(doc, 'g', {
    class: b.kind === 'node' ? 'fv-node' : `fv-box fv-${b.kind}`,
    transform: `translate(${r2(b.cx - b.w / 2)},${r2(b.cy - b.h / 2)})`,
    'data-node-id': id,
    'data-fv-node': id,
    'data-fv-key': b.key,
    'data-fv-module': mod?.path,
    'data-module-id': mod?.id,
    'data-fv-repeat': stack?.members.length,
    tabindex: 0,
    role: 'button'
  }) as SVGGElement;
  g.appendChild(s(doc, 'title'));
  for (const d of stack ? [6, 3] : []) {
    g.appendChild(s(doc, 'rect', { class: 'fv-stack-shadow', x: d, y: -d, width: r2(b.w), height: r2(b.h), rx: 6 }));
  }
  g.appendChild(s(doc, 'rect', { class: 'fv-node-halo', x: -4, y: -4, width: r2(b.w + 8), height: r2(b.h + 8), rx: 9 }));
  g.appendChild(s(doc, 'rect', { class: 'fv-node-box', x: 0, y: 0, width: r2(b.w), height: r2(b.h), rx: 6 }));
  const lines = mod ? b.lines.slice(0, -1) : stack ? b.lines.slice(0, 2) : b.lines;
  const lh = b.fontSize * 1.2;
  const first = b.h / 2 - (b.lines.length * lh) / 2 + lh * 0.75;
  const text = s(doc, 'text', { class: 'fv-node-text', 'text-anchor': 'middle' });
  lines.forEach((line, i) => {
    text.appendChild(s(doc, 'tspan', { class: i === 0 ? 'fv-line-name' : 'fv-line-sub', x: r2(b.w / 2), y: r2(first + i * lh) }, line));
  });
  if (mod) {
    text.appendChild(s(doc, 'tspan', { class: 'fv-line-grad', x: r2(b.w / 2), y: r2(first + lines.length * lh) }));
  }
  g.appendChild(text);
  if (stack) {
    g.appendChild(s(doc, 'g', { class: 'fv-bars' }));
  }
  g.appendChild(s(doc, 'g', { class: 'fv-marks' }));
  return g;
}

/** Every cluster of ``lay`` (an expanded Module: a dashed box, and a label that collapses it). */
export function drawClusters(doc: Document, lay: Layout, vis: VisibleGraph | null, out: Map<string, DrawnCluster>): SVGElement {
  const clusters = s(doc, 'g', { class: 'fv-clusters' });
  for (const c of lay.clusters) {
    const moduleId = c.id.startsWith('cluster:') ? c.id.slice(8) : null;
    const mod = moduleId !== null ? vis?.clusters.get(moduleId)?.module : undefined;
    const cg = s(doc, 'g', {
      class: 'fv-cluster',
      'data-cluster-id': c.id,
      'data-depth': c.depth,
      'data-fv-module': mod ? mod.path : null,
      'data-module-id': mod ? mod.id : null
    }) as SVGGElement;
    cg.appendChild(s(doc, 'title', {}, c.label));
    cg.appendChild(s(doc, 'rect', { class: 'fv-cluster-box', x: r2(c.x), y: r2(c.y), width: r2(c.w), height: r2(c.h), rx: 8 }));
    let head: SVGGElement | null = null;
    if (c.label && c.labelPos) {
      // the label collapses the module again (click, or Enter when focused)
      head = s(doc, 'g', { class: 'fv-cluster-head', tabindex: mod && 0, role: mod && 'button', 'aria-label': mod && `${c.label}, expanded` }) as SVGGElement;
      head.appendChild(
        s(doc, 'text', { class: 'fv-cluster-label', x: r2(c.labelPos.x), y: r2(c.labelPos.y + c.fontSize * 0.35), 'text-anchor': 'middle' }, c.label)
      );
      cg.appendChild(head);
    }
    clusters.appendChild(cg);
    if (mod) {
      out.set(mod.id, { el: cg, box: c, head });
    }
  }
  return clusters;
}

/** What an edge end is called in its title: a Node's label, a module's path, a stack's title. */
function itemName(vis: VisibleGraph | null, key: string): string {
  const item = vis?.items.get(key);
  if (!item) {
    return key;
  }
  return item.kind === 'node' ? item.node.label : item.kind === 'module' ? item.module.path || item.module.id : stackTitle(item.members);
}

function drawEdges(doc: Document, lay: Layout, vis: VisibleGraph | null): SVGElement {
  const edges = s(doc, 'g', { class: 'fv-edges' });
  const counts = new Map((vis?.edges ?? []).map(e => [`${e.src}>${e.dst}`, e.count]));
  for (const e of lay.edges) {
    const end = (id: number, key: string) => (Number.isNaN(id) ? key : id);
    const eg = s(doc, 'g', { class: 'fv-edge', 'data-src': end(e.src, e.srcKey), 'data-dst': end(e.dst, e.dstKey) });
    const n = counts.get(`${e.srcKey}>${e.dstKey}`) ?? 1;
    const shape = e.label ? ` (${e.label.replace(/ ×\d+$/, '')})` : '';
    eg.appendChild(s(doc, 'title', {}, `${itemName(vis, e.srcKey)} → ${itemName(vis, e.dstKey)}${shape}${n > 1 ? `, ${n} tensors` : ''}`));
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

/** Draw a layout: clusters under edges under items. ``vis`` names what each box stands for. */
export function drawGraph(doc: Document, lay: Layout, vis: VisibleGraph | null): DrawnGraph {
  const g = s(doc, 'g', { class: 'fv-graph' }) as SVGGElement;
  const clusterEls = new Map<string, DrawnCluster>();
  const clusters = drawClusters(doc, lay, vis, clusterEls);
  const edges = drawEdges(doc, lay, vis);
  const nodes = s(doc, 'g', { class: 'fv-nodes' });
  const nodeEls = new Map<number, SVGGElement>();
  const boxes = new Map<number, NodeBox>();
  const items = new Map<string, DrawnItem>();
  const itemBoxes = new Map<string, NodeBox>();
  for (const b of lay.nodes) {
    const el = drawItem(doc, b, vis?.items.get(b.key));
    nodes.appendChild(el);
    items.set(b.key, { key: b.key, kind: b.kind, el, box: b });
    itemBoxes.set(b.key, b);
    if (!Number.isNaN(b.id)) {
      nodeEls.set(b.id, el);
      boxes.set(b.id, b);
    }
  }
  g.append(clusters, edges, nodes);
  return { g, nodeEls, boxes, items, itemBoxes, clusters: clusterEls };
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
    marks.appendChild(warnMark(doc));
  }
}

/** The "⚠" in the top-left corner. */
function warnMark(doc: Document): SVGElement {
  const wm = s(doc, 'g', { class: 'fv-warn-mark', transform: 'translate(-7,-7)' });
  wm.appendChild(s(doc, 'circle', { class: 'fv-warn-bg', cx: 7, cy: 7, r: 8 }));
  wm.appendChild(s(doc, 'text', { class: 'fv-warn-glyph', x: 7, y: 11, 'text-anchor': 'middle' }, '⚠'));
  return wm;
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

/** What decoration reads: the Nodes by id, what is visible, and what is selected. */
export interface DecorateContext {
  nodes: ReadonlyMap<number, GraphNode>;
  vis: VisibleGraph | null;
  selected: number | null;
  /** A selected Module (its box, stack or cluster is marked). */
  selectedModule: string | null;
}

/** "‖∇‖ = 0.0123" of a Module, or "" before a backward. */
export function gradLine(m: Module): string {
  return m.grad_norm === null ? '' : `‖∇‖ = ${formatNumber(m.grad_norm)}`;
}

/** Accessible name of a module box: "h.0, Block, 44 ops · 7.09M params · 27 MiB, gradient norm 0.5, collapsed" (Enter expands it). */
export function moduleAriaLabel(m: Module): string {
  const parts = [m.path || m.id, m.type ?? 'module', moduleStats(m)];
  if (m.grad_norm !== null) {
    parts.push(`gradient norm ${formatNumber(m.grad_norm)}`);
  }
  return parts.join(', ') + ', collapsed';
}

/**
 * Bar heights (0..1) of a stack's members' parameter-gradient norms: linear, or logarithmic when
 * the largest is over 100× the smallest, so vanishing or exploding gradients across depth show.
 * null for a member without a norm; 1 for a non-finite one.
 *
 *     barHeights([1, 2, 4])       // [0.25, 0.5, 1]
 *     barHeights([1e-4, 1e-2, 1]) // [~0.05, ~0.53, 1] (log scale)
 */
export function barHeights(norms: readonly (number | string | null)[]): { heights: (number | null)[]; log: boolean } {
  const vals = norms.map(v => wireNumber(v));
  const pos = vals.filter((v): v is number => v !== null && Number.isFinite(v) && v > 0);
  const max = pos.length ? Math.max(...pos) : 0;
  const min = pos.length ? Math.min(...pos) : 0;
  const log = min > 0 && max / min > 100;
  const MIN_H = 0.05;
  const heights = vals.map(v => {
    if (v === null) {
      return null;
    }
    if (!Number.isFinite(v)) {
      return 1;
    }
    if (v <= 0 || max === 0) {
      return 0;
    }
    if (log) {
      return MIN_H + ((1 - MIN_H) * Math.log(v / min)) / Math.log(max / min);
    }
    return v / max;
  });
  return { heights, log };
}

/** One bar per member of a stack (a click on bar k expands member k), height ∝ its parameters' ‖∇‖. */
function drawBars(doc: Document, bars: SVGGElement, b: NodeBox, members: readonly Module[]): void {
  const lh = b.fontSize * 1.2;
  const area = STACK_BAR_LINES * lh - 4;
  const base = b.h - 6;
  const n = members.length;
  const slot = Math.min(STACK_BAR_W, (b.w - 16) / n);
  const x0 = (b.w - slot * n) / 2;
  const { heights, log } = barHeights(members.map(m => m.param_grad_norm));
  bars.replaceChildren();
  bars.setAttribute('data-scale', log ? 'log' : 'linear');
  members.forEach((m, k) => {
    const norm = m.param_grad_norm;
    const bg = s(doc, 'g', { class: 'fv-bar', 'data-instance': k, 'data-module-id': m.id });
    bg.appendChild(s(doc, 'title', {}, `${m.path || m.id}: ‖∇ params‖ = ${formatNumber(norm)}`));
    bg.appendChild(s(doc, 'rect', { class: 'fv-bar-slot', x: r2(x0 + k * slot), y: r2(base - area), width: r2(slot), height: r2(area) }));
    const hgt = heights[k];
    if (hgt !== null) {
      const v = wireNumber(norm);
      bg.appendChild(
        s(doc, 'rect', {
          class: v !== null && !Number.isFinite(v) ? 'fv-bar-fill fv-bar-bad' : 'fv-bar-fill',
          x: r2(x0 + k * slot + 0.5),
          y: r2(base - Math.max(1, hgt * area)),
          width: r2(Math.max(1, slot - 1.5)),
          height: r2(Math.max(1, hgt * area))
        })
      );
    }
    bars.appendChild(bg);
  });
}

/** Classes, gradient line or bars, and the warning mark of a module box or stack. */
export function decorateBox(doc: Document, d: DrawnItem, item: VisibleItem, warn: 0 | 1 | 2, selectedModule: string | null): void {
  const mods = item.kind === 'module' ? [item.module] : item.kind === 'stack' ? item.members : [];
  const cls = ['fv-box', `fv-${d.kind}`];
  if (mods.some(m => m.grad_norm !== null)) {
    cls.push('fv-has-grad');
  }
  if (warn) {
    cls.push('fv-nonfinite');
  }
  if (warn === 2) {
    cls.push('fv-first-nonfinite');
  }
  const selected = selectedModule !== null && mods.some(m => m.id === selectedModule);
  if (selected) {
    cls.push('fv-selected');
  }
  d.el.setAttribute('class', cls.join(' '));
  d.el.setAttribute('aria-pressed', selected ? 'true' : 'false');
  const title = d.el.querySelector('title');
  if (item.kind === 'module') {
    const m = item.module;
    const gl = gradLine(m);
    const line = d.el.querySelector('.fv-line-grad');
    if (line) {
      line.textContent = gl;
    }
    d.el.setAttribute('aria-label', moduleAriaLabel(m));
    if (title) {
      title.textContent = `${m.label}\n${moduleStats(m)}${gl ? `\n${gl}` : ''}${warn ? '\n⚠ non-finite gradient inside' : ''}`;
    }
  } else if (item.kind === 'stack') {
    const t = stackTitle(item.members);
    d.el.setAttribute('aria-label', `${t}, stacked`);
    if (title) {
      title.textContent = `${t}\neach ${moduleStats(item.members[0])}`;
    }
    const bars = d.el.querySelector('.fv-bars') as SVGGElement | null;
    if (bars) {
      drawBars(doc, bars, d.box, item.members);
    }
  }
  const marks = d.el.querySelector('.fv-marks') as SVGGElement;
  marks.replaceChildren();
  if (warn) {
    marks.appendChild(warnMark(doc));
  }
}

/** Decorate every drawn item (see ``decorateNode`` and ``decorateBox``); linear in what is drawn. */
export function decorateAll(doc: Document, drawn: DrawnGraph, ctx: DecorateContext): void {
  for (const [id, ng] of drawn.nodeEls) {
    decorateNode(doc, ng, drawn.boxes.get(id)!, ctx.nodes.get(id), ctx.selected);
  }
  // a collapsed box warns when a Node inside it got a non-finite gradient
  const warn = new Map<string, 1 | 2>();
  if (ctx.vis) {
    for (const n of ctx.nodes.values()) {
      if (n.nonfinite || n.first_nonfinite) {
        const key = ctx.vis.nodeItem.get(n.id);
        if (key !== undefined && (warn.get(key) ?? 0) < (n.first_nonfinite ? 2 : 1)) {
          warn.set(key, n.first_nonfinite ? 2 : 1);
        }
      }
    }
  }
  for (const d of drawn.items.values()) {
    const item = d.kind === 'node' ? undefined : ctx.vis?.items.get(d.key);
    if (item) {
      decorateBox(doc, d, item, warn.get(d.key) ?? 0, ctx.selectedModule);
    }
  }
  for (const [id, c] of drawn.clusters) {
    c.el.classList.toggle('fv-selected', id === ctx.selectedModule);
  }
}
