/** The memory timeline's data layer: decoding, totals, envelope, lifetimes, interval layout. */
import { describe, expect, it } from 'vitest';
import { EVENT_COLUMNS, NO_ID } from '../../src/model/wire';
import {
  ALLOC,
  columnBounds,
  decodeColumns,
  encodeColumns,
  envelope,
  IntervalLayout,
  MemoryStore,
  NCAT,
  type XMode
} from '../../src/render/memory/data';
import { buildSynthetic } from './memory-synthetic';
import { columnsOf, naiveTotals, randomEvents, rng, sliceColumns, storeOf } from './memory-fixtures';

const SIZES: Record<string, number> = { float32: 4, float64: 8, uint32: 4, uint16: 2, uint8: 1 };

/** Each column's bytes copied into a bigger buffer at an odd offset, as a DataView. */
function oddViews(views: DataView[], offsets: number[]): DataView[] {
  return views.map((v, j) => {
    const off = offsets[j % offsets.length];
    const buf = new ArrayBuffer(off + v.byteLength + 5);
    new Uint8Array(buf, off).set(new Uint8Array(v.buffer, v.byteOffset, v.byteLength));
    return new DataView(buf, off, v.byteLength);
  });
}

describe('decodeColumns', () => {
  const events = randomEvents(257, 3);
  const cols = columnsOf(events);

  it('reads little-endian DataViews at odd byte offsets into the right typed arrays', () => {
    for (const offsets of [[1], [3, 5, 7], [1, 2, 3, 4, 5, 6, 7, 9, 11, 13]]) {
      const dec = decodeColumns(oddViews(encodeColumns(cols), offsets), 257);
      for (const [name, type] of EVENT_COLUMNS) {
        const got = (dec as unknown as Record<string, ArrayLike<number>>)[name];
        const want = (cols as unknown as Record<string, ArrayLike<number>>)[name];
        expect(got.constructor.name.toLowerCase()).toBe(`${type}array`);
        expect(got.length).toBe(257);
        expect(Array.from(got)).toEqual(Array.from(want));
      }
    }
  });

  it('aligned buffers, ArrayBuffers, and a count smaller than the buffers', () => {
    const views = encodeColumns(cols);
    const dec = decodeColumns(views.map(v => v.buffer as ArrayBuffer));
    expect(Array.from(dec.bytes)).toEqual(Array.from(cols.bytes));
    const part = decodeColumns(views, 10);
    expect(part.time.length).toBe(10);
    expect(Array.from(part.storage)).toEqual(Array.from(cols.storage.subarray(0, 10)));
    expect(() => decodeColumns(views.slice(0, 9))).toThrow(/expected 10 event column buffers/);
    expect(() => decodeColumns(views, 300)).toThrow(/has 257 values, expected 300/);
    const short = views.slice();
    short[3] = new DataView(new ArrayBuffer(4 * 200));
    expect(() => decodeColumns(short)).toThrow(/node has 200 values/);
  });

  it('EVENT_COLUMNS add up to BYTES_PER_EVENT', () => {
    expect(EVENT_COLUMNS.reduce((a, [, t]) => a + SIZES[t], 0)).toBe(30);
  });
});

