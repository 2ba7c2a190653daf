/** The folded graph view with real Graphviz: expand, collapse, stacks, search, state, stable positions. */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { ModuleDetail, NodeDetail } from '../../src/model/wire';
import { layeredLayout, type LayeredInput } from '../../src/render/graph/layered';
import { createGraphView, GraphView } from '../../src/render/graph/view';
import { loopGraph, zDetail } from './fixtures';
import { gptGraph, gptState } from './gpt-fixture';
import { realLayout } from './graphviz';

let el: HTMLElement;
let view: GraphView;

function moduleDetail(id: string): ModuleDetail {
  return { id, path: id, type: 'Block', op_count: 44, param_count: 1, param_bytes: 4, parameters: [], grad_histogram: null, grad_norm: null, param_grad_norm: null, alive: true };
}

function make() {
  const opts = {
    layout: vi.fn(realLayout),
    layoutLayered: vi.fn(async (input: LayeredInput) => layeredLayout(input)),
    requestDetail: vi.fn(async (): Promise<NodeDetail> => zDetail()),
    requestModule: vi.fn(async (id: string) => moduleDetail(id)),
    requestDot: vi.fn(async () => 'digraph {}'),
    onExpandedChange: vi.fn((_ids: string[]) => undefined)
  };
  view = createGraphView(el, opts);
  return opts;
}

beforeEach(() => {
  el = document.createElement('div');
  document.body.appendChild(el);
});
afterEach(() => {
  view?.destroy();
  el.remove();
});

const q = (sel: string) => el.querySelector<SVGGElement>(sel);
const qa = (sel: string) => Array.from(el.querySelectorAll<SVGGElement>(sel));
const ready = () => vi.waitFor(() => expect(el.getAttribute('data-fv-state')).toBe('ready'));
const click = (e: Element) => e.dispatchEvent(new MouseEvent('click', { bubbles: true }));
const key = (e: Element, k: string) => e.dispatchEvent(new KeyboardEvent('keydown', { key: k, bubbles: true }));

/** The viewport's transform. */
function transform() {
  const m = /translate\(([-\d.]+),([-\d.]+)\) scale\(([-\d.]+)\)/.exec(q('.fv-viewport')!.getAttribute('transform')!)!;
  return { x: Number(m[1]), y: Number(m[2]), k: Number(m[3]) };
}
/** A box's top centre and centre in graph coordinates. */
function boxGeom(g: Element) {
  const m = /translate\(([-\d.]+),([-\d.]+)\)/.exec(g.getAttribute('transform')!)!;
  const r = g.querySelector('.fv-node-box')!;
  const w = Number(r.getAttribute('width'));
  const h = Number(r.getAttribute('height'));
  return { x: Number(m[1]) + w / 2, y: Number(m[2]), cy: Number(m[2]) + h / 2 };
}
function clusterTop(g: Element) {
  const r = g.querySelector('.fv-cluster-box')!;
  return { x: Number(r.getAttribute('x')) + Number(r.getAttribute('width')) / 2, y: Number(r.getAttribute('y')) };
}
const onScreen = (p: { x: number; y: number }) => {
  const t = transform();
  return { x: p.x * t.k + t.x, y: p.y * t.k + t.y };
};

