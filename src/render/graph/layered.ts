/**
 * A fast layered layout for views too big for Graphviz (dot needs seconds for 1,000 boxes and
 * overflows its stack near 3,000). Each expanded Module is laid out on its own, bottom up, and
 * then placed as one box in its parent, so clusters never overlap. Within one level:
 *
 *   1. layers: the longest path from the inputs, with inputs that feed a single op pulled down
 *      next to it (a parameter sits beside the op that uses it, not at the top of the page);
 *   2. order: four barycentre sweeps (down, up) to untangle crossings;
 *   3. x: each box over the mean of its neighbours, overlaps pushed apart in order;
 *   4. y: one row per layer, as tall as its tallest box.
 *
 * Edges are cubic curves from the bottom of one box to the top of the next, bowed out to the side
 * when they skip layers in a column. No edge labels: the inspector and the edge's title give the
 * shape. Linear in boxes and edges but for the sorts; 10,000 boxes lay out in tens of ms.
 *
 * It runs in the layout worker: forgeviz/static/graphviz.js exports it beside Graphviz.
 *
 *     layeredLayout({children: [{key: 'n1', lines: ['x', 'leaf']}, {key: 'n2', lines: ['MulBackward0']}],
 *                    edges: [{src: 'n1', dst: 'n2', label: '2×3'}]})
 *     // {width: …, height: …, nodes: [{key: 'n1', cx: …, cy: …, …}, …], edges: [one curve], clusters: []}
 */
import type { Layout } from './layout';

/** A box to place: its key (DOT name), label lines, and a fixed width where the label is not the measure. */
export interface LayeredBox {
  key: string;
  lines: string[];
  width?: number;
}

/** An expanded Module: ``id`` becomes the cluster's ``id`` (``cluster:<module id>``). */
export interface LayeredGroup {
  id: string;
  label: string;
  children: LayeredEntry[];
}

export type LayeredEntry = LayeredBox | LayeredGroup;

export interface LayeredInput {
  children: LayeredEntry[];
  edges: { src: string; dst: string; label: string | null }[];
}

