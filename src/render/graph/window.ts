/**
 * Drawing a big view (thousands of boxes) so that it still pans at 60 fps: only the items inside
 * the visible window, plus a margin, are SVG groups of their own (with their text, badges, hooks
 * and focus); everything else is an overview of a few plain paths, one per band of the drawing
 * and kind of box, that the browser skips when the band is off-screen. Edges are overview paths
 * too. A pan or zoom that settles moves the window: items that come into it are drawn, items that
 * leave are dropped, and the bands they were in are redrawn without them. When the window holds
 * more than ``MAX_WINDOW_ITEMS`` boxes, or the zoom is below ``READABLE_SCALE`` (no label could
 * be read), only the overview shows.
 *
 *     const drawn = drawWindowed(doc, layout, vis);  // a DrawnGraph with .window
 *     drawn.window.update({x0: 0, y0: 0, x1: 800, y1: 500})   // the items there are now groups
 */
import { s } from '../common/dom';
import { drawClusters, type DrawnCluster, type DrawnGraph, type DrawnItem, drawItem, type DrawWindow, type Rect } from './draw';
import type { VisibleGraph } from './fold';
import type { Layout, NodeBox } from './layout';

/** Past this many boxes a view is laid out by layered.ts (not Graphviz) and drawn windowed. */
export const BIG_VIEW_ITEMS = 1200;
/** The most items drawn as groups at once; a wider window shows the overview alone. */
export const MAX_WINDOW_ITEMS = 600;
/** Below this zoom (a label under ~3 px) no item is drawn as a group: the overview says it all. */
export const READABLE_SCALE = 0.3;
/** Height of one overview band, in graph units. */
const BAND = 3000;

/** How an overview rectangle is coloured: by what the box stands for. */
function overviewKind(b: NodeBox, vis: VisibleGraph | null): 'leaf' | 'op' | 'box' {
  if (b.kind !== 'node') {
    return 'box';
  }
  const item = vis?.items.get(b.key);
  return item?.kind === 'node' && item.node.kind === 'leaf' ? 'leaf' : 'op';
}

const r1 = (v: number) => Math.round(v * 10) / 10;

/**
 * Draw ``lay`` for a big view: clusters, overview edges and boxes, and a group for each item in
 * the window (none until the first ``update``). ``decorate`` (everything drawn) runs after an
 * ``ensure`` draws an item; after an ``update`` that added items the caller runs it.
 */