describe('folded first view', () => {
  it('draws GPT-2 as about 10 items with one "× 12" stack and the stable hooks', async () => {
    const opts = make();
    await view.setGraph(gptGraph());
    expect(el.matches('.fv-root[data-fv-state="ready"]')).toBe(true);
    expect(opts.layout).toHaveBeenCalledTimes(1);
    const items = qa('.fv-node, .fv-box');
    expect(items.length).toBeGreaterThanOrEqual(8);
    expect(items.length).toBeLessThanOrEqual(12);
    expect(qa('[data-fv-repeat]').map(e => e.getAttribute('data-fv-repeat'))).toEqual(['12']);
    expect(q('[data-fv-repeat="12"]')!.textContent).toContain('h.0 … h.11 · Block × 12');
    const wte = q('.fv-box[data-fv-module="wte"]')!;
    expect(wte.textContent).toContain('Embedding');
    expect(wte.textContent).toContain('38.6M params · 147 MiB');
    expect(q('.fv-cluster[data-fv-module="h"]')).not.toBeNull();
    expect(q('.fv-cluster[data-fv-module=""]')!.getAttribute('data-cluster-id')).toBe('cluster:model');
    const x = gptGraph().nodes.find(n => n.label === 'x')!;
    expect(q(`[data-fv-node="${x.id}"]`)!.getAttribute('data-node-id')).toBe(String(x.id));
    expect(el.querySelector('.fv-transcript')!.textContent).toContain('12 repeated modules h.0 … h.11 · Block × 12');
    expect(opts.onExpandedChange).not.toHaveBeenCalled();
  });

  it('shows the cut message as info', async () => {
    make();
    await view.setGraph({ ...gptGraph(), total_nodes: 90_000, cut: 'showing 543 of 90,000 nodes' });
    const status = q('.fv-status') as unknown as HTMLElement;
    expect(status.hidden).toBe(false);
    expect(status.getAttribute('data-kind')).toBe('info');
    expect(status.textContent).toBe('showing 543 of 90,000 nodes');
  });
});

describe('expand and collapse', () => {
  it('a click on the stack expands instance 0, asks for the module and tells the expansion', async () => {
    const opts = make();
    await view.setGraph(gptGraph());
    click(q('[data-fv-repeat="12"] .fv-node-box')!);
    await vi.waitFor(() => expect(q('.fv-cluster[data-fv-module="h.0"]')).not.toBeNull());
    await ready();
    expect(qa('[data-fv-repeat]').map(e => e.getAttribute('data-fv-repeat'))).toEqual(['11']);
    expect(opts.requestModule).toHaveBeenCalledWith('model.h.0');
    expect(opts.onExpandedChange).toHaveBeenLastCalledWith(['model', 'model.h', 'model.h.0']);
    expect(q('.fv-box[data-fv-module="h.0.attn"]')).not.toBeNull();
  });

  it('bar k expands instance k between two stacks; its label collapses it back into one stack', async () => {
    make();
    await view.setGraph(gptGraph());
    click(q('[data-fv-repeat="12"] .fv-bar[data-instance="5"] .fv-bar-slot')!);
    await vi.waitFor(() => expect(q('.fv-cluster[data-fv-module="h.5"]')).not.toBeNull());
    await ready();
    expect(qa('[data-fv-repeat]').map(e => e.getAttribute('data-fv-repeat'))).toEqual(['5', '6']);
    expect(view.expanded()).toEqual(['model', 'model.h', 'model.h.5']);
    click(q('.fv-cluster[data-fv-module="h.5"] .fv-cluster-label')!);
    await vi.waitFor(() => expect(q('.fv-cluster[data-fv-module="h.5"]')).toBeNull());
    await ready();
    expect(qa('[data-fv-repeat]').map(e => e.getAttribute('data-fv-repeat'))).toEqual(['12']);
  });

  it('Enter on a module box expands it; Enter on its cluster label collapses it', async () => {
    make();
    await view.setGraph(gptGraph());
    key(q('.fv-box[data-fv-module="ln_f"]')!, 'Enter');
    await vi.waitFor(() => expect(q('.fv-cluster[data-fv-module="ln_f"]')).not.toBeNull());
    await ready();
    expect(q('.fv-box[data-fv-module="ln_f"]')).toBeNull();
    key(q('.fv-cluster[data-fv-module="ln_f"] .fv-cluster-head')!, 'Enter');
    await vi.waitFor(() => expect(q('.fv-box[data-fv-module="ln_f"]')).not.toBeNull());
  });

  it('expand all, collapse all and expand to depth', async () => {
    const opts = make();
    await view.setGraph(gptGraph());
    const first = qa('.fv-node, .fv-box').length;
    await view.expandToDepth(3);
    expect(q('.fv-cluster[data-fv-module="h.11"]')).not.toBeNull();
    expect(q('.fv-box[data-fv-module="h.11.mlp"]')).not.toBeNull();
    expect(qa('[data-fv-repeat]')).toHaveLength(0);
    (q('button.fv-expand-all') as unknown as HTMLButtonElement).click();
    await vi.waitFor(() => expect(qa('.fv-node')).toHaveLength(gptGraph().nodes.length), { timeout: 15_000 });
    expect(qa('.fv-box')).toHaveLength(0);
    (q('button.fv-collapse-all') as unknown as HTMLButtonElement).click();
    await vi.waitFor(() => expect(qa('.fv-node, .fv-box')).toHaveLength(first));
    expect(opts.onExpandedChange).toHaveBeenLastCalledWith([]);
    const sel = el.querySelector<HTMLSelectElement>('select.fv-depth')!;
    sel.value = '2';
    sel.dispatchEvent(new Event('change'));
    await vi.waitFor(() => expect(q('.fv-cluster[data-fv-module="h.0"]')).toBeNull());
    expect(q('.fv-cluster[data-fv-module="h"]')).not.toBeNull();
  });

  it('setExpanded (the trait) draws that expansion and does not echo it', async () => {
    const opts = make();
    await view.setExpanded(['model', 'model.h', 'model.h.2', 'model.gone']);
    await view.setGraph(gptGraph());
    expect(q('.fv-cluster[data-fv-module="h.2"]')).not.toBeNull();
    await view.setExpanded([]);
    expect(q('.fv-cluster[data-fv-module="h.2"]')).toBeNull();
    expect(qa('[data-fv-repeat="12"]')).toHaveLength(1);
    expect(opts.onExpandedChange).not.toHaveBeenCalled();
  });

  it('keeps the clicked box still on screen and the other boxes in order', async () => {
    make();
    await view.setGraph(gptGraph());
    const others = () =>
      new Map(qa('.fv-box, .fv-node').filter(b => b.getAttribute('data-fv-module') !== 'ln_f').map(b => [b.getAttribute('data-fv-key')!, boxGeom(b).cy]));
    const before = others();
    const clicked = onScreen(boxGeom(q('.fv-box[data-fv-module="ln_f"]')!));
    click(q('.fv-box[data-fv-module="ln_f"] .fv-node-box')!);
    await vi.waitFor(() => expect(q('.fv-cluster[data-fv-module="ln_f"]')).not.toBeNull());
    await ready();
    const after = onScreen(clusterTop(q('.fv-cluster[data-fv-module="ln_f"]')!));
    expect(Math.abs(after.x - clicked.x)).toBeLessThan(1);
    expect(Math.abs(after.y - clicked.y)).toBeLessThan(1);
    const now = others();
    // ln_f's own Nodes are new; every other item is still there
    expect([...before.keys()].every(k => now.has(k))).toBe(true);
    // every pair one above the other stays so along the rank axis
    const keys = [...before.keys()];
    let pairs = 0;
    for (const a of keys) {
      for (const b of keys) {
        if (before.get(a)! < before.get(b)! - 1) {
          pairs++;
          expect(now.get(a)!, `${a} above ${b}`).toBeLessThan(now.get(b)!);
        }
      }
    }
    expect(pairs).toBeGreaterThan(10);
  });
});

