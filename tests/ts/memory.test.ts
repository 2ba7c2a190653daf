/** The memory timeline view: DOM contract, hit-testing, hover/click, zoom, append/reset, export. */
import { describe, expect, it, vi } from 'vitest';
import type { MemoryTimeline, StorageDetail } from '../../src/model/wire';
import { ALLOC, envelope, columnBounds, type EventColumns, FREE, MemoryStore, NCAT } from '../../src/render/memory/data';
import { computeFrame } from '../../src/render/memory/draw';
import {
  bytesLabel,
  bytesShort,
  byteTicks,
  hitArea,
  hitBlock,
  nearestEventInBand,
  newBlockRects,
  pushRect,
  summaryText,
  timeText
} from '../../src/render/memory/geom';
import { createMemoryView } from '../../src/render/memory/view';
import { buildSynthetic } from './memory-synthetic';
import {
  CAT,
  columnsOf,
  type Ev,
  MiB,
  randomEvents,
  sliceColumns,
  smallTrace,
  storeOf,
  timelineFor,
  viewsDestroyedAfterEach
} from './memory-fixtures';

const views = viewsDestroyedAfterEach();

function detailFor(storage: number, extra: Partial<StorageDetail> = {}): StorageDetail {
  return {
    storage,
    bytes: 4 * MiB,
    dtype: 'float32',
    shape: [1024, 1024],
    category: 'activation',
    op: 'mm',
    module: 'model.fc1',
    cell: 5,
    line: 3,
    source: 'y = x @ w',
    node: 42,
    node_name: 'MmBackward0',
    name: null,
    alive: false,
    ...extra
  };
}

function mount(detail: (s: number) => Promise<StorageDetail> = s => Promise.resolve(detailFor(s))) {
  const el = document.createElement('div');
  document.body.appendChild(el);
  const requestDetail = vi.fn(detail);
  const requestReplay = vi.fn();
  const view = createMemoryView(el, { requestDetail, requestReplay });
  views.push(view);
  return { el, view, requestDetail, requestReplay };
}

/** A view holding ``columns`` (not drawn yet). */
function mountColumns(columns: EventColumns, timeline: MemoryTimeline) {
  const m = mount();
  m.view.setTimeline(timeline);
  m.view.appendEvents(0, columns, true);
  return m;
}

function mountTrace(events: Ev[], extra = {}) {
  const m = mountColumns(columnsOf(events), timelineFor(events.length, extra));
  m.view.draw();
  return m;
}

/** A view of ``n`` synthetic events (not drawn yet). */
function mountSynthetic(n: number) {
  const { columns, timeline } = buildSynthetic(n);
  return mountColumns(columns, timeline);
}

describe('formatting', () => {
  it('binary units', () => {
    expect(bytesShort(0)).toBe('0 B');
    expect(bytesShort(512)).toBe('512 B');
    expect(bytesShort(4 * MiB)).toBe('4 MiB');
    expect(bytesShort(1.5 * 1024)).toBe('1.5 KiB');
    expect(bytesLabel(12 * MiB)).toBe('12.0 MiB');
    expect(byteTicks(100 * MiB)).toEqual([0, 32, 64, 96].map(v => v * MiB));
    expect(timeText(1.5, 0.5)).toBe('1.5 s');
    expect(timeText(0.25, 0.05)).toBe('250 ms');
  });

  it('the tooltip sentence: cell, line, category, bytes, op, shape and dtype', () => {
    const text = summaryText(
      { index: 1, storage: 7, bytes: 4 * MiB, category: 'temporary', action: 'alloc', op: 'mm', module: null, cell: 5, line: 3, node: 42 },
      detailFor(7),
      'activation'
    );
    expect(text).toBe('cell [5], line 3 · activation · 4 MiB · mm · (1024, 1024) float32');
    expect(summaryText({ index: 0, storage: 1, bytes: 8, category: 'other', action: 'alloc', op: null, module: null, cell: null, line: null, node: null }, null)).toBe(
      'before tracking · other · 8 B'
    );
  });
});

