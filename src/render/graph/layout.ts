/**
 * Turn Graphviz `json` output (dot engine) into plain geometry in SVG
 * coordinates (points, y pointing down).
 */

export interface Point {
  x: number;
  y: number;
}

/** What a laid-out box draws: a Node, a collapsed Module, or a stack of repeated Modules. */
export type BoxKind = 'node' | 'module' | 'stack';

export interface NodeBox {
  /** DOT name: ``n<id>`` (a Node), ``m<index>`` (a module box), ``r<repeat>_<start>`` (a stack). */
  name: string;
  /** Model node id parsed from the name (NaN if it is no Node's name). */
  id: number;
  /** What the name says it is (a foreign name counts as a node). */
  kind: BoxKind;
  /** The item's key in the visible graph: its DOT name. */
  key: string;
  cx: number;
  cy: number;
  w: number;
  h: number;
  /** Label lines exactly as Graphviz sized them. */
  lines: string[];
  fontSize: number;
}

export interface EdgePath {
  /** Node ids of the ends (NaN for a module box or stack end). */
  src: number;
  dst: number;
  /** DOT names of the ends. */
  srcKey: string;
  dstKey: string;
  /** SVG path data of the spline. */
  d: string;
  /** Arrowhead polygon points. */
  head: Point[] | null;
  tail: Point[] | null;
  label: string | null;
  labelPos: Point | null;
  fontSize: number;
}

export interface ClusterBox {
  name: string;
  /** The DOT ``id`` attribute (``cluster:<module id>``), or the name. */
  id: string;
  label: string;
  x: number;
  y: number;
  w: number;
  h: number;
  labelPos: Point | null;
  fontSize: number;
  depth: number;
}

export interface Layout {
  width: number;
  height: number;
  nodes: NodeBox[];
  edges: EdgePath[];
  clusters: ClusterBox[];
}

interface XdotOp {
  op: string;
  points?: number[][];
  pt?: number[];
  text?: string;
}

interface GvObject {
  _gvid: number;
  name: string;
  bb?: string;
  pos?: string;
  width?: string;
  height?: string;
  label?: string;
  lp?: string;
  id?: string;
  fontsize?: string;
  subgraphs?: number[];
  nodes?: number[];
  _draw_?: XdotOp[];
  _ldraw_?: XdotOp[];
}

interface GvEdge {
  tail: number;
  head: number;
  label?: string;
  lp?: string;
  fontsize?: string;
  _draw_?: XdotOp[];
  _hdraw_?: XdotOp[];
  _tdraw_?: XdotOp[];
}

interface GvGraph {
  bb: string;
  objects?: GvObject[];
  edges?: GvEdge[];
}

/** Split a DOT label on its escaped line breaks (``\n``, ``\l``, ``\r``) and undo escapes. */
export function splitLabel(label: string): string[] {
  const lines: string[] = [];
  let cur = '';
  for (let i = 0; i < label.length; i++) {
    const c = label[i];
    if (c === '\\' && i + 1 < label.length) {
      const n = label[i + 1];
      i++;
      if (n === 'n' || n === 'l' || n === 'r') {
        lines.push(cur);
        cur = '';
      } else {
        cur += n;
      }
    } else {
      cur += c;
    }
  }
  if (cur !== '' || lines.length === 0) {
    lines.push(cur);
  }
  return lines;
}

/** Kind of a box from its DOT name. */
export function boxKind(name: string): BoxKind {
  return /^m\d+$/.test(name) ? 'module' : /^r\d+_\d+$/.test(name) ? 'stack' : 'node';
}

function nums(s: string | undefined): number[] {
  return s ? s.split(',').map(Number) : [];
}

