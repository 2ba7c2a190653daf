/** The stride diagram through the real DOM (happy-dom): drawing, hover mapping, paging, try, export. */
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { StrideLayout, ValueWindow, ViewVerdict } from '../../src/model/wire';
import { createStridesView, StridesView, StridesViewOptions } from '../../src/render/strides/view';
import { bigLayout, copyLayout, expandLayout, fourDLayout, metaLayout, sharedLayout, sparseLayout, windowOf } from './strides-fixtures';
import { takeDown } from './host';

let el: HTMLElement;
let view: StridesView | null = null;

afterEach(() => {
  view = takeDown(view);
});

interface Deferred<T> {
  resolve(v: T): void;
  reject(e: Error): void;
}

function make(layout?: StrideLayout) {
  el = document.createElement('div');
  document.body.appendChild(el);
  const calls = {
    values: [] as { args: [number, number[], number[]]; d: Deferred<ValueWindow> }[],
    storage: [] as { args: [number, number, number]; d: Deferred<{ start: number; values: string[] }> }[],
    tries: [] as { args: [number, string, number[]]; d: Deferred<ViewVerdict> }[]
  };
  const opts: StridesViewOptions = {
    requestValues: vi.fn((tensor: number, start: number[], size: number[]) => new Promise<ValueWindow>((resolve, reject) => calls.values.push({ args: [tensor, start, size], d: { resolve, reject } }))),
    requestStorage: vi.fn(
      (strip: number, start: number, count: number) =>
        new Promise<{ start: number; values: string[] }>((resolve, reject) => calls.storage.push({ args: [strip, start, count], d: { resolve, reject } }))
    ),
    tryOp: vi.fn((tensor: number, op: 'view' | 'reshape', shape: number[]) => new Promise<ViewVerdict>((resolve, reject) => calls.tries.push({ args: [tensor, op, shape], d: { resolve, reject } })))
  };
  view = createStridesView(el, opts);
  if (layout) {
    view.setLayout(layout);
  }
  return { opts, calls };
}

const cell = (tensor: number, index: string) => el.querySelector<SVGGElement>(`.fv-cell[data-tensor="${tensor}"][data-index="${index}"]`)!;
const storageCell = (addr: number, strip = 0) => el.querySelector<SVGGElement>(`.fv-storage-cell[data-strip="${strip}"][data-addr="${addr}"]`)!;
const hotCells = () => Array.from(el.querySelectorAll('.fv-cell.fv-hot')).map(c => `${c.getAttribute('data-tensor')}:${c.getAttribute('data-index')}`);
const hotStorage = () => Array.from(el.querySelectorAll('.fv-storage-cell.fv-hot')).map(c => c.getAttribute('data-addr'));
const readout = () => el.querySelector('.fv-readout')!.textContent!;
const over = (target: Element, type = 'mouseover') => target.dispatchEvent(new MouseEvent(type, { bubbles: true }));
const flush = () => new Promise(r => setTimeout(r, 0));

