import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { CompiledRegion, NodeDetail } from '../../src/model/wire';
import { compiledText } from '../../src/render/graph/inspector';
import { createGraphView, GraphView } from '../../src/render/graph/view';
import { clusterGraph, compiledDetail, compiledGraph, detail, s1Graph, summary, xDetail, zDetail } from './fixtures';
import { realLayout } from './graphviz';
import { hostElement, takeDown } from './host';

let el: HTMLElement;
let view: GraphView | null = null;

beforeEach(() => {
  el = hostElement();
});
afterEach(() => {
  view = takeDown(view);
});

function make(over: Partial<Parameters<typeof createGraphView>[1]> = {}) {
  const opts = {
    layout: vi.fn(realLayout),
    requestDetail: vi.fn(async (id: number): Promise<NodeDetail> => (id === 1 ? xDetail() : zDetail())),
    requestDot: vi.fn(async () => 'digraph {}'),
    ...over
  };
  view = createGraphView(el, opts);
  return { view, opts };
}

const nodes = () => Array.from(el.querySelectorAll<SVGGElement>('.fv-node'));
const nodeEl = (id: number) => el.querySelector<SVGGElement>(`.fv-node[data-node-id="${id}"]`)!;
/** Translation of a node group = its top-left corner in graph coordinates. */
function corner(g: Element): { x: number; y: number } {
  const m = /translate\(([-\d.]+),([-\d.]+)\)/.exec(g.getAttribute('transform') ?? '');
  return { x: Number(m![1]), y: Number(m![2]) };
}
function boxOf(id: number) {
  const g = nodeEl(id);
  const rect = g.querySelector('.fv-node-box')!;
  const c = corner(g);
  const w = Number(rect.getAttribute('width'));
  const h = Number(rect.getAttribute('height'));
  return { x: c.x, y: c.y, w, h, cx: c.x + w / 2, cy: c.y + h / 2 };
}

