import { describe, expect, it } from 'vitest';
import { toDot } from '../../src/render/graph/dotgen';
import { barHeights } from '../../src/render/graph/draw';
import {
  defaultExpanded,
  foldGraph,
  indexGraph,
  revealMatch,
  searchGraph,
  VisibleItem,
  withCollapsed,
  withExpanded
} from '../../src/render/graph/fold';
import { parseLayout } from '../../src/render/graph/layout';
import { clusterGraph, s1Graph } from './fixtures';
import { gptGraph } from './gpt-fixture';
import { realLayout } from './graphviz';

const kinds = (items: Iterable<VisibleItem>) => Array.from(items).map(i => (i.kind === 'node' ? i.node.label : i.kind === 'module' ? `[${i.module.path}]` : `{${i.members.map(m => m.path).join(',')}}`));

describe('the fixture', () => {
  it('is shaped like GPT-2 small', () => {
    const g = gptGraph();
    expect(g.nodes.length).toBeGreaterThan(520);
    expect(g.nodes.length).toBeLessThan(560);
    expect(g.modules).toHaveLength(114);
    expect(g.repeats).toHaveLength(1);
    expect(g.repeats[0].members).toHaveLength(12);
  });
});

describe('first view', () => {
  it('folds GPT-2 to about 10 items with one "× 12" stack', () => {
    const ix = indexGraph(gptGraph());
    const exp = defaultExpanded(ix);
    // the root and the pure container h open; Blocks have ops of their own (residual adds)
    expect([...exp].sort()).toEqual(['model', 'model.h']);
    const vis = foldGraph(ix, exp);
    expect(vis.itemCount).toBeGreaterThanOrEqual(8);
    expect(vis.itemCount).toBeLessThanOrEqual(12);
    const stacks = [...vis.items.values()].filter(i => i.kind === 'stack');
    expect(stacks).toHaveLength(1);
    expect(stacks[0].kind === 'stack' && stacks[0].members.map(m => m.path)).toEqual(Array.from({ length: 12 }, (_, i) => `h.${i}`));
    expect(kinds(vis.items.values())).toEqual(
      expect.arrayContaining(['[wte]', '[wpe]', '[ln_f]', '[lm_head]', 'x', 'loss', `{${Array.from({ length: 12 }, (_, i) => `h.${i}`).join(',')}}`])
    );
    // every Node is drawn as itself or inside a box
    expect(vis.nodeItem.size).toBe(ix.graph.nodes.length);
  });

  it('keeps blocks with different signatures apart', () => {
    const ix = indexGraph(gptGraph({ odd: [6] }));
    expect(ix.graph.repeats.map(r => r.members.length)).toEqual([6, 5]);
    const vis = foldGraph(ix, defaultExpanded(ix));
    const order = kinds(vis.clusters.get('model.h')!.children.filter((c): c is VisibleItem => c.kind !== 'cluster'));
    expect(order).toEqual(['{h.0,h.1,h.2,h.3,h.4,h.5}', '[h.6]', '{h.7,h.8,h.9,h.10,h.11}']);
  });

  it('opens graphs of at most 50 Nodes fully expanded', () => {
    for (const g of [clusterGraph(), s1Graph()]) {
      const ix = indexGraph(g);
      const vis = foldGraph(ix, defaultExpanded(ix));
      expect(vis.nodeCount).toBe(g.nodes.length);
      expect(vis.clusters.size).toBe(g.modules.length);
      expect([...vis.items.values()].every(i => i.kind === 'node')).toBe(true);
    }
    // 51 Nodes fold
    const big = gptGraph({ blocks: 1 });
    expect(big.nodes.length).toBeGreaterThan(50);
    const ix = indexGraph(big);
    expect(foldGraph(ix, defaultExpanded(ix)).nodeCount).toBeLessThan(big.nodes.length);
  });
});

