/**
 * What the stride view shows beyond its data: the units and the pinned cell, as the wire's
 * StridesViewState. A live view reports it (``opts.onViewState``) so the kernel can save the
 * picture the user sees; a saved or exported one is given it (``applyViewState``). Cells are
 * named by their tensor's name, as the view labels them, not by ids that change with each layout.
 */
import type { PinnedCell, StridesViewState } from '../../model/wire';
import { applyHot, setHot, setPinned } from './hot';
import { boxOffset, boxToInclude } from './layout';
import { computeReaders, groupOfTensor, type Hot, type StridesContext, stripCount, stripOf } from './state';
import { ensureStrip, revealAddr } from './windows';

/** Units: elements ↔ bytes; every strip is drawn again in the new units. */
export function setUnits(ctx: StridesContext, bytes: boolean) {
  if (bytes === ctx.bytesMode) {
    return;
  }
  const { unitsBtn } = ctx.ui;
  ctx.bytesMode = bytes;
  unitsBtn.textContent = bytes ? 'Units: bytes' : 'Units: elements';
  unitsBtn.setAttribute('aria-pressed', String(bytes));
  ctx.el.setAttribute('data-fv-units', bytes ? 'bytes' : 'elements');
  for (const g of ctx.groups) {
    if (g.strip) {
      const st = g.strip;
      st.start = Math.max(0, Math.min(st.start, st.s.length - stripCount(ctx, st)));
      ctx.redraw(g);
      ensureStrip(ctx, st);
    }
  }
  ctx.opts.onViewState?.();
}

/** The pinned cell named as the wire says: a storage cell by the first tensor that reads its strip. */
export function pinnedCellOf(ctx: StridesContext, x: Hot): PinnedCell | null {
  if (x.kind === 'cell') {
    const ts = ctx.tensors.get(x.tensor);
    return ts ? { tensor: ts.t.name, index: x.index.slice(), element: null } : null;
  }
  const reader = [...ctx.tensors.values()].find(ts => stripOf(ctx, ts)?.s.id === x.strip);
  return reader ? { tensor: reader.t.name, index: null, element: x.addr } : null;
}

export function viewState(ctx: StridesContext): StridesViewState {
  return { units: ctx.bytesMode ? 'bytes' : 'elements', pinned: ctx.pinned ? pinnedCellOf(ctx, ctx.pinned) : null };
}

const shown = (v: unknown) => JSON.stringify(v) ?? String(v);

const isIndex = (v: unknown): v is number[] => Array.isArray(v) && v.every(i => Number.isInteger(i));

/** The cell ``p`` names in this layout, or an error saying why there is none. */
function resolvePinned(ctx: StridesContext, p: unknown): Hot {
  if (!p || typeof p !== 'object' || Array.isArray(p)) {
    throw new Error(`view_state.pinned: expected {tensor, index} or {tensor, element}, got ${shown(p)}`);
  }
  const { tensor, index, element, ...rest } = p as Record<string, unknown>;
  const extra = Object.keys(rest);
  if (extra.length) {
    throw new Error(`view_state.pinned: unknown key ${shown(extra[0])}; expected tensor, and index or element`);
  }
  const names = [...ctx.tensors.values()].map(ts => ts.t.name);
  const ts = [...ctx.tensors.values()].find(t => t.t.name === tensor);
  if (!ts) {
    throw new Error(`view_state.pinned.tensor: expected one of ${names.map(n => shown(n)).join(', ')}, got ${shown(tensor)}`);
  }
  const hasIndex = index !== null && index !== undefined;
  const hasElement = element !== null && element !== undefined;
  if (hasIndex === hasElement) {
    throw new Error(`view_state.pinned: expected either index (a cell of ${ts.t.name}) or element (of its storage), got ${shown(p)}`);
  }
  if (hasIndex) {
    const shape = ts.t.shape;
    if (!isIndex(index) || index.length !== shape.length || index.some((i, k) => i < 0 || i >= shape[k])) {
      throw new Error(`view_state.pinned.index: expected ${shape.length} integers within ${ts.t.name}'s shape ${shown(shape)}, got ${shown(index)}`);
    }
    if (ts.t.stride === null) {
      throw new Error(`view_state.pinned: ${ts.t.name} has no strides to map (${ts.t.layout} layout)`);
    }
    return { kind: 'cell', tensor: ts.t.id, index: index.slice() };
  }
  const st = stripOf(ctx, ts);
  if (!st) {
    throw new Error(`view_state.pinned.element: ${ts.t.name} reads no storage drawn here`);
  }
  if (!Number.isInteger(element) || (element as number) < 0 || (element as number) >= st.s.length) {
    throw new Error(`view_state.pinned.element: expected an integer in [0, ${st.s.length}) (${ts.t.name}'s storage, in ${st.s.dtype} elements), got ${shown(element)}`);
  }
  return { kind: 'storage', strip: st.s.id, addr: element as number };
}

/** Draw ``x``'s cells: its tensor's window moved to include it, its strip's window to its storage. */
function reveal(ctx: StridesContext, x: Hot) {
  if (x.kind === 'storage') {
    const st = ctx.strips.get(x.strip);
    if (st) {
      revealAddr(ctx, st, x.addr);
    }
    return;
  }
  const ts = ctx.tensors.get(x.tensor);
  if (!ts?.box || boxOffset(ts.box.start, ts.box.size, x.index) >= 0) {
    return;
  }
  // no kernel to ask for the values there: the cells are drawn without them
  ts.box = boxToInclude(ts.t.shape, ts.box, x.index, ctx.maxWindow);
  ts.values = null;
  computeReaders(ctx, ts);
  const g = groupOfTensor(ctx, ts.t.id);
  if (g) {
    ctx.redraw(g);
  }
}

/**
 * Show ``state`` (StridesViewState): its units, then its pinned cell with its windows moved to it.
 * Everything is checked first: a bad state throws, saying what was expected, and changes nothing.
 *
 *     view.applyViewState({ units: 'bytes', pinned: { tensor: 'y', index: [1, 0], element: null } })
 */
export function applyViewState(ctx: StridesContext, state: unknown) {
  if (!state || typeof state !== 'object' || Array.isArray(state)) {
    throw new Error(`view_state: expected an object with units and pinned, got ${shown(state)}`);
  }
  const { units, pinned, ...rest } = state as Record<string, unknown>;
  const extra = Object.keys(rest);
  if (extra.length) {
    throw new Error(`view_state: unknown key ${shown(extra[0])}; expected units or pinned`);
  }
  if (units !== undefined && units !== 'elements' && units !== 'bytes') {
    throw new Error(`view_state.units: expected 'elements' or 'bytes', got ${shown(units)}`);
  }
  const cell = pinned === null || pinned === undefined ? null : resolvePinned(ctx, pinned);
  if (units !== undefined) {
    setUnits(ctx, units === 'bytes');
  }
  if (cell) {
    reveal(ctx, cell);
  }
  setPinned(ctx, cell);
}

/** After a new layout: pin the cell ``before`` named again when it is still there (a re-run cell). */
export function repin(ctx: StridesContext, before: PinnedCell | null) {
  if (!before) {
    return;
  }
  let cell: Hot | null = null;
  try {
    cell = resolvePinned(ctx, before);
  } catch {
    // gone from the new layout: the pin goes too
  }
  if (cell) {
    reveal(ctx, cell);
    ctx.pinned = cell; // the same cell as before: nothing to tell the kernel
    setHot(ctx, cell);
    applyHot(ctx);
  } else {
    ctx.opts.onViewState?.();
  }
}
