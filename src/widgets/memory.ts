/**
 * anywidget entry (esbuild → forgeviz/static/memory.js): a thin adapter from the widget model
 * to the pure memory-timeline renderer.
 *
 * Traits: ``timeline`` (wire MemoryTimeline JSON, ``{}`` until ready), ``warnings`` (list of strings),
 * ``view_state`` (wire MemoryViewState: x mode, zoom, pinned storage; written by a live view, shown
 * by a saved one).
 * Custom messages:
 * - kernel → view ``{type: 'events', start, count, reset}`` with one little-endian buffer per
 *   EVENT_COLUMNS column (no request_id): append (or, with ``reset``, start over);
 * - view → kernel ``{type: 'replay', request_id, view}`` once on render (and after a gap); the kernel
 *   answers ``{type: 'replay', request_id, count}`` and streams the history as ``events``;
 * - view → kernel ``{type: 'gone', request_id, view}`` when the view is removed: a timeline no view
 *   draws any more is not streamed to (until a view asks for a replay again);
 * - view → kernel ``{type: 'detail', request_id, storage}`` → DetailReply (or an ErrorReply).
 *
 * Also exports the renderer and the column codec, for benchmark pages.
 */
import css from '../../style/memory.css?raw';
import type { MemoryTimeline } from '../model/wire';
import { decodeColumns, encodeColumns } from '../render/memory/data';
import { createMemoryView } from '../render/memory/view';
import { defineEntry, hasArrays, kernel } from './entry';

export { createMemoryView, decodeColumns, encodeColumns };

/** Looking a storage up can take the kernel a moment when it walks the history. */
const DETAIL_TIMEOUT_MS = 30_000;

interface EventsMessage {
  type: 'events' | 'replay';
  start: number;
  count: number;
  reset?: boolean;
  request_id?: number;
}

const render = defineEntry({
  trait: 'timeline',
  is: (v): v is MemoryTimeline => hasArrays(v, 'cells') && typeof (v as MemoryTimeline).count === 'number',
  styleId: 'forgeviz-memory-style',
  css,
  announce: 'replay',
  create(ctx) {
    const t = kernel(ctx.transport);
    return createMemoryView(ctx.el, {
      async requestDetail(storage) {
        const { msg } = await t().request('detail', { storage }, DETAIL_TIMEOUT_MS);
        return msg.detail;
      },
      requestReplay: ctx.announce,
      onViewState: ctx.stateChanged
    });
  },
  show: (view, t) => view.setTimeline(t),
  onMessage(view, msg, buffers, ctx) {
    if (!msg || typeof msg !== 'object') {
      return;
    }
    const m = msg as EventsMessage;
    if (m.type === 'replay' && m.request_id === ctx.announcementId) {
      // informative: the history the kernel is about to stream (events may come before this)
      ctx.el.setAttribute('data-fv-replay-count', String(m.count));
      return;
    }
    if (m.type !== 'events') {
      return;
    }
    try {
      view.appendEvents(m.start ?? 0, decodeColumns(buffers ?? [], m.count), !!m.reset);
    } catch (err) {
      ctx.setOwnWarnings([`forgeviz could not read memory events: ${err instanceof Error ? err.message : String(err)}`]);
    }
  }
});

export default { render };
