import { readFileSync } from 'node:fs';
import path from 'node:path';
import { Graphviz } from '@hpcc-js/wasm-graphviz';
import { afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { getGraphviz } from '../../src/graphviz-loader';
import { installGlobal } from '../../src/lab/index';
import plugins from '../../src/lab/index';
import { createTransport } from '../../src/transport';
import { VERSION } from '../../src/version';
import widget from '../../src/widgets/graph';
import { s1Graph, traitOf, zDetail } from './fixtures';
import { gptGraph, gptState } from './gpt-fixture';
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
    const m1 = new FakeModel({ graph: traitOf(s1Graph()), warnings: [] });
    const m2 = new FakeModel({ graph: traitOf(s1Graph()), warnings: [] });
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
    const model = new FakeModel({ graph: traitOf(s1Graph()), warnings: [] });
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
    const model = new FakeModel({ graph: traitOf(s1Graph()), warnings: [] }, (msg, m) => {
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
    const model = new FakeModel({ graph: traitOf(s1Graph(false)), warnings: [] });
    const { el, cleanup } = mount(model);
    await ready(el);
    expect(el.querySelector<HTMLElement>('.fv-warning')!.hidden).toBe(true);
    model.set('warnings', ['capture failed: RuntimeError(boom)']);
    expect(el.querySelector<HTMLElement>('.fv-warning')!.hidden).toBe(false);
    expect(el.querySelector('.fv-warning')!.textContent).toContain('capture failed: RuntimeError(boom)');
    model.set('graph', traitOf(s1Graph(true)));
    await ready(el);
    await vi.waitFor(() => expect(el.querySelector('.fv-node[data-node-id="1"] .fv-badge-text')?.textContent).toBe('∇ 64'));
    cleanup();
    expect(model.listenerCount('change:graph')).toBe(0);
    expect(model.listenerCount('msg:custom')).toBe(0);
  });

  it('binds the state and expanded traits, writes expanded back and asks for modules', async () => {
    const layouts: string[] = [];
    (globalThis as G).__forgeviz__ = {
      loadGraphviz: async () => ({ layout: (dot: string, f: 'json', e: 'dot') => (layouts.push(dot), gv.layout(dot, f, e)) })
    };
    const g = gptGraph();
    const model = new FakeModel({ graph: traitOf(g), state: gptState(g), expanded: ['model', 'model.h', 'model.h.2'], warnings: [] });
    const { el, cleanup } = mount(model);
    await ready(el);
    // the expansion from the trait, and the state newer than the graph, applied
    expect(el.querySelector('.fv-cluster[data-fv-module="h.2"]')).not.toBeNull();
    expect(el.querySelectorAll('[data-fv-repeat] .fv-bar-fill')).toHaveLength(11);
    expect(layouts).toHaveLength(1);
    // a new state: redecorated, not laid out
    model.set('state', { ...gptState(g, 2), module_param_grad_norms: g.modules.map(() => null) });
    expect(el.querySelectorAll('[data-fv-repeat] .fv-bar-fill')).toHaveLength(0);
    expect(layouts).toHaveLength(1);
    // a click writes the trait and asks the kernel about the module
    el.querySelector('.fv-box[data-fv-module="wte"] .fv-node-box')!.dispatchEvent(new MouseEvent('click', { bubbles: true }));
    expect(model.get('expanded')).toEqual(['model', 'model.wte', 'model.h', 'model.h.2']);
    expect(model.sent.find(m => m.type === 'module')).toEqual({ type: 'module', request_id: expect.any(Number), module: 'model.wte' });
    await ready(el);
    await vi.waitFor(() => expect(el.querySelector('.fv-cluster[data-fv-module="wte"]')).not.toBeNull());
    // another view of the same model writes the trait: this one follows
    model.set('expanded', ['model']);
    await vi.waitFor(() => expect(el.querySelector('.fv-box[data-fv-module="h"]')).not.toBeNull());
    cleanup();
    expect(model.listenerCount('change:state')).toBe(0);
    expect(model.listenerCount('change:expanded')).toBe(0);
  });

  it('falls back to the kernel for Graphviz, sent in buffers[0], and caches it', async () => {
    const source = new TextEncoder().encode('export const Graphviz = {};');
    const model = new FakeModel({ graph: traitOf(s1Graph()), warnings: [] }, (msg, m) => {
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

  it('module request/reply', async () => {
    const model = new FakeModel({}, (msg, m) =>
      m.reply({ type: 'module', request_id: msg.request_id, detail: { id: msg.module, path: 'h.0', type: 'Block' } })
    );
    const t = createTransport(model as any);
    expect((await t.module('model.h.0')).type).toBe('Block');
    expect(model.sent[0]).toEqual({ type: 'module', request_id: expect.any(Number), module: 'model.h.0' });
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
  it('registers Graphviz from the server and the version, keeping what was there', async () => {
    const config = document.createElement('script');
    config.id = 'jupyter-config-data';
    config.textContent = JSON.stringify({ fullLabextensionsUrl: '/base/lab/extensions/' });
    document.body.appendChild(config);
    const bytes = new TextEncoder().encode('export const Graphviz = {};').buffer;
    const statuses = [500, 200];
    const fetched: string[] = [];
    const realFetch = globalThis.fetch;
    globalThis.fetch = vi.fn(async (url: string | URL | Request) => {
      fetched.push(String(url));
      const status = statuses.shift()!;
      return new Response(status === 200 ? bytes : 'no', { status });
    }) as typeof fetch;
    try {
      (globalThis as G).__forgeviz__ = { other: 1 };
      const plugin = plugins[0]; // the second is the side panel's (src/lab/panel.ts)
      expect(plugin.id).toBe('forgeviz:plugin');
      expect(plugin.autoStart).toBe(true);
      plugin.activate({} as any);
      const fv = (globalThis as G).__forgeviz__;
      expect(fv.other).toBe(1);
      expect(fv.version).toBe(VERSION);
      expect(typeof fv.loadGraphviz).toBe('function');
      // A failed fetch says what and why, and is forgotten: the next view fetches again.
      await expect(fv.graphvizSource()).rejects.toThrow(
        'fetching /base/lab/extensions/forgeviz/static/graphviz.js for the graph layout failed: HTTP 500'
      );
      expect(new Uint8Array(await fv.graphvizSource())).toEqual(new Uint8Array(bytes));
      await fv.graphvizSource(); // fetched once per page
      expect(fetched).toEqual(['/base/lab/extensions/forgeviz/static/graphviz.js', '/base/lab/extensions/forgeviz/static/graphviz.js']);
      expect(installGlobal()).toBe((globalThis as G).__forgeviz__);
    } finally {
      globalThis.fetch = realFetch;
      config.remove();
    }
    // Not in Lab (no page config): nothing to fetch from, so views ask their kernel.
    (globalThis as G).__forgeviz__ = {};
    const bare = installGlobal();
    expect(bare.graphvizSource).toBeUndefined();
    expect(bare.loadGraphviz).toBeUndefined();
  });

  it('VERSION matches package.json', () => {
    const pkg = JSON.parse(readFileSync(path.join(process.cwd(), 'package.json'), 'utf8'));
    expect(VERSION).toBe(pkg.version);
  });
});