describe('hit-testing (pure)', () => {
  it('hitArea picks the band whose stacked span holds the value', () => {
    const store = storeOf([
      { time: 0, bytes: 100, storage: 1, action: ALLOC, category: CAT.parameter },
      { time: 1, bytes: 50, storage: 2, action: ALLOC, category: CAT.activation },
      { time: 2, bytes: 10, storage: 3, action: ALLOC, category: CAT.temporary }
    ]);
    const bounds = columnBounds(store, 'index', -0.5, 2.5, 3);
    const env = envelope(store, bounds, 3);
    expect(hitArea(env, 2, 50)).toBe(CAT.parameter);
    expect(hitArea(env, 2, 100)).toBe(CAT.parameter);
    expect(hitArea(env, 2, 120)).toBe(CAT.activation);
    expect(hitArea(env, 2, 155)).toBe(CAT.temporary);
    expect(hitArea(env, 2, 161)).toBe(-1);
    expect(hitArea(env, 0, 120)).toBe(-1); // nothing above the parameter yet
    expect(hitArea(env, 3, 10)).toBe(-1);
  });

  it('hitBlock returns the rectangle under the point; where drawn ones overlap, the smallest', () => {
    let r = newBlockRects(1);
    r = pushRect(r, 0, 0, 0, 100, 10, 0);
    r = pushRect(r, 1, 0, 10, 100, 40, 3);
    r = pushRect(r, 2, 20, 9.5, 60, 10.5, 5); // a 1-pixel block drawn over both
    expect(hitBlock(r, 2, 5)).toBe(0);
    expect(hitBlock(r, 50, 30)).toBe(1);
    expect(hitBlock(r, 30, 10)).toBe(2);
    expect(hitBlock(r, 130, 30)).toBe(-1);
    expect(hitBlock(r, 100.5, 30, 1)).toBe(1);
    expect(hitBlock(r, 100.5, 30)).toBe(-1);
  });

  it('nearestEventInBand looks both ways, in its band only', () => {
    const store = storeOf([
      { time: 0, bytes: 1, storage: 1, action: ALLOC, category: CAT.activation },
      { time: 1, bytes: 1, storage: 2, action: ALLOC, category: CAT.temporary },
      { time: 2, bytes: 1, storage: 3, action: ALLOC, category: CAT.activation },
      { time: 5, bytes: 1, storage: 4, action: ALLOC, category: CAT.activation }
    ]);
    expect(nearestEventInBand(store, 'time', 1, 1.2, CAT.activation, 10)).toBe(2);
    expect(nearestEventInBand(store, 'time', 1, 0.8, CAT.activation, 10)).toBe(0);
    expect(nearestEventInBand(store, 'time', 1, 1.2, CAT.temporary, 10)).toBe(1);
    expect(nearestEventInBand(store, 'time', 2, 3.4, CAT.activation, 1)).toBe(-1);
  });
});

