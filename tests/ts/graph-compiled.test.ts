/** A torch.compile region in the graph view: one box, and a click shows what compile hides and the
 *  gradients that crossed its edges (the kernel side: tests/test_graph_compiled.py). */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { CompiledRegion, NodeDetail } from '../../src/model/wire';
import { compiledText } from '../../src/render/graph/inspector';
import { createGraphView, GraphView } from '../../src/render/graph/view';
import { compiledDetail, compiledGraph, detail, s1Graph, zDetail } from './fixtures';
import { realLayout } from './graphviz';

let el: HTMLElement;
let view: GraphView | null = null;

beforeEach(() => {
  el = document.createElement('div');
  document.body.appendChild(el);
});
afterEach(() => {
  view?.destroy();
  view = null;
  el.remove();
});

function make(requestDetail: (id: number) => Promise<NodeDetail>) {
  view = createGraphView(el, { layout: realLayout, requestDetail: vi.fn(requestDetail), requestDot: async () => 'digraph {}' });
  return view;
}

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
    make(async id => (id === 2 ? compiledDetail() : detail({ id, label: 'h', name: 'MulBackward0' })));
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
    make(async () => zDetail());
    await view!.setGraph(s1Graph());
    await click(3);
    expect(sections()).not.toContain('Compiled region');
    expect(sections()).not.toContain('What compile hides');
    expect(inspector().querySelector('.fv-compiled')).toBeNull();
    expect(inspector().textContent).not.toContain('torch.compile');
  });

  it('nor for an eager node of a graph that has a compiled region', async () => {
    make(async id => (id === 2 ? compiledDetail() : detail({ id, label: 'h', name: 'MulBackward0', op: 'mul' })));
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
