/** Fixtures shaped exactly like src/model/wire.ts. Scenario S1:
 *  x=[2.], y=[3.] requires_grad; z=x*y; w=z+x; loss=w**2; loss.backward(). */
import type { Column, GraphTrait, Table } from '../../src/model/table';
import type { Graph, Module, Node, NodeDetail, TensorSummary } from '../../src/model/wire';

/** The DOT the browser makes of S1 (dotgen.ts; the graph, node and edge defaults of forgeviz/export.py). */
export const S1_DOT = `digraph forgeviz {
	graph [fontname=Helvetica fontsize=10 labeljust=l nodesep=0.3 rankdir=TB ranksep=0.35]
	node [fontname=Helvetica fontsize=11 margin="0.12,0.06" shape=box style=rounded]
	edge [fontname=Helvetica fontsize=9]
	n1 [label="x\\nleaf" id=n1]
	n2 [label="y\\nleaf" id=n2]
	n3 [label="z\\nMulBackward0" id=n3]
	n4 [label="w\\nAddBackward0" id=n4]
	n5 [label="loss\\nPowBackward0" id=n5]
	n1 -> n3 [label="1"]
	n2 -> n3 [label="1"]
	n3 -> n4 [label="1"]
	n1 -> n4 [label="1"]
	n4 -> n5 [label="1"]
}
`;

/** A Module shaped like the wire's, totals left to the caller. */
export function module(over: Partial<Module> & Pick<Module, 'id' | 'path' | 'label'>): Module {
  return {
    type: null,
    parent: null,
    nodes: [],
    op_count: 0,
    param_count: 0,
    param_bytes: 0,
    signature: over.id,
    grad_norm: null,
    param_grad_norm: null,
    ...over
  };
}

export function node(over: Partial<Node> & Pick<Node, 'id' | 'label' | 'name'>): Node {
  return {
    kind: 'op',
    var_names: [],
    op: null,
    module_path: null,
    cell: null,
    line: null,
    has_saved: false,
    freed: false,
    grad_passes: 0,
    grad_brief: null,
    nonfinite: false,
    first_nonfinite: false,
    ...over
  };
}

export function s1Graph(grads = true): Graph {
  const g = (v: string) => (grads ? v : null);
  return {
    version: 1,
    nodes: [
      node({ id: 1, label: 'x', name: 'AccumulateGrad', kind: 'leaf', var_names: ['x'], grad_brief: g('64'), grad_passes: grads ? 1 : 0 }),
      node({ id: 2, label: 'y', name: 'AccumulateGrad', kind: 'leaf', var_names: ['y'], grad_brief: g('32') }),
      node({ id: 3, label: 'z', name: 'MulBackward0', op: 'aten::mul', var_names: ['z'], cell: 3, line: 2, has_saved: true, freed: grads, grad_brief: g('16') }),
      node({ id: 4, label: 'w', name: 'AddBackward0', op: 'aten::add', var_names: ['w'], cell: 3, line: 3, grad_brief: g('16') }),
      node({ id: 5, label: 'loss', name: 'PowBackward0', op: 'aten::pow', var_names: ['loss'], cell: 3, line: 4, has_saved: true, freed: grads, grad_brief: g('1') })
    ],
    edges: [
      { src: 1, dst: 3, input_nr: 0, output_nr: 0, meta: { shape: [1], dtype: 'torch.float32', device: 'cpu' } },
      { src: 2, dst: 3, input_nr: 1, output_nr: 0, meta: { shape: [1], dtype: 'torch.float32', device: 'cpu' } },
      { src: 3, dst: 4, input_nr: 0, output_nr: 0, meta: { shape: [1], dtype: 'torch.float32', device: 'cpu' } },
      { src: 1, dst: 4, input_nr: 1, output_nr: 0, meta: { shape: [1], dtype: 'torch.float32', device: 'cpu' } },
      { src: 4, dst: 5, input_nr: 0, output_nr: 0, meta: { shape: [1], dtype: 'torch.float32', device: 'cpu' } }
    ],
    modules: [],
    repeats: [],
    roots: [5],
    message: null,
    backward_passes: grads ? 1 : 0,
    total_nodes: 5,
    cut: null,
    compiled: []
  };
}