describe('drawing', () => {
  it('draws every tensor of a strip, and the strip, with the address of each cell', () => {
    make(sharedLayout());
    expect(el.classList.contains('fv-root')).toBe(true);
    expect(el.classList.contains('fv-strides')).toBe(true);
    expect(el.getAttribute('data-fv-state')).toBe('ready');
    expect(el.querySelectorAll('.fv-cell[data-tensor="0"]')).toHaveLength(12);
    expect(el.querySelectorAll('.fv-cell[data-tensor="1"]')).toHaveLength(12);
    expect(el.querySelectorAll('.fv-cell[data-tensor="2"]')).toHaveLength(6);
    expect(el.querySelectorAll('.fv-storage-cell[data-strip="0"]')).toHaveLength(12);
    expect(cell(1, '1,2').getAttribute('data-addr')).toBe('9');
    expect(cell(2, '2,1').getAttribute('data-addr')).toBe('10');
    expect(cell(0, '2,3').getAttribute('data-addr')).toBe('11');
    expect(cell(1, '1,2').textContent).toContain('9');
    expect(cell(1, '1,2').getAttribute('tabindex')).toBe('0');
    expect(cell(1, '1,2').querySelector('title')!.textContent).toBe('t.T[1, 2] = 9 → storage[9]');
    expect(storageCell(7).textContent).toContain('7');
    // header
    const text = el.querySelector('.fv-sd-tensor[data-tensor="1"]')!.textContent!;
    expect(text).toContain('t.T');
    expect(text).toContain('shape (4, 3) · stride (1, 4) · offset 0');
    expect(text).toContain('float32 · 4 B/element · cpu');
    expect(text).toContain('non-contiguous');
    expect(el.querySelector('.fv-sd-tensor[data-tensor="2"]')!.textContent).toContain('offset 1');
    // strip label, readers, extents
    const strip = el.querySelector('.fv-strip[data-strip="0"]')!;
    expect(strip.textContent).toContain('storage 0 · float32 · 12 elements × 4 B = 48 bytes · cpu · data_ptr 0x55d0c0a01240');
    expect(strip.querySelectorAll('.fv-strip-reader')).toHaveLength(3);
    expect(strip.querySelectorAll('.fv-extent')).toHaveLength(3);
    // t[:, 1:3] reads 6 of the 12 elements: one tick per element it reads
    expect(strip.querySelectorAll('.fv-extent[data-tensor="2"] .fv-read-tick')).toHaveLength(6);
    expect(strip.querySelector('.fv-copy')).toBeNull();
  });

  it('gives each tensor its own colour and dash pattern', () => {
    make(sharedLayout());
    const frames = Array.from(el.querySelectorAll('.fv-t-frame'));
    expect(frames.map(f => f.getAttribute('stroke'))).toEqual(['#0072B2', '#D55E00', '#009E73']);
    expect(new Set(frames.map(f => f.getAttribute('stroke-dasharray'))).size).toBe(3);
  });

  it('describes overlaps under the strip and in the transcript', () => {
    make(sharedLayout());
    const lines = Array.from(el.querySelectorAll('.fv-overlap')).map(o => o.textContent);
    expect(lines).toContain('t and t.T read the same 12 elements');
    expect(lines).toContain('t and t[:, 1:3] both read 6 elements');
    const tr = el.querySelector('.fv-transcript')!.textContent!;
    expect(tr).toContain('t.T: shape (4, 3), stride (1, 4), storage offset 0, float32 (4 bytes per element) on cpu, not contiguous; reads storage 0');
    expect(tr).toContain('storage 0: 12 elements of float32 (48 bytes) on cpu, read by t, t.T, t[:, 1:3]');
    expect(tr).toContain('t and t.T read the same 12 elements.');
  });

  it('tiles 3-D and 4-D tensors with labelled leading indices', () => {
    make(expandLayout());
    expect(el.querySelectorAll('.fv-cell')).toHaveLength(24);
    expect(Array.from(el.querySelectorAll('.fv-tile-label')).map(t => t.textContent)).toEqual(['[0, :, :]', '[1, :, :]']);
    const axes = el.querySelector('.fv-axis-label')!.textContent!;
    expect(axes).toContain('dim 2 (size 4)');
    expect(axes).toContain('dim 1 (size 3)');
    expect(axes).toContain('dim 0 (size 2)');
    view!.setLayout(fourDLayout());
    expect(el.querySelectorAll('.fv-cell')).toHaveLength(120);
    const labels = Array.from(el.querySelectorAll('.fv-tile-label')).map(t => t.textContent);
    expect(labels).toHaveLength(6);
    expect(labels).toContain('[1, 2, :, :]');
    expect(cell(0, '1,2,3,4').getAttribute('data-addr')).toBe('119');
  });

  it('0-d and empty tensors', () => {
    const lay = sharedLayout();
    lay.tensors = [
      { ...lay.tensors[0], id: 0, name: 's', shape: [], stride: [], storage_offset: 5, numel: 1, extent: [5, 5], window: { start: [], size: [], values: ['5'] } },
      { ...lay.tensors[0], id: 1, name: 'z', shape: [0, 3], stride: [3, 1], numel: 0, extent: null, window: { start: [0, 0], size: [0, 3], values: [] } }
    ];
    lay.strips[0].tensors = [0, 1];
    lay.overlaps = [];
    make(lay);
    const scalar = el.querySelectorAll('.fv-cell[data-tensor="0"]');
    expect(scalar).toHaveLength(1);
    expect(scalar[0].getAttribute('data-index')).toBe('');
    expect(scalar[0].getAttribute('data-addr')).toBe('5');
    expect(el.querySelectorAll('.fv-cell[data-tensor="1"]')).toHaveLength(0);
    expect(el.querySelector('.fv-sd-tensor[data-tensor="1"]')!.textContent).toContain('no elements (shape (0, 3))');
    over(scalar[0]);
    expect(readout()).toBe('s[()] → storage[5] = 5   (offset 5)');
  });

  it('a copy on its own strip is marked', () => {
    make(copyLayout());
    expect(el.querySelectorAll('.fv-sd-group')).toHaveLength(2);
    expect(el.querySelector('.fv-strip[data-strip="0"] .fv-copy')).toBeNull();
    expect(el.querySelector('.fv-strip[data-strip="1"] .fv-copy')!.textContent).toBe('copy: own storage');
    expect(cell(1, '1,2').getAttribute('data-addr')).toBe('5');
    over(cell(1, '1,2'));
    expect(el.querySelector('.fv-storage-cell.fv-hot')!.getAttribute('data-strip')).toBe('1');
    expect(readout()).toContain('c[1, 2] → storage[5] = 9');
  });

  it('message and warnings', () => {
    make({ ...sparseLayout(), message: 'nothing strided to draw' });
    expect(el.querySelector<HTMLElement>('.fv-message')!.hidden).toBe(false);
    expect(el.querySelector('.fv-message')!.textContent).toBe('nothing strided to draw');
    expect(el.querySelector<HTMLElement>('.fv-warning')!.hidden).toBe(true);
    view!.setWarnings(['hook failed: RuntimeError(boom)']);
    expect(el.querySelector<HTMLElement>('.fv-warning')!.hidden).toBe(false);
    expect(el.querySelector('.fv-warning')!.textContent).toContain('hook failed: RuntimeError(boom)');
    view!.setWarnings([]);
    expect(el.querySelector<HTMLElement>('.fv-warning')!.hidden).toBe(true);
  });
});