describe('S1 graph layout', () => {
  it('draws 5 nodes with the right labels, ids and accessible names', async () => {
    const { opts } = make();
    await view!.setGraph(s1Graph());
    expect(el.getAttribute('data-fv-state')).toBe('ready');
    expect(opts.layout).toHaveBeenCalledTimes(1);
    const ns = nodes();
    expect(ns).toHaveLength(5);
    expect(ns.map(n => n.getAttribute('data-label')).sort()).toEqual(['loss', 'w', 'x', 'y', 'z']);
    expect(ns.map(n => Number(n.getAttribute('data-node-id'))).sort()).toEqual([1, 2, 3, 4, 5]);
    const x = nodeEl(1);
    expect(x.getAttribute('tabindex')).toBe('0');
    expect(x.getAttribute('role')).toBe('button');
    expect(x.getAttribute('aria-label')).toBe('x, leaf, grad 64');
    expect(x.querySelector('title')!.textContent).toContain('x');
    // Node text is the DOT label split on "\n".
    const lines = Array.from(nodeEl(3).querySelectorAll('tspan')).map(t => t.textContent);
    expect(lines).toEqual(['z', 'MulBackward0']);
  });

  it('styles leaves, ops, freed nodes and grad badges', async () => {
    make();
    await view!.setGraph(s1Graph());
    expect(nodeEl(1).classList.contains('fv-leaf')).toBe(true);
    expect(nodeEl(2).classList.contains('fv-leaf')).toBe(true);
    expect(nodeEl(3).classList.contains('fv-op')).toBe(true);
    expect(nodeEl(3).classList.contains('fv-leaf')).toBe(false);
    // freed: class + a non-colour cue
    expect(nodeEl(3).classList.contains('fv-freed')).toBe(true);
    expect(nodeEl(3).querySelector('.fv-freed-text')!.textContent).toContain('freed');
    expect(nodeEl(4).classList.contains('fv-freed')).toBe(false);
    expect(nodeEl(4).querySelector('.fv-freed-text')).toBeNull();
    expect(nodeEl(1).querySelector('.fv-badge-text')!.textContent).toBe('∇ 64');
    expect(nodeEl(2).querySelector('.fv-badge-text')!.textContent).toBe('∇ 32');
  });

  it('has no badges before backward', async () => {
    make();
    await view!.setGraph(s1Graph(false));
    expect(el.querySelectorAll('.fv-badge')).toHaveLength(0);
    expect(nodeEl(1).getAttribute('aria-label')).toBe('x, leaf');
  });

  it('draws 5 edges in the forward direction, arrowheads at the consumer', async () => {
    make();
    await view!.setGraph(s1Graph());
    const edges = Array.from(el.querySelectorAll('.fv-edge'));
    expect(edges).toHaveLength(5);
    const pairs = edges.map(e => `${e.getAttribute('data-src')}->${e.getAttribute('data-dst')}`).sort();
    expect(pairs).toEqual(['1->3', '1->4', '2->3', '3->4', '4->5']);
    // Rank order top to bottom: leaves above z above w above loss.
    expect(boxOf(1).cy).toBeLessThan(boxOf(3).cy);
    expect(boxOf(2).cy).toBeLessThan(boxOf(3).cy);
    expect(boxOf(3).cy).toBeLessThan(boxOf(4).cy);
    expect(boxOf(4).cy).toBeLessThan(boxOf(5).cy);
    for (const e of edges) {
      const src = boxOf(Number(e.getAttribute('data-src')));
      const dst = boxOf(Number(e.getAttribute('data-dst')));
      const pts = e.querySelector('.fv-edge-head')!.getAttribute('points')!.split(' ').map(p => p.split(',').map(Number));
      const tip = pts.reduce((a, p) => [a[0] + p[0] / pts.length, a[1] + p[1] / pts.length], [0, 0]);
      const d = (b: { cx: number; cy: number }) => Math.hypot(tip[0] - b.cx, tip[1] - b.cy);
      expect(d(dst)).toBeLessThan(d(src));
      // the spline starts at the producer's side
      const m = /^M([-\d.]+),([-\d.]+)/.exec(e.querySelector('.fv-edge-path')!.getAttribute('d')!)!;
      expect(Number(m[2])).toBeGreaterThan(src.y);
      expect(Number(m[2])).toBeLessThan(dst.y);
      expect(e.querySelector('title')!.textContent).toContain('→');
    }
    expect(el.querySelector('.fv-edge[data-src="1"][data-dst="3"] title')!.textContent).toBe('x → z (1)');
    expect(el.querySelector('.fv-edge-label')!.textContent).toBe('1');
  });

  it('writes a text transcript of nodes and edges', async () => {
    make();
    await view!.setGraph(s1Graph());
    const t = el.querySelector('details.fv-transcript')!;
    expect(t.querySelectorAll('.fv-transcript-nodes li')).toHaveLength(5);
    expect(t.querySelectorAll('.fv-transcript-edges li')).toHaveLength(5);
    expect(t.textContent).toContain('x feeds z as input 0');
    expect(t.textContent).toContain('gradient 64');
  });
});