describe('state', () => {
  it('applies a GraphState with no new layout: badges, module norms, one bar per instance', async () => {
    const opts = make();
    const g = gptGraph();
    await view.setGraph(g);
    expect(qa('.fv-bar-fill')).toHaveLength(0);
    expect(q('.fv-box[data-fv-module="wte"] .fv-line-grad')!.textContent).toBe('');
    view.setState(gptState(g));
    expect(opts.layout).toHaveBeenCalledTimes(1);
    const bars = qa('[data-fv-repeat="12"] .fv-bar');
    expect(bars).toHaveLength(12);
    expect(qa('[data-fv-repeat="12"] .fv-bar-fill')).toHaveLength(12);
    expect(q('[data-fv-repeat="12"] .fv-bars')!.getAttribute('data-scale')).toBe('log');
    expect(bars[3].querySelector('title')!.textContent).toMatch(/^h\.3: ‖∇ params‖ = /);
    const heights = qa('[data-fv-repeat="12"] .fv-bar-fill').map(b => Number(b.getAttribute('height')));
    expect(heights[11]).toBeGreaterThan(heights[0] * 5);
    expect(q('.fv-box[data-fv-module="wte"] .fv-line-grad')!.textContent).toBe('‖∇‖ = 1');
    const x = g.nodes.find(n => n.label === 'x')!;
    expect(q(`[data-fv-node="${x.id}"] .fv-badge-text`)!.textContent).toBe('∇ ‖g‖=1');
    expect(q(`[data-fv-node="${x.id}"]`)!.classList.contains('fv-freed')).toBe(true);
    // a Node not listed is back to its default; non-finite marks the box that holds it
    const inside = g.modules.find(m => m.path === 'ln_f')!.nodes[0];
    view.setState({ ...gptState(g, 2), ids: [], grad_passes: [], grad_briefs: [], freed: [], nonfinite: [inside], first_nonfinite: [inside] });
    expect(q(`[data-fv-node="${x.id}"] .fv-badge`)).toBeNull();
    expect(q('.fv-box[data-fv-module="ln_f"]')!.classList.contains('fv-first-nonfinite')).toBe(true);
    expect(opts.layout).toHaveBeenCalledTimes(1);
  });
});

