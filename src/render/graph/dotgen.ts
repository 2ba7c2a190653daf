/**
 * DOT for what is visible: Nodes ``n<id>``, module boxes ``m<index>`` (index in ``graph.modules``),
 * stacks ``r<repeat index>_<first member position>``, expanded Modules as ``subgraph cluster_<k>``
 * with ``id="cluster:<module id>"``. The graph, node and edge attributes are those of
 * forgeviz/export.py, so a fully expanded graph looks as it always did.
 *
 *     toDot(foldGraph(ix, expanded))   // 'digraph forgeviz {\n\tgraph [...]\n\tn1 [label="x\\nleaf" id=n1]\n…'
 */
import type { Module, Node } from '../../model/wire';
import { bytesShort } from '../common/format';
import type { VisibleEntry, VisibleGraph, VisibleItem } from './fold';
import type { LayeredEntry, LayeredInput } from './layered';

const HEAD = `digraph forgeviz {
	graph [fontname=Helvetica fontsize=10 labeljust=l nodesep=0.3 rankdir=TB ranksep=0.35]
	node [fontname=Helvetica fontsize=11 margin="0.12,0.06" shape=box style=rounded]
	edge [fontname=Helvetica fontsize=9]
`;

/** Room kept in a module box for its "‖∇‖ = …" line, so a backward changes no layout. */
export const GRAD_LINE_ROOM = '‖∇‖ = 0.0000e+00';
/** Bar chart room under a stack's text: blank label lines (Graphviz sizes them). */
export const STACK_BAR_LINES = 3;
/** Width of one bar of a stack's chart, in points. */
export const STACK_BAR_W = 7;

/** "532", "12.3K", "7.09M", "1.5B" parameters. */
export function countText(n: number): string {
  if (n < 1000) {
    return String(n);
  }
  for (const [unit, size] of [
    ['B', 1e9],
    ['M', 1e6],
    ['K', 1e3]
  ] as const) {
    if (n >= size) {
      return `${Number((n / size).toPrecision(3))}${unit}`;
    }
  }
  return String(n);
}

/** "44 ops · 7.09M params · 27 MiB" (no parameter part for a module without any). */
export function moduleStats(m: Module): string {
  const ops = `${m.op_count} op${m.op_count === 1 ? '' : 's'}`;
  return m.param_count ? `${ops} · ${countText(m.param_count)} params · ${bytesShort(m.param_bytes)}` : ops;
}

/** The two lines of a Node: what the user calls it, then torch's Node name (or "leaf"). */
export function nodeLines(n: Node): string[] {
  const second = n.kind === 'leaf' ? 'leaf' : n.name;
  return n.label === second ? [n.label] : [n.label, second];
}

/** "h.0 … h.11 · Block × 12". */
export function stackTitle(members: readonly Module[]): string {
  const first = members[0];
  const last = members[members.length - 1];
  return `${first.path || first.id} … ${last.path || last.id} · ${first.type ?? 'Module'} × ${members.length}`;
}

/** The label lines of an item as laid out (a module box keeps a line for its gradient norm). */
export function itemLines(item: VisibleItem): string[] {
  if (item.kind === 'node') {
    return nodeLines(item.node);
  }
  if (item.kind === 'module') {
    const m = item.module;
    return [m.path || m.id, m.type ?? 'Module', moduleStats(m), GRAD_LINE_ROOM];
  }
  return [stackTitle(item.members), `each ${moduleStats(item.members[0])}`, ...Array(STACK_BAR_LINES).fill(' ')];
}

/** A DOT string literal. Lines are joined with DOT's ``\n``; a user's backslash must not start one. */
function quote(lines: readonly string[]): string {
  return `"${lines.map(l => l.replace(/\\/g, '\\\\').replace(/"/g, '\\"')).join('\\n')}"`;
}

function itemStatement(item: VisibleItem): string {
  const label = quote(itemLines(item));
  if (item.kind === 'stack') {
    // wide enough for one bar per member
    const w = (item.members.length * STACK_BAR_W + 24) / 72;
    return `${item.key} [label=${label} id=${item.key} width=${w.toFixed(2)}]`;
  }
  return `${item.key} [label=${label} id=${item.key}]`;
}

/** The DOT source of a visible graph. Equal graphs give equal text (the layout cache's key). */
export function toDot(vis: VisibleGraph): string {
  const out: string[] = [HEAD];
  let k = 0;
  const emit = (entries: readonly VisibleEntry[], indent: string) => {
    for (const e of entries) {
      if (e.kind === 'cluster') {
        out.push(`${indent}subgraph cluster_${k++} {\n`);
        out.push(`${indent}\tlabel=${quote([e.module.label])} id=${quote([`cluster:${e.module.id}`])} style="rounded,dashed"\n`);
        emit(e.children, indent + '\t');
        out.push(`${indent}}\n`);
      } else {
        out.push(`${indent}${itemStatement(e)}\n`);
      }
    }
  };
  emit(vis.children, '\t');
  for (const e of vis.edges) {
    const label = e.label === null ? '' : e.count > 1 ? `${e.label} ×${e.count}` : e.label;
    out.push(`\t${e.src} -> ${e.dst}${label ? ` [label=${quote([label])}]` : ''}\n`);
  }
  out.push('}\n');
  return out.join('');
}

/** The input of the fast layered layout (layered.ts) for a visible graph: the same boxes and edges as ``toDot``. */
export function toLayered(vis: VisibleGraph): LayeredInput {
  const entries = (list: readonly VisibleEntry[]): LayeredEntry[] =>
    list.map(e =>
      e.kind === 'cluster'
        ? { id: `cluster:${e.module.id}`, label: e.module.label, children: entries(e.children) }
        : { key: e.key, lines: itemLines(e), width: e.kind === 'stack' ? e.members.length * STACK_BAR_W + 24 : undefined }
    );
  return {
    children: entries(vis.children),
    edges: vis.edges.map(e => ({ src: e.src, dst: e.dst, label: e.label === null ? null : e.count > 1 ? `${e.label} ×${e.count}` : e.label }))
  };
}
