/**
 * A synthetic wire Graph shaped like GPT-2 small's autograd graph (nanoGPT naming): wte, wpe, 12
 * Blocks under ``h`` (ln_1, attn with c_attn and c_proj and 11 ops of its own, ln_2, mlp with c_fc,
 * gelu, c_proj, two residual adds), ln_f, lm_head (tied to wte.weight) and the loss ops outside the
 * model: 543 Nodes, 114 Modules, one Repeat of the 12 Blocks.
 */
import type { Edge, Graph, GraphState, Module, Node, Repeat } from '../../src/model/wire';
import { node } from './fixtures';

export interface GptOptions {
  blocks?: number;
  /** Gradients as after one backward: grad briefs, module norms (decaying with depth). */
  grads?: boolean;
  /** Blocks whose signature differs (they break the repeat). */
  odd?: number[];
}

const B = 2;
const T = 32;
const C = 768;
const f32 = (shape: number[]) => ({ shape, dtype: 'torch.float32', device: 'cpu' });

export function gptGraph(o: GptOptions = {}): Graph {
  const blocks = o.blocks ?? 12;
  const nodes: Node[] = [];
  const edges: Edge[] = [];
  const modules: Module[] = [];
  const params = new Map<string, number>(); // module id → own parameter elements
  const shapeOf = new Map<number, number[]>();
  let next = 1;

  const mod = (path: string, type: string, signature = `${type}:${path.split('.').pop()}`): Module => {
    const id = path ? `model.${path}` : 'model';
    const parentPath = path.includes('.') ? path.slice(0, path.lastIndexOf('.')) : path ? '' : null;
    const m: Module = {
      id,
      path,
      label: path ? `${path} · ${type}` : `model · ${type}`,
      type,
      parent: parentPath === null ? null : parentPath ? `model.${parentPath}` : 'model',
      nodes: [],
      op_count: 0,
      param_count: 0,
      param_bytes: 0,
      signature,
      grad_norm: null,
      param_grad_norm: null
    };
    modules.push(m);
    return m;
  };
  const op = (m: Module | null, name: string, inputs: number[], shape: number[], over: Partial<Node> = {}): number => {
    const id = next++;
    nodes.push(node({ id, name, label: over.label ?? (m ? m.path : name), op: `aten::${name.replace(/Backward\d$/, '').toLowerCase()}`, module_path: m?.path ?? null, ...over }));
    inputs.forEach((src, i) => edges.push({ src, dst: id, input_nr: i, output_nr: 0, meta: f32(shapeOf.get(src) ?? shape) }));
    shapeOf.set(id, shape);
    m?.nodes.push(id);
    return id;
  };
  const param = (m: Module, name: string, shape: number[]): number => {
    const id = next++;
    nodes.push(node({ id, name: 'AccumulateGrad', kind: 'leaf', label: `${m.path}.${name}`, module_path: m.path }));
    shapeOf.set(id, shape);
    m.nodes.push(id);
    params.set(m.id, (params.get(m.id) ?? 0) + shape.reduce((a, b) => a * b, 1));
    return id;
  };
  const linear = (path: string, x: number, cin: number, cout: number): number => {
    const m = mod(path, 'Linear', `Linear:${cin}x${cout}`);
    const w = param(m, 'weight', [cout, cin]);
    const b = param(m, 'bias', [cout]);
    const v = op(m, 'ViewBackward0', [x], [B * T, cin]);
    const t = op(m, 'TBackward0', [w], [cin, cout]);
    const mm = op(m, 'AddmmBackward0', [b, v, t], [B * T, cout]);
    return op(m, 'ViewBackward0', [mm], [B, T, cout]);
  };
  const layerNorm = (path: string, x: number): number => {
    const m = mod(path, 'LayerNorm', `LayerNorm:${C}`);
    const w = param(m, 'weight', [C]);
    const b = param(m, 'bias', [C]);
    return op(m, 'NativeLayerNormBackward0', [x, w, b], [B, T, C]);
  };

  const root = mod('', 'GPT');
  const wte = mod('wte', 'Embedding');
  const wteW = param(wte, 'weight', [50257, C]);
  const tok = op(wte, 'EmbeddingBackward0', [wteW], [B, T, C]);
  const wpe = mod('wpe', 'Embedding');
  const pos = op(wpe, 'EmbeddingBackward0', [param(wpe, 'weight', [1024, C])], [T, C]);
  let x = op(root, 'AddBackward0', [tok, pos], [B, T, C], { label: 'x', var_names: ['x'] });
  mod('h', 'ModuleList');
  for (let i = 0; i < blocks; i++) {
    const p = `h.${i}`;
    const blk = mod(p, 'Block', o.odd?.includes(i) ? `Block:odd${i}` : 'Block:gpt2');
    const h1 = layerNorm(`${p}.ln_1`, x);
    const attn = mod(`${p}.attn`, 'CausalSelfAttention', 'Attn');
    const qkv = linear(`${p}.attn.c_attn`, h1, C, 3 * C);
    const split = op(attn, 'SplitBackward0', [qkv], [B, T, C]);
    const heads = [0, 1, 2].map(() => op(attn, 'TransposeBackward0', [op(attn, 'ViewBackward0', [split], [B, T, 12, 64])], [B, 12, T, 64]));
    const sdpa = op(attn, 'ScaledDotProductEfficientAttentionBackward0', heads, [B, 12, T, 64]);
    const y = op(attn, 'ViewBackward0', [op(attn, 'CloneBackward0', [op(attn, 'TransposeBackward0', [sdpa], [B, T, 12, 64])], [B, T, 12, 64])], [B, T, C]);
    const a = linear(`${p}.attn.c_proj`, y, C, C);
    x = op(blk, 'AddBackward0', [x, a], [B, T, C]);
    const h2 = layerNorm(`${p}.ln_2`, x);
    const mlp = mod(`${p}.mlp`, 'MLP', 'MLP');
    const fc = linear(`${p}.mlp.c_fc`, h2, C, 4 * C);
    const g = op(mlp, 'GeluBackward0', [fc], [B, T, 4 * C]);
    const proj = linear(`${p}.mlp.c_proj`, g, 4 * C, C);
    x = op(blk, 'AddBackward0', [x, proj], [B, T, C]);
  }
  x = layerNorm('ln_f', x);
  const head = mod('lm_head', 'Linear', 'Linear:tied');
  const hv = op(head, 'ViewBackward0', [x], [B * T, C]);
  const ht = op(head, 'TBackward0', [wteW], [C, 50257]);
  const logits = op(head, 'ViewBackward0', [op(head, 'MmBackward0', [hv, ht], [B * T, 50257])], [B, T, 50257], { label: 'logits', var_names: ['logits'] });
  const flat = op(null, 'ViewBackward0', [logits], [B * T, 50257]);
  const loss = op(null, 'NllLossBackward0', [op(null, 'LogSoftmaxBackward0', [flat], [B * T, 50257])], [], { label: 'loss', var_names: ['loss'] });

  // totals include the children's (modules are in named_modules() order: children after parents)
  const byId = new Map(modules.map(m => [m.id, m]));
  const nodeById = new Map(nodes.map(n => [n.id, n]));
  for (const m of [...modules].reverse()) {
    m.op_count += m.nodes.filter(id => nodeById.get(id)!.kind === 'op').length;
    m.param_count += params.get(m.id) ?? 0;
    m.param_bytes = m.param_count * 4;
    const parent = m.parent === null ? undefined : byId.get(m.parent);
    if (parent) {
      parent.op_count += m.op_count;
      parent.param_count += m.param_count;
    }
  }
  const hs = modules.filter(m => /^h\.\d+$/.test(m.path));
  const repeats: Repeat[] = [];
  for (let i = 0; i < hs.length; ) {
    let j = i + 1;
    while (j < hs.length && hs[j].signature === hs[i].signature) {
      j++;
    }
    if (j - i > 1) {
      repeats.push({ id: `${hs[i].id}×${j - i}`, parent: 'model.h', members: hs.slice(i, j).map(m => m.id), label: `h · Block × ${j - i}` });
    }
    i = j;
  }
  const graph: Graph = {
    version: 1,
    nodes,
    edges,
    modules,
    repeats,
    roots: [loss],
    message: null,
    backward_passes: 0,
    total_nodes: nodes.length,
    cut: null,
    compiled: []
  };
  void root;
  return o.grads ? withGrads(graph) : graph;
}