describe('search', () => {
  it('expands the path to a match, marks and counts matches; Enter moves on, Escape clears', async () => {
    make();
    const g = gptGraph();
    await view.setGraph(g);
    const input = el.querySelector<HTMLInputElement>('input.fv-search')!;
    input.value = 'h.7.attn.c_attn.weight';
    key(input, 'Enter');
    const param = g.nodes.find(n => n.label === 'h.7.attn.c_attn.weight')!;
    await vi.waitFor(() => expect(q(`[data-fv-node="${param.id}"]`)).not.toBeNull());
    await ready();
    expect(q(`[data-fv-node="${param.id}"]`)!.classList.contains('fv-match')).toBe(true);
    expect(el.querySelector('.fv-search-count')!.textContent).toBe('1 of 1 matches');
    expect(q('.fv-cluster[data-fv-module="h.7.attn.c_attn"]')).not.toBeNull();
    expect(qa('[data-fv-repeat]').map(e => e.getAttribute('data-fv-repeat'))).toEqual(['7', '4']);

    expect(await view.search('CausalSelfAttention')).toBe(12);
    expect(el.querySelector('.fv-search-count')!.textContent).toBe('1 of 12 matches');
    expect(q('.fv-box[data-fv-module="h.0.attn"]')!.classList.contains('fv-match-current')).toBe(true);
    input.value = 'CausalSelfAttention';
    key(input, 'Enter');
    await vi.waitFor(() => expect(el.querySelector('.fv-search-count')!.textContent).toBe('2 of 12 matches'));
    await vi.waitFor(() => expect(q('.fv-box[data-fv-module="h.1.attn"]')?.classList.contains('fv-match-current')).toBe(true));
    key(input, 'Escape');
    await vi.waitFor(() => expect(qa('.fv-match, .fv-match-inside')).toHaveLength(0));
    expect(el.querySelector('.fv-search-count')!.textContent).toBe('');
  });
});

describe('module path', () => {
  it('shows the breadcrumb of the selected module; a crumb centres its module', async () => {
    make();
    await view.setGraph(gptGraph());
    await view.expand('model.h.3.attn');
    await view.selectModule('model.h.3.attn');
    const crumbs = el.querySelector<HTMLElement>('.fv-crumbs')!;
    expect(crumbs.hidden).toBe(false);
    expect(Array.from(crumbs.querySelectorAll('button')).map(b => b.textContent)).toEqual(['model', 'h', '3', 'attn']);
    const t0 = transform();
    crumbs.querySelectorAll('button')[2].click();
    expect(transform()).not.toEqual(t0);
  });
});

describe('speed (indicative: happy-dom and Graphviz in Node)', () => {
  it('first folded view, expanding one block, expanding all', async () => {
    make();
    const g = gptGraph({ grads: true });
    let t = performance.now();
    await view.setGraph(g);
    const first = performance.now() - t;
    t = performance.now();
    await view.expand('model.h.4');
    const one = performance.now() - t;
    t = performance.now();
    await view.expandAll();
    const all = performance.now() - t;
    console.log(`GPT-2 fixture: first view ${first.toFixed(0)} ms, one block ${one.toFixed(0)} ms, expand all ${all.toFixed(0)} ms`);
    expect(qa('.fv-node')).toHaveLength(g.nodes.length);
  });
});

