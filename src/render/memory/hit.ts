/** What is under a point of the canvas, and where a storage is drawn (for drivers and tests). */
import { columnAt, type Frame, stateIndexAt, valueAtX } from './draw';
import { hitArea, hitBlock, nearestEventInBand } from './geom';
import type { Located, MemoryContext, MemoryHit } from './context';
import { eventPoint, frame } from './painter';

/** Events scanned each way for the hovered band's nearest event. */
const HOVER_SCAN = 20_000;

export function hitTest(ctx: MemoryContext, x: number, y: number): MemoryHit | null {
  const { store, mode } = ctx;
  const f = frame(ctx);
  if (f.view === 'empty' || x < f.left || x > f.right || y < f.top - 2 || y > f.bottom + 2) {
    return null;
  }
  const u = valueAtX(f, x);
  const stateIndex = stateIndexAt(store, mode, u);
  if (f.view === 'blocks') {
    const k = hitBlock(f.blocks, x, y, 1);
    if (k < 0) {
      return null;
    }
    const slot = f.blocks.slot[k];
    return {
      kind: 'block',
      category: f.blocks.cat[k],
      stateIndex,
      bandBytes: null,
      event: store.slotAlloc[slot],
      storage: store.slotSid[slot],
      slot,
      x,
      y,
      u
    };
  }
  const col = columnAt(f, x);
  const value = ((f.bottom - y) / (f.bottom - f.top)) * f.yMax;
  const cat = f.env ? hitArea(f.env, col, Math.max(0, value)) : -1;
  if (cat < 0 || stateIndex < 0) {
    return null;
  }
  // the band's event nearest in x (any distance: its time is in the tooltip), scanning a bounded number of events
  return bandHit(ctx, cat, stateIndex, nearestEventInBand(store, mode, stateIndex, u, cat, Infinity, HOVER_SCAN), x, y, u);
}

/** The hit on band ``cat`` after event ``stateIndex``, describing event ``ev`` (or none: -1) and its storage. */
export function bandHit(ctx: MemoryContext, cat: number, stateIndex: number, ev: number, x: number, y: number, u: number): MemoryHit {
  const { store } = ctx;
  const storage = ev >= 0 ? store.cols.storage[ev] : null;
  return {
    kind: 'band',
    category: cat,
    stateIndex,
    bandBytes: store.liveAt(stateIndex, cat),
    event: ev,
    storage,
    slot: storage === null ? -1 : store.slotAt(storage, ev),
    x,
    y,
    u
  };
}

/** The storage's last lifetime, or -1. */
export function lastSlotOf(ctx: MemoryContext, storage: number): number {
  const { store } = ctx;
  for (let k = store.nSlots - 1; k >= 0; k--) {
    if (store.slotSid[k] === storage) {
      return k;
    }
  }
  return -1;
}

function located(ctx: MemoryContext, view: Located['view'], x: number, y: number): Located {
  const r = ctx.ui.canvas.getBoundingClientRect();
  return { view, x, y, clientX: r.left + x, clientY: r.top + y };
}

/** Where a storage is drawn now (its block, or its alloc in the area view), or null. */
export function locate(ctx: MemoryContext, storage: number): Located | null {
  const f = frame(ctx);
  if (f.view === 'blocks') {
    return locateBlock(ctx, f, storage);
  }
  if (f.view !== 'area') {
    return null;
  }
  const { store } = ctx;
  const slot = lastSlotOf(ctx, storage);
  if (slot < 0) {
    return null;
  }
  const a = store.slotAlloc[slot];
  const p = eventPoint(ctx, f, a, store.slotCat0[slot]);
  return p ? located(ctx, 'area', p.x, p.y) : null;
}

/** A point inside the storage's widest block that hovers it (the centre first, then a grid). */
function locateBlock(ctx: MemoryContext, f: Frame, storage: number): Located | null {
  const { store } = ctx;
  const b = f.blocks;
  let best = -1;
  for (let k = 0; k < b.n; k++) {
    if (store.slotSid[b.slot[k]] === storage && (best < 0 || b.x1[k] - b.x0[k] > b.x1[best] - b.x0[best])) {
      best = k;
    }
  }
  if (best < 0) {
    return null;
  }
  const x0 = Math.max(f.left, b.x0[best]);
  const x1 = Math.min(f.right, b.x1[best]);
  const y0 = Math.max(f.top, b.y0[best]);
  const y1 = Math.min(f.bottom, b.y1[best]);
  for (const [fx, fy] of [[0.5, 0.5], [0.25, 0.5], [0.75, 0.5], [0.5, 0.25], [0.5, 0.75], [0.1, 0.5], [0.9, 0.5]]) {
    const x = x0 + (x1 - x0) * fx;
    const y = y0 + (y1 - y0) * fy;
    const k = hitBlock(b, x, y, 1);
    if (k >= 0 && store.slotSid[b.slot[k]] === storage) {
      return located(ctx, 'blocks', x, y);
    }
  }
  return null;
}