describe('hover mapping', () => {
  it('a logical cell lights the storage element it reads, with the arithmetic', () => {
    make(sharedLayout());
    over(cell(1, '1,2'));
    expect(hotCells()).toEqual(['1:1,2']);
    expect(hotStorage()).toEqual(['9']);
    expect(el.querySelector('.fv-storage-cell.fv-hot')!.getAttribute('data-addr')).toBe('9');
    expect(readout()).toBe('t.T[1, 2] → storage[9] = 9   (offset 0 + 1·1 + 2·4)');
    expect(el.querySelectorAll('.fv-sd-overlay .fv-connector')).toHaveLength(1);
    // one step along dim 0 moves 1 element; dim 1 is at its last index, so no arc for it
    const arcs = Array.from(el.querySelectorAll('.fv-sd-overlay .fv-arc'));
    expect(arcs.map(a => a.getAttribute('data-dim'))).toEqual(['0']);
    expect(arcs[0].getAttribute('data-to')).toBe('10');
    expect(arcs[0].textContent).toBe('dim 0 +1');
    over(cell(1, '0,0'));
    expect(Array.from(el.querySelectorAll('.fv-arc')).map(a => a.textContent)).toEqual(['dim 0 +1', 'dim 1 +4']);
    expect(hotStorage()).toEqual(['0']);
  });

  it('pointerover and keyboard focus work the same way', () => {
    make(sharedLayout());
    cell(2, '2,1').dispatchEvent(new PointerEvent('pointerover', { bubbles: true }));
    expect(hotStorage()).toEqual(['10']);
    expect(readout()).toBe('t[:, 1:3][2, 1] → storage[10] = 10   (offset 1 + 2·4 + 1·1)');
    (cell(0, '0,0') as unknown as HTMLElement).focus();
    expect(hotStorage()).toEqual(['0']);
    // arrow keys move along the dims
    cell(0, '0,0').dispatchEvent(new KeyboardEvent('keydown', { key: 'ArrowRight', bubbles: true }));
    expect(document.activeElement).toBe(cell(0, '0,1'));
    expect(hotStorage()).toEqual(['1']);
    cell(0, '0,1').dispatchEvent(new KeyboardEvent('keydown', { key: 'ArrowDown', bubbles: true }));
    expect(document.activeElement).toBe(cell(0, '1,1'));
    expect(hotStorage()).toEqual(['5']);
    // and along the strip
    (storageCell(5) as unknown as HTMLElement).focus();
    storageCell(5).dispatchEvent(new KeyboardEvent('keydown', { key: 'ArrowRight', bubbles: true }));
    expect(document.activeElement).toBe(storageCell(6));
    expect(hotCells().sort()).toEqual(['0:1,2', '1:2,1', '2:1,1']);
  });

  it('a storage cell lights every logical cell that reads it', () => {
    make(sharedLayout());
    over(storageCell(9));
    expect(hotStorage()).toEqual(['9']);
    expect(hotCells()).toEqual(['0:2,1', '1:1,2', '2:2,0']);
    expect(readout()).toBe('storage[9] ← t[2, 1], t.T[1, 2], t[:, 1:3][2, 0]   (value 9)');
    expect(el.querySelectorAll('.fv-sd-overlay .fv-connector')).toHaveLength(3);
    // blank canvas between cells keeps it; the cards below end it
    over(el.querySelector('.fv-sd-canvas')!);
    expect(hotStorage()).toEqual(['9']);
    over(el.querySelector('.fv-sd-card')!);
    expect(hotStorage()).toEqual([]);
    over(storageCell(9));
    expect(hotStorage()).toEqual(['9']);
    // leaving the diagram clears the mapping
    el.querySelector('.fv-sd-groups')!.dispatchEvent(new MouseEvent('mouseleave'));
    expect(hotCells()).toEqual([]);
    expect(el.querySelector('.fv-readout')!.getAttribute('data-empty')).toBe('true');
  });

  it('expand: one storage element, many logical cells; stride 0 is a self-loop', () => {
    make(expandLayout());
    over(storageCell(11));
    expect(hotCells()).toEqual(['0:0,2,3', '0:1,2,3']);
    expect(readout()).toMatch(/^storage\[11\] ← e\[0, 2, 3\], e\[1, 2, 3\]/);
    over(cell(0, '0,1,1'));
    expect(hotStorage()).toEqual(['5']);
    const self = el.querySelector('.fv-arc-self')!;
    expect(self.getAttribute('data-dim')).toBe('0');
    expect(self.textContent).toBe('dim 0 +0 (expand: same element)');
    expect(Array.from(el.querySelectorAll('.fv-arc:not(.fv-arc-self)')).map(a => a.textContent)).toEqual(['dim 1 +4', 'dim 2 +1']);
  });

  it('bytes mode draws element_size byte cells per element; data-addr stays the element', () => {
    make(sharedLayout());
    const units = el.querySelector<HTMLButtonElement>('button.fv-units')!;
    units.click();
    expect(units.getAttribute('aria-pressed')).toBe('true');
    expect(el.querySelectorAll('.fv-storage-cell')).toHaveLength(12);
    expect(storageCell(9).querySelectorAll('.fv-byte-div')).toHaveLength(3);
    expect(storageCell(9).querySelector('.fv-addr-num')!.textContent).toBe('36');
    over(cell(1, '1,2'));
    expect(hotStorage()).toEqual(['9']);
    units.click();
    expect(storageCell(9).querySelectorAll('.fv-byte-div')).toHaveLength(0);
  });
});

