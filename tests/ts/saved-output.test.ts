/**
 * Saved outputs drawn with no kernel (src/lab/saved.ts, src/lab/mime.ts): the view's own entry over
 * the saved traits, the graph's inspector answered from the saved details, the broadcast's steps.
 */
import { Graphviz } from '@hpcc-js/wasm-graphviz';
import { afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { isSavedPayload, mountSaved, SAVED_MIME, type SavedPayload } from '../../src/lab/saved';
import { SavedRenderer, rendererFactory, viewUrl } from '../../src/lab/mime';
import broadcast from '../../src/widgets/broadcast';
import graph from '../../src/widgets/graph';
import { okPlan } from './broadcast-fixtures';
import { s1Graph, traitOf, xDetail } from './fixtures';

let gv: Graphviz;
beforeAll(async () => {
  gv = await Graphviz.load();
});

type G = { __forgeviz__?: any };
let cleanups: (() => void)[] = [];
afterEach(() => {
  cleanups.forEach(c => c());
  cleanups = [];
  document.body.replaceChildren();
  delete (globalThis as G).__forgeviz__;
});

function s1Payload(): SavedPayload {
  return {
    version: 1,
    view: 'graph',
    summary: 'forgeviz graph: 5 Nodes, loss ← x, y; grads after 1 backward',
    traits: { graph: traitOf(s1Graph()), expanded: [], warnings: [] },
    details: { nodes: { '1': xDetail() }, modules: {} }
  };
}

const rootOf = (el: HTMLElement) => (el.classList.contains('fv-root') ? el : el.querySelector('.fv-root'));
const ready = (el: HTMLElement) => vi.waitFor(() => expect(rootOf(el)?.getAttribute('data-fv-state')).toBe('ready'), { timeout: 10_000 });

describe('a saved graph', () => {
  it('is drawn with no kernel, and a click on x shows its saved detail (64)', async () => {
    (globalThis as G).__forgeviz__ = { loadGraphviz: async () => gv };
    const el = document.body.appendChild(document.createElement('div'));
    cleanups.push(mountSaved(el, s1Payload(), graph));
    await ready(el);
    expect(el.querySelectorAll('.fv-node')).toHaveLength(5);
    el.querySelector('.fv-node[data-node-id="1"]')!.dispatchEvent(new MouseEvent('click', { bubbles: true }));
    const insp = el.querySelector('.fv-inspector')!;
    await vi.waitFor(() => expect(insp.getAttribute('data-state')).toBe('ready'));
    expect(insp.querySelector('h3')!.textContent).toBe('x');
    expect(insp.textContent).toContain('64');
  });

  it('says why a Node without saved details cannot be inspected', async () => {
    (globalThis as G).__forgeviz__ = { loadGraphviz: async () => gv };
    const el = document.body.appendChild(document.createElement('div'));
    cleanups.push(mountSaved(el, { ...s1Payload(), details: {}, details_cut: '532 Nodes: details are saved for at most 300' }, graph));
    await ready(el);
    el.querySelector('.fv-node[data-node-id="3"]')!.dispatchEvent(new MouseEvent('click', { bubbles: true }));
    const insp = el.querySelector('.fv-inspector')!;
    await vi.waitFor(() => expect(insp.getAttribute('data-state')).toBe('error'));
    expect(insp.textContent).toContain('details are saved for at most 300');
  });

  it('the Lab renderer loads the view by name and draws the saved data', async () => {
    (globalThis as G).__forgeviz__ = { loadGraphviz: async () => gv, graphvizSource: () => Promise.reject(new Error('unused')) };
    const load = vi.fn(async () => graph);
    const renderer = new SavedRenderer(load);
    document.body.appendChild(renderer.node);
    await renderer.renderModel({ data: { [SAVED_MIME]: s1Payload() as any }, metadata: {}, trusted: false, setData() {} } as any);
    expect(load).toHaveBeenCalledWith('graph');
    await ready(renderer.node);
    expect(renderer.node.querySelectorAll('.fv-node')).toHaveLength(5);
    renderer.dispose();
    expect(renderer.node.children).toHaveLength(0);
    expect(rendererFactory.safe).toBe(true);
    expect(rendererFactory.defaultRank).toBeLessThan(-10); // before the live widget's renderer (-10): it hands a trusted output to it (mime.ts)
    expect(rendererFactory.defaultRank).toBeLessThan(120); // before text/plain
  });

  it('a payload of another version shows a message, not a broken view', async () => {
    const renderer = new SavedRenderer(async () => graph);
    await renderer.renderModel({ data: { [SAVED_MIME]: { version: 2 } as any }, metadata: {}, trusted: false, setData() {} } as any);
    expect(renderer.node.textContent).toContain('another version');
    expect(isSavedPayload(s1Payload())).toBe(true);
  });
});

describe('a saved broadcast', () => {
  it('steps with its controls', () => {
    vi.useFakeTimers();
    try {
      const el = document.body.appendChild(document.createElement('div'));
      const payload: SavedPayload = { version: 1, view: 'broadcast', traits: { plan: okPlan(), warnings: [] }, details: {} };
      cleanups.push(mountSaved(el, payload, broadcast));
      expect(el.getAttribute('data-fv-state')).toBe('ready');
      expect(el.getAttribute('data-step')).toBe('5');
      el.querySelector<HTMLButtonElement>('button.fv-bc-first')!.click();
      expect(el.getAttribute('data-step')).toBe('0');
      el.querySelector<HTMLButtonElement>('button.fv-bc-next')!.click();
      expect(el.getAttribute('data-step')).toBe('1');
      el.querySelector<HTMLButtonElement>('button.fv-bc-play')!.click();
      vi.advanceTimersByTime(5000);
      expect(el.getAttribute('data-step')).toBe('5');
    } finally {
      vi.useRealTimers();
    }
  });
});

describe('viewUrl', () => {
  it('is under the extension static folder from the page config', () => {
    const script = document.createElement('script');
    script.id = 'jupyter-config-data';
    script.type = 'application/json';
    script.textContent = JSON.stringify({ fullLabextensionsUrl: '/lab/extensions' });
    document.body.appendChild(script);
    expect(viewUrl(document, 'graph')).toBe('/lab/extensions/forgeviz/static/views/graph.js');
    expect(viewUrl(document, '../x')).toBeNull();
  });
});