/** Parse the JSON text (or object) that ``graphviz.layout(dot, "json", "dot")`` returns. */
export function parseLayout(json: string | object): Layout {
  const g = (typeof json === 'string' ? JSON.parse(json) : json) as GvGraph;
  const [x0, y0, x1, y1] = nums(g.bb);
  const fx = (x: number) => x - x0;
  const fy = (y: number) => y1 - y;
  const pt = (p: number[]): Point => ({ x: fx(p[0]), y: fy(p[1]) });
  const objects = g.objects ?? [];
  const byGvid = new Map<number, GvObject>();
  for (const o of objects) {
    byGvid.set(o._gvid, o);
  }

  // Depth of each cluster from the subgraph tree.
  const depth = new Map<number, number>();
  const visit = (gvid: number, d: number) => {
    if (depth.has(gvid)) {
      return;
    }
    depth.set(gvid, d);
    for (const c of byGvid.get(gvid)?.subgraphs ?? []) {
      visit(c, d + 1);
    }
  };
  const childIds = new Set<number>();
  for (const o of objects) {
    for (const c of o.subgraphs ?? []) {
      childIds.add(c);
    }
  }

  const nodes: NodeBox[] = [];
  const clusters: ClusterBox[] = [];
  const clusterGvid = new Map<ClusterBox, number>();
  for (const o of objects) {
    if (o.pos !== undefined && o.width !== undefined) {
      const [x, y] = nums(o.pos);
      const m = /^n(-?\d+)$/.exec(o.name);
      nodes.push({
        name: o.name,
        id: m ? Number(m[1]) : NaN,
        kind: boxKind(o.name),
        key: o.name,
        cx: fx(x),
        cy: fy(y),
        w: Number(o.width) * 72,
        h: Number(o.height) * 72,
        lines: splitLabel(o.label ?? o.name),
        fontSize: Number(o.fontsize ?? 11)
      });
    } else if (o.bb !== undefined && o.name.startsWith('cluster')) {
      if (!childIds.has(o._gvid)) {
        visit(o._gvid, 0);
      }
      const [bx0, by0, bx1, by1] = nums(o.bb);
      const lp = nums(o.lp);
      const box: ClusterBox = {
        name: o.name,
        id: o.id ?? o.name,
        label: splitLabel(o.label ?? '').join(' '),
        x: fx(bx0),
        y: fy(by1),
        w: bx1 - bx0,
        h: by1 - by0,
        labelPos: lp.length === 2 ? pt(lp) : null,
        fontSize: Number(o.fontsize ?? 10),
        depth: 0
      };
      clusters.push(box);
      clusterGvid.set(box, o._gvid);
    }
  }
  for (const c of clusters) {
    c.depth = depth.get(clusterGvid.get(c) ?? -1) ?? 0;
  }
  clusters.sort((a, b) => a.depth - b.depth);

  const polygon = (ops: XdotOp[] | undefined): Point[] | null => {
    const p = ops?.find(o => (o.op === 'P' || o.op === 'p') && o.points);
    return p ? p.points!.map(pt) : null;
  };

  const nodeName = (gvid: number) => byGvid.get(gvid)?.name ?? '';
  const idOf = (gvid: number) => {
    const m = /^n(-?\d+)$/.exec(nodeName(gvid));
    return m ? Number(m[1]) : NaN;
  };

  const edges: EdgePath[] = [];
  for (const e of g.edges ?? []) {
    let d = '';
    for (const op of e._draw_ ?? []) {
      if ((op.op === 'b' || op.op === 'B') && op.points && op.points.length) {
        const p = op.points.map(pt);
        d += `M${r(p[0].x)},${r(p[0].y)}`;
        for (let i = 1; i + 2 < p.length; i += 3) {
          d += `C${r(p[i].x)},${r(p[i].y)} ${r(p[i + 1].x)},${r(p[i + 1].y)} ${r(p[i + 2].x)},${r(p[i + 2].y)}`;
        }
      }
    }
    const lp = nums(e.lp);
    edges.push({
      src: idOf(e.tail),
      dst: idOf(e.head),
      srcKey: nodeName(e.tail),
      dstKey: nodeName(e.head),
      d,
      head: polygon(e._hdraw_),
      tail: polygon(e._tdraw_),
      label: e.label !== undefined && e.label !== '' ? splitLabel(e.label).join(' ') : null,
      labelPos: lp.length === 2 ? pt(lp) : null,
      fontSize: Number(e.fontsize ?? 9)
    });
  }

  return { width: x1 - x0, height: y1 - y0, nodes, edges, clusters };
}

function r(v: number): number {
  return Math.round(v * 100) / 100;
}

/**
 * Lay out DOT through ``engine`` (Graphviz ``json`` output), remembering the last ``size``
 * layouts so that a gradient update of the same graph lays nothing out again.
 */
export function createLayoutCache(engine: (dot: string) => Promise<string>, size: number): (dot: string) => Promise<Layout> {
  const cache = new Map<string, Layout>();
  return async (dot: string) => {
    const hit = cache.get(dot);
    if (hit) {
      cache.delete(dot);
      cache.set(dot, hit);
      return hit;
    }
    const parsed = parseLayout(await engine(dot));
    cache.set(dot, parsed);
    while (cache.size > size) {
      cache.delete(cache.keys().next().value as string);
    }
    return parsed;
  };
}
