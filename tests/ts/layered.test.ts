import { describe, expect, it } from 'vitest';
import { toLayered } from '../../src/render/graph/dotgen';
import { allModules, defaultExpanded, foldGraph, indexGraph } from '../../src/render/graph/fold';
import type { Layout, NodeBox } from '../../src/render/graph/layout';
import { layeredLayout, packLayout, unpackLayout } from '../../src/render/graph/layered';
import { loopGraph } from './fixtures';
import { gptGraph } from './gpt-fixture';

/** Boxes that overlap (by more than a hair), as pairs of keys. */
function overlaps(boxes: NodeBox[]): [string, string][] {
  const out: [string, string][] = [];
  const sorted = [...boxes].sort((a, b) => a.cy - a.h / 2 - (b.cy - b.h / 2));
  for (let i = 0; i < sorted.length; i++) {
    const a = sorted[i];
    for (let j = i + 1; j < sorted.length; j++) {
      const b = sorted[j];
      if (b.cy - b.h / 2 >= a.cy + a.h / 2 - 0.5) {
        break;
      }
      if (Math.abs(a.cx - b.cx) < (a.w + b.w) / 2 - 0.5) {
        out.push([a.key, b.key]);
      }
    }
  }
  return out;
}

function layOut(g = gptGraph(), expandAll = true): { lay: Layout; ms: number } {
  const ix = indexGraph(g);
  const vis = foldGraph(ix, expandAll ? allModules(ix) : defaultExpanded(ix));
  const t = performance.now();
  const lay = layeredLayout(toLayered(vis));
  return { lay, ms: performance.now() - t };
}

describe('the layered layout', () => {
  it('places every box of GPT-2 expanded, none overlapping, each inside its clusters', () => {
    const g = gptGraph();
    const { lay } = layOut(g);
    expect(lay.nodes).toHaveLength(g.nodes.length);
    expect(overlaps(lay.nodes)).toEqual([]);
    const ix = indexGraph(g);
    const byId = new Map(lay.clusters.map(c => [c.id, c]));
    for (const b of lay.nodes) {
      // every module that lists the Node, and each of its parents, is a cluster around it
      for (let m = ix.moduleById.get(ix.nodeModule.get(b.id) ?? ''); m; m = m.parent ? ix.moduleById.get(m.parent) : undefined) {
        const c = byId.get(`cluster:${m.id}`)!;
        expect(c, m.id).toBeDefined();
        expect(b.cx - b.w / 2).toBeGreaterThanOrEqual(c.x);
        expect(b.cx + b.w / 2).toBeLessThanOrEqual(c.x + c.w + 1e-6);
        expect(b.cy - b.h / 2).toBeGreaterThanOrEqual(c.y);
        expect(b.cy + b.h / 2).toBeLessThanOrEqual(c.y + c.h + 1e-6);
      }
    }
    // sibling clusters never overlap
    const clusters = lay.clusters;
    for (const a of clusters) {
      for (const b of clusters) {
        if (a !== b && a.depth === b.depth) {
          const apart = a.x + a.w <= b.x + 0.5 || b.x + b.w <= a.x + 0.5 || a.y + a.h <= b.y + 0.5 || b.y + b.h <= a.y + 0.5;
          const nested = (a.x <= b.x && b.x + b.w <= a.x + a.w) || (b.x <= a.x && a.x + a.w <= b.x + b.w);
          expect(apart || nested, `${a.id} / ${b.id}`).toBe(true);
        }
      }
    }
  });

  it('draws the forward direction downwards: every edge of the DAG ends below where it starts', () => {
    const { lay } = layOut();
    const box = new Map(lay.nodes.map(b => [b.key, b]));
    let down = 0;
    for (const e of lay.edges) {
      const a = box.get(e.srcKey)!;
      const b = box.get(e.dstKey)!;
      if (b.cy > a.cy) {
        down++;
      }
      expect(e.d).toMatch(/^M[\d.-]+,[\d.-]+C/);
      expect(e.head).toHaveLength(3);
      expect(e.head![0].y).toBeCloseTo(b.cy - b.h / 2, 5); // the tip touches the destination's top
    }
    expect(down).toBe(lay.edges.length);
  });

  it('lays a 10,000-op chain out as one column, each op below the one before, in tens of ms', () => {
    const g = loopGraph();
    const { lay, ms } = layOut(g);
    console.log(`layered: 10,001 boxes in ${ms.toFixed(0)} ms`);
    expect(lay.nodes).toHaveLength(10_001);
    const box = new Map(lay.nodes.map(b => [b.id, b]));
    for (let i = 1; i <= 10_000; i++) {
      expect(box.get(i)!.cy).toBeGreaterThan(box.get(i - 1)!.cy);
    }
    expect(new Set(lay.nodes.slice(1).map(b => Math.round(b.cx))).size).toBe(1);
    expect(overlaps(lay.nodes)).toEqual([]);
  });

  it('packs for the worker\'s answer and unpacks to the same layout', () => {
    const ix = indexGraph(gptGraph());
    const input = toLayered(foldGraph(ix, allModules(ix)));
    const lay = layeredLayout(input);
    const packed = packLayout(lay);
    expect(packed.geometry).toBeInstanceOf(Float64Array);
    expect(unpackLayout(structuredClone(packed), input)).toEqual(lay);
  });
});
