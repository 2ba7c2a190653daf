/**
 * The stride view's input: hover and focus show a cell's mapping, the arrow keys walk the cells
 * (Shift: the tile dims), the pagers move a window, the units button switches elements ↔ bytes.
 */
import { hotFromKey, focusKey, key, keyOfEl } from './keys';
import { boxOffset, boxToInclude, pageBox } from './layout';
import { restoreHot, setHot, setPinned, togglePin } from './hot';
import { StridesContext, stripCount } from './state';
import { setUnits } from './viewstate';
import { moveStrip, moveTensorBox, revealAddr } from './windows';

/** The cell (logical or storage) an event happened in, inside this view. */
function cellEvent(ctx: StridesContext, e: Event): Element | null {
  const t = e.target as Element | null;
  const c = t?.closest?.('.fv-cell, .fv-storage-cell') ?? null;
  return c && ctx.el.contains(c) ? c : null;
}

/** Show the mapping of the cell ``c``. */
function hoverCell(ctx: StridesContext, c: Element) {
  const k = keyOfEl(c);
  setHot(ctx, k ? hotFromKey(k) : null);
}

function onOver(ctx: StridesContext, e: Event) {
  const c = cellEvent(ctx, e);
  if (c) {
    hoverCell(ctx, c);
  } else if (!(e.target as Element | null)?.closest?.('.fv-sd-canvas')) {
    // Blank canvas between cells keeps the mapping (no flicker); the cards and pagers end it.
    restoreHot(ctx);
  }
}

function onFocusIn(ctx: StridesContext, e: Event) {
  const c = cellEvent(ctx, e);
  if (c) {
    hoverCell(ctx, c);
  }
}

function onFocusOut(ctx: StridesContext, e: Event) {
  const rel = (e as FocusEvent).relatedTarget as Element | null;
  // a redraw replaces the focused cell and focuses its successor: keep the mapping then
  if (!ctx.rendering && (!rel || !rel.closest?.('.fv-cell, .fv-storage-cell'))) {
    setHot(ctx, ctx.pinned);
  }
}

/** Arrows on a logical cell: the next index along a dim, paging the window when it is outside. */
function keyOnCell(ctx: StridesContext, e: KeyboardEvent, tensor: number, at: number[]) {
  const ts = ctx.tensors.get(tensor);
  if (!ts || !ts.box) {
    return;
  }
  const d = ts.t.shape.length;
  const horiz = e.key === 'ArrowRight' || e.key === 'ArrowLeft';
  const step = e.key === 'ArrowRight' || e.key === 'ArrowDown' ? 1 : -1;
  const dim = e.shiftKey ? (horiz ? d - 3 : d - 4) : horiz ? d - 1 : d - 2;
  if (dim < 0) {
    return;
  }
  const index = at.slice();
  index[dim] += step;
  if (index[dim] < 0 || index[dim] >= ts.t.shape[dim]) {
    return;
  }
  const nk = `c:${key(ts.t.id, index)}`;
  if (boxOffset(ts.box.start, ts.box.size, index) >= 0) {
    focusKey(ctx, nk);
  } else {
    moveTensorBox(ctx, ts, boxToInclude(ts.t.shape, ts.box, index, ctx.maxWindow), nk);
  }
}

/** Arrows on a storage cell: ±1 element, ± one row. */
function keyOnStorage(ctx: StridesContext, e: KeyboardEvent, strip: number, addr: number) {
  const st = ctx.strips.get(strip);
  if (!st) {
    return;
  }
  const perRow = st.geom?.perRow ?? 16;
  const delta = { ArrowRight: 1, ArrowLeft: -1, ArrowDown: perRow, ArrowUp: -perRow }[e.key] ?? 0;
  const a = addr + delta;
  if (a < 0 || a >= st.s.length) {
    return;
  }
  const nk = `s:${st.s.id}|${a}`;
  if (!revealAddr(ctx, st, a, nk)) {
    focusKey(ctx, nk);
  }
}

function onKey(ctx: StridesContext, e: KeyboardEvent) {
  const c = cellEvent(ctx, e);
  if (e.key === 'Escape' && ctx.pinned) {
    setPinned(ctx, null);
    return;
  }
  if (c && (e.key === 'Enter' || e.key === ' ')) {
    e.preventDefault();
    const k = keyOfEl(c);
    const cell = k ? hotFromKey(k) : null;
    if (cell) {
      togglePin(ctx, cell);
    }
    return;
  }
  if (!c || !e.key.startsWith('Arrow')) {
    return;
  }
  e.preventDefault();
  const k = keyOfEl(c);
  const cur = k ? hotFromKey(k) : null;
  if (!cur) {
    return;
  }
  if (cur.kind === 'cell') {
    keyOnCell(ctx, e, cur.tensor, cur.index);
  } else {
    keyOnStorage(ctx, e, cur.strip, cur.addr);
  }
}

/** A cell pins (or unpins) its mapping; the pagers' ‹ › buttons move a window. */
function onClick(ctx: StridesContext, e: Event) {
  const c = cellEvent(ctx, e);
  const k = c ? keyOfEl(c) : null;
  const cell = k ? hotFromKey(k) : null;
  if (cell) {
    togglePin(ctx, cell);
    return;
  }
  const b = (e.target as Element | null)?.closest?.('button');
  if (!b || !ctx.el.contains(b)) {
    return;
  }
  const dir = b.classList.contains('fv-page-next') || b.classList.contains('fv-strip-next') ? 1 : -1;
  if (b.classList.contains('fv-page-prev') || b.classList.contains('fv-page-next')) {
    const ts = ctx.tensors.get(Number(b.getAttribute('data-tensor')));
    if (ts?.box) {
      moveTensorBox(ctx, ts, pageBox(ts.t.shape, ts.box, Number(b.getAttribute('data-dim')), dir, ctx.maxWindow), null);
    }
  } else if (b.classList.contains('fv-strip-prev') || b.classList.contains('fv-strip-next')) {
    const st = ctx.strips.get(Number(b.getAttribute('data-strip')));
    if (st) {
      moveStrip(ctx, st, st.start + dir * stripCount(ctx, st));
    }
  }
}


/** Listen to the view's input; returns what stops listening. */
export function bindEvents(ctx: StridesContext): () => void {
  const { el } = ctx;
  const over = (e: Event) => onOver(ctx, e);
  const listeners: [EventTarget, string, (e: Event) => void][] = [
    [el, 'pointerover', over],
    [el, 'mouseover', over],
    [el, 'focusin', e => onFocusIn(ctx, e)],
    [el, 'focusout', e => onFocusOut(ctx, e)],
    [el, 'keydown', e => onKey(ctx, e as KeyboardEvent)],
    [el, 'click', e => onClick(ctx, e)],
    [ctx.ui.groupsEl, 'mouseleave', () => restoreHot(ctx)],
    [ctx.ui.unitsBtn, 'click', () => setUnits(ctx, !ctx.bytesMode)]
  ];
  for (const [target, type, fn] of listeners) {
    target.addEventListener(type, fn);
  }
  return () => {
    for (const [target, type, fn] of listeners) {
      target.removeEventListener(type, fn);
    }
  };
}