export function drawWindowed(doc: Document, lay: Layout, vis: VisibleGraph | null, decorate: () => void): DrawnGraph & { window: DrawWindow } {
  const g = s(doc, 'g', { class: 'fv-graph fv-windowed' }) as SVGGElement;
  const clusterEls = new Map<string, DrawnCluster>();
  const clusters = drawClusters(doc, lay, vis, clusterEls);
  const bands = Math.max(1, Math.ceil(lay.height / BAND) + 1);
  const bandOf = (y: number) => Math.min(bands - 1, Math.max(0, Math.floor(y / BAND)));

  // edges: one path of curves and one of arrowheads per band of their start
  const edgeD: string[][] = Array.from({ length: bands }, () => []);
  const headD: string[][] = Array.from({ length: bands }, () => []);
  for (const e of lay.edges) {
    // the band of the curve's start: "M<x>,<y>…"
    const band = bandOf(parseFloat(e.d.slice(e.d.indexOf(',') + 1)) || 0);
    edgeD[band].push(e.d);
    const h = e.head;
    if (h && h.length === 3) {
      headD[band].push(`M${r1(h[0].x)},${r1(h[0].y)}L${r1(h[1].x)},${r1(h[1].y)}L${r1(h[2].x)},${r1(h[2].y)}Z`);
    }
  }
  const edges = s(doc, 'g', { class: 'fv-edges fv-overview-edges' });
  for (let i = 0; i < bands; i++) {
    if (edgeD[i].length) {
      edges.appendChild(s(doc, 'path', { class: 'fv-edge-path', d: edgeD[i].join('') }));
    }
    if (headD[i].length) {
      edges.appendChild(s(doc, 'path', { class: 'fv-edge-head', d: headD[i].join('') }));
    }
  }

  // boxes: sorted by centre y for window queries; the overview draws those not drawn as groups
  const sorted = [...lay.nodes].sort((a, b) => a.cy - b.cy);
  let tallest = 0;
  for (const b of sorted) {
    tallest = Math.max(tallest, b.h);
  }
  const kinds = sorted.map(b => overviewKind(b, vis));
  const bandItems: number[][] = Array.from({ length: bands }, () => []);
  sorted.forEach((b, i) => bandItems[bandOf(b.cy)].push(i));
  const overview = s(doc, 'g', { class: 'fv-overview', 'aria-hidden': 'true' });
  const bandEls: (SVGGElement | null)[] = Array(bands).fill(null);
  const nodes = s(doc, 'g', { class: 'fv-nodes' });

  const items = new Map<string, DrawnItem>();
  const nodeEls = new Map<number, SVGGElement>();
  const boxes = new Map<number, NodeBox>();
  const itemBoxes = new Map<string, NodeBox>();
  for (const b of lay.nodes) {
    itemBoxes.set(b.key, b);
    if (!Number.isNaN(b.id)) {
      boxes.set(b.id, b);
    }
  }

  function drawBand(band: number) {
    const d: Record<'leaf' | 'op' | 'box', string[]> = { leaf: [], op: [], box: [] };
    for (const i of bandItems[band]) {
      const b = sorted[i];
      if (!items.has(b.key)) {
        d[kinds[i]].push(`M${r1(b.cx - b.w / 2)},${r1(b.cy - b.h / 2)}h${r1(b.w)}v${r1(b.h)}h${r1(-b.w)}z`);
      }
    }
    const el = s(doc, 'g', { class: 'fv-overview-band', 'data-band': band }) as SVGGElement;
    for (const kind of ['leaf', 'op', 'box'] as const) {
      if (d[kind].length) {
        el.appendChild(s(doc, 'path', { class: `fv-overview-${kind}`, d: d[kind].join('') }));
      }
    }
    const old = bandEls[band];
    if (old) {
      old.replaceWith(el);
    } else {
      overview.appendChild(el);
    }
    bandEls[band] = el;
  }
  for (let i = 0; i < bands; i++) {
    drawBand(i);
  }

  function add(b: NodeBox): DrawnItem {
    const el = drawItem(doc, b, vis?.items.get(b.key));
    const d: DrawnItem = { key: b.key, kind: b.kind, el, box: b };
    items.set(b.key, d);
    if (!Number.isNaN(b.id)) {
      nodeEls.set(b.id, el);
    }
    nodes.appendChild(el);
    return d;
  }
  function drop(d: DrawnItem) {
    items.delete(d.key);
    if (!Number.isNaN(d.box.id)) {
      nodeEls.delete(d.box.id);
    }
    d.el.remove();
  }

  /** First index of ``sorted`` whose centre is at or below ``y``. */
  function lowerBound(y: number): number {
    let lo = 0;
    let hi = sorted.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (sorted[mid].cy < y) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return lo;
  }

  /** The items whose boxes meet ``r`` (at most ``limit + 1``: more means too many). */
  function within(r: Rect, limit: number): NodeBox[] {
    const out: NodeBox[] = [];
    for (let i = lowerBound(r.y0 - tallest / 2); i < sorted.length && sorted[i].cy - tallest / 2 <= r.y1; i++) {
      const b = sorted[i];
      if (b.cy + b.h / 2 >= r.y0 && b.cy - b.h / 2 <= r.y1 && b.cx + b.w / 2 >= r.x0 && b.cx - b.w / 2 <= r.x1) {
        out.push(b);
        if (out.length > limit) {
          break;
        }
      }
    }
    return out;
  }

  const window: DrawWindow = {
    update(r) {
      const inside = r ? within(r, MAX_WINDOW_ITEMS) : [];
      const want = inside.length > MAX_WINDOW_ITEMS ? [] : inside;
      const keep = new Set(want.map(b => b.key));
      const touched = new Set<number>();
      const focused = doc.activeElement;
      for (const d of [...items.values()]) {
        if (!keep.has(d.key) && !(focused && d.el.contains(focused))) {
          drop(d);
          touched.add(bandOf(d.box.cy));
        }
      }
      let added = false;
      for (const b of want) {
        if (!items.has(b.key)) {
          add(b);
          touched.add(bandOf(b.cy));
          added = true;
        }
      }
      touched.forEach(drawBand);
      return added;
    },
    ensure(key) {
      const have = items.get(key);
      const b = itemBoxes.get(key);
      if (have || !b) {
        return have;
      }
      const d = add(b);
      drawBand(bandOf(b.cy));
      decorate();
      return d;
    },
    hit(x, y) {
      const near = within({ x0: x, y0: y, x1: x, y1: y }, 4);
      return near[0] ?? null;
    }
  };

  g.append(clusters, edges, overview, nodes);
  return { g, nodeEls, boxes, items, itemBoxes, clusters: clusterEls, window };
}