describe('inspector', () => {
  it('clicking a node requests its detail and renders exact gradient values', async () => {
    const { opts } = make();
    await view!.setGraph(s1Graph());
    nodeEl(3).querySelector('.fv-node-box')!.dispatchEvent(new MouseEvent('click', { bubbles: true }));
    expect(opts.requestDetail).toHaveBeenCalledWith(3);
    await vi.waitFor(() => expect(el.querySelector('.fv-inspector')!.getAttribute('data-state')).toBe('ready'));
    const insp = el.querySelector('.fv-inspector')!;
    expect(insp.getAttribute('data-node-id')).toBe('3');
    expect(nodeEl(3).classList.contains('fv-selected')).toBe(true);
    const values = Array.from(insp.querySelectorAll('.fv-values')).map(v => v.textContent);
    expect(values).toEqual(['[16.]', '[48.]', '[32.]']);
    const text = insp.textContent!;
    expect(text).toContain('48');
    expect(text).toContain('32');
    // each leaving gradient is labelled with the producer (edge dst=z, input_nr=i)
    const leaving = Array.from(insp.querySelectorAll('.fv-grad-inputs .fv-key')).map(k => k.textContent);
    expect(leaving).toEqual(['leaving → x', 'leaving → y']);
    expect(text).toContain('cell [3], line 2');
    expect(insp.querySelector('.fv-source')!.textContent).toBe('z = x * y');
    expect(text).toContain('torch.mul');
    expect(text).toContain('freed after backward');
  });

  it('shows the leaf path sum, .grad and history', async () => {
    make({
      requestDetail: vi.fn(async () => ({
        ...xDetail(),
        leaf_grad_history: [summary([4]), null, summary([4]), summary([8])]
      }))
    });
    await view!.setGraph(s1Graph());
    await view!.select(1);
    const insp = el.querySelector('.fv-inspector')!;
    expect(insp.querySelector('.fv-path-sum')!.textContent).toBe('16 (via w/Add) + 48 (via z/Mul) = 64');
    expect(insp.querySelector('.fv-history')!.textContent).toBe('4 → ∅ (zero_grad) → 4 → 8');
    expect(insp.textContent).toContain('[64.]');
  });

  it('shows stats and a histogram for large tensors, and non-finite counts', async () => {
    const big = summary(null, {
      shape: [128, 64],
      numel: 8192,
      norm: 'Infinity',
      min: '-Infinity',
      max: 3.5,
      mean: 'NaN',
      nan_count: 2,
      inf_count: 1,
      histogram: { lo: -1.5, hi: '3.5', counts: [1, 4, 10, 3, 0, 2], edges: null }
    });
    make({
      requestDetail: vi.fn(async () => detail({
        id: 4, label: 'w', name: 'AddBackward0',
        grads: [{ backward_index: 0, grad_outputs: [big], grad_inputs: [null, summary([1.25, -0.5])] }]
      }))
    });
    await view!.setGraph(s1Graph());
    await view!.select(4);
    const insp = el.querySelector('.fv-inspector')!;
    expect(insp.querySelector('.fv-stats')!.textContent).toBe('norm inf · min -inf · max 3.5 · mean nan');
    expect(insp.querySelectorAll('.fv-hist .fv-hist-bar')).toHaveLength(6);
    expect(insp.textContent).toContain('128×64 float32');
    expect(insp.textContent).toContain('⚠ 2 NaN, 1 Inf');
    expect(insp.querySelector('.fv-grad-inputs')!.textContent).toContain('None');
    expect(insp.querySelector('.fv-grad-inputs .fv-values')!.textContent).toBe('[1.2500, -0.5000]');
  });

  it('says when the graph is gone from the kernel', async () => {
    make({ requestDetail: vi.fn(async () => ({ ...zDetail(), alive: false })) });
    await view!.setGraph(s1Graph());
    await view!.select(3);
    expect(el.querySelector('.fv-inspector')!.textContent).toContain(
      'graph no longer in the kernel; showing the last snapshot'
    );
  });

  it('shows a rejected request as an error in the inspector, not a crash', async () => {
    make({ requestDetail: vi.fn(async () => Promise.reject(new Error('node 3 is gone'))) });
    await view!.setGraph(s1Graph());
    await view!.select(3);
    const insp = el.querySelector('.fv-inspector')!;
    expect(insp.getAttribute('data-state')).toBe('error');
    expect(insp.querySelector('.fv-error')!.textContent).toContain('node 3 is gone');
    expect(el.getAttribute('data-fv-state')).toBe('ready');
  });

  it('shows a loading state while the detail is in flight, and ignores stale replies', async () => {
    const resolvers: ((d: NodeDetail) => void)[] = [];
    make({ requestDetail: vi.fn(() => new Promise<NodeDetail>(r => resolvers.push(r))) });
    await view!.setGraph(s1Graph());
    const first = view!.select(3);
    const insp = el.querySelector('.fv-inspector')!;
    expect(insp.getAttribute('data-state')).toBe('loading');
    expect(insp.textContent).toContain('Loading z');
    const second = view!.select(1);
    resolvers[1](xDetail());
    await second;
    resolvers[0](zDetail());
    await first;
    expect(insp.getAttribute('data-node-id')).toBe('1');
    expect(insp.querySelector('h3')!.textContent).toBe('x');
  });

  it('selects a focused node with Enter and Space', async () => {
    const { opts } = make();
    await view!.setGraph(s1Graph());
    const z = nodeEl(3);
    z.focus();
    z.dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter', bubbles: true }));
    expect(opts.requestDetail).toHaveBeenLastCalledWith(3);
    await vi.waitFor(() => expect(el.querySelector('.fv-inspector')!.getAttribute('data-node-id')).toBe('3'));
    expect(z.classList.contains('fv-selected')).toBe(true);
    nodeEl(5).dispatchEvent(new KeyboardEvent('keydown', { key: ' ', bubbles: true }));
    expect(opts.requestDetail).toHaveBeenLastCalledWith(5);
    expect(nodeEl(5).classList.contains('fv-selected')).toBe(true);
    expect(z.classList.contains('fv-selected')).toBe(false);
  });

  it('moves focus between nodes with the arrow keys', async () => {
    make();
    await view!.setGraph(s1Graph());
    const w = nodeEl(4);
    w.focus();
    w.dispatchEvent(new KeyboardEvent('keydown', { key: 'ArrowDown', bubbles: true }));
    expect(document.activeElement?.getAttribute('data-node-id')).toBe('5');
    nodeEl(5).dispatchEvent(new KeyboardEvent('keydown', { key: 'ArrowUp', bubbles: true }));
    expect(document.activeElement?.getAttribute('data-node-id')).toBe('4');
  });
});