/** Lay out ``input``: boxes, curves and cluster rectangles in the same form as Graphviz's (layout.ts). */
export function layeredLayout(input: LayeredInput): Layout {
  // Sizes in points, as Graphviz sizes a rounded box of Helvetica 11 with margin 0.12,0.06.
  const FONT = 11;
  const CHAR_W = 6.3;
  const PAD_X = 8.64;
  const PAD_Y = 4.32;
  const MIN_W = 54;
  const MIN_H = 36;
  const NODE_SEP = 21.6;
  const RANK_SEP = 25.2;
  const CLUSTER_PAD = 8;
  const CLUSTER_HEAD = 24;
  const CLUSTER_FONT = 10;
  const ARROW = 9;

  interface Placed {
    entry: LayeredEntry;
    w: number;
    h: number;
    /** Top left inside the parent group. */
    x: number;
    y: number;
    /** A group's members, laid out. */
    members: Placed[] | null;
  }

  const keyOf = new Map<string, Placed>();
  const parentOf = new Map<Placed, Placed | null>();

  function boxSize(b: LayeredBox): [number, number] {
    let longest = 0;
    for (const l of b.lines) {
      longest = Math.max(longest, l.length);
    }
    const w = b.width ?? Math.max(MIN_W, longest * CHAR_W + 2 * PAD_X);
    const h = Math.max(MIN_H, b.lines.length * FONT * 1.2 + 2 * PAD_Y);
    return [w, h];
  }

  function isGroup(e: LayeredEntry): e is LayeredGroup {
    return (e as LayeredGroup).children !== undefined;
  }

  // Build the tree of placed entries.
  function build(e: LayeredEntry, parent: Placed | null): Placed {
    const p: Placed = { entry: e, w: 0, h: 0, x: 0, y: 0, members: null };
    parentOf.set(p, parent);
    if (isGroup(e)) {
      p.members = e.children.map(c => build(c, p));
    } else {
      [p.w, p.h] = boxSize(e);
      keyOf.set(e.key, p);
    }
    return p;
  }
  const root: Placed = { entry: { id: '', label: '', children: input.children }, w: 0, h: 0, x: 0, y: 0, members: null };
  parentOf.set(root, null);
  root.members = input.children.map(c => build(c, root));

  // Each edge, lifted to the pair of members of the innermost group that holds both ends.
  const depthOf = (p: Placed) => {
    let d = 0;
    for (let q = parentOf.get(p); q; q = parentOf.get(q)) {
      d++;
    }
    return d;
  };
  const edgesIn = new Map<Placed, [Placed, Placed][]>();
  for (const e of input.edges) {
    let a = keyOf.get(e.src);
    let b = keyOf.get(e.dst);
    if (!a || !b || a === b) {
      continue;
    }
    let da = depthOf(a);
    let db = depthOf(b);
    while (da > db) {
      a = parentOf.get(a)!;
      da--;
    }
    while (db > da) {
      b = parentOf.get(b)!;
      db--;
    }
    while (parentOf.get(a) !== parentOf.get(b)) {
      a = parentOf.get(a)!;
      b = parentOf.get(b)!;
    }
    if (a === b) {
      continue;
    }
    const g = parentOf.get(a)!;
    let list = edgesIn.get(g);
    if (!list) {
      edgesIn.set(g, (list = []));
    }
    list.push([a, b]);
  }

  /** Adjacency in compressed rows: ``targets[offsets[v] .. offsets[v + 1])`` are v's neighbours. */
  function compressed(n: number, from: Int32Array, to: Int32Array, m: number): [Int32Array, Int32Array] {
    const offsets = new Int32Array(n + 1);
    for (let k = 0; k < m; k++) {
      offsets[from[k] + 1]++;
    }
    for (let v = 0; v < n; v++) {
      offsets[v + 1] += offsets[v];
    }
    const fill = offsets.slice(0, n);
    const targets = new Int32Array(m);
    for (let k = 0; k < m; k++) {
      targets[fill[from[k]]++] = to[k];
    }
    return [offsets, targets];
  }

  /** Lay out one group's members (already sized) and size the group. Flat typed arrays: a
   * 10,000-box level must not make 10,000 little arrays for the collector. */
  function layoutGroup(group: Placed): void {
    const ms = group.members!;
    const n = ms.length;
    const index = new Map<Placed, number>();
    ms.forEach((m, i) => index.set(m, i));
    const lifted = edgesIn.get(group) ?? [];
    const eu = new Int32Array(lifted.length);
    const ev = new Int32Array(lifted.length);
    let m = 0;
    const seen = new Set<number>();
    for (const [a, b] of lifted) {
      const u = index.get(a)!;
      const v = index.get(b)!;
      if (!seen.has(u * n + v)) {
        seen.add(u * n + v);
        eu[m] = u;
        ev[m++] = v;
      }
    }

    // 1. Break cycles (a module called twice can make one between boxes): drop DFS back edges.
    const [outOff, outEdge] = compressed(n, eu, new Int32Array(m).map((_, k) => k), m);
    const back = new Uint8Array(m);
    const state = new Uint8Array(n);
    const stackV = new Int32Array(n);
    const stackI = new Int32Array(n);
    for (let s = 0; s < n; s++) {
      if (state[s]) {
        continue;
      }
      let sp = 0;
      stackV[0] = s;
      stackI[0] = outOff[s];
      state[s] = 1;
      while (sp >= 0) {
        const v = stackV[sp];
        if (stackI[sp] < outOff[v + 1]) {
          const k = outEdge[stackI[sp]++];
          const w = ev[k];
          if (state[w] === 1) {
            back[k] = 1;
          } else if (!state[w]) {
            state[w] = 1;
            sp++;
            stackV[sp] = w;
            stackI[sp] = outOff[w];
          }
        } else {
          state[v] = 2;
          sp--;
        }
      }
    }
    const du = new Int32Array(m);
    const dv = new Int32Array(m);
    let dm = 0;
    for (let k = 0; k < m; k++) {
      if (!back[k]) {
        du[dm] = eu[k];
        dv[dm++] = ev[k];
      }
    }
    const [succOff, succ] = compressed(n, du, dv, dm);
    const [predOff, pred] = compressed(n, dv, du, dm);

    // Topological order, in input order where free.
    const indeg = new Int32Array(n);
    for (let v = 0; v < n; v++) {
      indeg[v] = predOff[v + 1] - predOff[v];
    }
    const topo = new Int32Array(n);
    let tn = 0;
    for (let v = 0; v < n; v++) {
      if (!indeg[v]) {
        topo[tn++] = v;
      }
    }
    for (let qi = 0; qi < tn; qi++) {
      const v = topo[qi];
      for (let p = succOff[v]; p < succOff[v + 1]; p++) {
        if (!--indeg[succ[p]]) {
          topo[tn++] = succ[p];
        }
      }
    }

    // 2. Layers: longest path, then inputs pulled down to just above their first consumer.
    const layer = new Int32Array(n);
    for (let i = 0; i < n; i++) {
      const v = topo[i];
      for (let p = succOff[v]; p < succOff[v + 1]; p++) {
        layer[succ[p]] = Math.max(layer[succ[p]], layer[v] + 1);
      }
    }
    for (let i = n - 1; i >= 0; i--) {
      const v = topo[i];
      if (predOff[v + 1] === predOff[v] && succOff[v + 1] > succOff[v]) {
        let lo = Infinity;
        for (let p = succOff[v]; p < succOff[v + 1]; p++) {
          lo = Math.min(lo, layer[succ[p]]);
        }
        layer[v] = lo - 1;
      }
    }
    let top = 0;
    let bottom = 0;
    for (let v = 0; v < n; v++) {
      top = Math.min(top, layer[v]);
      bottom = Math.max(bottom, layer[v]);
    }
    // rows: the members of layer r are row[rowOff[r] .. rowOff[r + 1]), in topological order
    const rowCount = n ? bottom - top + 1 : 0;
    const rowOff = new Int32Array(rowCount + 1);
    for (let v = 0; v < n; v++) {
      rowOff[layer[v] - top + 1]++;
    }
    for (let r = 0; r < rowCount; r++) {
      rowOff[r + 1] += rowOff[r];
    }
    const rowFill = rowOff.slice(0, rowCount);
    const row = new Int32Array(n);
    for (let i = 0; i < n; i++) {
      const v = topo[i];
      row[rowFill[layer[v] - top]++] = v;
    }

    // 3. Order: barycentre sweeps on centred positions.
    const pos = new Float64Array(n);
    const key = new Float64Array(n);
    const setPos = (r: number) => {
      const a = rowOff[r];
      const half = (rowOff[r + 1] - a - 1) / 2;
      for (let i = a; i < rowOff[r + 1]; i++) {
        pos[row[i]] = i - a - half;
      }
    };
    for (let r = 0; r < rowCount; r++) {
      setPos(r);
    }
    const sweep = (r: number, off: Int32Array, nbrs: Int32Array) => {
      const a = rowOff[r];
      const b = rowOff[r + 1];
      if (b - a < 2) {
        return;
      }
      for (let i = a; i < b; i++) {
        const v = row[i];
        const deg = off[v + 1] - off[v];
        let sum = 0;
        for (let p = off[v]; p < off[v + 1]; p++) {
          sum += pos[nbrs[p]];
        }
        key[v] = deg ? sum / deg : pos[v];
      }
      row.subarray(a, b).sort((x, y) => key[x] - key[y] || x - y);
      setPos(r);
    };
    for (let it = 0; it < 4; it++) {
      for (let r = 1; r < rowCount; r++) {
        sweep(r, predOff, pred);
      }
      for (let r = rowCount - 2; r >= 0; r--) {
        sweep(r, succOff, succ);
      }
    }

    // 4. x: centre of each member, pulled over its neighbours, overlaps pushed apart in order.
    const cx = new Float64Array(n);
    for (let r = 0; r < rowCount; r++) {
      let x = 0;
      for (let i = rowOff[r]; i < rowOff[r + 1]; i++) {
        cx[row[i]] = x + ms[row[i]].w / 2;
        x += ms[row[i]].w + NODE_SEP;
      }
      for (let i = rowOff[r]; i < rowOff[r + 1]; i++) {
        cx[row[i]] -= x / 2;
      }
    }
    const place = (r: number, off: Int32Array, nbrs: Int32Array) => {
      let right = -Infinity;
      let drift = 0;
      for (let i = rowOff[r]; i < rowOff[r + 1]; i++) {
        const v = row[i];
        let want = cx[v];
        if (off[v + 1] > off[v]) {
          let sum = 0;
          for (let p = off[v]; p < off[v + 1]; p++) {
            sum += cx[nbrs[p]];
          }
          want = sum / (off[v + 1] - off[v]);
        }
        const x = Math.max(want, right + NODE_SEP + ms[v].w / 2);
        cx[v] = x;
        right = x + ms[v].w / 2;
        drift += want - x;
      }
      drift /= rowOff[r + 1] - rowOff[r] || 1;
      for (let i = rowOff[r]; i < rowOff[r + 1]; i++) {
        cx[row[i]] += drift;
      }
    };
    for (let it = 0; it < 2; it++) {
      for (let r = 1; r < rowCount; r++) {
        place(r, predOff, pred);
      }
      for (let r = rowCount - 2; r >= 0; r--) {
        place(r, succOff, succ);
      }
    }
    for (let r = 1; r < rowCount; r++) {
      place(r, predOff, pred);
    }

    // 5. y: one row per layer.
    let y = 0;
    let minX = Infinity;
    let maxX = -Infinity;
    for (let r = 0; r < rowCount; r++) {
      let hh = 0;
      for (let i = rowOff[r]; i < rowOff[r + 1]; i++) {
        hh = Math.max(hh, ms[row[i]].h);
      }
      for (let i = rowOff[r]; i < rowOff[r + 1]; i++) {
        const v = row[i];
        ms[v].y = y + (hh - ms[v].h) / 2;
        minX = Math.min(minX, cx[v] - ms[v].w / 2);
        maxX = Math.max(maxX, cx[v] + ms[v].w / 2);
      }
      if (rowOff[r + 1] > rowOff[r]) {
        y += hh + RANK_SEP;
      }
    }
    if (!n) {
      minX = maxX = 0;
      y = RANK_SEP;
    }
    const isCluster = group !== root;
    const padX = isCluster ? CLUSTER_PAD : 0;
    const padTop = isCluster ? CLUSTER_HEAD : 0;
    for (let v = 0; v < n; v++) {
      ms[v].x = cx[v] - ms[v].w / 2 - minX + padX;
      ms[v].y += padTop;
    }
    const labelW = isCluster ? (group.entry as LayeredGroup).label.length * CLUSTER_FONT * 0.56 + 2 * CLUSTER_PAD : 0;
    group.w = Math.max(maxX - minX + 2 * padX, labelW);
    group.h = y - RANK_SEP + padTop + (isCluster ? CLUSTER_PAD : 0);
    if (isCluster && labelW > maxX - minX + 2 * padX) {
      const extra = (labelW - (maxX - minX + 2 * padX)) / 2;
      for (const m of ms) {
        m.x += extra;
      }
    }
  }

  // Bottom up: a group is laid out once its member groups are sized.
  const order: Placed[] = [];
  const collect = (p: Placed) => {
    for (const m of p.members ?? []) {
      if (m.members) {
        collect(m);
      }
    }
    order.push(p);
  };
  collect(root);
  for (const g of order) {
    layoutGroup(g);
  }

  // Top down: absolute positions.
  const out: Layout = { width: root.w, height: root.h, nodes: [], edges: [], clusters: [] };
  const abs = new Map<Placed, { x: number; y: number }>();
  const emit = (p: Placed, ox: number, oy: number, depth: number) => {
    for (const m of p.members!) {
      const x = ox + m.x;
      const y = oy + m.y;
      abs.set(m, { x, y });
      if (m.members) {
        const g = m.entry as LayeredGroup;
        const lw = g.label.length * CLUSTER_FONT * 0.56;
        out.clusters.push({
          name: `cluster_${out.clusters.length}`,
          id: g.id,
          label: g.label,
          x,
          y,
          w: m.w,
          h: m.h,
          labelPos: { x: x + CLUSTER_PAD + lw / 2, y: y + CLUSTER_HEAD / 2 + 1 },
          fontSize: CLUSTER_FONT,
          depth
        });
        emit(m, x, y, depth + 1);
      } else {
        const b = m.entry as LayeredBox;
        const id = /^n(-?\d+)$/.exec(b.key);
        out.nodes.push({
          name: b.key,
          id: id ? Number(id[1]) : NaN,
          kind: /^m\d+$/.test(b.key) ? 'module' : /^r\d+_\d+$/.test(b.key) ? 'stack' : 'node',
          key: b.key,
          cx: x + m.w / 2,
          cy: y + m.h / 2,
          w: m.w,
          h: m.h,
          lines: b.lines,
          fontSize: FONT
        });
      }
    }
  };
  emit(root, 0, 0, 0);
  out.clusters.sort((a, b) => a.depth - b.depth);

  // Edges: bottom of the source to the top of the destination.
  const round = (v: number) => Math.round(v * 100) / 100;
  for (const e of input.edges) {
    const a = keyOf.get(e.src);
    const b = keyOf.get(e.dst);
    if (!a || !b || a === b) {
      continue;
    }
    const pa = abs.get(a)!;
    const pb = abs.get(b)!;
    const x1 = pa.x + a.w / 2;
    const y1 = pa.y + a.h;
    const x2 = pb.x + b.w / 2;
    const tipY = pb.y;
    const span = tipY - y1;
    // a skip down one column would run through the boxes between: bow it out to the right
    const bow = Math.abs(x2 - x1) < 4 && span > 2 * RANK_SEP + MIN_H ? Math.min(160, 24 + span * 0.06) : 0;
    const reach = Math.max(RANK_SEP, Math.abs(span) / 3);
    const c1 = { x: x1 + bow, y: y1 + reach };
    const c2 = { x: x2 + bow, y: tipY - reach };
    // the curve ends where the arrowhead starts, along the last tangent
    let dx = x2 - c2.x;
    let dy = tipY - c2.y;
    const len = Math.hypot(dx, dy) || 1;
    dx /= len;
    dy /= len;
    const end = { x: x2 - dx * ARROW, y: tipY - dy * ARROW };
    const d = `M${round(x1)},${round(y1)}C${round(c1.x)},${round(c1.y)} ${round(c2.x)},${round(c2.y)} ${round(end.x)},${round(end.y)}`;
    const head = [
      { x: x2, y: tipY },
      { x: end.x - dy * 3.5, y: end.y + dx * 3.5 },
      { x: end.x + dy * 3.5, y: end.y - dx * 3.5 }
    ];
    out.edges.push({
      src: /^n-?\d+$/.test(e.src) ? Number(e.src.slice(1)) : NaN,
      dst: /^n-?\d+$/.test(e.dst) ? Number(e.dst.slice(1)) : NaN,
      srcKey: e.src,
      dstKey: e.dst,
      d,
      head,
      tail: null,
      label: e.label,
      labelPos: null,
      fontSize: 9
    });
  }
  return out;
}

