/**
 * The memory timeline's data: event columns decoded from the kernel's little-endian buffers,
 * and everything derived from them once, incrementally, so that drawing costs pixels, not events:
 *
 * - per category, the stacked live bytes after each event (``stack[c][i]`` = live bytes of
 *   categories 0..c after event i), plus a min/max pyramid over it (blocks of 16, 256, ...);
 * - one slot per storage lifetime (alloc → free), with a max-pyramid over free indices so the
 *   lifetimes visible in a range are found without walking every storage;
 * - a first-fit interval layout (a stable vertical offset per storage), computed lazily.
 *
 * Pure data: no DOM, no Jupyter.
 */
import { CATEGORIES, EVENT_COLUMNS, NO_ID } from '../../model/wire';

export const ALLOC = 0;
export const FREE = 1;
export const RECATEGORIZE = 2;
/** Categories, in stacking order (bottom first). */
export const NCAT = CATEGORIES.length;
/** The category of anything the kernel labels out of range. */
const OTHER_CAT = NCAT - 1;
/** Events per block at the first pyramid level; each level groups this many of the one below. */
const FAN = 16;
const FAN_BITS = 4;
/** Storage ids below this index an array; larger ones a Map. */
const SID_DENSE_MAX = 1 << 22;

export interface EventColumns {
  time: Float32Array;
  bytes: Float64Array;
  storage: Uint32Array;
  node: Uint32Array;
  op: Uint16Array;
  module: Uint16Array;
  cell: Uint16Array;
  line: Uint16Array;
  action: Uint8Array;
  category: Uint8Array;
}
export type ColumnName = keyof EventColumns;
type Typed = EventColumns[ColumnName];
type TypedCtor = { new (n: number): Typed; new (buf: ArrayBufferLike, off: number, n: number): Typed; BYTES_PER_ELEMENT: number };

const CTORS: Record<string, TypedCtor> = {
  float32: Float32Array as unknown as TypedCtor,
  float64: Float64Array as unknown as TypedCtor,
  uint32: Uint32Array as unknown as TypedCtor,
  uint16: Uint16Array as unknown as TypedCtor,
  uint8: Uint8Array as unknown as TypedCtor
};
/** ``dv.getFloat32``, ``dv.setUint8``, ...: the DataView accessor of a wire type (``float32`` → ``Float32``), bound to ``dv``. */
function accessor<F>(dv: DataView, verb: 'get' | 'set', type: string): F {
  const fn = (dv as unknown as Record<string, F & ((...args: never[]) => unknown)>)[`${verb}${type[0].toUpperCase()}${type.slice(1)}`];
  return fn.bind(dv) as F;
}
const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

export type WireBuffer = DataView | ArrayBuffer | ArrayBufferView;

function parts(b: WireBuffer): { buffer: ArrayBufferLike; byteOffset: number; byteLength: number } {
  if (b instanceof ArrayBuffer) {
    return { buffer: b, byteOffset: 0, byteLength: b.byteLength };
  }
  return { buffer: b.buffer, byteOffset: b.byteOffset, byteLength: b.byteLength };
}

/** Empty columns of length ``n``. */
export function emptyColumns(n = 0): EventColumns {
  const out: Record<string, Typed> = {};
  for (const [name, type] of EVENT_COLUMNS) {
    out[name] = new CTORS[type](n);
  }
  return out as unknown as EventColumns;
}

/**
 * Typed arrays from one little-endian buffer per column (EVENT_COLUMNS order). Any byteOffset
 * works: unaligned buffers are copied, aligned ones are viewed in place (copy before keeping).
 * ``count`` (the message's) bounds the events read; without it every column must agree.
 */