describe('edges', () => {
  it('map to the outermost collapsed box, drop self-loops and merge by pair with a count', () => {
    const ix = indexGraph(gptGraph());
    const vis = foldGraph(ix, defaultExpanded(ix));
    const pairs = vis.edges.map(e => `${e.src}>${e.dst}`);
    expect(new Set(pairs).size).toBe(pairs.length);
    expect(vis.edges.every(e => e.src !== e.dst)).toBe(true);
    const crossing = ix.graph.edges.filter(e => vis.nodeItem.get(e.src) !== vis.nodeItem.get(e.dst)).length;
    expect(vis.edges.reduce((a, e) => a + e.count, 0)).toBe(crossing);
    const key = (path: string) => vis.moduleItem.get(path ? `model.${path}` : 'model')!;
    // x feeds h.0's ln_1 and its residual add: two tensors, one edge, the first's shape as label
    const stackIn = vis.edges.find(e => e.src === 'n' + ix.graph.nodes.find(n => n.label === 'x')!.id && e.dst === key('h.0'))!;
    expect(stackIn.count).toBe(2);
    expect(stackIn.label).toBe('2×32×768');
    // the tied weight: wte's parameter feeds lm_head
    expect(vis.edges.some(e => e.src === key('wte') && e.dst === key('lm_head'))).toBe(true);
    expect(vis.edges.find(e => e.src === key('h.11') && e.dst === key('ln_f'))!.label).toBe('2×32×768');
  });

  it('show the count in the DOT label when several tensors merge', () => {
    const ix = indexGraph(gptGraph());
    const dot = toDot(foldGraph(ix, defaultExpanded(ix)));
    expect(dot).toMatch(/-> r0_0 \[label="2×32×768 ×2"\]/);
    expect(dot).toMatch(/r0_0 \[label="h\.0 … h\.11 · Block × 12\\n/);
    expect(dot).toContain('subgraph cluster_0 {');
    expect(dot).toContain('id="cluster:model.h"');
  });
});

describe('expand and collapse', () => {
  const ix = indexGraph(gptGraph());
  const first = defaultExpanded(ix);
  const inH = (exp: Set<string>) => kinds(foldGraph(ix, exp).clusters.get('model.h')!.children.filter((c): c is VisibleItem => c.kind !== 'cluster'));
  const clustersInH = (exp: Set<string>) => foldGraph(ix, exp).clusters.get('model.h')!.children.map(c => (c.kind === 'cluster' ? c.module.path : c.kind));

  it('splits a stack around the expanded instance k and re-forms it on collapse', () => {
    const k5 = withExpanded(ix, first, 'model.h.5');
    expect(clustersInH(k5)).toEqual(['stack', 'h.5', 'stack']);
    expect(inH(k5)).toEqual(['{h.0,h.1,h.2,h.3,h.4}', '{h.6,h.7,h.8,h.9,h.10,h.11}']);
    // instance 0: nothing before it
    expect(clustersInH(withExpanded(ix, first, 'model.h.0'))).toEqual(['h.0', 'stack']);
    // one member left before: a plain box
    expect(inH(withExpanded(ix, first, 'model.h.1'))).toEqual(['[h.0]', '{h.2,h.3,h.4,h.5,h.6,h.7,h.8,h.9,h.10,h.11}']);
    const back = withCollapsed(ix, k5, 'model.h.5');
    expect([...back].sort()).toEqual([...first].sort());
    expect(inH(back)).toEqual([`{${Array.from({ length: 12 }, (_, i) => `h.${i}`).join(',')}}`]);
  });

  it('draws an expanded block as a cluster of its sub-module boxes and own ops', () => {
    const vis = foldGraph(ix, withExpanded(ix, first, 'model.h.3'));
    const c = vis.clusters.get('model.h.3')!;
    expect(kinds(c.children.filter((x): x is VisibleItem => x.kind !== 'cluster')).sort()).toEqual(['[h.3.attn]', '[h.3.ln_1]', '[h.3.ln_2]', '[h.3.mlp]', 'h.3', 'h.3'].sort());
  });

  it('collapsing forgets what was expanded inside', () => {
    const deep = withExpanded(ix, first, 'model.h.2.attn');
    expect(deep.has('model.h.2')).toBe(true);
    const back = withCollapsed(ix, deep, 'model.h.2');
    expect(back.has('model.h.2.attn')).toBe(false);
  });
});

describe('search', () => {
  const ix = indexGraph(gptGraph());
  it('matches module paths and types, Node labels, ops and parameter names', () => {
    const m = searchGraph(ix, 'H.3.MLP.C_FC');
    expect(m[0]).toEqual({ kind: 'module', id: 'model.h.3.mlp.c_fc' });
    expect(m.filter(x => x.kind === 'node').length).toBeGreaterThan(0);
    expect(searchGraph(ix, 'CausalSelfAttention')).toHaveLength(12);
    expect(searchGraph(ix, 'h.7.attn.c_attn.weight')).toEqual([{ kind: 'node', id: expect.any(Number) }]);
    expect(searchGraph(ix, 'nllloss').length).toBe(1);
    expect(searchGraph(ix, '  ')).toEqual([]);
  });

  it('reveals a match by expanding its ancestors, splitting the stack at its instance', () => {
    const [param] = searchGraph(ix, 'h.7.attn.c_attn.weight');
    const exp = revealMatch(ix, defaultExpanded(ix), param);
    const vis = foldGraph(ix, exp);
    expect(vis.nodeItem.get(param.id as number)).toBe(`n${param.id}`);
    expect(['model.h.7', 'model.h.7.attn', 'model.h.7.attn.c_attn'].every(id => exp.has(id))).toBe(true);
    expect(kinds([...vis.items.values()].filter(i => i.kind === 'stack'))).toEqual(['{h.0,h.1,h.2,h.3,h.4,h.5,h.6}', '{h.8,h.9,h.10,h.11}']);
    // a module match shows its own box
    const mod = revealMatch(ix, defaultExpanded(ix), { kind: 'module', id: 'model.h.3.mlp.c_fc' });
    const item = foldGraph(ix, mod).items.get(foldGraph(ix, mod).moduleItem.get('model.h.3.mlp.c_fc')!)!;
    expect(item.kind === 'module' && item.module.path).toBe('h.3.mlp.c_fc');
  });
});

describe('stack bars', () => {
  it('are linear within 100×, log beyond, full for non-finite, absent without a norm', () => {
    expect(barHeights([1, 2, 4]).heights).toEqual([0.25, 0.5, 1]);
    expect(barHeights([1, 2, 4]).log).toBe(false);
    const lg = barHeights([1e-4, 1e-2, 1]);
    expect(lg.log).toBe(true);
    expect(lg.heights[1]).toBeCloseTo(0.05 + 0.95 / 2);
    expect(barHeights([null, 'Infinity', 1]).heights).toEqual([null, 1, 1]);
  });
});

describe('layout of generated DOT', () => {
  it('comes back with each box kind and key', async () => {
    const ix = indexGraph(gptGraph());
    const lay = parseLayout(await realLayout(toDot(foldGraph(ix, defaultExpanded(ix)))));
    const stack = lay.nodes.find(n => n.kind === 'stack')!;
    expect(stack.key).toBe('r0_0');
    expect(Number.isNaN(stack.id)).toBe(true);
    expect(lay.nodes.filter(n => n.kind === 'module').map(n => n.key).sort()).toEqual(['m1', 'm2', 'm112', 'm113'].sort());
    expect(lay.clusters.map(c => c.id)).toEqual(['cluster:model', 'cluster:model.h']);
    const e = lay.edges.find(x => x.srcKey === 'r0_0')!;
    expect(Number.isNaN(e.src)).toBe(true);
  });
});