describe('updates and states', () => {
  it('same dot: no re-layout, badges update, zoom and selection kept', async () => {
    const { opts } = make();
    await view!.setGraph(s1Graph(false));
    await view!.select(3);
    (el.querySelector('button.fv-zoom-in') as HTMLButtonElement).click();
    const before = el.querySelector('.fv-viewport')!.getAttribute('transform');
    const firstGraphEl = el.querySelector('.fv-graph');
    expect(nodeEl(1).querySelector('.fv-badge')).toBeNull();

    const g2 = s1Graph();
    g2.nodes[0].grad_brief = '128';
    g2.nodes[3].nonfinite = true;
    g2.nodes[3].first_nonfinite = true;
    await view!.setGraph(g2);
    expect(opts.layout).toHaveBeenCalledTimes(1);
    expect(el.querySelector('.fv-graph')).toBe(firstGraphEl);
    expect(nodeEl(1).querySelector('.fv-badge-text')!.textContent).toBe('∇ 128');
    expect(nodeEl(1).getAttribute('aria-label')).toBe('x, leaf, grad 128');
    expect(nodeEl(4).classList.contains('fv-nonfinite')).toBe(true);
    expect(nodeEl(4).classList.contains('fv-first-nonfinite')).toBe(true);
    expect(nodeEl(4).querySelector('.fv-warn-glyph')!.textContent).toBe('⚠');
    expect(el.querySelector('.fv-viewport')!.getAttribute('transform')).toBe(before);
    expect(nodeEl(3).classList.contains('fv-selected')).toBe(true);
    // the inspector is refreshed for the new gradients
    await vi.waitFor(() => expect(opts.requestDetail).toHaveBeenCalledTimes(2));
    expect(el.getAttribute('data-fv-state')).toBe('ready');
  });

  it('a different dot is laid out again', async () => {
    const { opts } = make();
    await view!.setGraph(s1Graph());
    await view!.setGraph(clusterGraph());
    expect(opts.layout).toHaveBeenCalledTimes(2);
    expect(nodes()).toHaveLength(4);
    await view!.setGraph(s1Graph());
    expect(opts.layout).toHaveBeenCalledTimes(2); // cached
    expect(nodes()).toHaveLength(5);
  });

  it('renders graph.message instead of an empty graph', async () => {
    make();
    const g = { ...s1Graph(), nodes: [], edges: [], dot: '', message: 'no autograd history (requires_grad=False)' };
    await view!.setGraph(g);
    const box = el.querySelector<HTMLElement>('.fv-message')!;
    expect(box.hidden).toBe(false);
    expect(box.textContent).toBe('no autograd history (requires_grad=False)');
    expect(el.querySelectorAll('.fv-node')).toHaveLength(0);
    expect(el.getAttribute('data-fv-state')).toBe('ready');
  });

  it('a failed layout sets data-fv-state="error" with a visible message', async () => {
    make({ layout: vi.fn(async () => Promise.reject(new Error('syntax error in line 3'))) });
    await view!.setGraph(s1Graph());
    expect(el.getAttribute('data-fv-state')).toBe('error');
    const st = el.querySelector<HTMLElement>('.fv-status')!;
    expect(st.hidden).toBe(false);
    expect(st.textContent).toContain('syntax error in line 3');
  });

  it('shows kernel warnings in a strip', () => {
    make();
    view!.setWarnings(['hook failed: boom']);
    const strip = el.querySelector<HTMLElement>('.fv-warning')!;
    expect(strip.hidden).toBe(false);
    expect(strip.textContent).toContain('hook failed: boom');
    view!.setWarnings([]);
    expect(strip.hidden).toBe(true);
  });
});

