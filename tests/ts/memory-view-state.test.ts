/** The memory view's state beyond its data (x mode, zoom range, pinned storage): reported, restored, exported. */
import { describe, expect, it, vi } from 'vitest';
import type { MemoryTimeline, StorageDetail } from '../../src/model/wire';
import { mountSaved } from '../../src/lab/saved';
import { ALLOC, encodeColumns, type EventColumns } from '../../src/render/memory/data';
import { bytesShort } from '../../src/render/memory/geom';
import { createMemoryView, type MemoryView } from '../../src/render/memory/view';
import widget from '../../src/widgets/memory';
import { FakeModel } from './fakemodel';
import { columnsOf, MiB, randomEvents, smallTrace, timelineFor, viewsDestroyedAfterEach } from './memory-fixtures';
import { mounter } from './mount';

const views = viewsDestroyedAfterEach();
const mountWidget = mounter(widget);

const noKernel = () => Promise.reject(new Error('no kernel connection'));

/** A view holding ``columns``, drawn; ``requestDetail`` rejects (no kernel) unless given. */
function make(columns: EventColumns, timeline: MemoryTimeline, requestDetail: (s: number) => Promise<StorageDetail> = noKernel) {
  const el = document.createElement('div');
  document.body.appendChild(el);
  const onViewState = vi.fn();
  const view = createMemoryView(el, { requestDetail, requestReplay: () => {}, onViewState });
  views.push(view);
  view.setTimeline(timeline);
  view.appendEvents(0, columns, true);
  view.draw();
  onViewState.mockClear();
  return { el, view, onViewState };
}

const random = (n: number, seed: number) => {
  const events = randomEvents(n, seed);
  return { events, columns: columnsOf(events), timeline: timelineFor(n) };
};

/** The storage of the widest block in the frame (tiny ones may not be hoverable). */
function widestBlock(view: MemoryView): number {
  const f = view.frame();
  const { store } = view;
  let best = 0;
  for (let k = 1; k < f.blocks.n; k++) {
    if (store.slotBytes[f.blocks.slot[k]] > store.slotBytes[f.blocks.slot[best]]) {
      best = k;
    }
  }
  return store.slotSid[f.blocks.slot[best]];
}

const parse = (svg: string) => new DOMParser().parseFromString(svg.replace(/^<\?xml[^>]*>\s*/, ''), 'image/svg+xml');
/** The x axis labels of an export: middle-anchored, under the plot (not the bold peak label). */
const xLabels = (svg: string) =>
  Array.from(parse(svg).querySelectorAll('text[text-anchor="middle"]'))
    .filter(t => t.getAttribute('font-weight') !== 'bold')
    .map(t => t.textContent!);
