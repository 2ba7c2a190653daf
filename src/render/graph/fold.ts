/**
 * Folding the autograd graph by module: which Nodes, module boxes and repeat stacks are visible
 * for a set of expanded Modules, and the edges between them. Pure data, no DOM.
 *
 * A collapsed Module is one box; an expanded one is a cluster around its visible children. Runs
 * of consecutive collapsed members of a Repeat (``h.0 … h.11``) are drawn as one stack, so
 * expanding member k of a stack of n leaves a stack of the k before it, member k as a cluster,
 * and a stack of the ones after it; collapsing k again re-forms the one stack.
 *
 *     const ix = indexGraph(graph);
 *     const vis = foldGraph(ix, defaultExpanded(ix));   // GPT-2: ~10 items, one "× 12" stack
 *     vis.edges[0]                                      // {src: 'n7', dst: 'r0_0', count: 2, ...}
 */
import type { Edge, Graph, Module, Node, Repeat } from '../../model/wire';

/** Graphs with at most this many Nodes open fully expanded (every module a cluster). */
export const SMALL_GRAPH_NODES = 50;
/** Auto-expansion of pure containers stops before the first view has more items than this. */
export const FIRST_VIEW_ITEMS = 40;

/** Lookups over one Graph, built once per structure. */
export interface FoldIndex {
  graph: Graph;
  nodeById: Map<number, Node>;
  moduleById: Map<string, Module>;
  /** Position of each Module in ``graph.modules`` (its DOT name is ``m<index>``). */
  moduleIndex: Map<string, number>;
  /** Child Modules by parent id (null: the roots), in ``named_modules()`` order. */
  children: Map<string | null, Module[]>;
  /** The Module that lists each Node directly. */
  nodeModule: Map<number, string>;
  /** Each Repeat member's repeat, the repeat's index and the member's position in it. */
  repeatOf: Map<string, { repeat: Repeat; index: number; pos: number }>;
  /** 0 for a root Module. */
  depth: Map<string, number>;
  /** Nodes that no Module lists: drawn at the top level. */
  topNodes: Node[];
}

export type VisibleItem =
  | { kind: 'node'; key: string; node: Node }
  | { kind: 'module'; key: string; module: Module }
  | { kind: 'stack'; key: string; repeat: Repeat; members: Module[]; start: number };

/** An expanded Module: a cluster around its visible children. */
export interface VisibleCluster {
  kind: 'cluster';
  module: Module;
  children: VisibleEntry[];
}

export type VisibleEntry = VisibleItem | VisibleCluster;

/** One drawn edge: every wire edge between the same two visible items, in the forward direction. */
export interface VisibleEdge {
  src: string;
  dst: string;
  /** Wire edges folded into this one. */
  count: number;
  /** The first wire edge's shape, e.g. "2×32×768" (with its dtype unless float32). */
  label: string | null;
  first: Edge;
}

export interface VisibleGraph {
  /** The top level, in drawing order. */
  children: VisibleEntry[];
  /** Every visible item by key (its DOT name). */
  items: Map<string, VisibleItem>;
  /** Every expanded (drawn as a cluster) Module by id. */
  clusters: Map<string, VisibleCluster>;
  edges: VisibleEdge[];
  /** The key of the item each Node is drawn as or inside. */
  nodeItem: Map<number, string>;
  /** The key of the item each collapsed Module is drawn as or inside; absent for a cluster. */
  moduleItem: Map<string, string>;
  /** Visible Nodes, module boxes and stacks (clusters are not counted). */
  itemCount: number;
  /** Visible items that are Nodes. */
  nodeCount: number;
}

/** DOT name of a Node: ``n<id>``. */
export const nodeKey = (id: number) => `n${id}`;

/** Build the lookups ``foldGraph`` needs. */
export function indexGraph(graph: Graph): FoldIndex {
  const nodeById = new Map(graph.nodes.map(n => [n.id, n] as [number, Node]));
  const moduleById = new Map<string, Module>();
  const moduleIndex = new Map<string, number>();
  const children = new Map<string | null, Module[]>();
  const nodeModule = new Map<number, string>();
  const depth = new Map<string, number>();
  graph.modules.forEach((m, i) => {
    moduleById.set(m.id, m);
    moduleIndex.set(m.id, i);
  });
  for (const m of graph.modules) {
    // a parent the graph does not list makes a root
    const parent = m.parent !== null && moduleById.has(m.parent) ? m.parent : null;
    let list = children.get(parent);
    if (!list) {
      children.set(parent, (list = []));
    }
    list.push(m);
    // named_modules() order: a parent comes before its children
    depth.set(m.id, parent === null ? 0 : (depth.get(parent) ?? 0) + 1);
    for (const id of m.nodes) {
      if (nodeById.has(id)) {
        nodeModule.set(id, m.id);
      }
    }
  }
  const repeatOf = new Map<string, { repeat: Repeat; index: number; pos: number }>();
  graph.repeats.forEach((repeat, index) => repeat.members.forEach((id, pos) => repeatOf.set(id, { repeat, index, pos })));
  const topNodes = graph.nodes.filter(n => !nodeModule.has(n.id));
  return { graph, nodeById, moduleById, moduleIndex, children, nodeModule, repeatOf, depth, topNodes };
}