describe('paging', () => {
  it('a pager button fetches the next box with a values request of at most max_window', async () => {
    const { opts, calls } = make(bigLayout());
    expect(el.querySelectorAll('.fv-cell')).toHaveLength(256);
    expect(el.querySelectorAll('.fv-storage-cell')).toHaveLength(256);
    expect(el.querySelectorAll('.fv-ellipsis').length).toBeGreaterThan(0);
    const next = el.querySelector<HTMLButtonElement>('button.fv-page-next[data-tensor="0"][data-dim="0"]')!;
    expect(el.querySelector<HTMLButtonElement>('button.fv-page-prev[data-tensor="0"][data-dim="0"]')!.disabled).toBe(true);
    next.click();
    expect(opts.requestValues).toHaveBeenCalledWith(0, [16, 0], [16, 16]);
    expect(el.getAttribute('data-fv-pending')).toBe('1');
    calls.values[0].d.resolve(windowOf([16, 0], [16, 16], ([i, j]) => String(50 * i + j)));
    await vi.waitFor(() => expect(cell(0, '16,0')).toBeTruthy());
    expect(cell(0, '0,0')).toBeNull();
    expect(el.querySelectorAll('.fv-cell')).toHaveLength(256);
    expect(cell(0, '20,0').textContent).toContain('1000');
    expect(el.querySelector('.fv-pager[data-dim="0"]')!.textContent).toContain('dim 0: 16–31 of 100');
    expect(el.getAttribute('data-fv-pending')).toBe('0');
  });

  it('keeps the box within max_window', () => {
    const { opts } = make(bigLayout(64));
    el.querySelector<HTMLButtonElement>('button.fv-page-next[data-dim="1"]')!.click();
    const [, start, size] = (opts.requestValues as ReturnType<typeof vi.fn>).mock.calls[0];
    expect(size[0] * size[1]).toBeLessThanOrEqual(64);
    expect(start[1]).toBeGreaterThan(0);
  });

  it('hovering a cell whose element is outside the strip window moves the window and fetches it', async () => {
    const { opts, calls } = make(bigLayout());
    el.querySelector<HTMLButtonElement>('button.fv-page-next[data-dim="0"]')!.click();
    calls.values[0].d.resolve(windowOf([16, 0], [16, 16], ([i, j]) => String(50 * i + j)));
    await vi.waitFor(() => expect(cell(0, '20,0')).toBeTruthy());
    over(cell(0, '20,0'));
    expect(opts.requestStorage).toHaveBeenCalledTimes(1);
    const [strip, start, count] = calls.storage[0].args;
    expect(strip).toBe(0);
    expect(start).toBeLessThanOrEqual(1000);
    expect(start + count).toBeGreaterThan(1000);
    expect(count).toBeLessThanOrEqual(1024);
    // drawn at once (values pending), highlighted
    expect(hotStorage()).toEqual(['1000']);
    calls.storage[0].d.resolve({ start, values: Array.from({ length: count }, (_, i) => String(start + i)) });
    await vi.waitFor(() => expect(storageCell(1000).textContent).toContain('1000'));
    expect(hotStorage()).toEqual(['1000']);
    expect(readout()).toBe('big[20, 0] → storage[1000] = 1000   (offset 0 + 20·50 + 0·1)');
    expect(el.querySelectorAll('.fv-storage-cell').length).toBeLessThanOrEqual(512);
    // the overview shows where the window is
    expect(el.querySelector('.fv-overview')!.textContent).toContain(`showing elements ${start}–${start + 255} of 5000`);
  });

  it('strip pager buttons page through a long storage', async () => {
    const { opts, calls } = make(bigLayout());
    el.querySelector<HTMLButtonElement>('button.fv-strip-next[data-strip="0"]')!.click();
    expect(opts.requestStorage).toHaveBeenCalledWith(0, 256, 256);
    calls.storage[0].d.resolve({ start: 256, values: Array.from({ length: 256 }, (_, i) => String(256 + i)) });
    await vi.waitFor(() => expect(storageCell(300).textContent).toContain('300'));
    expect(storageCell(0)).toBeNull();
  });

  it('shows a failed fetch', async () => {
    const { calls } = make(bigLayout());
    el.querySelector<HTMLButtonElement>('button.fv-page-next[data-dim="0"]')!.click();
    calls.values[0].d.reject(new Error('big no longer exists in the kernel'));
    await vi.waitFor(() => expect(el.querySelector<HTMLElement>('.fv-status')!.hidden).toBe(false));
    expect(el.querySelector('.fv-status')!.textContent).toContain('big no longer exists in the kernel');
    expect(cell(0, '0,0')).toBeTruthy();
  });
});