/** A Layout as the layout worker sends it: numbers in typed arrays (moved, not copied), text joined. */
export interface PackedLayout {
  width: number;
  height: number;
  /** Box keys, one per line, in ``geometry`` order. */
  keys: string;
  /** cx, cy, w, h of each box. */
  geometry: Float64Array;
  /** Each edge's path, one per line. */
  paths: string;
  /** "src dst" keys of each edge, one per line. */
  ends: string;
  /** The three arrowhead points of each edge: x, y × 3. */
  heads: Float64Array;
  clusters: Layout['clusters'];
}

/**
 * Pack a Layout for postMessage (the layout worker's answer).
 * A 10,000-box layout is a few strings and two arrays, not 20,000 objects to clone.
 *
 *     const packed = packLayout(layeredLayout(input));   // postMessage(packed, [packed.geometry.buffer, …])
 */
export function packLayout(layout: Layout): PackedLayout {
  const geometry = new Float64Array(layout.nodes.length * 4);
  layout.nodes.forEach((b, i) => geometry.set([b.cx, b.cy, b.w, b.h], i * 4));
  const heads = new Float64Array(layout.edges.length * 6);
  layout.edges.forEach((e, i) => (e.head ?? []).forEach((p, j) => heads.set([p.x, p.y], i * 6 + j * 2)));
  return {
    width: layout.width,
    height: layout.height,
    keys: layout.nodes.map(b => b.key).join('\n'),
    geometry,
    paths: layout.edges.map(e => e.d).join('\n'),
    ends: layout.edges.map(e => `${e.srcKey} ${e.dstKey}`).join('\n'),
    heads,
    clusters: layout.clusters
  };
}