export function clusterGraph(): Graph {
  return {
    version: 1,
    nodes: [
      node({ id: 1, label: 'x', name: 'AccumulateGrad', kind: 'leaf' }),
      node({ id: 2, label: 'layer1.0.weight', name: 'AccumulateGrad', kind: 'leaf' }),
      node({ id: 3, label: 'layer1.0', name: 'MmBackward0', module_path: 'layer1.0' }),
      node({ id: 4, label: 'layer1.1', name: 'ReluBackward0', module_path: 'layer1.1' })
    ],
    edges: [
      { src: 1, dst: 3, input_nr: 0, output_nr: 0, meta: null },
      { src: 2, dst: 3, input_nr: 1, output_nr: 0, meta: null },
      { src: 3, dst: 4, input_nr: 0, output_nr: 0, meta: null }
    ],
    modules: [
      module({ id: 'model', path: '', label: 'model · Net', type: 'Net', op_count: 2, param_count: 12, param_bytes: 48 }),
      module({ id: 'model.layer1', path: 'layer1', label: 'layer1 · Sequential', type: 'Sequential', parent: 'model', nodes: [4], op_count: 2, param_count: 12, param_bytes: 48 }),
      module({ id: 'model.layer1.0', path: 'layer1.0', label: 'layer1.0 · Linear', type: 'Linear', parent: 'model.layer1', nodes: [2, 3], op_count: 1, param_count: 12, param_bytes: 48 })
    ],
    repeats: [],
    roots: [4],
    message: null,
    backward_passes: 0,
    total_nodes: 4,
    cut: null,
    compiled: []
  };
}

export function summary(values: (number | string)[] | null, over: Partial<TensorSummary> = {}): TensorSummary {
  const nums = (values ?? []).map(Number);
  return {
    shape: [values ? values.length : 1],
    dtype: 'torch.float32',
    device: 'cpu',
    numel: values ? values.length : 1,
    norm: values ? Math.hypot(...nums) : null,
    min: values ? Math.min(...nums) : null,
    max: values ? Math.max(...nums) : null,
    mean: values ? nums.reduce((a, b) => a + b, 0) / nums.length : null,
    nan_count: 0,
    inf_count: 0,
    values,
    histogram: null,
    ...over
  };
}

function detail(over: Partial<NodeDetail> & Pick<NodeDetail, 'id' | 'label' | 'name'>): NodeDetail {
  return {
    var_names: [],
    op: null,
    op_qualname: null,
    module_path: null,
    module_type: null,
    cell: null,
    line: null,
    source: null,
    inputs: [],
    outputs: [],
    saved: [],
    freed: false,
    alive: true,
    grads: [],
    contributions: [],
    leaf_grad: null,
    leaf_grad_history: [],
    chain: [],
    compiled: null,
    backward_passes: 0,
    grad_cadence: 'each',
    recorded: null,
    ...over
  };
}

const f32 = { shape: [1], dtype: 'torch.float32', device: 'cpu' };

/** z = x * y: grad_output 16 (= dloss/dz = 2w = 16); grad_inputs [16*y, 16*x] = [48, 32]. */
export function zDetail(): NodeDetail {
  return detail({
    id: 3,
    label: 'z',
    name: 'MulBackward0',
    var_names: ['z'],
    op: 'aten::mul',
    op_qualname: 'torch.mul',
    cell: 3,
    line: 2,
    source: 'z = x * y',
    inputs: [f32, f32],
    outputs: [f32],
    saved: [],
    freed: true,
    grads: [{ backward_index: 0, grad_outputs: [summary([16])], grad_inputs: [summary([48]), summary([32])] }]
  });
}