describe('facts, verdicts, try', () => {
  it('lists facts and verdicts with torch messages verbatim', () => {
    make(sharedLayout());
    const card = el.querySelector('.fv-sd-card[data-tensor="1"]')!;
    expect(card.querySelector('.fv-fact[data-key="contiguous"]')!.textContent).toContain('is_contiguous(): False');
    const view = card.querySelector('.fv-verdict[data-op="view"]')!;
    expect(view.getAttribute('data-works')).toBe('false');
    expect(view.textContent).toContain('.view(-1)');
    expect(view.textContent).toContain('✗ fails');
    expect(view.querySelector('pre.fv-torch-msg')!.textContent).toContain('view size is not compatible');
    expect(card.querySelector('.fv-verdict[data-op="reshape"]')!.textContent).toContain('copy (48 bytes)');
    expect(card.querySelector('.fv-verdict[data-op="contiguous"]')!.textContent).toContain('.contiguous() allocates 48 bytes');
    const own = el.querySelector('.fv-sd-card[data-tensor="0"]')!;
    expect(own.querySelector('.fv-verdict[data-op="reshape"]')!.textContent).toContain('view (no copy)');
    expect(own.querySelector('.fv-verdict[data-op="contiguous"]')!.textContent).toContain('no-op');
  });

  it('the try form sends a try request and shows the verdict', async () => {
    const { opts, calls } = make(sharedLayout());
    const form = el.querySelector('.fv-try[data-tensor="1"]')!;
    const input = form.querySelector<HTMLInputElement>('input.fv-try-shape')!;
    input.value = '2, 6';
    form.querySelector<HTMLButtonElement>('button.fv-try-view')!.click();
    expect(opts.tryOp).toHaveBeenCalledWith(1, 'view', [2, 6]);
    calls.tries[0].d.resolve({ op: 'view', shape: [2, 6], works: false, copies: false, result_stride: null, bytes: 0, reason: 'dims 0 and 1 cannot merge', torch_message: 'view size is not compatible' });
    await vi.waitFor(() => expect(form.querySelector('.fv-try-result')).toBeTruthy());
    expect(form.querySelector('.fv-try-result')!.textContent).toContain('.view(2, 6)');
    expect(form.querySelector('.fv-try-result pre.fv-torch-msg')!.textContent).toBe('view size is not compatible');
    input.value = '(4, -1)';
    form.querySelector<HTMLButtonElement>('button.fv-try-reshape')!.click();
    expect(opts.tryOp).toHaveBeenLastCalledWith(1, 'reshape', [4, -1]);
    calls.tries[1].d.reject(new Error('shape [4, -1] is invalid'));
    await vi.waitFor(() => expect(form.querySelector('.fv-try-error')).toBeTruthy());
    expect(form.querySelector('.fv-try-error')!.textContent).toContain('shape [4, -1] is invalid');
  });

  it('a bad shape is explained locally and sends nothing', () => {
    const { opts } = make(sharedLayout());
    const form = el.querySelector('.fv-try[data-tensor="0"]')!;
    form.querySelector<HTMLInputElement>('input.fv-try-shape')!.value = '2, x';
    form.querySelector<HTMLButtonElement>('button.fv-try-reshape')!.click();
    expect(opts.tryOp).not.toHaveBeenCalled();
    expect(form.querySelector('.fv-try-error')!.textContent).toContain('"x" is not a whole number: expected a shape');
  });
});