export function decodeColumns(buffers: ArrayLike<WireBuffer>, count?: number): EventColumns {
  if (!buffers || buffers.length < EVENT_COLUMNS.length) {
    throw new Error(`expected ${EVENT_COLUMNS.length} event column buffers, got ${buffers ? buffers.length : 0}`);
  }
  const lengths = EVENT_COLUMNS.map(([, type], j) => Math.floor(parts(buffers[j]).byteLength / CTORS[type].BYTES_PER_ELEMENT));
  let n: number;
  if (count === undefined || count === null) {
    n = lengths[0];
    const bad = lengths.findIndex(l => l !== n);
    if (bad >= 0) {
      throw new Error(`event column ${EVENT_COLUMNS[bad][0]} has ${lengths[bad]} values, ${EVENT_COLUMNS[0][0]} has ${n}`);
    }
  } else {
    n = Math.max(0, Math.floor(count));
    const bad = lengths.findIndex(l => l < n);
    if (bad >= 0) {
      throw new Error(`event column ${EVENT_COLUMNS[bad][0]} has ${lengths[bad]} values, expected ${n}`);
    }
  }
  const out: Record<string, Typed> = {};
  EVENT_COLUMNS.forEach(([name, type], j) => {
    const Ctor = CTORS[type];
    const size = Ctor.BYTES_PER_ELEMENT;
    const { buffer, byteOffset } = parts(buffers[j]);
    if (LITTLE_ENDIAN && byteOffset % size === 0) {
      out[name] = new Ctor(buffer, byteOffset, n);
    } else if (LITTLE_ENDIAN) {
      const copy = new Uint8Array(n * size);
      copy.set(new Uint8Array(buffer, byteOffset, n * size));
      out[name] = new Ctor(copy.buffer, 0, n);
    } else {
      const dv = new DataView(buffer, byteOffset, n * size);
      const arr = new Ctor(n);
      const get = accessor<(off: number, littleEndian: boolean) => number>(dv, 'get', type);
      for (let i = 0; i < n; i++) {
        arr[i] = get(i * size, true);
      }
      out[name] = arr;
    }
  });
  return out as unknown as EventColumns;
}

/** Columns as little-endian DataViews, EVENT_COLUMNS order (what the kernel sends). */
export function encodeColumns(cols: EventColumns, start = 0, end = cols.time.length): DataView[] {
  const n = Math.max(0, end - start);
  return EVENT_COLUMNS.map(([name, type]) => {
    const size = CTORS[type].BYTES_PER_ELEMENT;
    const dv = new DataView(new ArrayBuffer(n * size));
    const src = cols[name as ColumnName];
    const set = accessor<(off: number, v: number, littleEndian: boolean) => void>(dv, 'set', type);
    for (let i = 0; i < n; i++) {
      set(i * size, src[start + i], true);
    }
    return dv;
  });
}