/** x is used by z (x*y) and w (z+x): dloss/dx = 16*y + 16 = 48 + 16 = 64. */
export function xDetail(): NodeDetail {
  return detail({
    id: 1,
    label: 'x',
    name: 'AccumulateGrad',
    var_names: ['x'],
    outputs: [f32],
    grads: [{ backward_index: 0, grad_outputs: [summary([64])], grad_inputs: [] }],
    contributions: [
      { consumer: 4, consumer_label: 'w/Add', input_nr: 1, grad: summary([16]) },
      { consumer: 3, consumer_label: 'z/Mul', input_nr: 0, grad: summary([48]) }
    ],
    leaf_grad: summary([64]),
    leaf_grad_history: [summary([64])]
  });
}

export { detail };

/** A 10,000-op chain made by one loop line, as the kernel sends it: one line-group Module. */
export function loopGraph(n = 10_000): Graph {
  const nodes: Graph['nodes'] = [];
  const edges: Graph['edges'] = [];
  const base = { var_names: [], module_path: null, cell: 4, line: 3, has_saved: true, freed: false, grad_passes: 0, grad_brief: null, nonfinite: false, first_nonfinite: false };
  nodes.push({ ...base, id: 0, name: 'torch::autograd::AccumulateGrad', kind: 'leaf', label: 't', op: null, cell: null, line: null, has_saved: false });
  for (let i = 1; i <= n; i++) {
    nodes.push({ ...base, id: i, name: 'MulBackward0', kind: 'op', label: i === n ? 'h' : 'mul', op: 'mul' });
    edges.push({ src: i - 1, dst: i, input_nr: 0, output_nr: 0, meta: { shape: [3], dtype: 'float32', device: 'cpu' } });
  }
  const where = 'cell [4] line 3';
  const group = {
    id: `line:${where}`, path: where, label: `${where} · mul × ${n}`, type: null, parent: null,
    nodes: nodes.slice(1).map(x => x.id), op_count: n, param_count: 0, param_bytes: 0, signature: '', grad_norm: null, param_grad_norm: null
  };
  return { version: 1, nodes, edges, modules: [group], repeats: [], roots: [n], message: null, backward_passes: 0, total_nodes: n + 1, cut: null, compiled: [] };
}

/** ``rows`` as a table the way the kernel's ``as_table`` makes one: string columns coded. */
export function tableOf(rows: object[]): Table {
  const columns: Record<string, Column> = {};
  for (const key of Object.keys(rows[0] ?? {})) {
    const values = rows.map(r => (r as Record<string, unknown>)[key]);
    if (values.every(v => typeof v === 'string')) {
      const distinct = [...new Set(values)];
      columns[key] = { values: distinct, codes: values.map(v => distinct.indexOf(v)) };
    } else {
      columns[key] = values;
    }
  }
  return { rows: rows.length, columns };
}

/** ``g`` as the graph trait carries it (src/model/table.ts). */
export function traitOf(g: Graph): GraphTrait {
  return { ...g, nodes: tableOf(g.nodes), edges: tableOf(g.edges), modules: tableOf(g.modules), repeats: tableOf(g.repeats) };
}

/**
 * A compiled MLP between eager ops, as the kernel sends it (tests/test_graph_compiled.py's scenario):
 * ``model = torch.compile(Sequential(Linear(32, 64), GELU(), Linear(64, 8)), backend="aot_eager")``;
 * ``x`` (4×32) → ``h = x * 2`` → ``out = model(h)`` → ``loss = out.square().mean()``. The region is
 * Node 2, its inputs in torch's order: 0.weight, 0.bias, h, 2.weight, 2.bias.
 */