describe('layouts without strides or data', () => {
  it('a sparse tensor shows its panel, not a grid', () => {
    make(sparseLayout());
    expect(el.getAttribute('data-fv-state')).toBe('ready');
    expect(el.querySelectorAll('.fv-cell, .fv-storage-cell')).toHaveLength(0);
    const panel = el.querySelector('.fv-panel[data-layout="sparse_coo"]')!;
    expect(panel.querySelector('.fv-panel-title')!.textContent).toBe('sparse COO tensor');
    expect(panel.textContent).toContain('stores the coordinates of its nonzero elements');
    const rows = Array.from(panel.querySelectorAll('tbody tr')).map(r => Array.from(r.children).map(c => c.textContent));
    expect(rows).toEqual([
      ['indices', '(2, 2)', 'int64', 'row and column of each nonzero', '0, 2, 1, 0'],
      ['values', '(2,)', 'float32', 'one value per nonzero', '3, 4']
    ]);
    expect(el.querySelector('.fv-try')).toBeNull();
    expect(el.querySelector('.fv-sd-tensor')!.textContent).toContain('layout sparse_coo');
  });

  it('a meta tensor draws its layout with no values and fetches nothing', () => {
    const { opts } = make(metaLayout());
    expect(el.querySelectorAll('.fv-cell')).toHaveLength(12);
    expect(el.querySelectorAll('.fv-cell .fv-cell-text')).toHaveLength(0);
    expect(el.querySelectorAll('.fv-storage-cell .fv-cell-text')).toHaveLength(0);
    expect(el.textContent).toContain('meta: no data');
    expect(cell(0, '1,2').getAttribute('data-addr')).toBe('9');
    over(cell(0, '1,2'));
    expect(hotStorage()).toEqual(['9']);
    expect(readout()).toBe('m[1, 2] → storage[9] (meta: no data)   (offset 0 + 1·1 + 2·4)');
    expect(opts.requestValues).not.toHaveBeenCalled();
    expect(opts.requestStorage).not.toHaveBeenCalled();
  });
});