const heightOf = (svg: string) => Number(/<svg[^>]*\sheight="([\d.]+)/.exec(svg)![1]);
const pinnedPanel = (el: HTMLElement) => el.querySelector<HTMLElement>('.fv-mem-pinned')!;
const settle = () => new Promise(r => setTimeout(r, 0));

describe('reporting the view state', () => {
  it('starts at the whole timeline in seconds, nothing pinned; follows zoom, x mode and pin', async () => {
    const { columns, timeline } = random(3000, 14);
    const { el, view } = make(columns, timeline);
    expect(view.viewState()).toEqual({ x: 'time', range: null, pinned: null });
    view.setXMode('index');
    view.setRange(1000, 1040);
    const f = view.draw();
    expect(f.view).toBe('blocks');
    const sid = widestBlock(view);
    const at = view.locate(sid)!;
    await view.click(at.x, at.y);
    expect(pinnedPanel(el).getAttribute('data-storage')).toBe(String(sid));
    const state = view.viewState();
    expect(state.x).toBe('index');
    expect(state.range![0]).toBeCloseTo(1000, 9);
    expect(state.range![1]).toBeCloseTo(1040, 9);
    expect(state.pinned).toBe(sid);
    // JSON-safe: it is what the kernel's view_state trait holds
    expect(JSON.parse(JSON.stringify(state))).toEqual(state);
  });

  it('tells its options on zoom, x mode, pin and unpin', async () => {
    const { columns, timeline } = random(3000, 14);
    const { el, view, onViewState } = make(columns, timeline);
    view.setRange(view.frame().x0, (view.frame().x0 + view.frame().x1) / 2);
    expect(onViewState).toHaveBeenCalledTimes(1);
    el.querySelector<HTMLButtonElement>('button.fv-mem-zoom-in')!.click();
    expect(onViewState).toHaveBeenCalledTimes(2);
    el.querySelector<HTMLButtonElement>('button.fv-mem-xmode')!.click();
    expect(onViewState.mock.calls.length).toBeGreaterThanOrEqual(3);
    onViewState.mockClear();
    view.setRange(1000, 1040);
    view.draw();
    onViewState.mockClear();
    const sid = widestBlock(view);
    const at = view.locate(sid)!;
    await view.click(at.x, at.y);
    expect(onViewState).toHaveBeenCalledTimes(1);
    pinnedPanel(el).querySelector<HTMLButtonElement>('button.fv-mem-unpin')!.click();
    expect(onViewState).toHaveBeenCalledTimes(2);
    expect(view.viewState().pinned).toBeNull();
    await view.click(at.x, at.y);
    el.querySelector('canvas')!.dispatchEvent(new KeyboardEvent('keydown', { key: 'Escape' }));
    expect(onViewState).toHaveBeenCalledTimes(4);
    expect(view.viewState().pinned).toBeNull();
    view.resetZoom();
    expect(onViewState).toHaveBeenCalledTimes(5);
    expect(view.viewState().range).toBeNull();
  });

  it('a new history (reset) drops the zoom and the pin, and says so', () => {
    const { columns, timeline } = random(3000, 14);
    const { view, onViewState } = make(columns, timeline);
    view.setXMode('index');
    view.setRange(1000, 1040);
    onViewState.mockClear();
    view.appendEvents(0, columnsOf(randomEvents(500, 3)), true);
    expect(onViewState).toHaveBeenCalledTimes(1);
    expect(view.viewState()).toEqual({ x: 'index', range: null, pinned: null });
  });
});

describe('restoring a view state', () => {
  it('round-trips: a fresh view given the state shows the same range, mode and pinned storage', async () => {
    const { columns, timeline } = random(3000, 14);
    const a = make(columns, timeline);
    a.view.setXMode('index');
    a.view.setRange(1000, 1040);
    const fa = a.view.draw();
    const sid = widestBlock(a.view);
    const at = a.view.locate(sid)!;
    await a.view.click(at.x, at.y);
    const state = JSON.parse(JSON.stringify(a.view.viewState()));

    const b = make(columns, timeline);
    expect(b.view.viewState()).toEqual({ x: 'time', range: null, pinned: null });
    b.view.applyViewState(state);
    const fb = b.view.draw();
    expect(fb.view).toBe('blocks');
    expect(fb.x0).toBeCloseTo(fa.x0, 9);
    expect(fb.x1).toBeCloseTo(fa.x1, 9);
    expect(b.el.getAttribute('data-fv-xmode')).toBe('index');
    expect(pinnedPanel(b.el).hidden).toBe(false);
    expect(pinnedPanel(b.el).getAttribute('data-storage')).toBe(String(sid));
    // restored where it is drawn: the block under the storage, as the click pinned it
    expect(b.view.hitTest(at.x, at.y)!.storage).toBe(sid);
    expect(b.view.viewState().x).toBe('index');
    expect(b.view.viewState().pinned).toBe(sid);
    b.view.viewState().range!.forEach((v, i) => expect(v).toBeCloseTo(state.range[i], 9));
    expect(b.onViewState).toHaveBeenCalled();
  });

  it('keys left out take the defaults; null range shows everything', () => {
    const { columns, timeline } = random(3000, 14);
    const { view } = make(columns, timeline);
    view.setXMode('index');
    view.setRange(1000, 1040);
    view.applyViewState({});
    expect(view.viewState()).toEqual({ x: 'time', range: null, pinned: null });
    view.applyViewState({ x: 'index', range: null, pinned: null });
    const f = view.draw();
    expect(view.viewState()).toEqual({ x: 'index', range: null, pinned: null });
    expect([f.x0, f.x1]).toEqual([0, 2999]);
  });

  it('pins a storage not drawn in the range from its lifetime; with no kernel the panel says details are unavailable', async () => {
    const { events, columns, timeline } = random(3000, 14);
    // a storage allocated well before the range shown
    const early = events.slice(0, 300).find(e => e.action === ALLOC)!;
    const { el, view } = make(columns, timeline);
    expect(() => view.applyViewState({ x: 'index', range: [2500, 2540], pinned: early.storage })).not.toThrow();
    expect(view.locate(early.storage)).toBeNull();
    const panel = pinnedPanel(el);
    expect(panel.hidden).toBe(false);
    expect(panel.getAttribute('data-storage')).toBe(String(early.storage));
    expect(panel.querySelector('.fv-mem-tip-title')!.textContent).toContain(`storage ${early.storage}`);
    expect(panel.textContent).toContain(`allocated at event ${events.indexOf(early).toLocaleString('en-US')}`);
    expect(view.viewState().pinned).toBe(early.storage);
    await vi.waitFor(() => expect(panel.querySelector('.fv-mem-tip-error')!.textContent).toContain('details unavailable: no kernel connection'));
  });

  it('a saved notebook (no kernel) shows the saved state: mountSaved sets view_state after the events', () => {
    const { events, timeline } = smallTrace();
    const buffers = encodeColumns(columnsOf(events)).map(v => Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString('base64'));
    const payload = {
      version: 1,
      view: 'memory',
      traits: { timeline, warnings: [], view_state: { x: 'index', range: null, pinned: 7 } },
      messages: [{ content: { type: 'events', start: 0, count: events.length, reset: true }, buffers }]
    };
    const el = document.createElement('div');
    document.body.appendChild(el);
    const unmount = mountSaved(el, payload, widget);
    try {
      const view = (el as any).forgevizMemory as MemoryView;
      expect(view.store.n).toBe(events.length);
      expect(view.viewState()).toEqual({ x: 'index', range: null, pinned: 7 });
      expect(pinnedPanel(el).getAttribute('data-storage')).toBe('7');
    } finally {
      unmount();
    }
    // a bad one: mountSaved throws the view's message (and unmounts)
    const el2 = document.createElement('div');
    document.body.appendChild(el2);
    const bad = { ...payload, traits: { ...payload.traits, view_state: { x: 'index', range: null, pinned: 999 } } };
    expect(() => mountSaved(el2, bad, widget)).toThrow('view_state.pinned: expected a storage id of this timeline (storages 1–8), or null, got 999');
    expect((el2 as any).forgevizMemory).toBeUndefined();
  });

  it('a live widget writes its state to the view_state trait after a quiet moment', async () => {
    vi.useFakeTimers();
    try {
      const { events, timeline } = smallTrace();
      const model = new FakeModel({ timeline, warnings: [] });
      const save = vi.spyOn(model, 'save_changes');
      const { el } = mountWidget(model);
      model.reply({ type: 'events', start: 0, count: events.length, reset: true }, encodeColumns(columnsOf(events)));
      const view = (el as any).forgevizMemory as MemoryView;
      view.setRange(1, 2);
      view.setRange(1, 3);
      expect(model.get('view_state')).toBeUndefined();
      vi.advanceTimersByTime(300);
      expect(model.get('view_state')).toEqual({ x: 'time', range: [1, 3], pinned: null });
      expect(save).toHaveBeenCalledTimes(1);
    } finally {
      vi.useRealTimers();
    }
  });
});

describe('bad view states', () => {
  it('throw naming the field, what was expected and what was given, and change nothing', async () => {
    const { columns, timeline } = random(3000, 14);
    const { el, view } = make(columns, timeline);
    view.setXMode('index');
    view.setRange(1000, 1040);
    view.draw();
    const sid = widestBlock(view);
    const at = view.locate(sid)!;
    await view.click(at.x, at.y);
    const before = view.viewState();
    const frameBefore = view.draw();
    const ids = Array.from(view.store.slotSid.subarray(0, view.store.nSlots));
    const known = `storages ${Math.min(...ids)}–${Math.max(...ids)}`;
    const cases: [unknown, string][] = [
      [null, 'view_state: expected an object {x, range, pinned}, got null'],
      [42, 'view_state: expected an object {x, range, pinned}, got 42'],
      [[1000, 1040], 'view_state: expected an object {x, range, pinned}, got [1000,1040]'],
      [{ zoom: [1, 2] }, 'view_state: expected only the keys x, range, pinned, got "zoom"'],
      [{ x: 'seconds' }, `view_state.x: expected 'time' or 'index', got "seconds"`],
      [{ x: 'time', range: [3, 1] }, 'view_state.range: expected [start, end] with start < end, or null, got [3,1]'],
      [{ range: [0, NaN] }, 'view_state.range: expected [start, end] with start < end, or null, got [0,"NaN"]'],
      [{ range: [0, 1, 2] }, 'view_state.range: expected [start, end] with start < end, or null, got [0,1,2]'],
      [{ range: 'all' }, 'view_state.range: expected [start, end] with start < end, or null, got "all"'],
      [{ pinned: 1.5 }, `view_state.pinned: expected a storage id of this timeline (${known}), or null, got 1.5`],
      [{ pinned: '7' }, `view_state.pinned: expected a storage id of this timeline (${known}), or null, got "7"`],
      // x and range are fine: still nothing changes when the pin is not
      [{ x: 'time', range: null, pinned: 99_999 }, `view_state.pinned: expected a storage id of this timeline (${known}), or null, got 99999`]
    ];
    for (const [state, message] of cases) {
      expect(() => view.applyViewState(state), JSON.stringify(state)).toThrow(message);
      expect(view.viewState(), JSON.stringify(state)).toEqual(before);
      const f = view.draw();
      expect([f.x0, f.x1]).toEqual([frameBefore.x0, frameBefore.x1]);
      expect(pinnedPanel(el).getAttribute('data-storage')).toBe(String(sid));
    }
  });

  it('an empty timeline has no storage to pin', () => {
    const { view } = make(columnsOf([]), timelineFor(0));
    expect(() => view.applyViewState({ pinned: 0 })).toThrow('view_state.pinned: expected a storage id of this timeline (it has none), or null, got 0');
  });
});

describe('exporting the view state', () => {
  it('exports the range shown: only tick labels inside it, unlike the default export', () => {
    const { columns, timeline } = random(3000, 14);
    const { view } = make(columns, timeline);
    view.setXMode('index');
    const whole = view.exportSVG();
    const num = (label: string) => Number(label.replace(/,/g, ''));
    expect(xLabels(whole).map(num).some(v => v < 1000 || v > 1200)).toBe(true);
    view.applyViewState({ x: 'index', range: [1000, 1200], pinned: null });
    const zoomed = view.exportSVG();
    const labels = xLabels(zoomed);
    expect(labels.length).toBeGreaterThan(2);
    for (const v of labels.map(num)) {
      expect(v).toBeGreaterThanOrEqual(1000);
      expect(v).toBeLessThanOrEqual(1200);
    }
    expect(labels).toEqual(view.draw().xTicks.map(t => t.label));
    expect(zoomed).not.toBe(whole);
  });

  it("captions the pinned storage's details (its size as the view writes it), without the kernel's progress", async () => {
    const { events, timeline } = smallTrace();
    const { el, view } = make(columnsOf(events), timeline);
    const plain = view.exportSVG();
    view.applyViewState({ x: 'index', pinned: 7 });
    // asked, not answered yet: the panel says so; the export leaves that out
    expect(pinnedPanel(el).querySelector('.fv-mem-tip-loading')).toBeTruthy();
    const svg = view.exportSVG();
    const caption = parse(svg).querySelector('g.fv-mem-export-pinned')!;
    expect(caption).toBeTruthy();
    const lines = Array.from(caption.querySelectorAll('text')).map(t => t.textContent!);
    const summary = pinnedPanel(el).querySelector('.fv-mem-tip-summary')!.textContent!;
    expect(summary).toContain(bytesShort(4 * MiB));
    expect(lines).toContain(summary);
    expect(lines.some(l => l.startsWith('Pinned · storage 7'))).toBe(true);
    expect(lines.join('\n')).toContain('allocated at event 1, freed at event 5');
    expect(svg).not.toContain('asking the kernel');
    expect(heightOf(svg)).toBeGreaterThan(heightOf(plain));
    expect(plain).not.toContain('fv-mem-export-pinned');
    // the kernel is not there: the panel says details are unavailable, the export still does not
    await vi.waitFor(() => expect(pinnedPanel(el).querySelector('.fv-mem-tip-error')).toBeTruthy());
    const later = view.exportSVG();
    expect(later).not.toContain('details unavailable');
    expect(later).toContain(summary);
  });

  it("captions the kernel's details once they came (name, shape, source lines)", async () => {
    const { events, timeline } = smallTrace();
    const detail: StorageDetail = {
      storage: 7, bytes: 4 * MiB, dtype: 'float32', shape: [1024, 1024], category: 'activation', op: 'mm', module: 'model.fc1',
      cell: 5, line: 3, source: 'h = x @ w\nh = h.relu()', node: 42, node_name: 'MmBackward0', name: 'h', alive: false
    };
    const { el, view } = make(columnsOf(events), timeline, () => Promise.resolve(detail));
    view.applyViewState({ pinned: 7 });
    await settle();
    expect(pinnedPanel(el).querySelector('.fv-mem-tip-loading')).toBeNull();
    const lines = Array.from(parse(view.exportSVG()).querySelectorAll('g.fv-mem-export-pinned text')).map(t => t.textContent!);
    expect(lines.some(l => l.startsWith('h'))).toBe(true);
    expect(lines).toContain('cell [5], line 3 · temporary · 4 MiB · mm · (1024, 1024) float32');
    expect(lines).toContain('h = x @ w');
    expect(lines).toContain('h = h.relu()');
  });

  it("outlines the pinned storage's blocks as the canvas does", async () => {
    const { columns, timeline } = random(3000, 14);
    const { view } = make(columns, timeline);
    view.setXMode('index');
    view.setRange(1000, 1040);
    const f = view.draw();
    const plainOutlines = parse(view.exportSVG()).querySelectorAll('g[clip-path] path[stroke-width="2"]');
    expect(plainOutlines).toHaveLength(0);
    const sid = widestBlock(view);
    const at = view.locate(sid)!;
    await view.click(at.x, at.y);
    const slot = view.viewState().pinned === sid ? view.hitTest(at.x, at.y)!.slot : -1;
    const outline = parse(view.exportSVG()).querySelectorAll('g[clip-path] path[stroke-width="2"]');
    expect(outline).toHaveLength(1);
    expect(outline[0].getAttribute('fill')).toBe('none');
    const blocks = Array.from(f.blocks.slot.subarray(0, f.blocks.n)).filter(s => s === slot).length;
    expect(blocks).toBeGreaterThan(0);
    expect(outline[0].getAttribute('d')!.match(/M/g)).toHaveLength(blocks);
    // the block's top-left corner, one pixel in
    const k = Array.from(f.blocks.slot.subarray(0, f.blocks.n)).indexOf(slot);
    const [x, y] = /^M([\d.]+) ([\d.]+)/.exec(outline[0].getAttribute('d')!)!.slice(1).map(Number);
    expect(x).toBeCloseTo(f.blocks.x0[k] + 1, 1);
    expect(y).toBeCloseTo(f.blocks.y0[k] + 1, 1);
  });
});
