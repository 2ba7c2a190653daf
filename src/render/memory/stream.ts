/**
 * Data in: the timeline's JSON half and the event columns as they stream, with gaps, overlaps and
 * resets; and the text that follows the data (summary line, loading status, legend, transcript).
 */
import type { MemoryTimeline } from '../../model/wire';
import { errorMessage } from '../common/chrome';
import { cudaPanel } from './cuda';
import type { EventColumns } from './data';
import { bytesLabel } from './geom';
import type { MemoryContext } from './context';
import { clearDetails } from './details';
import { renderLegend } from './legend';
import { schedule } from './painter';
import { renderPinned } from './pinned';
import { showTooltip } from './tooltip';
import { renderTranscript } from './transcript';

export function setTimeline(ctx: MemoryContext, t: MemoryTimeline): void {
  const { ui, store } = ctx;
  // more history merged away since we last looked: the event indices we hold are stale
  if (ctx.timeline && store.n && (t.dropped ?? 0) > (ctx.timeline.dropped ?? 0)) {
    askReplay(ctx);
  }
  ctx.timeline = t;
  ui.cudaBox.hidden = !t.cuda;
  ui.cudaBox.replaceChildren(...(t.cuda ? [cudaPanel(ctx.doc, t.cuda)] : []));
  ui.message.hidden = !t.message;
  ui.message.textContent = t.message ?? '';
  ui.note.hidden = !t.dropped;
  ui.note.textContent = t.dropped
    ? `Older history was merged to stay within ${t.max_events.toLocaleString('en-US')} events: ${t.dropped.toLocaleString('en-US')} events dropped (storages allocated and freed there no longer show; the ones still alive start at the cut).` +
      (t.peak_bytes > store.peakBytes ? ` The all-time peak was ${bytesLabel(t.peak_bytes)}.` : '')
    : '';
  refreshText(ctx);
  ctx.el.setAttribute('data-fv-state', 'ready');
  schedule(ctx);
}

/** Events from ``startIndex`` on; ``reset`` drops everything held first. */
export function appendEvents(ctx: MemoryContext, startIndex: number, columns: EventColumns, reset: boolean): void {
  const { store } = ctx;
  const count = columns.time.length;
  if (reset) {
    // a new history: the zoom and pin it had are gone (tell the kernel, if there were any)
    const had = ctx.range || ctx.pinnedHit;
    ctx.replayAsked = null;
    store.reset();
    clearDetails(ctx.details);
    ctx.hoverHit = null;
    ctx.pinnedHit = null;
    ctx.range = null;
    showTooltip(ctx, null);
    renderPinned(ctx);
    if (had) {
      ctx.opts.onViewState?.();
    }
    if (startIndex !== 0) {
      askReplay(ctx);
      refreshText(ctx);
      schedule(ctx);
      return;
    }
    store.append(columns, 0, count);
  } else {
    const n = store.n;
    if (startIndex > n) {
      askReplay(ctx); // a gap: we missed events
      return;
    }
    const skip = n - startIndex; // events we already hold (a replay overlapping the stream)
    if (skip < count) {
      store.append(columns, skip, count);
    }
  }
  refreshText(ctx);
  schedule(ctx);
}

/** Ask for the whole history again, unless an earlier ask is still unanswered (for 10 s). */
function askReplay(ctx: MemoryContext): void {
  const now = Date.now();
  if (ctx.replayAsked !== null && now - ctx.replayAsked < 10_000) {
    return;
  }
  ctx.replayAsked = now;
  try {
    ctx.opts.requestReplay();
  } catch (err) {
    ctx.ui.status.show(`Could not ask the kernel for the events: ${errorMessage(err)}`);
  }
}

/** The root's event counts, the loading status, the summary line, the canvas label, legend and transcript. */
export function refreshText(ctx: MemoryContext): void {
  const { el, store, timeline, ui } = ctx;
  const n = store.n;
  el.setAttribute('data-fv-events', String(n));
  const expected = timeline?.count ?? 0;
  el.setAttribute('data-fv-expected', String(expected));
  el.setAttribute('data-fv-complete', String(n >= expected));
  if (timeline && n < expected) {
    ui.status.show(`Loading events… ${n.toLocaleString('en-US')} of ${expected.toLocaleString('en-US')}`, 'info');
  } else if (ui.status.kind() === 'info') {
    ui.status.show(null);
  }
  const live = store.totalAt(n - 1);
  ui.summary.textContent = n
    ? `peak ${bytesLabel(store.peakBytes)} · live ${bytesLabel(live)} · ${n.toLocaleString('en-US')} event${n === 1 ? '' : 's'}` +
      (timeline?.cuda ? ` · reserved peak ${bytesLabel(timeline.cuda.peak_reserved)}` : '') +
      (timeline?.own_bytes ? ` · forgeviz ${bytesLabel(timeline.own_bytes)}` : '')
    : 'no events yet';
  ui.canvas.setAttribute(
    'aria-label',
    n ? `Memory timeline: ${n.toLocaleString('en-US')} events, peak ${bytesLabel(store.peakBytes)}, live ${bytesLabel(live)} at the end` : 'Memory timeline (empty)'
  );
  renderLegend(ctx);
  renderTranscript(ui.transcript, store, timeline);
}