/** The GraphState one backward through ``g`` sends: every Node has a gradient; norms decay with depth. */
export function gptState(g: Graph, passes = 1): GraphState {
  const ids = g.nodes.map(n => n.id);
  const blockNorm = (m: Module) => {
    const k = /^h\.(\d+)/.exec(m.path);
    // vanishing towards the input: 1e-4 at h.0 … 1 at the last block
    return k ? Math.pow(10, -4 + (4 * Number(k[1])) / 11) : 0.5;
  };
  return {
    backward_passes: passes,
    ids,
    grad_passes: ids.map(() => passes),
    grad_briefs: g.nodes.map(n => (n.kind === 'leaf' ? '‖g‖=0.1' : '‖g‖=1')),
    freed: g.nodes.filter(n => n.kind === 'op').map(n => n.id),
    nonfinite: [],
    first_nonfinite: [],
    module_ids: g.modules.map(m => m.id),
    module_grad_norms: g.modules.map(m => blockNorm(m) * 2),
    module_param_grad_norms: g.modules.map(m => blockNorm(m))
  };
}

function withGrads(g: Graph): Graph {
  const s = gptState(g);
  const at = new Map(s.ids.map((id, i) => [id, i]));
  return {
    ...g,
    backward_passes: 1,
    nodes: g.nodes.map(n => ({ ...n, grad_passes: 1, grad_brief: s.grad_briefs[at.get(n.id)!], freed: s.freed.includes(n.id) })),
    modules: g.modules.map((m, i) => ({ ...m, grad_norm: s.module_grad_norms[i], param_grad_norm: s.module_param_grad_norms[i] }))
  };
}