describe('export', () => {
  it('exportSVG is a standalone SVG holding the cells', () => {
    make(copyLayout());
    const svg = view!.exportSVG();
    expect(svg.startsWith('<?xml')).toBe(true);
    expect(svg).toContain('xmlns="http://www.w3.org/2000/svg"');
    expect(svg).not.toContain('tabindex');
    const doc = new DOMParser().parseFromString(svg, 'image/svg+xml');
    expect(doc.querySelectorAll('.fv-cell')).toHaveLength(24);
    expect(doc.querySelectorAll('.fv-storage-cell')).toHaveLength(24);
    expect(doc.querySelector('.fv-copy')!.textContent).toBe('copy: own storage');
    expect(doc.documentElement.getAttribute('viewBox')).toMatch(/^0 0 \d+ \d+$/);
    expect(svg).toContain('t.T'.slice(0, 1));
    // the live diagram is unchanged
    expect(el.querySelectorAll('.fv-sd-export')).toHaveLength(0);
  });

  it('the export buttons download forgeviz-strides.svg', () => {
    make(sharedLayout());
    const clicked: string[] = [];
    const orig = HTMLAnchorElement.prototype.click;
    HTMLAnchorElement.prototype.click = function (this: HTMLAnchorElement) {
      clicked.push(this.download);
    };
    try {
      el.querySelector<HTMLButtonElement>('button.fv-export-svg')!.click();
      expect(clicked).toEqual(['forgeviz-strides.svg']);
      expect(el.querySelector('button.fv-export-png')).toBeTruthy();
    } finally {
      HTMLAnchorElement.prototype.click = orig;
    }
  });

  it('destroy removes everything', async () => {
    make(sharedLayout());
    view!.destroy();
    view = null;
    expect(el.children).toHaveLength(0);
    expect(el.classList.contains('fv-strides')).toBe(false);
    await flush();
  });
});