/** Edge label from its tensor's metadata: "2×32×768", "64 int64", "scalar". */
export function edgeLabel(e: Edge): string | null {
  if (!e.meta) {
    return null;
  }
  const dtype = e.meta.dtype.replace(/^torch\./, '');
  const shape = e.meta.shape.length ? e.meta.shape.join('×') : 'scalar';
  return dtype === 'float32' ? shape : `${shape} ${dtype}`;
}

/** The visible graph for ``expanded`` (Module ids drawn as clusters). */
export function foldGraph(ix: FoldIndex, expanded: ReadonlySet<string>): VisibleGraph {
  const items = new Map<string, VisibleItem>();
  const clusters = new Map<string, VisibleCluster>();
  const moduleItem = new Map<string, string>();
  let nodeCount = 0;

  /** ``m`` and everything inside it is drawn as ``key``. */
  const fold = (m: Module, key: string) => {
    moduleItem.set(m.id, key);
    for (const c of ix.children.get(m.id) ?? []) {
      fold(c, key);
    }
  };
  const add = (out: VisibleEntry[], item: VisibleItem) => {
    items.set(item.key, item);
    out.push(item);
  };

  const container = (parent: string | null, nodes: readonly Node[]): VisibleEntry[] => {
    const out: VisibleEntry[] = [];
    for (const n of nodes) {
      add(out, { kind: 'node', key: nodeKey(n.id), node: n });
      nodeCount++;
    }
    let run: Module[] = [];
    let runOf: { repeat: Repeat; index: number; pos: number } | null = null;
    const flush = () => {
      if (run.length === 1) {
        const m = run[0];
        const key = `m${ix.moduleIndex.get(m.id)}`;
        add(out, { kind: 'module', key, module: m });
        fold(m, key);
      } else if (run.length > 1 && runOf) {
        const start = runOf.pos - run.length + 1;
        const key = `r${runOf.index}_${start}`;
        add(out, { kind: 'stack', key, repeat: runOf.repeat, members: run, start });
        run.forEach(m => fold(m, key));
      }
      run = [];
      runOf = null;
    };
    for (const m of ix.children.get(parent) ?? []) {
      const rep = ix.repeatOf.get(m.id);
      if (expanded.has(m.id)) {
        flush();
        const cluster: VisibleCluster = { kind: 'cluster', module: m, children: [] };
        clusters.set(m.id, cluster);
        out.push(cluster);
        cluster.children = container(m.id, m.nodes.map(id => ix.nodeById.get(id)).filter((n): n is Node => !!n));
        continue;
      }
      if (!rep || !runOf || rep.index !== runOf.index || rep.pos !== runOf.pos + 1) {
        flush();
      }
      run.push(m);
      runOf = rep ?? null;
      if (!rep) {
        flush();
      }
    }
    flush();
    return out;
  };

  const children = container(null, ix.topNodes);
  const nodeItem = new Map<number, string>();
  for (const n of ix.graph.nodes) {
    const mod = ix.nodeModule.get(n.id);
    nodeItem.set(n.id, (mod !== undefined && moduleItem.get(mod)) || nodeKey(n.id));
  }

  const byPair = new Map<string, VisibleEdge>();
  const edges: VisibleEdge[] = [];
  for (const e of ix.graph.edges) {
    const src = nodeItem.get(e.src);
    const dst = nodeItem.get(e.dst);
    if (src === undefined || dst === undefined || src === dst) {
      continue;
    }
    const pair = `${src}>${dst}`;
    const seen = byPair.get(pair);
    if (seen) {
      seen.count++;
    } else {
      const ve: VisibleEdge = { src, dst, count: 1, label: edgeLabel(e), first: e };
      byPair.set(pair, ve);
      edges.push(ve);
    }
  }
  return { children, items, clusters, edges, nodeItem, moduleItem, itemCount: items.size, nodeCount };
}

function hasDirectOps(ix: FoldIndex, m: Module): boolean {
  return m.nodes.some(id => ix.nodeById.get(id)?.kind === 'op');
}

/** Every Module id. */
export function allModules(ix: FoldIndex): Set<string> {
  return new Set(ix.graph.modules.map(m => m.id));
}

/** Modules shallower than ``depth`` (1: the roots only). */
export function expandedToDepth(ix: FoldIndex, depth: number): Set<string> {
  return new Set(ix.graph.modules.filter(m => (ix.depth.get(m.id) ?? 0) < depth).map(m => m.id));
}

/**
 * The first view: a small graph (≤ 50 Nodes) fully expanded; a larger one with its root Modules
 * expanded (those that fit in ``maxItems``: a 10,000-step loop's box stays one box), then pure
 * containers (no op Nodes of their own: ModuleList, Sequential) expanded while the view keeps at
 * most ``maxItems`` items.
 */
