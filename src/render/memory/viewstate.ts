/**
 * What the view shows beyond its data: the x mode, the zoom range and the pinned storage (the wire
 * MemoryViewState). Read for the kernel's ``view_state`` (a saved notebook draws what was shown),
 * and shown again from a saved one.
 */
import type { MemoryViewState } from '../../model/wire';
import type { MemoryContext, MemoryHit } from './context';
import { eventX } from './data';
import { plotX } from './draw';
import { bandHit, hitTest, lastSlotOf, locate } from './hit';
import { frame } from './painter';
import { pin, unpin } from './pinned';
import { resetZoom, setRange, setXMode } from './zoom';

/** The x mode, zoom range (null: the whole timeline) and pinned storage shown now. */
export function viewState(ctx: MemoryContext): MemoryViewState {
  return { x: ctx.mode, range: ctx.range && [...ctx.range], pinned: ctx.pinnedHit?.storage ?? null };
}

/** ``v`` as an error message quotes it: [3,1], "day", "NaN", undefined (JSON, cut to 80 characters). */
function shown(v: unknown): string {
  const text = `${JSON.stringify(v, (_k, x: unknown) => (typeof x === 'number' && !Number.isFinite(x) ? String(x) : x))}`;
  return text.length > 80 ? `${text.slice(0, 79)}…` : text;
}

function bad(field: string, expected: string, got: unknown): never {
  throw new Error(`view_state${field}: expected ${expected}, got ${shown(got)}`);
}

const KEYS = ['x', 'range', 'pinned'];

/** "storages 0–41": the ids this timeline holds, for an unknown id's message. */
function storagesText(ctx: MemoryContext): string {
  const { store } = ctx;
  let lo = Infinity;
  let hi = -1;
  for (let k = 0; k < store.nSlots; k++) {
    lo = Math.min(lo, store.slotSid[k]);
    hi = Math.max(hi, store.slotSid[k]);
  }
  return hi < 0 ? 'it has none' : `storages ${lo}–${hi}`;
}

/**
 * Where the pin goes: the hit under the storage where it is drawn, or, when it is not drawn in
 * the range shown, its lifetime as a hit at its alloc (so a saved pin outside the zoom still shows).
 */
function pinHit(ctx: MemoryContext, storage: number, slot: number): MemoryHit & { storage: number } {
  const at = locate(ctx, storage);
  const hit = at && hitTest(ctx, at.x, at.y);
  if (hit && hit.storage === storage) {
    return hit as MemoryHit & { storage: number };
  }
  const { store } = ctx;
  const a = store.slotAlloc[slot];
  const u = eventX(store, ctx.mode, a);
  const f = frame(ctx);
  return bandHit(ctx, store.slotCat0[slot], a, a, plotX(f, u), f.bottom, u) as MemoryHit & { storage: number };
}

/**
 * Show a saved view state: x mode, then range (clamped to the data; null: all of it), then the pin.
 * Checked whole first: a bad one throws, saying which field, what was expected and what was
 * given, and changes nothing. Keys left out take the defaults (time, all, none).
 */
export function applyViewState(ctx: MemoryContext, state: unknown): void {
  if (!state || typeof state !== 'object' || Array.isArray(state)) {
    bad('', 'an object {x, range, pinned}', state);
  }
  const s = state as Partial<Record<string, unknown>>;
  const unknown = Object.keys(s).find(k => !KEYS.includes(k));
  if (unknown !== undefined) {
    bad('', `only the keys ${KEYS.join(', ')}`, unknown);
  }
  const x = s.x ?? 'time';
  if (x !== 'time' && x !== 'index') {
    bad('.x', "'time' or 'index'", x);
  }
  const range = (s.range ?? null) as number[] | null;
  if (range !== null && !(Array.isArray(range) && range.length === 2 && range.every(Number.isFinite) && range[0] < range[1])) {
    bad('.range', '[start, end] with start < end, or null', range);
  }
  const pinned = (s.pinned ?? null) as number | null;
  const slot = Number.isInteger(pinned) ? lastSlotOf(ctx, pinned!) : -1;
  if (pinned !== null && slot < 0) {
    bad('.pinned', `a storage id of this timeline (${storagesText(ctx)}), or null`, pinned);
  }
  setXMode(ctx, x);
  if (range) {
    setRange(ctx, range[0], range[1]);
  } else {
    resetZoom(ctx);
  }
  if (pinned === null) {
    unpin(ctx);
  } else {
    // the details come later (or, with no kernel, "details unavailable"): pin never rejects
    void pin(ctx, pinHit(ctx, pinned, slot));
  }
}