describe('clusters', () => {
  it('renders module clusters as labelled groups, nested', async () => {
    make();
    await view!.setGraph(clusterGraph());
    const cs = Array.from(el.querySelectorAll('.fv-cluster')).slice(1);
    expect(Array.from(el.querySelectorAll('.fv-cluster')).map(c => c.getAttribute('data-cluster-id'))).toEqual([
      'cluster:model',
      'cluster:model.layer1',
      'cluster:model.layer1.0'
    ]);
    expect(cs.map(c => c.getAttribute('data-depth'))).toEqual(['1', '2']);
    expect(cs.map(c => c.getAttribute('data-fv-module'))).toEqual(['layer1', 'layer1.0']);
    expect(cs[0].querySelector('.fv-cluster-label')!.textContent).toBe('layer1 · Sequential');
    expect(cs[1].querySelector('.fv-cluster-label')!.textContent).toBe('layer1.0 · Linear');
    // the inner cluster lies inside the outer one, and contains its node
    const r = (c: Element) => {
      const b = c.querySelector('.fv-cluster-box')!;
      return ['x', 'y', 'width', 'height'].map(k => Number(b.getAttribute(k)));
    };
    const [ox, oy, ow, oh] = r(cs[0]);
    const [ix, iy, iw, ih] = r(cs[1]);
    expect(ix).toBeGreaterThanOrEqual(ox);
    expect(iy).toBeGreaterThanOrEqual(oy);
    expect(ix + iw).toBeLessThanOrEqual(ox + ow);
    expect(iy + ih).toBeLessThanOrEqual(oy + oh);
    const n3 = boxOf(3);
    expect(n3.x).toBeGreaterThanOrEqual(ix);
    expect(n3.x + n3.w).toBeLessThanOrEqual(ix + iw);
    expect(nodeEl(2).getAttribute('data-label')).toBe('layer1.0.weight');
  });
});

describe('export', () => {
  it('exportSVG is a standalone SVG with xmlns, titles and the node labels as text', async () => {
    make();
    await view!.setGraph(s1Graph());
    const svg = view!.exportSVG();
    expect(svg).toContain('<svg');
    expect(svg).toContain('xmlns="http://www.w3.org/2000/svg"');
    expect(svg).toContain('<title>');
    for (const label of ['x', 'y', 'z', 'w', 'loss', 'MulBackward0']) {
      expect(svg).toMatch(new RegExp(`<tspan[^>]*>${label}</tspan>`));
    }
    expect(svg).not.toContain('tabindex');
    const doc = new DOMParser().parseFromString(svg, 'image/svg+xml');
    expect(doc.querySelectorAll('.fv-node')).toHaveLength(5);
    expect(doc.documentElement.getAttribute('viewBox')).toMatch(/^0 0 \d+ \d+$/);
  });

  it('DOT export asks requestDot', async () => {
    const { opts } = make();
    await view!.setGraph(s1Graph());
    const clicked: string[] = [];
    const orig = HTMLAnchorElement.prototype.click;
    HTMLAnchorElement.prototype.click = function (this: HTMLAnchorElement) {
      clicked.push(this.download);
    };
    try {
      (el.querySelector('button.fv-export-dot') as HTMLButtonElement).click();
      await vi.waitFor(() => expect(clicked).toEqual(['forgeviz-graph.dot']));
      expect(opts.requestDot).toHaveBeenCalledTimes(1);
      (el.querySelector('button.fv-export-svg') as HTMLButtonElement).click();
      expect(clicked).toEqual(['forgeviz-graph.dot', 'forgeviz-graph.svg']);
    } finally {
      HTMLAnchorElement.prototype.click = orig;
    }
  });
});

