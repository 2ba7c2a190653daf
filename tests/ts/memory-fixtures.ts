/** Hand-made and random memory traces (wire-shaped), and a naive reference of the totals. */
import { CATEGORIES, EVENT_COLUMNS, type MemoryTimeline } from '../../src/model/wire';
import { afterEach } from 'vitest';
import type { MemoryView } from '../../src/render/memory/view';
import { ALLOC, emptyColumns, type EventColumns, FREE, MemoryStore, RECATEGORIZE } from '../../src/render/memory/data';
import { type Ev, rng, writeEvent } from './memory-synthetic';

export { type Ev, rng };

export const MiB = 2 ** 20;

/** The views a test file makes: each is destroyed after its test, and the page emptied. */
export function viewsDestroyedAfterEach(): MemoryView[] {
  const views: MemoryView[] = [];
  afterEach(() => {
    views.splice(0).forEach(v => v.destroy());
    document.body.replaceChildren();
  });
  return views;
}

export const CAT = Object.fromEntries(CATEGORIES.map((c, i) => [c, i])) as Record<(typeof CATEGORIES)[number], number>;

export function columnsOf(events: Ev[]): EventColumns {
  const c = emptyColumns(events.length);
  events.forEach((e, i) => writeEvent(c, i, e));
  return c;
}

/** A store holding ``events``. */
export function storeOf(events: Ev[]): MemoryStore {
  const store = new MemoryStore();
  store.append(columnsOf(events));
  return store;
}

/** Slice [from, to) of columns (copies). */
export function sliceColumns(c: EventColumns, from: number, to: number): EventColumns {
  const out: Record<string, unknown> = {};
  for (const [name] of EVENT_COLUMNS) {
    out[name] = (c as unknown as Record<string, Float64Array>)[name].slice(from, to);
  }
  return out as unknown as EventColumns;
}

/**
 * ``n`` random events: allocs, frees of live storages, recategorizations; now and then a free
 * or recategorize of an unknown id, and times that sometimes repeat.
 */
export function randomEvents(n: number, seed = 1, opts: { unknown?: boolean } = {}): Ev[] {
  const r = rng(seed);
  const live: { sid: number; bytes: number; cat: number }[] = [];
  const out: Ev[] = [];
  let sid = 0;
  let t = 0;
  while (out.length < n) {
    const x = r();
    if (r() < 0.7) {
      t += r() * 0.01;
    }
    if (opts.unknown && x < 0.02) {
      out.push({ time: t, bytes: 1 + Math.floor(r() * 100), storage: 1_000_000 + sid++, action: r() < 0.5 ? FREE : RECATEGORIZE, category: Math.floor(r() * CATEGORIES.length) });
    } else if (x < 0.5 || live.length === 0) {
      const e = { sid: sid++, bytes: 1 + Math.floor(r() * 4096) * (r() < 0.1 ? 1024 : 1), cat: Math.floor(r() * CATEGORIES.length) };
      live.push(e);
      out.push({ time: t, bytes: e.bytes, storage: e.sid, action: ALLOC, category: e.cat, node: r() < 0.3 ? sid : undefined, op: Math.floor(r() * 3), cell: 1 + Math.floor(t), line: 1 + Math.floor(r() * 9) });
    } else if (x < 0.85) {
      const k = Math.floor(r() * live.length);
      const e = live.splice(k, 1)[0];
      // the kernel sends the current category; a stale one must not matter
      out.push({ time: t, bytes: e.bytes, storage: e.sid, action: FREE, category: opts.unknown && r() < 0.2 ? Math.floor(r() * CATEGORIES.length) : e.cat });
    } else if (opts.unknown && x < 0.87) {
      // an id allocated again while alive: the first lifetime ends there
      const e = live[Math.floor(r() * live.length)];
      const bytes = 1 + Math.floor(r() * 4096);
      out.push({ time: t, bytes, storage: e.sid, action: ALLOC, category: e.cat });
      e.bytes = bytes;
    } else {
      const e = live[Math.floor(r() * live.length)];
      e.cat = Math.floor(r() * CATEGORIES.length);
      out.push({ time: t, bytes: e.bytes, storage: e.sid, action: RECATEGORIZE, category: e.cat });
    }
  }
  return out;
}

/** The reference: forgeviz.model.memory.category_series, without sampling (totals after each event). */
export function naiveTotals(events: Ev[]): number[][] {
  const totals = new Array(CATEGORIES.length).fill(0);
  const current = new Map<number, number>();
  return events.map(e => {
    const c = e.category;
    if (e.action === ALLOC) {
      current.set(e.storage, c);
      totals[c] += e.bytes;
    } else if (e.action === FREE) {
      const k = current.has(e.storage) ? current.get(e.storage)! : c;
      current.delete(e.storage);
      totals[k] -= e.bytes;
    } else {
      const k = current.has(e.storage) ? current.get(e.storage)! : c;
      totals[k] -= e.bytes;
      current.set(e.storage, c);
      totals[c] += e.bytes;
    }
    return totals.slice();
  });
}

export function timelineFor(n: number, extra: Partial<MemoryTimeline> = {}): MemoryTimeline {
  return {
    version: 1,
    device: 'cpu',
    own_bytes: 0,
    count: n,
    dropped: 0,
    max_events: 1_000_000,
    categories: [...CATEGORIES],
    ops: ['mm', 'relu', 'add'],
    modules: ['model', 'model.fc1'],
    cells: [],
    peak_bytes: 0,
    peak_time: 0,
    live_bytes: 0,
    baseline_bytes: 0,
    message: null,
    ...extra,
    cuda: extra.cuda ?? null
  };
}

/**
 * A small notebook-like trace: a parameter (8 MiB, cell 0), then in cell [5] an mm output
 * (4 MiB, storage 7, node 42, line 3) saved as an activation, a temporary, the frees.
 */
export function smallTrace(): { events: Ev[]; timeline: MemoryTimeline } {
  const events: Ev[] = [
    { time: 0, bytes: 8 * MiB, storage: 1, action: ALLOC, category: CAT.parameter },
    { time: 1, bytes: 4 * MiB, storage: 7, action: ALLOC, category: CAT.temporary, node: 42, op: 0, module: 1, cell: 5, line: 3 },
    { time: 1.5, bytes: 4 * MiB, storage: 7, action: RECATEGORIZE, category: CAT.activation, node: 42, op: 0, module: 1, cell: 5, line: 3 },
    { time: 2, bytes: 2 * MiB, storage: 8, action: ALLOC, category: CAT.temporary, op: 2, cell: 5, line: 4 },
    { time: 3, bytes: 2 * MiB, storage: 8, action: FREE, category: CAT.temporary, op: 2, cell: 5, line: 4 },
    { time: 4, bytes: 4 * MiB, storage: 7, action: FREE, category: CAT.activation, node: 42, op: 0, module: 1, cell: 5, line: 3 }
  ];
  return {
    events,
    timeline: timelineFor(events.length, {
      cells: [{ cell: 5, time: 1, index: 1 }],
      peak_bytes: 14 * MiB,
      peak_time: 2,
      live_bytes: 8 * MiB,
      baseline_bytes: 8 * MiB
    })
  };
}
