/** Pure address math and grid geometry of the stride diagram. */
import { describe, expect, it } from 'vitest';
import {
  boxIndices,
  boxOffset,
  boxToInclude,
  cellAddress,
  fitBox,
  gridGeometry,
  initialBox,
  pageBox,
  parseShape,
  product,
  storageIndex,
  stripGeometry,
  stripSpan,
  stripWindowFor,
  toStripIndex,
  tupleText
} from '../../src/render/strides/layout';
import { bytesText, overlapText, verdictCall, verdictSummary } from '../../src/render/strides/data';

describe('the address rule', () => {
  // t = arange(12).reshape(3, 4)
  const tT = { stride: [1, 4], storage_offset: 0, element_size: 4 };
  const slice = { stride: [4, 1], storage_offset: 1, element_size: 4 };
  const expanded = { stride: [0, 4, 1], storage_offset: 0, element_size: 4 };

  it('storage_offset + Σ i_k·stride_k', () => {
    expect(storageIndex([1, 2], [4, 1], 0)).toBe(6); // t[1, 2]
    expect(storageIndex([1, 2], [1, 4], 0)).toBe(9); // t.T[1, 2]
    expect(storageIndex([], [], 5)).toBe(5); // 0-d
    expect(cellAddress(tT, [1, 2], 4)).toBe(9);
    expect(cellAddress(slice, [2, 1], 4)).toBe(10); // t[:, 1:3][2, 1]
    expect(cellAddress(expanded, [1, 2, 3], 4)).toBe(11);
    expect(cellAddress(expanded, [0, 2, 3], 4)).toBe(11);
  });

  it('converts to strip units when the dtypes differ', () => {
    // a float16 view (2 bytes) of a float32 storage (4 bytes): elements 2 and 3 live in strip element 1
    expect(toStripIndex(2, 2, 4)).toBe(1);
    expect(toStripIndex(3, 2, 4)).toBe(1);
    expect(stripSpan(3, 2, 4)).toEqual([1, 1]);
    // a float64 view of a float32 storage: element 1 covers strip elements 2 and 3
    expect(toStripIndex(1, 8, 4)).toBe(2);
    expect(stripSpan(1, 8, 4)).toEqual([2, 3]);
    expect(cellAddress({ stride: [1], storage_offset: 0, element_size: 8 }, [5], 4)).toBe(10);
  });
});

describe('windows', () => {
  it('boxIndices is row-major and boxOffset inverts it', () => {
    const idx = boxIndices([1, 2], [2, 3]);
    expect(idx).toEqual([
      [1, 2],
      [1, 3],
      [1, 4],
      [2, 2],
      [2, 3],
      [2, 4]
    ]);
    idx.forEach((i, flat) => expect(boxOffset([1, 2], [2, 3], i)).toBe(flat));
    expect(boxOffset([1, 2], [2, 3], [0, 2])).toBe(-1);
    expect(boxIndices([], [])).toEqual([[]]);
  });

  it('initialBox follows forgeviz.model.strides.initial_window', () => {
    expect(initialBox([10000, 1000], 1024)).toEqual({ start: [0, 0], size: [16, 16] });
    expect(initialBox([5, 6, 7, 8, 9], 1024)).toEqual({ start: [0, 0, 0, 0, 0], size: [1, 3, 4, 8, 9] });
    expect(initialBox([], 1024)).toEqual({ start: [], size: [] });
  });

  it('fitBox clips to the shape and to max_window', () => {
    const b = fitBox([100, 50], [95, 0], [16, 16], 64);
    expect(product(b.size)).toBeLessThanOrEqual(64);
    expect(b.start[0] + b.size[0]).toBeLessThanOrEqual(100);
    expect(fitBox([3, 4], [0, 0], [16, 16], 1024)).toEqual({ start: [0, 0], size: [3, 4] });
  });

  it('pageBox moves one page and stops at the ends', () => {
    const b = { start: [0, 0], size: [16, 16] };
    expect(pageBox([100, 50], b, 0, 1, 1024)).toEqual({ start: [16, 0], size: [16, 16] });
    expect(pageBox([100, 50], { start: [80, 0], size: [16, 16] }, 0, 1, 1024)).toEqual({ start: [84, 0], size: [16, 16] });
    expect(pageBox([100, 50], b, 1, -1, 1024)).toEqual(b);
    expect(boxToInclude([100, 50], b, [20, 3], 1024)).toEqual({ start: [5, 0], size: [16, 16] });
  });

  it('strip windows hold ~512 cells and contain the address asked for', () => {
    const start = stripWindowFor(1000, 5000, 256, 32);
    expect(start).toBeLessThanOrEqual(1000);
    expect(start + 256).toBeGreaterThan(1000);
    expect(stripWindowFor(4990, 5000, 256, 32)).toBe(5000 - 256);
    const g = stripGeometry(0, 12, 30, 4, false);
    expect(g.perRow).toBe(12); // small storages stay on one row
    expect(stripGeometry(0, 256, 30, 4, false).perRow).toBeLessThanOrEqual(32);
  });
});