describe('memory link', () => {
  it('selects the node a memory block names, and ignores nodes it does not have', async () => {
    const { view: v, opts } = make();
    const g = s1Graph();
    await v.setGraph(g);
    const z = g.nodes.find(n => n.label === 'z')!;
    document.dispatchEvent(new CustomEvent('forgeviz:highlight-node', { detail: { node: z.id } }));
    document.dispatchEvent(new CustomEvent('forgeviz:highlight-node', { detail: { node: 987654 } }));
    expect(vi.mocked(opts.requestDetail).mock.calls.map(c => c[0])).toEqual([z.id]);
    expect(nodeEl(z.id).classList.contains('fv-selected')).toBe(true);
    v.destroy();
    view = null;
    document.dispatchEvent(new CustomEvent('forgeviz:highlight-node', { detail: { node: z.id } }));
    expect(vi.mocked(opts.requestDetail).mock.calls.length).toBe(1);
  });
});

// A torch.compile region: one box, and a click shows what compile hides and the gradients that
// crossed its edges (the kernel side: tests/test_graph_compiled.py).
const inspector = () => el.querySelector<HTMLElement>('.fv-inspector')!;
const sections = () => Array.from(inspector().querySelectorAll('.fv-section h4')).map(h => h.textContent);

async function click(id: number): Promise<void> {
  el.querySelector(`.fv-node[data-node-id="${id}"] .fv-node-box`)!.dispatchEvent(new MouseEvent('click', { bubbles: true }));
  await vi.waitFor(() => {
    expect(inspector().getAttribute('data-node-id')).toBe(String(id));
    expect(inspector().getAttribute('data-state')).toBe('ready');
  });
}

function region(over: Partial<CompiledRegion> = {}): CompiledRegion {
  return { ...compiledGraph().compiled[0], ...over };
}