export function compiledGraph(): Graph {
  const meta = (shape: number[]) => ({ shape, dtype: 'float32', device: 'cpu' });
  const leaf = (id: number, label: string, module_path: string | null) =>
    node({ id, label, name: 'torch::autograd::AccumulateGrad', kind: 'leaf', module_path });
  return {
    version: 1,
    nodes: [
      node({ id: 4, label: 'loss', name: 'MeanBackward0', op: 'mean', var_names: ['loss'], cell: 4, line: 4 }),
      node({ id: 3, label: 'square', name: 'PowBackward0', op: 'square', cell: 4, line: 4 }),
      node({ id: 2, label: 'model · compiled', name: 'CompiledFunctionBackward', op: 'CompiledFunction', var_names: ['out'], module_path: '', cell: 4, line: 3 }),
      leaf(5, '0.weight', '0'),
      leaf(6, '0.bias', '0'),
      node({ id: 1, label: 'h', name: 'MulBackward0', op: 'mul', var_names: ['h'], cell: 4, line: 2 }),
      leaf(7, '2.weight', '2'),
      leaf(8, '2.bias', '2'),
      leaf(9, 'x', null)
    ],
    edges: [
      { src: 3, dst: 4, input_nr: 0, output_nr: 0, meta: meta([4, 8]) },
      { src: 2, dst: 3, input_nr: 0, output_nr: 0, meta: meta([4, 8]) },
      { src: 5, dst: 2, input_nr: 0, output_nr: 0, meta: meta([64, 32]) },
      { src: 6, dst: 2, input_nr: 1, output_nr: 0, meta: meta([64]) },
      { src: 1, dst: 2, input_nr: 2, output_nr: 0, meta: meta([4, 32]) },
      { src: 7, dst: 2, input_nr: 3, output_nr: 0, meta: meta([8, 64]) },
      { src: 8, dst: 2, input_nr: 4, output_nr: 0, meta: meta([8]) },
      { src: 9, dst: 1, input_nr: 0, output_nr: 0, meta: meta([4, 32]) }
    ],
    modules: [
      module({ id: 'model', path: '', label: 'model · Sequential', type: 'Sequential', nodes: [2], op_count: 1, param_count: 2632, param_bytes: 10528 }),
      module({ id: 'model.0', path: '0', label: '0 · Linear', type: 'Linear', parent: 'model', nodes: [5, 6], param_count: 2112, param_bytes: 8448 }),
      module({ id: 'model.2', path: '2', label: '2 · Linear', type: 'Linear', parent: 'model', nodes: [7, 8], param_count: 520, param_bytes: 2080 })
    ],
    repeats: [],
    roots: [4],
    message: null,
    backward_passes: 1,
    total_nodes: 9,
    cut: null,
    compiled: [{ node: 2, name: 'model', backend: 'aot_eager', dynamo_graphs: 1, dynamo_breaks: 0, regions_at_line: 1 }]
  };
}

/** The compiled region's detail after one backward: what arrived (out's gradient) and what left it. */
export function compiledDetail(): NodeDetail {
  const grad = (shape: number[], norm: number) => summary(null, { shape, numel: shape.reduce((a, b) => a * b, 1), norm });
  return detail({
    id: 2,
    label: 'model · compiled',
    name: 'CompiledFunctionBackward',
    var_names: ['out'],
    op: 'CompiledFunction',
    module_path: '',
    module_type: 'Sequential',
    cell: 4,
    line: 3,
    source: 'out = model(h)',
    grads: [{
      backward_index: 0,
      grad_outputs: [grad([4, 8], 0.0951)],
      grad_inputs: [grad([64, 32], 0.6698), grad([64], 0.05319), grad([4, 32], 0.03936), grad([8, 64], 0.8685), grad([8], 0.1039)]
    }],
    // the kernel sends every Node's paths, an op's too: here square's gradient toward out
    contributions: [{ consumer: 3, consumer_label: 'square', input_nr: 0, grad: grad([4, 8], 0.0951) }],
    compiled: compiledGraph().compiled[0]
  });
}
