/**
 * The mapping on hover and focus: a logical cell lights the storage it reads (connector, stride
 * arcs, readout); a storage cell lights every logical cell of the shown windows that reads it.
 */
import { boxIndices, indexText, storageIndex } from './layout';
import { cellReadout, storageReadout } from './data';
import { connector, strideArcs } from './draw';
import { hotFromKey, hotKey, key, keyOfEl } from './keys';
import { groupOfStrip, groupOfTensor, Hot, MAX_CONNECTORS, MAX_READERS, setReadout, spanOf, stripOf, StridesContext, valueAt } from './state';
import { revealAddr } from './windows';

/** Show the mapping of ``next`` (null: none), drawing its storage when it is off the strip's window. */
export function setHot(ctx: StridesContext, next: Hot | null) {
  if (hotKey(next) === hotKey(ctx.hot)) {
    return;
  }
  ctx.hot = next;
  if (next && next.kind === 'cell') {
    const ts = ctx.tensors.get(next.tensor);
    const st = ts ? stripOf(ctx, ts) : null;
    if (ts && st && ts.t.stride !== null && revealAddr(ctx, st, spanOf(ctx, ts, next.index)[0])) {
      return; // redrawn: renderGroup applied the highlight
    }
  }
  applyHot(ctx);
}

/** Back to the focused cell, else the pinned one, when the pointer leaves the cells. */
export function restoreHot(ctx: StridesContext) {
  const a = ctx.doc.activeElement;
  const k = a && ctx.el.contains(a) ? keyOfEl(a) : null;
  setHot(ctx, k ? hotFromKey(k) : ctx.pinned);
}

/** Pin ``next``'s mapping (null: unpin): it stays shown when the pointer and focus leave. */
export function setPinned(ctx: StridesContext, next: Hot | null) {
  const changed = hotKey(next) !== hotKey(ctx.pinned);
  ctx.pinned = next;
  if (next) {
    setHot(ctx, next);
  }
  applyHot(ctx);
  if (changed) {
    ctx.opts.onViewState?.();
  }
}

/** A click on a cell: pin it, or unpin it when it is the pinned one. */
export function togglePin(ctx: StridesContext, cell: Hot) {
  setPinned(ctx, hotKey(cell) === hotKey(ctx.pinned) ? null : cell);
}

/** The element drawn for a cell, if it is drawn. */
function elOfHot(ctx: StridesContext, x: Hot): SVGGElement | undefined {
  return x.kind === 'cell' ? groupOfTensor(ctx, x.tensor)?.cellEls.get(key(x.tensor, x.index)) : groupOfStrip(ctx, x.strip)?.stripEls.get(x.addr);
}

function clearHotMarks(ctx: StridesContext) {
  for (const e of Array.from(ctx.el.querySelectorAll('.fv-hot, .fv-pinned'))) {
    e.classList.remove('fv-hot', 'fv-pinned');
  }
  for (const g of ctx.groups) {
    g.overlay?.replaceChildren();
  }
}

/** A logical cell: its storage cells, the connector, the stride arcs and the address formula. */
function applyCellHot(ctx: StridesContext, cur: Extract<Hot, { kind: 'cell' }>) {
  const ts = ctx.tensors.get(cur.tensor);
  const g = groupOfTensor(ctx, cur.tensor);
  if (!ts || !g || ts.t.stride === null) {
    setReadout(ctx, null);
    return;
  }
  const t = ts.t;
  const strides = ts.t.stride;
  const k = key(t.id, cur.index);
  g.cellEls.get(k)?.classList.add('fv-hot');
  const st = stripOf(ctx, ts);
  const [a0, a1] = spanOf(ctx, ts, cur.index);
  const rect = g.cellRects.get(k);
  for (let a = a0; a <= a1; a++) {
    g.stripEls.get(a)?.classList.add('fv-hot');
  }
  const target = g.stripRects.get(a0);
  if (rect && target && g.overlay) {
    g.overlay.appendChild(connector(ctx.doc, rect, target, ts.color));
  }
  const raw = storageIndex(cur.index, strides, t.storage_offset);
  let value = st?.s.has_data ? st.known.get(a0) : undefined;
  if (!value) {
    value = valueAt(ts, cur.index) ?? undefined;
  }
  setReadout(ctx, cellReadout(t, cur.index, raw, a0, st ? st.s.element_size : null, value));
  if (st && g.overlay && target) {
    g.overlay.append(...strideArcs(ctx.doc, g, ts, st, cur.index, raw, target));
  }
}

/** A storage cell: every logical cell (in the shown windows) that reads it. */
function applyStorageHot(ctx: StridesContext, cur: Extract<Hot, { kind: 'storage' }>) {
  const g = groupOfStrip(ctx, cur.strip);
  const st = ctx.strips.get(cur.strip);
  if (!g || !st) {
    setReadout(ctx, null);
    return;
  }
  g.stripEls.get(cur.addr)?.classList.add('fv-hot');
  const target = g.stripRects.get(cur.addr);
  const names: string[] = [];
  let n = 0;
  for (const ts of g.tensors) {
    const flats = ts.readers.get(cur.addr);
    if (!flats || !ts.box) {
      continue;
    }
    const idxs = boxIndices(ts.box.start, ts.box.size);
    for (const f of flats) {
      const k = key(ts.t.id, idxs[f]);
      g.cellEls.get(k)?.classList.add('fv-hot');
      const rect = g.cellRects.get(k);
      if (rect && target && g.overlay && n < MAX_CONNECTORS) {
        g.overlay.appendChild(connector(ctx.doc, rect, target, ts.color));
      }
      n++;
      if (names.length < MAX_READERS) {
        names.push(indexText(ts.t.name, idxs[f]));
      }
    }
  }
  const v = st.s.has_data ? st.known.get(cur.addr) : undefined;
  setReadout(ctx, storageReadout(cur.addr, names, n, st.s, v, ctx.bytesMode));
}

/** Draw the marks of ``ctx.hot`` afresh. */
export function applyHot(ctx: StridesContext) {
  clearHotMarks(ctx);
  const cur = ctx.hot;
  if (!cur) {
    setReadout(ctx, null);
  } else if (cur.kind === 'cell') {
    applyCellHot(ctx, cur);
  } else {
    applyStorageHot(ctx, cur);
  }
  if (ctx.pinned) {
    elOfHot(ctx, ctx.pinned)?.classList.add('fv-pinned');
    if (hotKey(cur) === hotKey(ctx.pinned) && ctx.ui.readout.textContent) {
      ctx.ui.readout.textContent = `Pinned · ${ctx.ui.readout.textContent}`;
    }
  }
}