describe('a 10,000-op loop', () => {
  /** The stage's SVG as the page would size it (happy-dom lays nothing out). */
  function sized(w = 800, h = 500) {
    const svg = q('svg.fv-canvas')!;
    Object.defineProperty(svg, 'clientWidth', { configurable: true, get: () => w });
    Object.defineProperty(svg, 'clientHeight', { configurable: true, get: () => h });
  }
  const drawnItems = () => qa('.fv-graph .fv-node, .fv-graph .fv-box');
  /** A sized view of an ``n``-op chain, expanded (so drawn windowed), and ``select``ed if given. */
  async function expandedChain(n = 10_000, select?: number) {
    make();
    sized();
    await view.setGraph(loopGraph(n));
    await ready();
    await view.expandAll();
    await ready();
    if (select !== undefined) {
      await view.select(select);
    }
  }
  /** Boxes in the overview paths: one "h…v…h…z" each. */
  const overviewBoxes = () => qa('.fv-overview path').reduce((n, p) => n + (p.getAttribute('d')!.match(/z/g) ?? []).length, 0);

  it('opens as one box; expanded, it is laid out by layers and drawn windowed: groups in view, the rest as overview', async () => {
    make();
    sized();
    await view.setGraph(loopGraph());
    await ready();
    expect(drawnItems()).toHaveLength(2); // the leaf t, the loop's box
    expect(q('[data-fv-module="cell [4] line 3"]')).not.toBeNull();
    await view.expandAll();
    await ready();
    expect(q('.fv-graph.fv-windowed')).not.toBeNull();
    // fitted: 10,001 boxes are far too many to read, so none is a group and all are overview
    expect(drawnItems()).toHaveLength(0);
    expect(overviewBoxes()).toBe(10_001);
    expect(qa('.fv-overview-edges .fv-edge-path').length).toBeGreaterThan(0);
    expect(el.textContent).toContain('10,001 boxes: zoom in to read them');
    // zoom in on op 5,000: the ops around it become groups with their hooks, the rest stay overview
    await view.select(5000);
    const t = transform();
    const near = drawnItems();
    expect(near.length).toBeGreaterThan(0);
    expect(near.length).toBeLessThanOrEqual(600);
    expect(q('[data-fv-node="5000"]')).not.toBeNull();
    expect(q('[data-fv-node="5000"]')!.getAttribute('class')).toContain('fv-selected');
    expect(overviewBoxes() + near.length).toBe(10_001);
    // drawn groups carry their decoration like any small view's
    expect(q('[data-fv-node="4999"]')!.getAttribute('class')).toContain('fv-op');
    expect(t.k).toBeGreaterThan(0);
  });

  it('moves the window with a pan: new items become groups, ones far away go back to the overview', async () => {
    await expandedChain(10_000, 5000);
    const before = new Set(drawnItems().map(g => g.getAttribute('data-fv-key')));
    expect(before.has('n5000')).toBe(true);
    // drag the drawing up by ten screens' worth of 400 px, as a hand on the mouse would
    const svg = q('svg.fv-canvas')!;
    const pointer = (type: string, y: number) =>
      svg.dispatchEvent(new PointerEvent(type, { bubbles: true, pointerId: 1, button: 0, clientX: 400, clientY: y }));
    pointer('pointerdown', 450);
    for (let i = 1; i <= 10; i++) {
      pointer('pointermove', 450 - 400 * i);
    }
    pointer('pointerup', 450 - 4000);
    // once the pan settles, the window follows it
    await vi.waitFor(() => expect(q('[data-fv-node="5000"]')).toBeNull());
    const after = new Set(drawnItems().map(g => g.getAttribute('data-fv-key')));
    expect(after.size).toBeGreaterThan(0);
    expect([...after].some(k => before.has(k))).toBe(false);
    // further down the chain: higher ids
    expect(overviewBoxes() + after.size).toBe(10_001);
    const first = Math.min(...[...after].map(k => Number(k!.slice(1))));
    expect(first).toBeGreaterThan(5000);
    expect(q(`[data-fv-node="${first}"]`)!.getAttribute('class')).toContain('fv-op'); // decorated when drawn
  });

  it('moves the focus with the arrow keys past the window: the Node reached is drawn, decorated and kept in view', async () => {
    await expandedChain(10_000, 5000);
    q('[data-fv-node="5000"]')!.focus();
    for (let i = 1; i <= 40; i++) {
      (document.activeElement as Element).dispatchEvent(new KeyboardEvent('keydown', { key: 'ArrowDown', bubbles: true }));
      expect(document.activeElement?.getAttribute('data-fv-node')).toBe(String(5000 + i));
    }
    // 40 ops down is past the window drawn around op 5,000: the key drew it, with its classes
    expect(document.activeElement?.getAttribute('class')).toContain('fv-op');
    // and the focus panned it into view
    const t = transform();
    const svg = q('svg.fv-canvas')!;
    const box = q('[data-fv-node="5040"]')!;
    const y = Number(/translate\([-\d.]+,([-\d.]+)\)/.exec(box.getAttribute('transform')!)![1]) * t.k + t.y;
    expect(y).toBeGreaterThanOrEqual(-100);
    expect(y).toBeLessThanOrEqual(svg.clientHeight);
  });

  it('selects the box clicked in the overview, and exports every box to SVG', async () => {
    await expandedChain(1300);
    expect(q('.fv-graph.fv-windowed')).not.toBeNull();
    expect(drawnItems()).toHaveLength(0);
    const exported = view.exportSVG();
    expect(exported.match(/data-fv-node="\d+"/g) ?? []).toHaveLength(1301);
    expect(drawnItems()).toHaveLength(0); // the export left nothing drawn on the page
    // click inside the first op's overview rectangle: it selects that Node
    const box = /^M([\d.-]+),([\d.-]+)h/.exec(q('.fv-overview-op')!.getAttribute('d')!)!;
    const t = transform();
    const svg = q('svg.fv-canvas')!;
    svg.getBoundingClientRect = () => ({ left: 0, top: 0, right: 800, bottom: 500, width: 800, height: 500, x: 0, y: 0, toJSON: () => null });
    svg.dispatchEvent(new MouseEvent('click', { bubbles: true, clientX: (Number(box[1]) + 10) * t.k + t.x, clientY: (Number(box[2]) + 10) * t.k + t.y }));
    await vi.waitFor(() => expect(q('.fv-node.fv-selected')).not.toBeNull());
    expect(q('.fv-node.fv-selected')!.getAttribute('data-fv-node')).toBe('1');
  });
});