describe('MemoryStore totals', () => {
  it('match a naive recomputation on random alloc/free/recategorize events, whatever the chunking', () => {
    for (const seed of [1, 2, 3]) {
      const events = randomEvents(3000, seed, { unknown: true });
      const want = naiveTotals(events);
      const cols = columnsOf(events);
      const r = rng(seed * 7);
      const store = new MemoryStore();
      for (let at = 0; at < events.length; ) {
        const m = 1 + Math.floor(r() * 400);
        store.append(sliceColumns(cols, at, Math.min(events.length, at + m)));
        at += m;
      }
      expect(store.n).toBe(events.length);
      let peak = 0;
      for (let i = 0; i < events.length; i++) {
        let sum = 0;
        for (let c = 0; c < NCAT; c++) {
          expect(store.liveAt(i, c)).toBe(want[i][c]);
          sum += want[i][c];
          expect(store.stackAt(i, c)).toBe(want[i].slice(0, c + 1).reduce((a, b) => a + b, 0));
        }
        expect(store.totalAt(i)).toBe(sum);
        peak = Math.max(peak, sum);
      }
      expect(store.peakBytes).toBe(peak);
      expect(store.totalAt(store.peakIndex)).toBe(peak);
    }
  });

  it('a category first seen late starts from the band below', () => {
    const store = storeOf([
      { time: 0, bytes: 10, storage: 1, action: ALLOC, category: 0 },
      { time: 1, bytes: 5, storage: 2, action: ALLOC, category: 6 },
      { time: 2, bytes: 3, storage: 3, action: ALLOC, category: 3 }
    ]);
    expect(store.present).toEqual([0, 3, 6]);
    expect(Array.from(store.stack[3]!.subarray(0, 3))).toEqual([10, 10, 13]);
    expect(Array.from(store.stack[6]!.subarray(0, 3))).toEqual([10, 15, 18]);
    expect(store.liveAt(2, 3)).toBe(3);
    expect(store.liveAt(2, 2)).toBe(0);
  });

  it('rangeMinMax equals brute force on random ranges', () => {
    const events = randomEvents(20_000, 11);
    const store = storeOf(events);
    const r = rng(5);
    const mn = new Float64Array(NCAT);
    const mx = new Float64Array(NCAT);
    for (let q = 0; q < 300; q++) {
      const a = Math.floor(r() * store.n);
      const b = Math.min(store.n, a + 1 + Math.floor(r() ** 3 * store.n));
      store.rangeMinMax(a, b, mn, mx);
      for (const c of store.present) {
        let lo = Infinity;
        let hi = -Infinity;
        for (let i = a; i < b; i++) {
          lo = Math.min(lo, store.stack[c]![i]);
          hi = Math.max(hi, store.stack[c]![i]);
        }
        expect([mn[c], mx[c]]).toEqual([lo, hi]);
      }
    }
  });

  it('time is made non-decreasing for the x axis', () => {
    const store = storeOf([
      { time: 1, bytes: 1, storage: 1, action: ALLOC, category: 0 },
      { time: 0.5, bytes: 1, storage: 2, action: ALLOC, category: 0 },
      { time: 2, bytes: 1, storage: 3, action: ALLOC, category: 0 }
    ]);
    expect(Array.from(store.cols.time.subarray(0, 3))).toEqual([1, 1, 2]);
  });
});

describe('per-pixel envelope', () => {
  function brute(store: MemoryStore, bounds: Int32Array, cols: number) {
    const out: { min: number[]; max: number[]; last: number[]; empty: boolean }[] = [];
    for (let k = 0; k < cols; k++) {
      const hi = bounds[k + 1];
      const lo = Math.max(0, bounds[k] - 1);
      if (hi <= lo) {
        out.push({ min: [], max: [], last: [], empty: true });
        continue;
      }
      const min: number[] = [];
      const max: number[] = [];
      const last: number[] = [];
      for (let c = 0; c < NCAT; c++) {
        let a = Infinity;
        let b = -Infinity;
        for (let i = lo; i < hi; i++) {
          a = Math.min(a, store.stackAt(i, c));
          b = Math.max(b, store.stackAt(i, c));
        }
        min.push(a);
        max.push(b);
        last.push(store.stackAt(hi - 1, c));
      }
      out.push({ min, max, last, empty: false });
    }
    return out;
  }

  it('equals brute force over random views, both x modes', () => {
    const events = randomEvents(6000, 21);
    const store = storeOf(events);
    const r = rng(9);
    for (let q = 0; q < 40; q++) {
      const mode: XMode = q % 2 ? 'time' : 'index';
      const [f0, f1] = mode === 'time' ? [store.cols.time[0], store.lastTime] : [0, store.n - 1];
      const a = f0 + (f1 - f0) * r() * 0.9 - (q % 5 === 0 ? (f1 - f0) * 0.05 : 0);
      const b = a + (f1 - f0) * Math.max(0.0005, r() ** 2);
      const cols = 1 + Math.floor(r() * 400);
      const bounds = columnBounds(store, mode, a, b, cols);
      const env = envelope(store, bounds, cols);
      const want = brute(store, bounds, cols);
      for (let k = 0; k < cols; k++) {
        expect(!!env.empty[k]).toBe(want[k].empty);
        if (want[k].empty) {
          continue;
        }
        for (let c = 0; c < NCAT; c++) {
          expect([env.min[c][k], env.max[c][k], env.last[c][k]]).toEqual([want[k].min[c], want[k].max[c], want[k].last[c]]);
        }
      }
    }
  });

  it('column bounds: column k holds the events with x in (u_k, u_k+1]', () => {
    const store = storeOf(randomEvents(500, 4));
    const bounds = columnBounds(store, 'time', 0.2, 0.9, 7);
    for (let k = 0; k < 7; k++) {
      const u0 = 0.2 + (0.7 * k) / 7;
      const u1 = 0.2 + (0.7 * (k + 1)) / 7;
      for (let i = bounds[k]; i < bounds[k + 1]; i++) {
        expect(store.cols.time[i]).toBeGreaterThan(u0 - 1e-7);
        expect(store.cols.time[i]).toBeLessThanOrEqual(u1 + 1e-7);
      }
    }
    expect(Array.from(columnBounds(store, 'index', -0.5, 9.5, 5))).toEqual([0, 2, 4, 6, 8, 10]);
  });
});

