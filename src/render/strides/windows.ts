/**
 * The windows drawn: which box of each tensor and which run of each strip, and fetching the
 * values they lack from the kernel (one request in flight per strip, the last one per tensor wins).
 */
import { errorMessage } from '../common/chrome';
import { focusKey } from './keys';
import { Box, stripWindowFor } from './layout';
import { renderPagers } from './panel';
import { computeReaders, groupOfStrip, groupOfTensor, KNOWN_CAP, setPending, showStatus, SState, stripCount, StridesContext, TState } from './state';

/** Show ``box`` of ``ts`` (fetching its values), then focus ``focus``. */
export function moveTensorBox(ctx: StridesContext, ts: TState, box: Box, focus: string | null, force = false) {
  const same = !force && ts.box && box.start.every((v, k) => v === ts.box!.start[k]) && box.size.every((v, k) => v === ts.box!.size[k]);
  if (same) {
    if (focus) {
      focusKey(ctx, focus);
    }
    return;
  }
  const g = groupOfTensor(ctx, ts.t.id);
  if (!ts.t.has_data) {
    ts.box = box;
    computeReaders(ctx, ts);
    ctx.pendingFocus = focus;
    if (g) {
      ctx.redraw(g);
    }
    return;
  }
  const token = ++ts.token;
  ts.loading = true;
  setPending(ctx, 1);
  if (g) {
    renderPagers(ctx, g, ts);
  }
  ctx.opts
    .requestValues(ts.t.id, box.start, box.size)
    .then(win => {
      if (ctx.destroyed || token !== ts.token) {
        return;
      }
      ts.box = { start: win.start.slice(), size: win.size.slice() };
      ts.values = win.values;
      computeReaders(ctx, ts);
      showStatus(ctx, null);
      ctx.pendingFocus = focus;
    })
    .catch(err => {
      if (!ctx.destroyed && token === ts.token) {
        showStatus(ctx, `Could not fetch values of ${ts.t.name}: ${errorMessage(err)}`);
      }
    })
    .finally(() => {
      setPending(ctx, -1);
      if (ctx.destroyed || token !== ts.token) {
        return;
      }
      ts.loading = false;
      const gg = groupOfTensor(ctx, ts.t.id);
      if (gg) {
        ctx.redraw(gg);
      }
    });
}

/** Fetch the strip values the current window lacks (one request in flight per strip). */
export function ensureStrip(ctx: StridesContext, st: SState) {
  if (!st.s.has_data || st.inflight || ctx.destroyed) {
    return;
  }
  const count = stripCount(ctx, st);
  const start = st.start;
  let missing = false;
  for (let a = start; a < start + count; a++) {
    if (!st.known.has(a)) {
      missing = true;
      break;
    }
  }
  if (!missing || st.failed === start) {
    return;
  }
  st.inflight = true;
  setPending(ctx, 1);
  ctx.opts
    .requestStorage(st.s.id, start, Math.min(count, ctx.maxWindow))
    .then(reply => {
      if (ctx.destroyed) {
        return;
      }
      if (st.known.size > KNOWN_CAP) {
        st.known.clear();
      }
      reply.values.forEach((v, i) => st.known.set(reply.start + i, v));
      // never ask twice for elements the kernel did not send
      for (let a = start; a < start + count; a++) {
        if (!st.known.has(a)) {
          st.known.set(a, '');
        }
      }
      showStatus(ctx, null);
    })
    .catch(err => {
      st.failed = start;
      if (!ctx.destroyed) {
        showStatus(ctx, `Could not fetch storage ${st.s.id}: ${errorMessage(err)}`);
      }
    })
    .finally(() => {
      st.inflight = false;
      setPending(ctx, -1);
      if (ctx.destroyed) {
        return;
      }
      const g = groupOfStrip(ctx, st.s.id);
      if (g) {
        ctx.redraw(g);
      }
      if (st.start !== start) {
        ensureStrip(ctx, st);
      }
    });
}

/** Draw the strip from element ``start`` (clamped), then focus ``focus``. */
export function moveStrip(ctx: StridesContext, st: SState, start: number, focus: string | null = null) {
  const count = stripCount(ctx, st);
  const ns = Math.max(0, Math.min(start, st.s.length - count));
  if (ns === st.start) {
    if (focus) {
      focusKey(ctx, focus);
    }
    return;
  }
  st.start = ns;
  ctx.pendingFocus = focus;
  const g = groupOfStrip(ctx, st.s.id);
  if (g) {
    ctx.redraw(g);
  }
  ensureStrip(ctx, st);
}

/** Make sure strip element ``addr`` is drawn, moving the window when it is not. */
export function revealAddr(ctx: StridesContext, st: SState, addr: number, focus: string | null = null): boolean {
  const count = stripCount(ctx, st);
  if (addr >= st.start && addr < st.start + count) {
    return false;
  }
  const perRow = st.geom?.perRow ?? 16;
  moveStrip(ctx, st, stripWindowFor(addr, st.s.length, count, perRow), focus);
  return true;
}
