/** The memory anywidget adapter: traits, one stylesheet, replay, event chunks, detail requests. */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import widget from '../../src/widgets/memory';
import { encodeColumns } from '../../src/render/memory/data';
import { expectWidgetBundle } from './bundle';
import { FakeModel } from './fakemodel';
import { mounter } from './mount';
import { columnsOf, randomEvents, smallTrace, timelineFor } from './memory-fixtures';

const mount = mounter(widget);

/** DataViews at an odd offset inside one shared buffer, as a comm message may deliver them. */
function packed(views: DataView[]): DataView[] {
  const total = views.reduce((a, v) => a + v.byteLength + 3, 1);
  const buf = new ArrayBuffer(total);
  let off = 1;
  return views.map(v => {
    new Uint8Array(buf, off).set(new Uint8Array(v.buffer, v.byteOffset, v.byteLength));
    const dv = new DataView(buf, off, v.byteLength);
    off += v.byteLength + 3;
    return dv;
  });
}

describe('memory anywidget adapter', () => {
  it('asks for the history once, appends event chunks (even before the replay reply), one stylesheet', async () => {
    const events = randomEvents(600, 2);
    const cols = columnsOf(events);
    const model = new FakeModel({ timeline: {}, warnings: [] });
    const { el } = mount(model);
    mount(new FakeModel({ timeline: timelineFor(0), warnings: [] }));
    expect(document.querySelectorAll('style#forgeviz-memory-style')).toHaveLength(1);
    expect(document.getElementById('forgeviz-memory-style')!.textContent).toContain('.fv-memory');
    const replay = model.sent.filter(m => m.type === 'replay');
    expect(replay).toEqual([{ type: 'replay', request_id: expect.any(Number), view: expect.any(Number) }]);
    expect(el.getAttribute('data-fv-state')).toBe('loading');
    // the stream starts before the reply
    model.reply({ type: 'events', start: 0, count: 250, reset: true }, packed(encodeColumns(cols, 0, 250)));
    model.reply({ type: 'replay', request_id: replay[0].request_id, count: 600 });
    model.reply({ type: 'events', start: 250, count: 350, reset: false }, packed(encodeColumns(cols, 250, 600)));
    model.set('timeline', timelineFor(600));
    expect(el.getAttribute('data-fv-state')).toBe('ready');
    expect(el.getAttribute('data-fv-events')).toBe('600');
    expect((el as any).forgevizMemory.store.n).toBe(600);
    // a later event the stream sends again is not counted twice
    model.reply({ type: 'events', start: 590, count: 10, reset: false }, packed(encodeColumns(cols, 590, 600)));
    expect(el.getAttribute('data-fv-events')).toBe('600');
    await vi.waitFor(() => expect(el.getAttribute('data-fv-view')).toBe('area'));
  });

  it('hover asks for a detail matched by request_id; an ErrorReply is shown', async () => {
    const { events, timeline } = smallTrace();
    const model = new FakeModel({ timeline, warnings: [] }, (msg, m) => {
      if (msg.type === 'detail' && msg.storage === 7) {
        m.reply({ type: 'detail', request_id: msg.request_id, detail: { storage: 7, bytes: 4 * 2 ** 20, dtype: 'float32', shape: [1024, 1024], category: 'activation', op: 'mm', module: 'model.fc1', cell: 5, line: 3, source: null, node: 42, node_name: 'MmBackward0', name: 'h', alive: false } });
      } else if (msg.type === 'detail') {
        m.reply({ type: 'error', request_id: msg.request_id, message: `no storage ${msg.storage} in this timeline` });
      }
    });
    const { el, cleanup } = mount(model);
    model.reply({ type: 'events', start: 0, count: events.length, reset: true }, encodeColumns(columnsOf(events)));
    const view = (el as any).forgevizMemory;
    view.setXMode('index');
    const f = view.draw();
    const px = (i: number) => f.left + ((i - f.x0) / (f.x1 - f.x0)) * (f.right - f.left);
    const py = (v: number) => f.bottom - (v / f.yMax) * (f.bottom - f.top);
    await view.hover(px(2), py(10 * 2 ** 20));
    expect(model.sent.filter(m => m.type === 'detail')).toEqual([{ type: 'detail', request_id: expect.any(Number), storage: 7 }]);
    const tip = el.querySelector('.fv-mem-tooltip')!;
    expect(tip.querySelector('.fv-mem-tip-title')!.textContent).toContain('h');
    expect(tip.querySelector('.fv-mem-tip-summary')!.textContent).toBe('cell [5], line 3 · activation · 4 MiB · mm · (1024, 1024) float32');
    await view.hover(px(0), py(2 * 2 ** 20));
    await vi.waitFor(() => expect(tip.querySelector('.fv-mem-tip-error')!.textContent).toContain('no storage 1 in this timeline'));
    cleanup();
    // the kernel is told this view is gone, under the id its replay request carried
    const [replay] = model.sent.filter(m => m.type === 'replay');
    expect(model.sent.at(-1)).toEqual({ type: 'gone', request_id: expect.any(Number), view: replay.view });
    expect(model.listenerCount('msg:custom')).toBe(0);
    expect(model.listenerCount('change:timeline')).toBe(0);
    expect(model.listenerCount('change:warnings')).toBe(0);
  });

  it('tells the kernel of a view only once it is on the page; one that never gets there is never counted', async () => {
    // How ipywidgets renders: on an element attached only after render returns.
    const model = new FakeModel({ timeline: timelineFor(0), warnings: [] });
    const el = document.createElement('div');
    const cleanup = widget.render({ model, el });
    expect(model.sent.filter(m => m.type === 'replay')).toEqual([]);
    // a gap in the stream while off the page asks for nothing either
    model.reply({ type: 'events', start: 5, count: 1, reset: false }, encodeColumns(columnsOf(randomEvents(1, 1))));
    expect(model.sent).toEqual([]);
    document.body.appendChild(el);
    await vi.waitFor(() => expect(model.sent.filter(m => m.type === 'replay')).toHaveLength(1));
    cleanup();
    expect(model.sent.at(-1)).toEqual({ type: 'gone', request_id: expect.any(Number), view: model.sent[0].view });

    // The output was replaced while this view was created: its element never reaches the page.
    const zombie = new FakeModel({ timeline: timelineFor(0), warnings: [] });
    const removed = widget.render({ model: zombie, el: document.createElement('div') });
    await new Promise(resolve => setTimeout(resolve, 100));
    expect(zombie.sent).toEqual([]);
    removed();
    expect(zombie.sent).toEqual([]); // no 'gone' for a view the kernel was never told of
    expect(zombie.listenerCount('msg:custom')).toBe(0);
  });

  it('bad event buffers become a warning; warnings trait shown', () => {
    const model = new FakeModel({ timeline: timelineFor(1), warnings: ['tracking stopped: boom'] });
    const { el } = mount(model);
    expect(el.querySelector('.fv-warning')!.textContent).toContain('boom');
    model.reply({ type: 'events', start: 0, count: 5, reset: true }, [new DataView(new ArrayBuffer(4))]);
    expect(el.querySelector('.fv-warning')!.textContent).toContain('could not read memory events');
    expect(el.querySelector('.fv-warning')!.textContent).toContain('boom');
  });

  it('works without a kernel (no send): no replay, no crash', () => {
    const { events, timeline } = smallTrace();
    const { el } = mount({ get: (k: string) => (k === 'timeline' ? timeline : []) });
    const view = (el as any).forgevizMemory;
    view.appendEvents(0, columnsOf(events), true);
    expect(view.draw().view).toBe('area');
  });
});

const built = path.join(process.cwd(), 'forgeviz', 'static', 'memory.js');
describe.skipIf(!existsSync(built))('forgeviz/static/memory.js (after jlpm build:esm:prod)', () => {
  it('is a small, offline ESM with a default export, without Graphviz or a plotting library', () => {
    const src = expectWidgetBundle(built);
    expect(src).toMatch(/export\s*\{[^}]*createMemoryView/);
    expect(src).not.toMatch(/export\s*\{[^}]*buildSynthetic/); // benchmark pages bundle it themselves
    expect(src).not.toMatch(/plotly|d3-/i);
    expect(src).toContain('forgeviz-memory-style');
  });
});