export function defaultExpanded(ix: FoldIndex, maxItems = FIRST_VIEW_ITEMS): Set<string> {
  if (ix.graph.nodes.length <= SMALL_GRAPH_NODES) {
    return allModules(ix);
  }
  const roots = (ix.children.get(null) ?? []).filter(m => m.nodes.length + (ix.children.get(m.id)?.length ?? 0) <= maxItems);
  const expanded = new Set(roots.map(m => m.id));
  for (;;) {
    const vis = foldGraph(ix, expanded);
    let count = vis.itemCount;
    let grew = false;
    for (const item of vis.items.values()) {
      if (item.kind !== 'module' || hasDirectOps(ix, item.module)) {
        continue;
      }
      const trial = new Set(expanded).add(item.module.id);
      // what expanding it adds: its own visible children in place of its box
      const inside = foldGraph(ix, trial).clusters.get(item.module.id)!.children.filter(c => c.kind !== 'cluster').length;
      if (count - 1 + inside <= maxItems) {
        expanded.add(item.module.id);
        count += inside - 1;
        grew = true;
      }
    }
    if (!grew) {
      return expanded;
    }
  }
}

/** ``id`` and every Module inside it. */
export function descendants(ix: FoldIndex, id: string): string[] {
  const out = [id];
  for (let i = 0; i < out.length; i++) {
    for (const c of ix.children.get(out[i]) ?? []) {
      out.push(c.id);
    }
  }
  return out;
}

/** The Modules that enclose ``id``, outermost first (``id`` itself not included). */
export function ancestors(ix: FoldIndex, id: string): string[] {
  const out: string[] = [];
  let p = ix.moduleById.get(id)?.parent ?? null;
  while (p !== null && ix.moduleById.has(p) && !out.includes(p)) {
    out.unshift(p);
    p = ix.moduleById.get(p)!.parent;
  }
  return out;
}

/** Expand ``id`` and whatever encloses it, so that it is a visible cluster. */
export function withExpanded(ix: FoldIndex, expanded: ReadonlySet<string>, id: string): Set<string> {
  const next = new Set(expanded);
  for (const a of [...ancestors(ix, id), id]) {
    next.add(a);
  }
  return next;
}

/** Collapse ``id`` (and forget what was expanded inside it). */
export function withCollapsed(ix: FoldIndex, expanded: ReadonlySet<string>, id: string): Set<string> {
  const next = new Set(expanded);
  for (const d of descendants(ix, id)) {
    next.delete(d);
  }
  return next;
}

/** Expand what encloses Node ``id`` so that it is drawn itself. */
export function revealNode(ix: FoldIndex, expanded: ReadonlySet<string>, id: number): Set<string> {
  const mod = ix.nodeModule.get(id);
  return mod === undefined ? new Set(expanded) : withExpanded(ix, expanded, mod);
}

/** Expand what encloses Module ``id`` so that its own box (or cluster) is drawn. */
export function revealModule(ix: FoldIndex, expanded: ReadonlySet<string>, id: string): Set<string> {
  const next = new Set(expanded);
  ancestors(ix, id).forEach(a => next.add(a));
  return next;
}

/** The Module that the item ``key`` stands for when it is expanded: a box's, or a stack's member ``instance``. */
export function moduleOfItem(item: VisibleItem, instance = 0): Module | null {
  if (item.kind === 'module') {
    return item.module;
  }
  if (item.kind === 'stack') {
    return item.members[Math.max(0, Math.min(item.members.length - 1, instance))];
  }
  return null;
}

/** One search hit: a Node or a Module. */
export type SearchMatch = { kind: 'module'; id: string } | { kind: 'node'; id: number };

/**
 * Modules whose path or class, and Nodes whose label, variable names, op or torch name contain
 * ``query`` (case-insensitive); Modules first, each in graph order.
 *
 *     searchGraph(ix, 'c_attn')   // [{kind: 'module', id: 'model.h.0.attn.c_attn'}, …, {kind: 'node', id: 17}, …]
 */
export function searchGraph(ix: FoldIndex, query: string): SearchMatch[] {
  const q = query.trim().toLowerCase();
  if (!q) {
    return [];
  }
  const has = (s: string | null | undefined) => !!s && s.toLowerCase().includes(q);
  const out: SearchMatch[] = [];
  for (const m of ix.graph.modules) {
    if (has(m.path) || has(m.type)) {
      out.push({ kind: 'module', id: m.id });
    }
  }
  for (const n of ix.graph.nodes) {
    if (has(n.label) || has(n.op) || has(n.name) || n.var_names.some(has)) {
      out.push({ kind: 'node', id: n.id });
    }
  }
  return out;
}

/** Expansion that shows ``match`` itself (a stack opens at the instance that holds it). */
export function revealMatch(ix: FoldIndex, expanded: ReadonlySet<string>, match: SearchMatch): Set<string> {
  return match.kind === 'node' ? revealNode(ix, expanded, match.id) : revealModule(ix, expanded, match.id);
}

/** Expanded ids in ``graph.modules`` order (what the ``expanded`` trait holds). */
export function orderedIds(ix: FoldIndex, expanded: ReadonlySet<string>): string[] {
  return ix.graph.modules.filter(m => expanded.has(m.id)).map(m => m.id);
}
