/**
 * What a backward changed, applied to the graph shown: each Node's gradient passes and brief,
 * freed saved tensors, non-finite gradients, and each Module's gradient norms. Pure: no DOM.
 */
import type { Graph, GraphState } from '../../model/wire';

/** Fill ``graph``'s dynamic fields from ``state`` (a Node or Module it leaves out has none). */
export function applyState(graph: Graph, state: GraphState): void {
  const at = new Map(state.ids.map((id, i) => [id, i]));
  const freed = new Set(state.freed);
  const bad = new Set(state.nonfinite);
  const first = new Set(state.first_nonfinite);
  for (const n of graph.nodes) {
    const i = at.get(n.id);
    n.grad_passes = i === undefined ? 0 : state.grad_passes[i];
    n.grad_brief = i === undefined ? null : state.grad_briefs[i];
    n.freed = freed.has(n.id);
    n.nonfinite = bad.has(n.id);
    n.first_nonfinite = first.has(n.id);
  }
  const mi = new Map(state.module_ids.map((id, i) => [id, i]));
  for (const m of graph.modules) {
    const i = mi.get(m.id);
    m.grad_norm = i === undefined ? null : state.module_grad_norms[i];
    m.param_grad_norm = i === undefined ? null : state.module_param_grad_norms[i];
  }
  graph.backward_passes = state.backward_passes;
}