describe('grid tiling', () => {
  it('0-d is one cell, 1-D one row, 2-D rows × columns', () => {
    expect(gridGeometry([], [], [], 30, 20).cells).toEqual([{ index: [], flat: 0, x: 0, y: 0 }]);
    const row = gridGeometry([5], [0], [5], 30, 20);
    expect(new Set(row.cells.map(c => c.y)).size).toBe(1);
    expect(row.cells.map(c => c.index)).toEqual([[0], [1], [2], [3], [4]]);
    const m = gridGeometry([3, 4], [0, 0], [3, 4], 30, 20);
    expect(m.cells).toHaveLength(12);
    expect(new Set(m.cells.map(c => c.y)).size).toBe(3);
    expect(new Set(m.cells.map(c => c.x)).size).toBe(4);
    expect(m.tiles).toHaveLength(0);
  });

  it('3-D: dim -3 tiles horizontally, labelled with the leading index', () => {
    const g = gridGeometry([2, 3, 4], [0, 0, 0], [2, 3, 4], 30, 20);
    expect(g.cells).toHaveLength(24);
    expect(g.tiles.map(t => t.label)).toEqual(['[0, :, :]', '[1, :, :]']);
    expect(g.tiles[1].x).toBeGreaterThan(g.tiles[0].x + g.tiles[0].w - 1);
    expect(g.tiles[1].y).toBe(g.tiles[0].y);
    // cells come in row-major order of the window
    g.cells.forEach((c, flat) => expect(c.flat).toBe(flat));
    expect(g.cells.map(c => c.index)).toEqual(boxIndices([0, 0, 0], [2, 3, 4]));
  });

  it('4-D: dim -4 stacks rows of tiles vertically; 5-D tiles dim -5 horizontally again', () => {
    const g = gridGeometry([2, 3, 4, 5], [0, 0, 0, 0], [2, 3, 4, 5], 30, 20);
    expect(g.cells).toHaveLength(120);
    expect(g.tiles).toHaveLength(6);
    expect(g.tiles.map(t => t.label)).toContain('[1, 2, :, :]');
    const tile = (a: number, b: number) => g.tiles.find(t => t.lead.join() === `${a},${b}`)!;
    expect(tile(0, 1).x).toBeGreaterThan(tile(0, 0).x);
    expect(tile(0, 1).y).toBe(tile(0, 0).y);
    expect(tile(1, 0).y).toBeGreaterThan(tile(0, 0).y + tile(0, 0).h - 1);
    expect(tile(1, 0).x).toBe(tile(0, 0).x);
    const five = gridGeometry([2, 2, 2, 2, 2], [0, 0, 0, 0, 0], [2, 2, 2, 2, 2], 30, 20);
    const t5 = (lead: string) => five.tiles.find(t => t.lead.join() === lead)!;
    expect(five.tiles).toHaveLength(8);
    expect(t5('1,0,0').x).toBeGreaterThan(t5('0,1,1').x); // dim 0 blocks side by side
    expect(t5('1,0,0').y).toBe(t5('0,0,0').y);
  });

  it('a window smaller than the shape shows ellipses and absolute indices', () => {
    const g = gridGeometry([100, 50], [16, 0], [16, 16], 30, 20);
    expect(g.cells).toHaveLength(256);
    expect(g.cells[0].index).toEqual([16, 0]);
    const marks = g.marks.filter(m => m.cls === 'fv-ellipsis').map(m => m.text);
    expect(marks).toContain('…'); // more columns
    expect(marks.filter(m => m === '⋮')).toHaveLength(2); // rows before and after
  });
});

describe('words', () => {
  it('parses shapes and says what it expected', () => {
    expect(parseShape('2, 6')).toEqual({ shape: [2, 6] });
    expect(parseShape('(2,6)')).toEqual({ shape: [2, 6] });
    expect(parseShape('[3 -1]')).toEqual({ shape: [3, -1] });
    expect(parseShape(' -1 ')).toEqual({ shape: [-1] });
    expect(parseShape('12,')).toEqual({ shape: [12] });
    for (const bad of ['', '2, x', '2.5', '-1, -1', '-3']) {
      const r = parseShape(bad);
      expect('error' in r && r.error).toMatch(/expected a shape/);
    }
  });

  it('formats tuples, bytes, verdicts and overlaps', () => {
    expect(tupleText([12])).toBe('(12,)');
    expect(tupleText([])).toBe('()');
    expect(tupleText([3, 4])).toBe('(3, 4)');
    expect(bytesText(48)).toBe('48 bytes');
    expect(bytesText(4194304)).toBe('4,194,304 bytes (4 MiB)');
    const v = { op: 'reshape' as const, shape: [-1], works: true, copies: true, result_stride: [1], bytes: 48, reason: '', torch_message: '' };
    expect(verdictCall(v)).toBe('.reshape(-1)');
    expect(verdictSummary(v)).toBe('copy (48 bytes)');
    expect(verdictSummary({ ...v, copies: false, bytes: 0 })).toBe('view (no copy)');
    expect(verdictSummary({ ...v, op: 'contiguous', shape: [3, 4], copies: false, bytes: 0 })).toBe('no-op: already contiguous');
    expect(verdictCall({ ...v, op: 'contiguous' })).toBe('.contiguous()');
    const names = (id: number) => ['t', 't.T', 'a[0:6]', 'a[6:12]'][id];
    const numel = (id: number) => [12, 12, 6, 6][id];
    expect(overlapText({ a: 0, b: 1, elements: 12, exact: true }, names, numel)).toBe('t and t.T read the same 12 elements');
    expect(overlapText({ a: 2, b: 3, elements: 0, exact: true }, names, numel)).toBe(
      'a[0:6] and a[6:12] share the storage but read disjoint elements'
    );
    expect(overlapText({ a: 0, b: 2, elements: 6, exact: false }, names, numel)).toBe('t and a[0:6] both read 6 elements (by extent)');
  });
});