describe('memory view', () => {
  it('renders the DOM contract: root, canvas, legend, toolbar, transcript', () => {
    const { events, timeline } = smallTrace();
    const { el, view } = mount();
    expect(el.getAttribute('data-fv-state')).toBe('loading');
    view.setTimeline(timeline);
    view.appendEvents(0, columnsOf(events), false);
    view.draw();
    expect(el.matches('.fv-root.fv-memory[data-fv-state=ready]')).toBe(true);
    expect(el.querySelectorAll('canvas.fv-mem-canvas')).toHaveLength(1);
    expect(el.getAttribute('data-fv-view')).toBe('area');
    expect(el.getAttribute('data-fv-events')).toBe('6');
    expect(el.getAttribute('data-fv-complete')).toBe('true');
    const items = el.querySelectorAll('.fv-mem-legend .fv-mem-legend-item');
    expect(items).toHaveLength(NCAT);
    expect(el.querySelector('.fv-mem-legend-item[data-category="parameter"] .fv-mem-legend-bytes')!.textContent).toBe('8 MiB');
    expect(el.querySelector('.fv-mem-legend-item[data-category="gradient"]')!.getAttribute('data-present')).toBe('false');
    // every non-solid category has a pattern swatch
    expect(el.querySelectorAll('.fv-mem-legend pattern').length).toBe(NCAT - 1);
    for (const cls of ['fv-mem-xmode', 'fv-mem-zoom-in', 'fv-mem-zoom-out', 'fv-mem-zoom-reset', 'fv-export-svg', 'fv-export-png']) {
      expect(el.querySelector(`button.${cls}`), cls).toBeTruthy();
    }
    const tr = el.querySelector('details.fv-transcript')!.textContent!;
    expect(tr).toContain('Peak 14,680,064 bytes (14 MiB)');
    expect(tr).toContain('parameter: 8,388,608 bytes (8 MiB)');
    expect(tr).toContain('[5] starts at');
    expect(el.querySelector('.fv-mem-summary')!.textContent).toContain('peak 14.0 MiB');
    // the peak is marked where the total is highest (event 3)
    const f = view.frame();
    expect(f.peak!.label).toBe('peak 14.0 MiB');
    expect(f.peak!.index).toBe(3);
    expect(f.cells.map(c => c.label)).toEqual(['[5]']);
    expect((el as any).forgevizMemory).toBe(view);
  });

  it("a cell starting at the timeline's end is labelled left of its line, inside the canvas", () => {
    const { events, timeline } = smallTrace();
    const { view } = mountTrace(events, { ...timeline, cells: [{ cell: 5, time: 0, index: 0 }, { cell: 12, time: 4, index: 5 }] });
    const f = view.frame();
    const [first, last] = f.cells;
    expect([first.label, first.end, last.label, last.end]).toEqual(['[5]', false, '[12]', true]);
    expect(last.x).toBeCloseTo(f.right); // drawn at the plot's right edge, where a label to its right would be cut
    const svg = view.exportSVG();
    const labels = [...new DOMParser().parseFromString(svg, 'image/svg+xml').querySelectorAll('text')].filter(t => t.textContent === '[12]');
    expect(labels.map(t => t.getAttribute('text-anchor'))).toEqual(['end']);
  });

  it('message, dropped note and warnings', () => {
    const { el, view } = mount();
    view.setTimeline(timelineFor(0, { message: 'No CUDA device: tracking CPU storages.', dropped: 1234 }));
    expect(el.querySelector('.fv-message')!.textContent).toBe('No CUDA device: tracking CPU storages.');
    expect(el.querySelector('.fv-mem-note')!.textContent).toContain('1,234 events dropped');
    view.setWarnings(['forgeviz could not track: boom']);
    expect(el.querySelector('.fv-warning')!.textContent).toContain('boom');
    view.setWarnings([]);
    expect((el.querySelector('.fv-warning') as HTMLElement).hidden).toBe(true);
  });

  it('x axis toggles between time and event index', () => {
    const { events, timeline } = smallTrace();
    const { el, view } = mount();
    view.setTimeline(timeline);
    view.appendEvents(0, columnsOf(events), true);
    const btn = el.querySelector<HTMLButtonElement>('button.fv-mem-xmode')!;
    expect(btn.getAttribute('data-mode')).toBe('time');
    btn.click();
    expect(btn.getAttribute('data-mode')).toBe('index');
    expect(view.draw().xTicks.map(t => t.label)).toContain('5');
    expect(el.getAttribute('data-fv-xmode')).toBe('index');
    btn.click();
    expect(view.draw().xTicks.map(t => t.label)).toContain('4.0 s');
  });

  it('area hover: the band and its bytes at that time, then the nearest event, detail fetched once', async () => {
    const { events, timeline } = smallTrace();
    const { el, view, requestDetail } = mount();
    view.setTimeline(timeline);
    view.appendEvents(0, columnsOf(events), true);
    const f = view.draw();
    // x at t = 2.5 (after the temporary's alloc), y inside the activation band (8..12 MiB)
    const x = f.left + ((2.5 - f.x0) / (f.x1 - f.x0)) * (f.right - f.left);
    const y = f.bottom - (10 * MiB / f.yMax) * (f.bottom - f.top);
    const hit = view.hitTest(x, y)!;
    expect(hit.kind).toBe('band');
    expect(hit.category).toBe(CAT.activation);
    expect(hit.bandBytes).toBe(4 * MiB);
    expect(hit.event).toBe(2); // the recategorize at t=1.5 is the nearest activation event
    expect(hit.storage).toBe(7);
    await view.hover(x, y);
    const tip = el.querySelector<HTMLElement>('.fv-mem-tooltip')!;
    expect(tip.hidden).toBe(false);
    expect(tip.querySelector('.fv-mem-tip-band')!.textContent).toBe('activation: 4.0 MiB live at 2.50 s');
    expect(tip.querySelector('.fv-mem-tip-summary')!.textContent).toBe('cell [5], line 3 · activation · 4 MiB · mm · (1024, 1024) float32');
    expect(tip.querySelector('.fv-mem-tip-source')!.textContent).toBe('y = x @ w');
    expect(tip.textContent).toContain('module model.fc1');
    expect(tip.textContent).toContain('(freed)');
    expect(el.getAttribute('data-fv-hover-storage')).toBe('7');
    await view.hover(x + 1, y);
    await view.hover(x, y);
    expect(requestDetail).toHaveBeenCalledTimes(1);
    expect(requestDetail).toHaveBeenCalledWith(7);
    // leaving hides it
    el.querySelector('canvas')!.dispatchEvent(new Event('pointerleave'));
    expect(tip.hidden).toBe(true);
  });

  it('hover while the detail is on its way, and a failed detail', async () => {
    const { events, timeline } = smallTrace();
    let resolve!: (d: StorageDetail) => void;
    const { el, view } = mount(s => (s === 7 ? new Promise(r => (resolve = r)) : Promise.reject(new Error('no storage 1 in this timeline'))));
    view.setTimeline(timeline);
    view.appendEvents(0, columnsOf(events), true);
    view.setXMode('index');
    const f = view.draw();
    const px = (i: number) => f.left + ((i - f.x0) / (f.x1 - f.x0)) * (f.right - f.left);
    const py = (v: number) => f.bottom - (v / f.yMax) * (f.bottom - f.top);
    const pending = view.hover(px(1), py(10 * MiB));
    const tip = el.querySelector<HTMLElement>('.fv-mem-tooltip')!;
    expect(tip.querySelector('.fv-mem-tip-loading')).toBeTruthy();
    expect(tip.querySelector('.fv-mem-tip-summary')!.textContent).toBe('cell [5], line 3 · temporary · 4 MiB · mm');
    resolve(detailFor(7, { name: 'y' }));
    await pending;
    expect(tip.querySelector('.fv-mem-tip-title')!.textContent).toContain('y');
    expect(tip.querySelector('.fv-mem-tip-loading')).toBeNull();
    await view.hover(px(0), py(4 * MiB));
    expect(tip.querySelector('.fv-mem-tip-error')!.textContent).toContain('no storage 1 in this timeline');
  });

  it('click pins the details and asks the graph to highlight the node', async () => {
    const { events, timeline } = smallTrace();
    const { el, view } = mount();
    view.setTimeline(timeline);
    view.appendEvents(0, columnsOf(events), true);
    view.setXMode('index');
    const f = view.draw();
    const seen: unknown[] = [];
    const onHighlight = (e: Event) => seen.push((e as CustomEvent).detail);
    document.addEventListener('forgeviz:highlight-node', onHighlight);
    try {
      const x = f.left + ((1 - f.x0) / (f.x1 - f.x0)) * (f.right - f.left);
      const y = f.bottom - ((10 * MiB) / f.yMax) * (f.bottom - f.top);
      await view.click(x, y);
      const panel = el.querySelector<HTMLElement>('.fv-mem-pinned')!;
      expect(panel.hidden).toBe(false);
      expect(panel.getAttribute('data-storage')).toBe('7');
      expect(panel.textContent).toContain('cell [5], line 3');
      expect(panel.textContent).toContain('autograd node MmBackward0 #42');
      expect(seen).toEqual([{ node: 42 }]);
      // a storage without a node: no event
      await view.click(f.left + ((0 - f.x0) / (f.x1 - f.x0)) * (f.right - f.left) + 1, f.bottom - 2);
      expect(panel.getAttribute('data-storage')).toBe('1');
      expect(seen).toHaveLength(2); // the detail names node 42 for every storage in this fake
      panel.querySelector<HTMLButtonElement>('button.fv-mem-unpin')!.click();
      expect(panel.hidden).toBe(true);
    } finally {
      document.removeEventListener('forgeviz:highlight-node', onHighlight);
    }
  });

  it('append, overlapping chunks, gaps and reset', () => {
    const events = randomEvents(1000, 5);
    const cols = columnsOf(events);
    const { el, view, requestReplay } = mount();
    view.setTimeline(timelineFor(1000));
    view.appendEvents(0, sliceColumns(cols, 0, 400), false);
    expect(el.querySelector('.fv-status')!.textContent).toContain('400 of 1,000');
    view.appendEvents(300, sliceColumns(cols, 300, 700), false); // overlaps: 300..399 already held
    expect(view.store.n).toBe(700);
    view.appendEvents(900, sliceColumns(cols, 900, 1000), false); // a gap
    expect(view.store.n).toBe(700);
    expect(requestReplay).toHaveBeenCalledTimes(1);
    view.appendEvents(950, sliceColumns(cols, 950, 1000), false); // still a gap: already asked
    expect(requestReplay).toHaveBeenCalledTimes(1);
    // the kernel replays everything (reset), then streams on
    view.appendEvents(0, sliceColumns(cols, 0, 800), true);
    view.appendEvents(800, sliceColumns(cols, 800, 1000), false);
    expect(view.store.n).toBe(1000);
    expect(el.getAttribute('data-fv-complete')).toBe('true');
    expect((el.querySelector('.fv-status') as HTMLElement).hidden).toBe(true);
    const whole = new MemoryStore();
    whole.append(cols);
    expect(view.store.totalAt(999)).toBe(whole.totalAt(999));
    expect(view.store.peakBytes).toBe(whole.peakBytes);
    // the kernel merged older history: indices shift, so ask for all of it again
    requestReplay.mockClear();
    view.setTimeline(timelineFor(1000, { dropped: 300 }));
    expect(requestReplay).toHaveBeenCalledTimes(1);
    // reset: a new (downsampled) history replaces everything
    const fresh = columnsOf(randomEvents(50, 6));
    view.appendEvents(0, fresh, true);
    expect(view.store.n).toBe(50);
    expect(el.getAttribute('data-fv-events')).toBe('50');
  });

  it('zoomed in far enough, storages become blocks at stable offsets; locate and hover one', async () => {
    const events = randomEvents(5000, 12);
    const { el, view, requestDetail } = mountTrace(events);
    expect(el.getAttribute('data-fv-view')).toBe('area');
    view.setXMode('index');
    view.setRange(2500, 2600);
    const f = view.draw();
    expect(f.view).toBe('blocks');
    expect(el.getAttribute('data-fv-view')).toBe('blocks');
    expect(Number(el.getAttribute('data-fv-blocks'))).toBeGreaterThan(0);
    // every block is the storage's lifetime at its laid-out offset
    const store = view.store;
    // the biggest block in view (tiny ones are drawn a pixel tall and may not be hoverable)
    let big = 0;
    for (let k = 1; k < f.blocks.n; k++) {
      if (store.slotBytes[f.blocks.slot[k]] > store.slotBytes[f.blocks.slot[big]]) {
        big = k;
      }
    }
    const sid = store.slotSid[f.blocks.slot[big]];
    const at = view.locate(sid)!;
    expect(at.view).toBe('blocks');
    const hit = view.hitTest(at.x, at.y)!;
    expect(hit.kind).toBe('block');
    expect(hit.storage).toBe(sid);
    await view.hover(at.x, at.y);
    expect(requestDetail).toHaveBeenCalledWith(sid);
    expect(el.querySelector('.fv-mem-tooltip')!.getAttribute('data-storage')).toBe(String(sid));
    // offsets do not change when zooming elsewhere and back
    const offsets = Array.from(store.slotOffset.subarray(0, store.nSlots));
    view.setRange(100, 160);
    view.draw();
    view.setRange(2500, 2600);
    view.draw();
    expect(Array.from(store.slotOffset.subarray(0, store.nSlots))).toEqual(offsets);
    // reset zoom: the area again
    el.querySelector<HTMLButtonElement>('button.fv-mem-zoom-reset')!.click();
    expect(view.draw().view).toBe('area');
  });

  it('showStorage zooms to a storage and returns where to point', () => {
    const events = randomEvents(3000, 13);
    const { view } = mountTrace(events);
    // a big storage allocated in the middle
    const sid = events.slice(1500).find(e => e.action === ALLOC && e.bytes > 2 ** 20)!.storage;
    const at = view.showStorage(sid)!;
    expect(at.view).toBe('blocks');
    expect(view.hitTest(at.x, at.y)!.storage).toBe(sid);
  });

  it('zoom buttons, wheel and drag change the range; the area never draws per event', () => {
    const { el, view } = mountSynthetic(20_000);
    const f0 = view.draw();
    el.querySelector<HTMLButtonElement>('button.fv-mem-zoom-in')!.click();
    const f1 = view.draw();
    expect(f1.x1 - f1.x0).toBeCloseTo((f0.x1 - f0.x0) / 2, 6);
    expect(el.getAttribute('data-fv-zoomed')).toBe('true');
    const canvas = el.querySelector('canvas')!;
    canvas.dispatchEvent(new WheelEvent('wheel', { deltaY: -300, clientX: 300, clientY: 100, cancelable: true }));
    const f2 = view.draw();
    expect(f2.x1 - f2.x0).toBeLessThan(f1.x1 - f1.x0);
    canvas.dispatchEvent(new PointerEvent('pointerdown', { button: 0, clientX: 400, clientY: 100, pointerId: 1 }));
    canvas.dispatchEvent(new PointerEvent('pointermove', { buttons: 1, clientX: 300, clientY: 100, pointerId: 1 }));
    canvas.dispatchEvent(new PointerEvent('pointerup', { clientX: 300, clientY: 100, pointerId: 1 }));
    const f3 = view.draw();
    expect(f3.x0).toBeGreaterThan(f2.x0);
    expect(f3.x1 - f3.x0).toBeCloseTo(f2.x1 - f2.x0, 9);
    el.querySelector<HTMLButtonElement>('button.fv-mem-zoom-out')!.click();
    el.querySelector<HTMLButtonElement>('button.fv-mem-zoom-reset')!.click();
    expect(el.getAttribute('data-fv-zoomed')).toBe('false');
  });

  it('canvas drawing is bounded by pixel columns, not events', () => {
    const calls = { lineTo: 0, fillRect: 0 };
    const fake = new Proxy(
      {},
      {
        get(_t, prop) {
          if (prop === 'lineTo' || prop === 'fillRect') {
            return () => calls[prop]++;
          }
          if (prop === 'measureText') {
            return () => ({ width: 40 });
          }
          if (prop === 'createPattern') {
            return () => null;
          }
          return () => undefined;
        },
        set: () => true
      }
    );
    const spy = vi.spyOn(HTMLCanvasElement.prototype, 'getContext').mockImplementation(() => fake as never);
    try {
      const counts: number[] = [];
      for (const n of [5_000, 200_000]) {
        const { view } = mountSynthetic(n);
        calls.lineTo = 0;
        view.draw();
        counts.push(calls.lineTo);
      }
      // ≤ 2 points per column per band, plus axes
      expect(Math.max(...counts)).toBeLessThan(2 * 1600 * 2 * NCAT);
      expect(counts[1]).toBeLessThan(counts[0] * 3);
    } finally {
      spy.mockRestore();
    }
  });

  it('export SVG: standalone, and its size does not grow with the event count', () => {
    const sizes: number[] = [];
    for (const n of [20_000, 400_000]) {
      const { view } = mountSynthetic(n);
      const svg = view.exportSVG();
      expect(svg.startsWith('<?xml')).toBe(true);
      expect(svg).toMatch(/<svg[^>]*xmlns="http:\/\/www\.w3\.org\/2000\/svg"/);
      expect(svg).not.toMatch(/<canvas|foreignObject|<image|https?:\/\/(?!www\.w3\.org)/);
      expect(svg).toContain('peak ');
      expect(svg).toContain('<pattern');
      expect(svg).toContain('data-category="activation"');
      const doc = new DOMParser().parseFromString(svg.replace(/^<\?xml[^>]*>\s*/, ''), 'image/svg+xml');
      expect(doc.querySelectorAll('path').length).toBeLessThan(40);
      sizes.push(svg.length);
    }
    console.log(`export SVG size: 20,000 events → ${sizes[0]} chars, 400,000 events → ${sizes[1]} chars`);
    expect(sizes[1]).toBeLessThan(300_000);
    expect(sizes[1] / sizes[0]).toBeLessThan(2);
  });

  it('export SVG keeps the peak label inside the plot when the peak is the last event', () => {
    // a step up at the very end (the CPU trace of two allocations after a quiet start)
    const events: Ev[] = [0, 1, 2].map(i => ({ time: i * 0.001, bytes: 8, storage: i, action: ALLOC, category: 0 }));
    events.push({ time: 0.057, bytes: 40_000, storage: 10, action: ALLOC, category: 6 });
    events.push({ time: 0.0571, bytes: 80_000, storage: 11, action: ALLOC, category: 6 });
    const { view } = mountTrace(events);
    const f = view.draw();
    expect(f.peak!.index).toBe(4);
    const svg = view.exportSVG();
    const doc = new DOMParser().parseFromString(svg.replace(/^<\?xml[^>]*>\s*/, ''), 'image/svg+xml');
    const label = [...doc.querySelectorAll('text')].find(t => t.textContent!.startsWith('peak '))!;
    const half = (label.textContent!.length * 7) / 2; // bold 11px: at most about 7 px a character
    const x = Number(label.getAttribute('x'));
    expect(x + half).toBeLessThanOrEqual(f.right + 1);
    expect(x - half).toBeGreaterThanOrEqual(f.left - 1);
  });

  it('export SVG of the blocks view has one rect per block segment', () => {
    const events = randomEvents(3000, 14);
    const { view } = mountTrace(events);
    view.setXMode('index');
    view.setRange(1000, 1040);
    const f = view.draw();
    expect(f.view).toBe('blocks');
    const svg = view.exportSVG();
    const doc = new DOMParser().parseFromString(svg.replace(/^<\?xml[^>]*>\s*/, ''), 'image/svg+xml');
    const dataRects = doc.querySelectorAll('g[clip-path] rect');
    expect(svg.length).toBeLessThan(200 * dataRects.length + 20_000); // attributes only, no inlined styles
    expect(dataRects.length).toBe(computeFrame({ store: view.store, timeline: null, mode: 'index', x0: f.x0, x1: f.x1, W: f.W, H: f.H, density: 1, zoomed: true }).blocks.n);
  });

  it('1,000,000 synthetic events: first frame (report only)', () => {
    const { columns, timeline } = buildSynthetic(1_000_000);
    const { view } = mount();
    const t0 = performance.now();
    view.setTimeline(timeline);
    view.appendEvents(0, columns, true);
    const f = view.draw();
    const t1 = performance.now();
    for (let k = 0; k < 20; k++) {
      view.setRange(f.x0 + (k * (f.x1 - f.x0)) / 100, f.x0 + ((k + 50) * (f.x1 - f.x0)) / 100);
      view.draw();
    }
    const t2 = performance.now();
    console.log(`1,000,000 events in the view (happy-dom, no canvas): first frame ${(t1 - t0).toFixed(0)} ms, pan frames ${((t2 - t1) / 20).toFixed(1)} ms each`);
    expect(view.store.n).toBe(1_000_000);
    expect(f.view).toBe('area');
  });
});