describe('a compiled region in the graph view', () => {
  it('is one box named by its module; a click shows backend, counts, what compile hides and the edge gradients', async () => {
    make({ requestDetail: vi.fn(async id => (id === 2 ? compiledDetail() : detail({ id, label: 'h', name: 'MulBackward0' }))) });
    await view!.setGraph(compiledGraph());
    const boxes = Array.from(el.querySelectorAll('.fv-node')).map(n => n.getAttribute('data-label'));
    expect(boxes.filter(l => l?.endsWith('· compiled'))).toEqual(['model · compiled']);
    expect(boxes).toContain('h'); // the eager ops around it keep their names
    expect(boxes).toContain('loss');

    await click(2);
    const insp = inspector();
    expect(sections()).toContain('Compiled region');
    const compiled = insp.querySelector('.fv-compiled')!;
    const backend = Array.from(compiled.querySelectorAll('.fv-row')).map(r => r.textContent);
    expect(backend).toEqual(['backendaot_eager']);
    const notes = (sel: string) => Array.from(insp.querySelectorAll(`${sel} .fv-note`)).map(p => p.textContent);
    expect(notes('.fv-compiled')).toEqual([
      'One region of model, compiled by torch.compile (backend aot_eager).',
      'In this process Dynamo has compiled 1 graph and met 0 graph breaks (torch._dynamo.utils.counters).'
    ]);
    expect(notes('.fv-compiled-hidden')).toEqual([
      'Compile hides what happens inside: autograd sees one Node, so the gradients shown are only those ' +
        'that crossed its edges, not the per-op gradients inside, and its ops belong to no module.',
      'To see them, run model eagerly for one step: call it without torch.compile ' +
        '(for a compiled module, model._orig_mod(x)), then draw that graph.'
    ]);
    // What it is comes before its gradients; the long words on what compile hides after them.
    // No "Leaf gradient" (.grad None, a sum of paths into nothing) for this op, though the kernel sends
    // its output's one path, as it does for every Node.
    expect(sections()).toEqual(['Origin', 'Compiled region', 'Gradients · backward #0', 'What compile hides']);
    // Named by what made it, not by AOTAutograd's internal class; its module as the user calls it.
    expect(insp.querySelector('.fv-sub')!.textContent).toBe('CompiledFunctionBackward · torch.compile, aot_eager');
    expect(insp.textContent).toContain('model (Sequential)');
    // The gradients that crossed its edges: out's arriving, and one leaving along each input edge, each
    // named by the Node at the other end.
    const leaving = Array.from(insp.querySelectorAll('.fv-grad-inputs .fv-key')).map(k => k.textContent);
    expect(leaving).toEqual(['leaving → 0.weight', 'leaving → 0.bias', 'leaving → h', 'leaving → 2.weight', 'leaving → 2.bias']);
    const stats = Array.from(insp.querySelectorAll('.fv-grad-inputs .fv-stats')).map(s => s.textContent);
    expect(stats.map(s => /norm ([\d.]+)/.exec(s!)![1])).toEqual(['0.6698', '0.05319', '0.03936', '0.8685', '0.1039']);
    expect(insp.querySelector('.fv-grad-outputs .fv-stats')!.textContent).toContain('norm 0.0951');
    expect(insp.querySelector('.fv-grad-inputs')!.textContent).toContain('4×32 float32');
    expect(insp.querySelector('.fv-source')!.textContent).toBe('out = model(h)');
  });

  it('shows no compiled section for an eager node', async () => {
    make({ requestDetail: vi.fn(async () => zDetail()) });
    await view!.setGraph(s1Graph());
    await click(3);
    expect(sections()).not.toContain('Compiled region');
    expect(sections()).not.toContain('What compile hides');
    expect(inspector().querySelector('.fv-compiled')).toBeNull();
    expect(inspector().textContent).not.toContain('torch.compile');
  });

  it('nor for an eager node of a graph that has a compiled region', async () => {
    make({ requestDetail: vi.fn(async id => (id === 2 ? compiledDetail() : detail({ id, label: 'h', name: 'MulBackward0', op: 'mul' }))) });
    await view!.setGraph(compiledGraph());
    await click(1);
    expect(sections()).not.toContain('Compiled region');
    expect(inspector().textContent).not.toContain('torch.compile');
  });
});

describe('compiledText', () => {
  it('counts graphs and breaks with their plurals, and says when a graph break split the call', () => {
    const text = compiledText(region({ name: 'chatty', dynamo_graphs: 2, dynamo_breaks: 1, regions_at_line: 2 }));
    expect(text.about.slice(1)).toEqual([
      'In this process Dynamo has compiled 2 graphs and met 1 graph break (torch._dynamo.utils.counters).',
      'This call ran as 2 compiled regions (graph breaks split it); this is one of them.'
    ]);
    expect(text.hidden[1]).toContain('chatty._orig_mod(x)');
  });

  it('leaves out what it cannot know: the counts, the backend and the module', () => {
    const text = compiledText(region({ name: 'compiled region', backend: null, dynamo_graphs: null, dynamo_breaks: null }));
    expect(text.about).toEqual(['One region of the compiled function, compiled by torch.compile (backend unknown).']);
    expect(text.hidden[1]).toContain('run the compiled function eagerly for one step');
    expect(text.hidden[1]).toContain('(for a compiled module, m = torch.compile(module): m._orig_mod(x))');
  });
});
