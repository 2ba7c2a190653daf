/** A CUDA history on the memory timeline: reserved steps over the allocated area, releases, OOMs, segments. */
import { describe, expect, it, vi } from 'vitest';
import type { CudaState } from '../../src/model/wire';
import { ALLOC, FREE } from '../../src/render/memory/data';
import { computeFrame, plotX, plotY } from '../../src/render/memory/draw';
import { createMemoryView, type MemoryView } from '../../src/render/memory/view';
import { CAT, columnsOf, type Ev, MiB, storeOf, timelineFor, viewsDestroyedAfterEach } from './memory-fixtures';

const views = viewsDestroyedAfterEach();

// The same history as tests/test_memory_cuda.py's hand-written snapshot, as the kernel sends it.
const events: Ev[] = [
  { time: 0.001, bytes: 8 * MiB, storage: 0, action: ALLOC, category: CAT.parameter, cell: 3 },
  { time: 0.002, bytes: 4 * MiB, storage: 1, action: ALLOC, category: CAT.temporary, cell: 3 },
  { time: 0.003, bytes: 4 * MiB, storage: 2, action: ALLOC, category: CAT.gradient, cell: 4 },
  { time: 0.004, bytes: 4 * MiB, storage: 1, action: FREE, category: CAT.temporary, cell: 3 },
  { time: 0.005, bytes: 512, storage: 3, action: ALLOC, category: CAT.temporary, cell: 5 },
  { time: 0.006, bytes: 512, storage: 3, action: FREE, category: CAT.temporary, cell: 5 }
];
const cuda: CudaState = {
  device: 0,
  reserved_time: [0, 0.005, 0.007],
  reserved_bytes: [20 * MiB, 22 * MiB, 20 * MiB],
  peak_reserved: 22 * MiB,
  reserved_unused: 8 * MiB,
  released: [[0.007, 2 * MiB]],
  ooms: [{ time: 0.008, requested: 64 * 2 ** 30, device_free: 2 ** 30, allocated: 12 * MiB, reserved: 20 * MiB, cell: 6 }],
  segments: [{ address: '0x7f0000000000', total: 20 * MiB, allocated: 12 * MiB, largest_free: 4 * MiB, fragmentation: 0.5, segment_type: 'large' }]
};

describe('the CUDA overlay', () => {
  it('draws reserved as steps above the allocated area, with the y axis reaching its peak', () => {
    const store = storeOf(events);
    const f = computeFrame({ store, timeline: timelineFor(events.length, { cuda }), mode: 'time', x0: 0, x1: 0.01, W: 800, H: 320, density: 1, zoomed: false });
    expect(f.view).toBe('area');
    expect(f.yMax).toBeGreaterThanOrEqual(22 * MiB); // allocated peaks at 16 MiB: the axis follows reserved
    const o = f.cuda!;
    expect(o.xs.length).toBe(6); // three steps, two ends each
    expect(o.ys).toEqual([20, 20, 22, 22, 20, 20].map(v => plotY(f, v * MiB)));
    expect(o.xs[2]).toBeCloseTo(plotX(f, 0.005));
    expect(o.xs[5]).toBeCloseTo(f.right);
    const oom = o.marks.find(m => m.kind === 'oom')!;
    expect(oom.x).toBeCloseTo(plotX(f, 0.008));
    expect(oom.y).toBeCloseTo(plotY(f, 20 * MiB));
    expect(oom.label).toContain('OOM in cell [6]: asked 64.0 GiB, CUDA had 1.0 GiB free');
    expect(o.marks.filter(m => m.kind === 'release').map(m => m.x)).toEqual([plotX(f, 0.007)]);
  });

  it('maps times to event indices in index mode, and shows only what is in view', () => {
    const store = storeOf(events);
    const f = computeFrame({ store, timeline: timelineFor(events.length, { cuda }), mode: 'index', x0: 0, x1: 3, W: 800, H: 320, density: 1, zoomed: false });
    const o = f.cuda!;
    // reserved rose to 22 MiB at t = 0.005, which is event 4: outside [0, 3]
    expect(o.xs.length).toBe(2);
    expect(o.ys[0]).toBeCloseTo(plotY(f, 20 * MiB));
    expect(o.marks).toEqual([]); // the release (event 6) and the OOM (after the last event) are off screen
    expect(o.maxInView).toBe(20 * MiB);
  });

  it('without a CUDA history there is no overlay', () => {
    const f = computeFrame({ store: storeOf(events), timeline: timelineFor(events.length), mode: 'time', x0: 0, x1: 0.01, W: 800, H: 320, density: 1, zoomed: false });
    expect(f.cuda).toBeNull();
  });
});

describe('the CUDA view', () => {
  function mount(): { el: HTMLElement; view: MemoryView } {
    const el = document.createElement('div');
    document.body.appendChild(el);
    const view = createMemoryView(el, { requestDetail: vi.fn(), requestReplay: vi.fn() });
    views.push(view);
    view.setTimeline(timelineFor(events.length, { cuda, device: 'cuda:0' }));
    view.appendEvents(0, columnsOf(events), true);
    view.draw();
    return { el, view };
  }

  it('tables the segments with their fragmentation and lists the OOM', () => {
    const { el } = mount();
    const box = el.querySelector('.fv-mem-cuda-box') as HTMLElement;
    expect(box.hidden).toBe(false);
    const cells = [...box.querySelectorAll('tbody td')].map(td => td.textContent);
    expect(cells).toEqual(['0x7f0000000000', 'large', '20.0 MiB', '12.0 MiB', '8.0 MiB', '4.0 MiB', '50%']);
    expect(box.querySelector('.fv-mem-cuda-summary')!.textContent).toContain('8.0 MiB of it is cached with no tensor in it');
    expect(box.querySelector('.fv-mem-ooms li')!.textContent).toBe(
      'OOM in cell [6]: asked 64.0 GiB, CUDA had 1.0 GiB free; allocated 12.0 MiB, reserved 20.0 MiB (at 8.00 ms)'
    );
    const canvas = el.querySelector('canvas')!;
    expect(canvas.getAttribute('data-fv-reserved-steps')).toBe('3');
    expect(canvas.getAttribute('data-fv-ooms')).toBe('1');
    expect(el.querySelector('.fv-mem-summary')!.textContent).toContain('reserved peak 22.0 MiB');
  });

  it('exports the reserved line and the marks in the SVG', () => {
    const { view } = mount();
    const svg = view.exportSVG();
    expect(svg).toContain('data-series="reserved"');
    expect(svg).toContain('data-mark="oom"');
    expect(svg).toContain('data-mark="release"');
  });

  it('hides the CUDA panel for a CPU timeline', () => {
    const el = document.createElement('div');
    document.body.appendChild(el);
    const view = createMemoryView(el, { requestDetail: vi.fn(), requestReplay: vi.fn() });
    views.push(view);
    view.setTimeline(timelineFor(0));
    expect((el.querySelector('.fv-mem-cuda-box') as HTMLElement).hidden).toBe(true);
  });
});