describe('layout', () => {
  it('keeps its last width while the stage is hidden, instead of falling back to 800 px', () => {
    const { el, view } = mountTrace(randomEvents(200, 3));
    const stage = el.querySelector('.fv-mem-stage') as HTMLElement;
    let width = 966;
    Object.defineProperty(stage, 'clientWidth', { get: () => width });
    expect(view.draw().W).toBe(966);
    width = 0; // hidden for a moment: a redraw now must not shrink the canvas
    expect(view.draw().W).toBe(966);
    expect((el.querySelector('canvas') as HTMLCanvasElement).style.width).toBe('966px');
    width = 700;
    expect(view.draw().W).toBe(700);
  });
});

describe('semantics', () => {
  it('live bytes per category follow recategorizations and frees', () => {
    const { events } = smallTrace();
    const store = storeOf(events);
    expect([0, 1, 2, 3, 4, 5].map(i => store.liveAt(i, CAT.activation) / MiB)).toEqual([0, 0, 4, 4, 4, 0]);
    expect([0, 1, 2, 3, 4, 5].map(i => store.liveAt(i, CAT.temporary) / MiB)).toEqual([0, 4, 0, 2, 0, 0]);
    expect(store.totalAt(5)).toBe(8 * MiB);
    expect(events.filter(e => e.action === FREE)).toHaveLength(2);
  });
});