/** First index in sorted ``arr[0..n)`` whose value is > v (``orEqual``: >= v). */
function bisect(arr: ArrayLike<number>, n: number, v: number, orEqual: boolean): number {
  let lo = 0;
  let hi = n;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    const a = arr[mid];
    if (a < v || (a === v && !orEqual)) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

/** First index in sorted ``arr[0..n)`` whose value is > v. */
export function upperBound(arr: ArrayLike<number>, n: number, v: number): number {
  return bisect(arr, n, v, false);
}

/** First index in sorted ``arr[0..n)`` whose value is >= v. */
export function lowerBound(arr: ArrayLike<number>, n: number, v: number): number {
  return bisect(arr, n, v, true);
}

/** A copy of a typed array with room for ``cap`` elements. */
export function grown<T extends Typed | Int32Array>(arr: T, cap: number): T {
  const Ctor = arr.constructor as { new (n: number): T };
  const out = new Ctor(cap);
  out.set(arr as unknown as ArrayLike<number>);
  return out;
}

/** First-fit over free offsets: a block never moves once placed. */
export class IntervalLayout {
  /** Free gaps below ``top``, sorted by offset, never adjacent (merged). */
  gapStart: number[] = [];
  gapSize: number[] = [];
  /** Everything at or above ``top`` is free. */
  top = 0;

  alloc(size: number): number {
    const need = Math.max(1, size);
    const gs = this.gapStart;
    const gz = this.gapSize;
    for (let k = 0; k < gs.length; k++) {
      if (gz[k] >= need) {
        const off = gs[k];
        if (gz[k] === need) {
          gs.splice(k, 1);
          gz.splice(k, 1);
        } else {
          gs[k] += need;
          gz[k] -= need;
        }
        return off;
      }
    }
    const off = this.top;
    this.top += need;
    return off;
  }

  free(offset: number, size: number): void {
    const need = Math.max(1, size);
    const gs = this.gapStart;
    const gz = this.gapSize;
    let start = offset;
    let end = offset + need;
    const k = lowerBound(gs, gs.length, start);
    // merge with the gap just below and the one just above
    let lo = k;
    let hi = k;
    if (k > 0 && gs[k - 1] + gz[k - 1] === start) {
      lo = k - 1;
      start = gs[k - 1];
    }
    if (k < gs.length && gs[k] === end) {
      end = gs[k] + gz[k];
      hi = k + 1;
    }
    if (end >= this.top) {
      gs.splice(lo, hi - lo);
      gz.splice(lo, hi - lo);
      this.top = start;
    } else {
      gs.splice(lo, hi - lo, start);
      gz.splice(lo, hi - lo, end - start);
    }
  }
}

/**
 * All events of one trace and what is derived from them. ``append`` is O(events appended);
 * ``reset`` forgets everything.
 */
export class MemoryStore {
  n = 0;
  private cap = 0;
  /** Event columns (``time`` made non-decreasing), capacity-sized: read ``[0, n)`` only. */
  cols: EventColumns = emptyColumns(0);
  /** stack[c][i]: live bytes of categories 0..c after event i; null while c has never been seen. */
  stack: (Float64Array | null)[] = new Array(NCAT).fill(null);
  /** Categories seen so far, ascending. */
  present: number[] = [];
  /** pyramid[c][L]: min and max of stack[c] over blocks of FAN^(L+1) events. */
  private mipMin: Float64Array[][] = Array.from({ length: NCAT }, () => []);
  private mipMax: Float64Array[][] = Array.from({ length: NCAT }, () => []);
  /** Live storages after event i. */
  liveCount = new Uint32Array(0);
  /** Live bytes per category now. */
  running = new Float64Array(NCAT);
  peakBytes = 0;
  peakIndex = -1;
  private live = 0;

  // ---- storage lifetimes (slots), in alloc order -----------------------------------------------
  nSlots = 0;
  private slotCap = 0;
  slotSid = new Uint32Array(0);
  slotAlloc = new Uint32Array(0);
  /** Event index of the free, NO_ID while alive. */
  slotFree = new Uint32Array(0);
  slotBytes = new Float64Array(0);
  /** Category at alloc; later changes are in ``recats``. */
  slotCat0 = new Uint8Array(0);
  slotCat = new Uint8Array(0);
  /** First-fit offset, NaN until laid out. */
  slotOffset = new Float64Array(0);
  /** Recategorizations as linked lists per slot (event index, new category, next; -1 ends). */
  private recatHead = new Int32Array(0);
  private recatTail = new Int32Array(0);
  private nRecats = 0;
  private recatEvent = new Uint32Array(0);
  private recatCat = new Uint8Array(0);
  private recatNext = new Int32Array(0);
  /** storage id → live slot: an array for small ids, a map beyond */
  private sidSlot = new Int32Array(0);
  private slotOf = new Map<number, number>();
  /** Slots in the order they were freed. */
  private freeOrder: number[] = [];
  /** freeMax[L][j]: max of slotFree over slots [j·FAN^(L+1), (j+1)·FAN^(L+1)). */
  private freeMax: Uint32Array[] = [];

  // ---- lazy interval layout ---------------------------------------------------------------------
  private layout = new IntervalLayout();
  private laidAllocs = 0;
  private laidFrees = 0;
  /** Highest byte ever used by the layout. */
  layoutTop = 0;

  reset(): void {
    Object.assign(this, new MemoryStore());
  }

  /** The time (seconds) of the last event, or 0. */
  get lastTime(): number {
    return this.n ? this.cols.time[this.n - 1] : 0;
  }

  private ensureCap(need: number): void {
    if (need <= this.cap) {
      return;
    }
    const cap = Math.max(need, Math.floor(this.cap * 1.5), 1024);
    const c = this.cols as unknown as Record<string, Typed>;
    for (const k of Object.keys(c)) {
      c[k] = grown(c[k], cap);
    }
    this.liveCount = grown(this.liveCount, cap);
    for (const cat of this.present) {
      this.stack[cat] = grown(this.stack[cat]!, cap);
    }
    this.cap = cap;
    for (const cat of this.present) {
      this.growMip(cat);
    }
  }

  private growMip(cat: number): void {
    const mins = this.mipMin[cat];
    const maxs = this.mipMax[cat];
    for (let L = 0, size = FAN; size <= this.cap; L++, size *= FAN) {
      const len = Math.floor(this.cap / size) + 1;
      if (L >= mins.length) {
        mins.push(new Float64Array(len));
        maxs.push(new Float64Array(len));
      } else if (mins[L].length < len) {
        mins[L] = grown(mins[L], len);
        maxs[L] = grown(maxs[L], len);
      }
    }
  }

  /** Category ``cat`` appears at event ``i``: its stack so far equals the band below's. */
  private addBand(cat: number, i: number): void {
    let below = -1;
    for (const p of this.present) {
      if (p < cat) {
        below = p;
      }
    }
    const arr = new Float64Array(this.cap);
    if (below >= 0) {
      arr.set(this.stack[below]!.subarray(0, i));
    }
    this.stack[cat] = arr;
    this.growMip(cat);
    if (below >= 0) {
      for (let L = 0; L < this.mipMin[cat].length; L++) {
        this.mipMin[cat][L].set(this.mipMin[below][L]);
        this.mipMax[cat][L].set(this.mipMax[below][L]);
      }
    }
    this.present = [...this.present, cat].sort((a, b) => a - b);
  }

  private ensureSlotCap(need: number): void {
    if (need <= this.slotCap) {
      return;
    }
    const cap = Math.max(need, 1024, Math.floor(this.slotCap * 1.5));
    this.slotSid = grown(this.slotSid, cap);
    this.slotAlloc = grown(this.slotAlloc, cap);
    this.slotFree = grown(this.slotFree, cap);
    this.slotBytes = grown(this.slotBytes, cap);
    this.slotCat0 = grown(this.slotCat0, cap);
    this.slotCat = grown(this.slotCat, cap);
    const head = grown(this.recatHead, cap);
    head.fill(-1, this.slotCap);
    this.recatHead = head;
    this.recatTail = grown(this.recatTail, cap);
    const off = grown(this.slotOffset, cap);
    off.fill(NaN, this.slotCap);
    this.slotOffset = off;
    this.slotCap = cap;
    for (let L = 0, size = FAN; ; L++, size *= FAN) {
      const len = Math.floor(cap / size) + 1;
      if (L >= this.freeMax.length) {
        // a new level: each block is the max of the 16 below (slots already held count)
        const level = new Uint32Array(len);
        const below: ArrayLike<number> = L === 0 ? this.slotFree : this.freeMax[L - 1];
        const belowCount = L === 0 ? this.nSlots : below.length;
        for (let k = 0; k < belowCount; k++) {
          const j = k >>> FAN_BITS;
          if (below[k] > level[j]) {
            level[j] = below[k];
          }
        }
        this.freeMax.push(level);
      } else {
        this.freeMax[L] = grown(this.freeMax[L], len);
      }
      if (len <= 1) {
        break;
      }
    }
  }

  /** The live slot of a storage id, or -1. Dense ids (the kernel counts from 0) use an array. */
  private lookup(sid: number): number {
    if (sid < this.sidSlot.length) {
      return this.sidSlot[sid];
    }
    const s = this.slotOf.get(sid);
    return s === undefined ? -1 : s;
  }

  private bind(sid: number, s: number): void {
    if (sid >= this.sidSlot.length && sid < SID_DENSE_MAX) {
      const len = Math.min(SID_DENSE_MAX, Math.max(sid + 1, 1024, this.sidSlot.length * 2));
      const next = new Int32Array(len).fill(-1);
      next.set(this.sidSlot);
      this.sidSlot = next;
      // ids held in the map that now fit the array move over
      for (const [k, v] of this.slotOf) {
        if (k < len) {
          next[k] = v;
          this.slotOf.delete(k);
        }
      }
    }
    if (sid < this.sidSlot.length) {
      this.sidSlot[sid] = s;
    } else if (s < 0) {
      this.slotOf.delete(sid);
    } else {
      this.slotOf.set(sid, s);
    }
  }

  private newSlot(sid: number, i: number, bytes: number, cat: number): void {
    this.ensureSlotCap(this.nSlots + 1);
    const s = this.nSlots++;
    this.slotSid[s] = sid;
    this.slotAlloc[s] = i;
    this.slotFree[s] = NO_ID;
    this.slotBytes[s] = bytes;
    this.slotCat0[s] = cat;
    this.slotCat[s] = cat;
    // a live slot makes every enclosing block's max NO_ID (stop where it already is)
    for (let L = 0; L < this.freeMax.length; L++) {
      const sh = FAN_BITS * (L + 1);
      const level = this.freeMax[L];
      const block = sh >= 32 ? 0 : s >>> sh;
      if (level[block] === NO_ID) {
        break;
      }
      level[block] = NO_ID;
    }
    this.bind(sid, s);
    this.live++;
  }

  private addRecat(s: number, i: number, cat: number): void {
    if (this.nRecats >= this.recatEvent.length) {
      const cap = Math.max(1024, this.recatEvent.length * 2);
      this.recatEvent = grown(this.recatEvent, cap);
      this.recatCat = grown(this.recatCat, cap);
      this.recatNext = grown(this.recatNext, cap);
    }
    const r = this.nRecats++;
    this.recatEvent[r] = i;
    this.recatCat[r] = cat;
    this.recatNext[r] = -1;
    if (this.recatHead[s] < 0) {
      this.recatHead[s] = r;
    } else {
      this.recatNext[this.recatTail[s]] = r;
    }
    this.recatTail[s] = r;
  }

  /** Slot s's recategorizations: [event index, category] pairs in event order. */
  recatsOf(s: number): [number, number][] {
    const out: [number, number][] = [];
    for (let r = this.recatHead[s]; r >= 0; r = this.recatNext[r]) {
      out.push([this.recatEvent[r], this.recatCat[r]]);
    }
    return out;
  }

  private freeSlot(s: number, i: number): void {
    this.slotFree[s] = i;
    this.freeOrder.push(s);
    this.live--;
    let childCount = this.nSlots;
    let child: ArrayLike<number> = this.slotFree;
    let j = s;
    for (let L = 0; L < this.freeMax.length; L++) {
      const block = j >>> FAN_BITS;
      const from = block << FAN_BITS;
      const to = Math.min(from + FAN, childCount);
      let m = 0;
      for (let k = from; k < to; k++) {
        if (child[k] > m) {
          m = child[k];
        }
      }
      const level = this.freeMax[L];
      if (level[block] === m) {
        break;
      }
      level[block] = m;
      child = level;
      childCount = Math.ceil(childCount / FAN);
      j = block;
    }
  }

  /** Append events ``[from, to)`` of ``src`` after the ones held. */
  append(src: EventColumns, from = 0, to = src.time.length): void {
    const m = Math.max(0, to - from);
    if (!m) {
      return;
    }
    const n0 = this.n;
    this.ensureCap(n0 + m);
    const c = this.cols;
    for (const [name] of EVENT_COLUMNS) {
      const k = name as ColumnName;
      (c[k] as Typed).set((src[k] as Typed).subarray(from, to) as never, n0);
    }
    const { time, bytes, storage, action, category } = c;
    let allocs = 0;
    for (let i = n0; i < n0 + m; i++) {
      if (action[i] === ALLOC) {
        allocs++;
      }
    }
    this.ensureSlotCap(this.nSlots + allocs);
    const running = this.running;
    const stack = this.stack;
    let presCats = this.present;
    let presArrs = presCats.map(k => stack[k]!);
    let prevT = n0 ? time[n0 - 1] : -Infinity;
    for (let i = n0; i < n0 + m; i++) {
      const t = time[i];
      if (!(t >= prevT)) {
        time[i] = prevT; // clamp: the x axis needs a non-decreasing time (NaN too)
      } else {
        prevT = t;
      }
      let cat = category[i];
      if (cat >= NCAT) {
        cat = OTHER_CAT;
        category[i] = cat;
      }
      if (!stack[cat]) {
        this.addBand(cat, i);
        presCats = this.present;
        presArrs = presCats.map(k => stack[k]!);
      }
      const a = action[i];
      const b = bytes[i];
      const sid = storage[i];
      // the same arithmetic as forgeviz.model.memory.category_series
      if (a === ALLOC) {
        const old = this.lookup(sid);
        if (old >= 0) {
          this.freeSlot(old, i); // an id allocated twice: the first lifetime ends here
        }
        this.newSlot(sid, i, b, cat);
        running[cat] += b;
      } else if (a === FREE) {
        const s = this.lookup(sid);
        if (s >= 0) {
          this.bind(sid, -1);
          this.freeSlot(s, i);
          running[this.slotCat[s]] -= b;
        } else {
          running[cat] -= b;
        }
      } else if (a === RECATEGORIZE) {
        const s = this.lookup(sid);
        if (s >= 0) {
          const old = this.slotCat[s];
          running[old] -= b;
          running[cat] += b;
          this.slotCat[s] = cat;
          this.addRecat(s, i, cat);
        }
      }
      // categories never seen hold 0 bytes
      let sum = 0;
      for (let q = 0; q < presCats.length; q++) {
        sum += running[presCats[q]];
        presArrs[q][i] = sum;
      }
      this.liveCount[i] = this.live;
      if (sum > this.peakBytes) {
        this.peakBytes = sum;
        this.peakIndex = i;
      }
      if (((i + 1) & (FAN - 1)) === 0) {
        this.updateMip(i);
      }
    }
    this.n = n0 + m;
  }

  /** Blocks ending at event i are complete: fill the pyramid levels they close. */
  private updateMip(i: number): void {
    for (const cat of this.present) {
      const mins = this.mipMin[cat];
      const maxs = this.mipMax[cat];
      let srcMin: ArrayLike<number> = this.stack[cat]!;
      let srcMax: ArrayLike<number> = srcMin;
      let j = (i + 1) >>> FAN_BITS; // blocks complete at level 0 after this event
      for (let L = 0; L < mins.length; L++) {
        const block = j - 1;
        const from = block << FAN_BITS;
        let lo = Infinity;
        let hi = -Infinity;
        for (let k = from; k < from + FAN; k++) {
          const a = srcMin[k];
          const b = srcMax[k];
          if (a < lo) {
            lo = a;
          }
          if (b > hi) {
            hi = b;
          }
        }
        mins[L][block] = lo;
        maxs[L][block] = hi;
        if ((j & (FAN - 1)) !== 0) {
          break;
        }
        srcMin = mins[L];
        srcMax = maxs[L];
        j = j >>> FAN_BITS;
      }
    }
  }

  /**
   * Min and max of stack[c][lo..hi) for every present category, into ``mn``/``mx``
   * (indexed by category). Cost: O(FAN · log(hi − lo)), whatever the range.
   */
  rangeMinMax(lo: number, hi: number, mn: Float64Array, mx: Float64Array): void {
    const pres = this.present;
    for (const c of pres) {
      mn[c] = Infinity;
      mx[c] = -Infinity;
    }
    let a = lo;
    let b = hi;
    let L = -1;
    const scan = (from: number, to: number) => {
      if (from >= to) {
        return;
      }
      for (const c of pres) {
        const srcMin = L < 0 ? this.stack[c]! : this.mipMin[c][L];
        const srcMax = L < 0 ? srcMin : this.mipMax[c][L];
        let lo2 = mn[c];
        let hi2 = mx[c];
        for (let k = from; k < to; k++) {
          if (srcMin[k] < lo2) {
            lo2 = srcMin[k];
          }
          if (srcMax[k] > hi2) {
            hi2 = srcMax[k];
          }
        }
        mn[c] = lo2;
        mx[c] = hi2;
      }
    };
    const levels = pres.length ? this.mipMin[pres[0]].length : 0;
    while (a < b) {
      if (b - a <= 2 * FAN || L + 1 >= levels) {
        scan(a, b);
        break;
      }
      const aUp = Math.min(b, ((a + FAN - 1) >>> FAN_BITS) << FAN_BITS);
      const bDown = Math.max(aUp, (b >>> FAN_BITS) << FAN_BITS);
      scan(a, aUp);
      scan(bDown, b);
      a = aUp >>> FAN_BITS;
      b = bDown >>> FAN_BITS;
      L++;
    }
  }

  /** Live bytes of one category after event i (exact). */
  liveAt(i: number, cat: number): number {
    if (i < 0 || i >= this.n || !this.stack[cat]) {
      return 0;
    }
    return this.stack[cat]![i] - this.stackBelow(i, cat);
  }

  /** stack value of the nearest present band below ``cat`` (0 if none). */
  stackBelow(i: number, cat: number): number {
    for (let k = cat - 1; k >= 0; k--) {
      const arr = this.stack[k];
      if (arr) {
        return arr[i];
      }
    }
    return 0;
  }

  /** Stacked top of band ``cat`` after event i (bands never seen take the one below). */
  stackAt(i: number, cat: number): number {
    if (i < 0 || i >= this.n) {
      return 0;
    }
    return this.stack[cat] ? this.stack[cat]![i] : this.stackBelow(i, cat);
  }

  /** Live bytes of every category after event i. */
  totalAt(i: number): number {
    return this.stackAt(i, NCAT - 1);
  }

  /** The slot (lifetime) of ``storage`` covering event i, or -1. */
  slotAt(storage: number, i: number): number {
    const end = upperBound(this.slotAlloc, this.nSlots, i);
    for (let s = end - 1; s >= 0; s--) {
      if (this.slotSid[s] === storage && this.slotAlloc[s] <= i) {
        return this.slotFree[s] === NO_ID || this.slotFree[s] >= i ? s : -1;
      }
    }
    return -1;
  }

  /**
   * Slots alive at some point of the state range [lo, hi) (alive after event lo, or allocated
   * before hi): alloc < hi and (free > lo or alive). Appends to ``out``; stops (returns false)
   * once more than ``limit`` are found.
   */
  visibleSlots(lo: number, hi: number, limit: number, out: number[]): boolean {
    const sEnd = lowerBound(this.slotAlloc, this.nSlots, hi);
    if (sEnd === 0) {
      return true;
    }
    const minFree = lo + 1;
    const fm = this.freeMax;
    const slotFree = this.slotFree;
    const visit = (L: number, j: number): boolean => {
      if (L < 0) {
        if (slotFree[j] >= minFree) {
          out.push(j);
          return out.length <= limit;
        }
        return true;
      }
      if (fm[L][j] < minFree) {
        return true;
      }
      const span = FAN ** L; // slots per child at this level
      const from = j << FAN_BITS;
      for (let k = from; k < from + FAN; k++) {
        if (k * span >= sEnd) {
          break;
        }
        if (!visit(L - 1, k)) {
          return false;
        }
      }
      return true;
    };
    if (!fm.length) {
      return true;
    }
    let top = fm.length - 1;
    while (top > 0 && fm[top].length <= 1 && fm[top - 1].length <= 1) {
      top--;
    }
    const topSpan = FAN ** (top + 1);
    for (let j = 0; j * topSpan < sEnd; j++) {
      if (!visit(top, j)) {
        return false;
      }
    }
    return true;
  }

  /** Lay out every storage allocated so far (first fit, in event order). */
  ensureLayout(): void {
    const lay = this.layout;
    const fo = this.freeOrder;
    while (this.laidAllocs < this.nSlots || this.laidFrees < fo.length) {
      const nextAlloc = this.laidAllocs < this.nSlots ? this.slotAlloc[this.laidAllocs] : Infinity;
      const nextFree = this.laidFrees < fo.length ? this.slotFree[fo[this.laidFrees]] : Infinity;
      if (nextFree <= nextAlloc) {
        const s = fo[this.laidFrees++];
        lay.free(this.slotOffset[s], this.slotBytes[s]);
      } else {
        const s = this.laidAllocs++;
        this.slotOffset[s] = lay.alloc(this.slotBytes[s]);
        if (lay.top > this.layoutTop) {
          this.layoutTop = lay.top;
        }
      }
    }
  }
}

/** The x coordinate of event i: its time, or its index. */
export type XMode = 'time' | 'index';

export function eventX(store: MemoryStore, mode: XMode, i: number): number {
  return mode === 'time' ? store.cols.time[i] : i;
}

/**
 * Column boundaries for ``cols`` pixel columns over the x range [x0, x1]: column k shows the
 * state after event ``bounds[k] - 1`` and every event in ``[bounds[k], bounds[k+1])``, i.e. the
 * events with x in (u_k, u_{k+1}] where u_k = x0 + k·(x1−x0)/cols.
 */
export function columnBounds(store: MemoryStore, mode: XMode, x0: number, x1: number, cols: number, out?: Int32Array): Int32Array {
  const bounds = out && out.length >= cols + 1 ? out : new Int32Array(cols + 1);
  const n = store.n;
  const span = x1 - x0;
  for (let k = 0; k <= cols; k++) {
    const u = x0 + (span * k) / cols;
    let a: number;
    if (mode === 'time') {
      a = upperBound(store.cols.time, n, u);
    } else {
      a = Math.floor(u) + 1;
      a = a < 0 ? 0 : a > n ? n : a;
    }
    bounds[k] = a;
  }
  return bounds;
}

export interface Envelope {
  cols: number;
  /** per category (all NCAT; unseen ones copy the band below): stacked min/max/last per column */
  min: Float64Array[];
  max: Float64Array[];
  last: Float64Array[];
  /** 1 where the column holds no state (before the first event) */
  empty: Uint8Array;
}

export function newEnvelope(cols: number): Envelope {
  return {
    cols,
    min: Array.from({ length: NCAT }, () => new Float64Array(cols)),
    max: Array.from({ length: NCAT }, () => new Float64Array(cols)),
    last: Array.from({ length: NCAT }, () => new Float64Array(cols)),
    empty: new Uint8Array(cols)
  };
}

/**
 * Per pixel column and band: min, max and last of the stacked totals over the states the column
 * covers (the one carried in, then each event's). Cost O(cols · NCAT · FAN · log n).
 */
export function envelope(store: MemoryStore, bounds: Int32Array, cols: number, out?: Envelope): Envelope {
  const env = out && out.cols === cols ? out : newEnvelope(cols);
  const mn = new Float64Array(NCAT);
  const mx = new Float64Array(NCAT);
  const pres = store.present;
  for (let k = 0; k < cols; k++) {
    const hi = bounds[k + 1];
    const lo = Math.max(0, bounds[k] - 1);
    if (hi <= 0 || hi <= lo || !pres.length) {
      env.empty[k] = 1;
      for (let c = 0; c < NCAT; c++) {
        env.min[c][k] = env.max[c][k] = env.last[c][k] = 0;
      }
      continue;
    }
    env.empty[k] = 0;
    store.rangeMinMax(lo, hi, mn, mx);
    let pm = 0;
    let pM = 0;
    let pl = 0;
    for (let c = 0; c < NCAT; c++) {
      const arr = store.stack[c];
      if (arr) {
        pm = mn[c];
        pM = mx[c];
        pl = arr[hi - 1];
      }
      env.min[c][k] = pm;
      env.max[c][k] = pM;
      env.last[c][k] = pl;
    }
  }
  return env;
}