describe('the transcript of a big view', () => {
  it('is written when opened, not at every expand', async () => {
    make();
    await view.setGraph(gptGraph());
    await ready();
    await view.expandAll();
    const t = el.querySelector<HTMLDetailsElement>('details.fv-transcript')!;
    expect(t.querySelectorAll('li')).toHaveLength(0);
    expect(t.textContent).toBe('Text description');
    t.open = true;
    t.dispatchEvent(new Event('toggle'));
    expect(t.querySelectorAll('.fv-transcript-nodes li').length).toBeGreaterThan(500);
  });
});

describe('a big drawing', () => {
  it('goes on the page a few hundred groups per frame, and is ready only when all are there', async () => {
    make();
    await view.setGraph(gptGraph());
    await ready();
    const frames = vi.spyOn(window, 'requestAnimationFrame');
    const seen: number[] = [];
    const watch = new MutationObserver(() => {
      if (el.getAttribute('data-fv-state') === 'loading') {
        seen.push(qa('.fv-graph .fv-node, .fv-graph .fv-box').length);
      }
    });
    watch.observe(el, { subtree: true, childList: true });
    await view.expandAll();
    watch.disconnect();
    const total = qa('.fv-graph .fv-node, .fv-graph .fv-box').length;
    expect(total).toBeGreaterThan(500);
    expect(frames.mock.calls.length).toBeGreaterThanOrEqual(3);
    expect(seen.some(n => n > 0 && n < total)).toBe(true); // part of it was on the page, still loading
    expect(el.getAttribute('data-fv-state')).toBe('ready');
    frames.mockRestore();
  });
});
