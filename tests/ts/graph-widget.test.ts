import { readFileSync } from 'node:fs';
import path from 'node:path';
import { Graphviz } from '@hpcc-js/wasm-graphviz';
import { afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { getGraphviz } from '../../src/graphviz-loader';
import { installGlobal } from '../../src/lab/index';
import plugin from '../../src/lab/index';
import { createTransport } from '../../src/transport';
import { VERSION } from '../../src/version';
import widget from '../../src/widgets/graph';
import { s1Graph, zDetail } from './fixtures';
import { FakeModel } from './fakemodel';
import { mounter } from './mount';

let gv: Graphviz;
beforeAll(async () => {
  gv = await Graphviz.load();
});

type G = { __forgeviz__?: any };
beforeEach(() => {
  delete (globalThis as G).__forgeviz__;
});
afterEach(() => {
  delete (globalThis as G).__forgeviz__;
});
// registered after: its afterEach (cleanups, then an empty body) runs before the one above
const mount = mounter(widget);

const ready = (el: HTMLElement) =>
  vi.waitFor(() => expect(el.getAttribute('data-fv-state')).toBe('ready'), { timeout: 10_000 });

describe('anywidget adapter', () => {
  it('uses the Lab-provided Graphviz once per page for every widget', async () => {
    const loadGraphviz = vi.fn(async () => gv);
    (globalThis as G).__forgeviz__ = { loadGraphviz };
    const m1 = new FakeModel({ graph: s1Graph(), warnings: [] });
    const m2 = new FakeModel({ graph: s1Graph(), warnings: [] });
    const a = mount(m1);
    const b = mount(m2);
    await ready(a.el);
    await ready(b.el);
    expect(loadGraphviz).toHaveBeenCalledTimes(1);
    expect(a.el.querySelectorAll('.fv-node')).toHaveLength(5);
    expect(m1.sent.filter(m => m.type === 'graphviz')).toHaveLength(0);
    // one stylesheet per document
    expect(document.querySelectorAll('style#forgeviz-style')).toHaveLength(1);
    expect(document.getElementById('forgeviz-style')!.textContent).toContain('.fv-node');
  });

  it('asks the kernel for inspect and matches the reply by request_id', async () => {
    (globalThis as G).__forgeviz__ = { loadGraphviz: async () => gv };
    const model = new FakeModel({ graph: s1Graph(), warnings: [] });
    const { el } = mount(model);
    await ready(el);
    el.querySelector('.fv-node[data-node-id="3"]')!.dispatchEvent(new MouseEvent('click', { bubbles: true }));
    const req = model.sent.find(m => m.type === 'inspect');
    expect(req).toEqual({ type: 'inspect', request_id: expect.any(Number), node: 3 });
    // a reply for some other request is ignored
    model.reply({ type: 'inspect', request_id: req.request_id + 1000, detail: { ...zDetail(), label: 'WRONG' } });
    model.reply({ type: 'inspect', request_id: req.request_id, detail: zDetail() });
    const insp = el.querySelector('.fv-inspector')!;
    await vi.waitFor(() => expect(insp.getAttribute('data-state')).toBe('ready'));
    expect(insp.querySelector('h3')!.textContent).toBe('z');
    expect(insp.textContent).toContain('[48.]');
    expect(insp.textContent).toContain('[32.]');
  });

  it('shows an error reply in the inspector', async () => {
    (globalThis as G).__forgeviz__ = { loadGraphviz: async () => gv };
    const model = new FakeModel({ graph: s1Graph(), warnings: [] }, (msg, m) => {
      if (msg.type === 'inspect') {
        m.reply({ type: 'error', request_id: msg.request_id, message: 'node 3 was garbage collected' });
      }
    });
    const { el } = mount(model);
    await ready(el);
    el.querySelector('.fv-node[data-node-id="3"]')!.dispatchEvent(new MouseEvent('click', { bubbles: true }));
    await vi.waitFor(() => expect(el.querySelector('.fv-inspector')!.getAttribute('data-state')).toBe('error'));
    expect(el.querySelector('.fv-inspector')!.textContent).toContain('node 3 was garbage collected');
  });

  it('re-renders on change:graph and shows warnings', async () => {
    (globalThis as G).__forgeviz__ = { loadGraphviz: async () => gv };
    const model = new FakeModel({ graph: s1Graph(false), warnings: [] });
    const { el, cleanup } = mount(model);
    await ready(el);
    expect(el.querySelector<HTMLElement>('.fv-warning')!.hidden).toBe(true);
    model.set('warnings', ['capture failed: RuntimeError(boom)']);
    expect(el.querySelector<HTMLElement>('.fv-warning')!.hidden).toBe(false);
    expect(el.querySelector('.fv-warning')!.textContent).toContain('capture failed: RuntimeError(boom)');
    model.set('graph', s1Graph(true));
    await ready(el);
    await vi.waitFor(() => expect(el.querySelector('.fv-node[data-node-id="1"] .fv-badge-text')?.textContent).toBe('∇ 64'));
    cleanup();
    expect(model.listenerCount('change:graph')).toBe(0);
    expect(model.listenerCount('msg:custom')).toBe(0);
  });

  it('falls back to the kernel for Graphviz, sent in buffers[0], and caches it', async () => {
    const source = new TextEncoder().encode('export const Graphviz = {};');
    const model = new FakeModel({ graph: s1Graph(), warnings: [] }, (msg, m) => {
      if (msg.type === 'graphviz') {
        m.reply({ type: 'graphviz', request_id: msg.request_id }, [new DataView(source.buffer)]);
      }
    });
    const importer = vi.fn(async (buf: ArrayBuffer) => {
      expect(new TextDecoder().decode(buf)).toBe('export const Graphviz = {};');
      return { Graphviz } as Record<string, unknown>;
    });
    const t = createTransport(model as any);
    const p1 = getGraphviz(() => t.graphvizSource(), importer);
    const p2 = getGraphviz(() => t.graphvizSource(), importer);
    expect(p1).toBe(p2);
    const g = await p1;
    expect(g.layout('digraph { a -> b }', 'json', 'dot')).toContain('"objects"');
    expect(model.sent).toEqual([{ type: 'graphviz', request_id: expect.any(Number) }]);
    expect(importer).toHaveBeenCalledTimes(1);
    expect((globalThis as G).__forgeviz__.graphviz).toBe(p1);
    t.dispose();
  });

  it('forgets a failed Graphviz load so a later widget can retry', async () => {
    const failing = getGraphviz(async () => Promise.reject(new Error('kernel busy')));
    await expect(failing).rejects.toThrow('kernel busy');
    expect((globalThis as G).__forgeviz__.graphviz).toBeUndefined();
  });
});

describe('transport', () => {
  it('times out with a clear message', async () => {
    const model = new FakeModel({});
    const t = createTransport(model as any, 50);
    await expect(t.inspect(3)).rejects.toThrow(/no reply from the kernel to "inspect" after/);
    t.dispose();
  });

  it('dot request/reply', async () => {
    const model = new FakeModel({}, (msg, m) => m.reply({ type: 'dot', request_id: msg.request_id, dot: 'digraph forgeviz {}' }));
    const t = createTransport(model as any);
    expect(await t.dot()).toBe('digraph forgeviz {}');
    expect(model.sent[0]).toEqual({ type: 'dot', request_id: expect.any(Number) });
    t.dispose();
  });

  it('rejects pending requests when disposed', async () => {
    const model = new FakeModel({});
    const t = createTransport(model as any);
    const p = t.dot();
    t.dispose();
    await expect(p).rejects.toThrow('view closed');
  });
});

describe('Lab plugin and version', () => {
  it('registers loadGraphviz and version, keeping what was there', async () => {
    (globalThis as G).__forgeviz__ = { other: 1 };
    expect(plugin.id).toBe('forgeviz:plugin');
    expect(plugin.autoStart).toBe(true);
    plugin.activate({} as any);
    const fv = (globalThis as G).__forgeviz__;
    expect(fv.other).toBe(1);
    expect(fv.version).toBe(VERSION);
    const g = await fv.loadGraphviz();
    expect(g.layout('digraph { a }', 'json', 'dot')).toContain('"name": "a"');
    expect(installGlobal()).toBe((globalThis as G).__forgeviz__);
  });

  it('VERSION matches package.json', () => {
    const pkg = JSON.parse(readFileSync(path.join(process.cwd(), 'package.json'), 'utf8'));
    expect(VERSION).toBe(pkg.version);
  });
});