describe('storage lifetimes', () => {
  it('visibleSlots finds exactly the lifetimes overlapping a state range', () => {
    const events = randomEvents(8000, 8);
    const store = storeOf(events);
    const r = rng(3);
    for (let q = 0; q < 60; q++) {
      const lo = Math.floor(r() * store.n);
      const hi = Math.min(store.n, lo + 1 + Math.floor(r() * 300));
      const out: number[] = [];
      expect(store.visibleSlots(lo, hi, 1e9, out)).toBe(true);
      const want: number[] = [];
      for (let s = 0; s < store.nSlots; s++) {
        const f = store.slotFree[s] === NO_ID ? Infinity : store.slotFree[s];
        if (store.slotAlloc[s] < hi && f > lo) {
          want.push(s);
        }
      }
      expect(out.sort((a, b) => a - b)).toEqual(want);
      const few: number[] = [];
      if (want.length > 5) {
        expect(store.visibleSlots(lo, hi, 5, few)).toBe(false);
      }
    }
  });

  it('interval layout: a block never moves once placed; live blocks never overlap', () => {
    const events = randomEvents(4000, 17);
    const cols = columnsOf(events);
    const store = new MemoryStore();
    const placed = new Map<number, number>();
    for (let at = 0; at < events.length; at += 250) {
      store.append(sliceColumns(cols, at, Math.min(events.length, at + 250)));
      store.ensureLayout();
      for (let s = 0; s < store.nSlots; s++) {
        expect(Number.isNaN(store.slotOffset[s])).toBe(false);
        if (placed.has(s)) {
          expect(store.slotOffset[s]).toBe(placed.get(s));
        } else {
          placed.set(s, store.slotOffset[s]);
        }
      }
    }
    const S = store.nSlots;
    const end = (s: number) => (store.slotFree[s] === NO_ID ? Infinity : store.slotFree[s]);
    const clashes: string[] = [];
    let pairs = 0;
    for (let a = 0; a < S; a++) {
      for (let b = a + 1; b < S; b++) {
        const timeOverlap = store.slotAlloc[a] < end(b) && store.slotAlloc[b] < end(a);
        if (!timeOverlap) {
          continue;
        }
        pairs++;
        const oa = store.slotOffset[a];
        const ob = store.slotOffset[b];
        if (oa < ob + Math.max(1, store.slotBytes[b]) && ob < oa + Math.max(1, store.slotBytes[a])) {
          clashes.push(`slots ${a} and ${b}`);
        }
      }
    }
    expect(pairs).toBeGreaterThan(1000);
    expect(clashes).toEqual([]);
  });

  it('IntervalLayout is first fit and merges freed neighbours', () => {
    const lay = new IntervalLayout();
    const a = lay.alloc(10);
    const b = lay.alloc(20);
    const c = lay.alloc(5);
    expect([a, b, c]).toEqual([0, 10, 30]);
    lay.free(a, 10);
    lay.free(b, 20);
    expect(lay.gapStart).toEqual([0]);
    expect(lay.gapSize).toEqual([30]);
    expect(lay.alloc(25)).toBe(0); // first fit, at the lowest offset
    expect(lay.alloc(8)).toBe(35); // the 5-byte gap is too small
    lay.free(35, 8);
    lay.free(30, 5);
    expect(lay.top).toBe(25);
    expect(lay.gapStart).toEqual([]);
  });
});

describe('buildSynthetic', () => {
  it('a 1,000,000-event trace builds and is decoded and totalled', () => {
    const t0 = performance.now();
    const { columns, timeline } = buildSynthetic(1_000_000);
    const t1 = performance.now();
    const store = new MemoryStore();
    store.append(decodeColumns(encodeColumns(columns), 1_000_000));
    const t2 = performance.now();
    const cols = 1600;
    const bounds = columnBounds(store, 'time', store.cols.time[0], store.lastTime, cols);
    envelope(store, bounds, cols);
    const t3 = performance.now();
    store.ensureLayout();
    const t4 = performance.now();
    console.log(
      `1,000,000 synthetic events: generate ${(t1 - t0).toFixed(0)} ms, decode+append ${(t2 - t1).toFixed(0)} ms, ` +
        `first envelope (${cols} columns) ${(t3 - t2).toFixed(1)} ms, interval layout ${(t4 - t3).toFixed(0)} ms`
    );
    expect(store.n).toBe(1_000_000);
    expect(timeline.count).toBe(1_000_000);
    expect(store.peakBytes).toBe(timeline.peak_bytes);
    expect(store.totalAt(store.n - 1)).toBe(timeline.live_bytes);
    expect(store.present.length).toBe(NCAT);
    expect(timeline.cells.length).toBeGreaterThan(10);
    expect(Array.from(store.cols.action.subarray(0, 10)).every(a => a === ALLOC)).toBe(true);
  });
});
