/**
 * What the stride view's parts share: the DOM they draw into, the state of each tensor and
 * storage strip, the groups (one strip and the tensors that read it) and the hovered cell.
 * Every part takes this context as its first argument; nothing hides in a closure.
 */
import type { StorageStrip, StrideLayout, TensorLayout } from '../../model/wire';
import type { StatusLine } from '../common/chrome';
import { TENSOR_COLORS, TENSOR_DASHES } from './data';
import { Box, boxIndices, boxOffset, initialBox, Rect, storageIndex, stripDrawCount, StripGeom, stripSpan, toStripIndex } from './layout';
import type { StridesViewOptions } from './view';

/** One tensor: its layout, its colour and dash, and the window of its values drawn. */
export interface TState {
  t: TensorLayout;
  order: number;
  color: string;
  dash: string;
  box: Box | null;
  values: string[] | null;
  token: number;
  loading: boolean;
  /** strip element → row-major positions in the window that read it */
  readers: Map<number, number[]>;
}

/** One storage strip: its window and the values known so far. */
export interface SState {
  s: StorageStrip;
  start: number;
  known: Map<number, string>;
  inflight: boolean;
  failed: number | null;
  geom: StripGeom | null;
}

/** One section of the view: a strip (or none) and the tensors drawn above it. */
export interface Group {
  strip: SState | null;
  tensors: TState[];
  section: HTMLElement;
  svg: SVGSVGElement;
  content: SVGGElement | null;
  overlay: SVGGElement | null;
  cards: HTMLElement;
  width: number;
  height: number;
  cellEls: Map<string, SVGGElement>;
  cellRects: Map<string, Rect>;
  stripEls: Map<number, SVGGElement>;
  stripRects: Map<number, Rect>;
}

/** The cell whose mapping is shown: a logical cell or a storage cell. */
export type Hot = { kind: 'cell'; tensor: number; index: number[] } | { kind: 'storage'; strip: number; addr: number };

/** The parts of the DOM the view owns below its chrome. */
export interface StridesUi {
  readout: HTMLElement;
  status: StatusLine;
  message: HTMLElement;
  groupsEl: HTMLElement;
  transcript: HTMLElement;
  unitsBtn: HTMLButtonElement;
}

export interface StridesContext {
  readonly doc: Document;
  readonly el: HTMLElement;
  readonly opts: StridesViewOptions;
  readonly ui: StridesUi;
  layout: StrideLayout | null;
  maxWindow: number;
  /** storage drawn in bytes, not elements */
  bytesMode: boolean;
  groups: Group[];
  readonly tensors: Map<number, TState>;
  readonly strips: Map<number, SState>;
  hot: Hot | null;
  /** the cell clicked to keep its mapping shown (exported, and reported as the view state) */
  pinned: Hot | null;
  /** the key (keys.ts) of the cell to focus after the next redraw */
  pendingFocus: string | null;
  /** requests in flight (mirrored in ``data-fv-pending``) */
  pending: number;
  destroyed: boolean;
  /** true while a redraw replaces the SVG (a focusout then is not the user's) */
  rendering: boolean;
  /** Draw ``g`` again (group.ts ``renderGroup``; set by view.ts). */
  redraw(g: Group): void;
}

export const MAX_READERS = 12;
export const MAX_CONNECTORS = 48;
export const KNOWN_CAP = 16384;

export function setPending(ctx: StridesContext, delta: number) {
  ctx.pending += delta;
  ctx.el.setAttribute('data-fv-pending', String(ctx.pending));
}

/** An error on the status line (null hides it). */
export function showStatus(ctx: StridesContext, text: string | null) {
  ctx.ui.status.show(text, 'error');
}

export function setReadout(ctx: StridesContext, text: string | null) {
  const readout = ctx.ui.readout;
  readout.textContent = text ?? 'Hover or focus a cell to see which storage element it reads; click it (or Enter) to pin the mapping.';
  readout.setAttribute('data-empty', text ? 'false' : 'true');
}