/**
 * The Layout of ``packed``, with the label lines and edge labels of ``input`` (what was laid out):
 * ``unpackLayout(packLayout(layeredLayout(input)), input)`` equals ``layeredLayout(input)``.
 */
export function unpackLayout(packed: PackedLayout, input: LayeredInput): Layout {
  const lines = new Map<string, string[]>();
  const walk = (entries: LayeredEntry[]) => {
    for (const e of entries) {
      if ('children' in e) {
        walk(e.children);
      } else {
        lines.set(e.key, e.lines);
      }
    }
  };
  walk(input.children);
  const labels = new Map(input.edges.map(e => [`${e.src} ${e.dst}`, e.label]));
  const idOf = (key: string) => (/^n-?\d+$/.test(key) ? Number(key.slice(1)) : NaN);
  const g = packed.geometry;
  const nodes: Layout['nodes'] = packed.keys
    ? packed.keys.split('\n').map((key, i) => ({
        name: key,
        id: idOf(key),
        kind: /^m\d+$/.test(key) ? 'module' : /^r\d+_\d+$/.test(key) ? 'stack' : 'node',
        key,
        cx: g[i * 4],
        cy: g[i * 4 + 1],
        w: g[i * 4 + 2],
        h: g[i * 4 + 3],
        lines: lines.get(key) ?? [key],
        fontSize: 11
      }))
    : [];
  const paths = packed.paths ? packed.paths.split('\n') : [];
  const hd = packed.heads;
  const edges: Layout['edges'] = packed.ends
    ? packed.ends.split('\n').map((ends, i) => {
        const [src, dst] = ends.split(' ');
        return {
          src: idOf(src),
          dst: idOf(dst),
          srcKey: src,
          dstKey: dst,
          d: paths[i],
          head: [0, 1, 2].map(j => ({ x: hd[i * 6 + j * 2], y: hd[i * 6 + j * 2 + 1] })),
          tail: null,
          label: labels.get(ends) ?? null,
          labelPos: null,
          fontSize: 9
        };
      })
    : [];
  return { width: packed.width, height: packed.height, nodes, edges, clusters: packed.clusters };
}