export const nameOf = (ctx: StridesContext, id: number) => ctx.tensors.get(id)?.t.name ?? `tensor ${id}`;
export const numelOf = (ctx: StridesContext, id: number) => ctx.tensors.get(id)?.t.numel ?? -1;
export const stripOf = (ctx: StridesContext, ts: TState): SState | null =>
  ts.t.strip >= 0 && ctx.layout ? ctx.strips.get(ctx.layout.strips[ts.t.strip]?.id ?? -1) ?? null : null;
export const groupOfTensor = (ctx: StridesContext, id: number) => ctx.groups.find(g => g.tensors.some(ts => ts.t.id === id)) ?? null;
export const groupOfStrip = (ctx: StridesContext, id: number) => ctx.groups.find(g => g.strip?.s.id === id) ?? null;

/** The strip index (or storage element, without a strip) of a logical index. */
export function addrOf(ctx: StridesContext, ts: TState, index: readonly number[]): number {
  const a = storageIndex(index, ts.t.stride ?? [], ts.t.storage_offset);
  const st = stripOf(ctx, ts);
  return st ? toStripIndex(a, ts.t.element_size, st.s.element_size) : a;
}

/** The strip elements ``[first, last]`` a logical index covers. */
export function spanOf(ctx: StridesContext, ts: TState, index: readonly number[]): [number, number] {
  const a = storageIndex(index, ts.t.stride ?? [], ts.t.storage_offset);
  const st = stripOf(ctx, ts);
  return st ? stripSpan(a, ts.t.element_size, st.s.element_size) : [a, a];
}

/** How many elements of the strip are drawn at once (in the current units). */
export function stripCount(ctx: StridesContext, st: SState): number {
  return stripDrawCount(st.s.length, st.s.element_size, ctx.bytesMode, ctx.maxWindow);
}

/** Which window positions of ``ts`` read each strip element. */
export function computeReaders(ctx: StridesContext, ts: TState) {
  ts.readers = new Map();
  if (!ts.box || ts.t.stride === null || ts.t.numel === 0) {
    return;
  }
  boxIndices(ts.box.start, ts.box.size).forEach((idx, flat) => {
    const [a0, a1] = spanOf(ctx, ts, idx);
    for (let a = a0; a <= a1; a++) {
      const list = ts.readers.get(a);
      if (list) {
        list.push(flat);
      } else {
        ts.readers.set(a, [flat]);
      }
    }
  });
}

/** The value of ``index`` when it is in the window fetched, else null. */
export function valueAt(ts: TState, index: readonly number[]): string | null {
  if (!ts.box || !ts.values) {
    return null;
  }
  const off = boxOffset(ts.box.start, ts.box.size, index);
  return off >= 0 && off < ts.values.length ? ts.values[off] : null;
}

/** The state of the ``order``-th tensor of a new layout: the window the kernel sent, or the first one. */
export function tensorState(t: TensorLayout, order: number, maxWindow: number): TState {
  let box: Box | null = null;
  let values: string[] | null = null;
  if (t.stride !== null && t.numel > 0) {
    if (t.window) {
      box = { start: t.window.start.slice(), size: t.window.size.slice() };
      values = t.has_data ? t.window.values : null;
    } else {
      box = initialBox(t.shape, maxWindow);
    }
  }
  return {
    t,
    order,
    color: TENSOR_COLORS[order % TENSOR_COLORS.length],
    dash: TENSOR_DASHES[order % TENSOR_DASHES.length],
    box,
    values,
    token: 0,
    loading: false,
    readers: new Map()
  };
}

/** The state of a strip of a new layout: the values the kernel sent, the window clamped. */
export function stripState(ctx: StridesContext, sp: StorageStrip): SState {
  const st: SState = { s: sp, start: sp.window_start, known: new Map(), inflight: false, failed: null, geom: null };
  sp.values.forEach((v, i) => st.known.set(sp.window_start + i, v));
  st.start = Math.max(0, Math.min(st.start, sp.length - stripCount(ctx, st)));
  return st;
}
