/**
 * anywidget entry (esbuild → forgeviz/static/memory.js): a thin adapter from the widget model
 * to the pure memory-timeline renderer.
 *
 * Traits: ``timeline`` (wire MemoryTimeline JSON, ``{}`` until ready), ``warnings`` (list of strings).
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
import type { AnyModel, RenderProps } from '@anywidget/types';
import css from '../../style/memory.css?raw';
import type { MemoryTimeline } from '../model/wire';
import { decodeColumns, encodeColumns } from '../render/memory/data';
import { createMemoryView } from '../render/memory/view';
import { createTransport } from '../transport';
import { VERSION } from '../version';

export { createMemoryView, decodeColumns, encodeColumns };

const STYLE_ID = 'forgeviz-memory-style';
/** Looking a storage up can take the kernel a moment when it walks the history. */
const DETAIL_TIMEOUT_MS = 30_000;

/** Inject the stylesheet once per document (updated when the version changes). */
export function ensureMemoryStyle(doc: Document): void {
  const existing = doc.getElementById(STYLE_ID);
  if (existing && existing.getAttribute('data-version') === VERSION) {
    return;
  }
  const style = existing ?? doc.createElement('style');
  style.id = STYLE_ID;
  style.setAttribute('data-version', VERSION);
  style.textContent = css;
  if (!existing) {
    (doc.head ?? doc.documentElement).appendChild(style);
  }
}

interface Traits {
  timeline: MemoryTimeline | Record<string, never> | null;
  warnings: string[];
}

/** The part of the model the entry uses. */
export interface MinimalModel {
  get(key: string): unknown;
  on?(name: string, cb: (...args: any[]) => void): void;
  off?(name?: string | null, cb?: ((...args: any[]) => void) | null): void;
  send?(msg: unknown, callbacks?: unknown, buffers?: unknown): void;
}

export function isTimeline(v: unknown): v is MemoryTimeline {
  return !!v && typeof v === 'object' && typeof (v as MemoryTimeline).count === 'number' && Array.isArray((v as MemoryTimeline).cells);
}

interface EventsMessage {
  type: 'events' | 'replay';
  start: number;
  count: number;
  reset?: boolean;
  request_id?: number;
}

export function render({ model, el }: Pick<RenderProps<Traits>, 'model' | 'el'> | { model: MinimalModel; el: HTMLElement }): () => void {
  const m = model as unknown as MinimalModel;
  ensureMemoryStyle(el.ownerDocument);
  const canSend = typeof m.send === 'function';
  const transport = canSend ? createTransport(model as unknown as AnyModel) : null;
  let replayId = -1;
  /** which of the model's views this is, so the kernel can tell when none is left */
  const viewId = 1 + Math.floor(Math.random() * 2 ** 31);
  /** warnings of this view's own (events it could not read) */
  let own: string[] = [];
  const requestReplay = () => {
    if (!canSend) {
      return;
    }
    replayId = 1 + Math.floor(Math.random() * 2 ** 31);
    m.send!({ type: 'replay', request_id: replayId, view: viewId });
  };
  const view = createMemoryView(el, {
    async requestDetail(storage) {
      if (!transport) {
        throw new Error('no kernel connection');
      }
      const { msg } = await transport.request('detail', { storage }, DETAIL_TIMEOUT_MS);
      return msg.detail;
    },
    requestReplay
  });
  const onCustom = (msg: unknown, buffers?: DataView[]) => {
    if (!msg || typeof msg !== 'object') {
      return;
    }
    const mm = msg as EventsMessage;
    if (mm.type === 'replay' && mm.request_id === replayId) {
      // informative: the history the kernel is about to stream (events may come before this)
      el.setAttribute('data-fv-replay-count', String(mm.count));
      return;
    }
    if (mm.type !== 'events') {
      return;
    }
    try {
      const cols = decodeColumns(buffers ?? [], mm.count);
      view.appendEvents(mm.start ?? 0, cols, !!mm.reset);
    } catch (err) {
      own = [`forgeviz could not read memory events: ${err instanceof Error ? err.message : String(err)}`];
      onWarnings();
    }
  };
  const onTimeline = () => {
    const t = m.get('timeline');
    if (isTimeline(t)) {
      view.setTimeline(t);
    }
  };
  const onWarnings = () => {
    const w = m.get('warnings');
    view.setWarnings([...(Array.isArray(w) ? (w as string[]) : []), ...own]);
  };
  m.on?.('msg:custom', onCustom);
  m.on?.('change:timeline', onTimeline);
  m.on?.('change:warnings', onWarnings);
  onWarnings();
  onTimeline();
  requestReplay();
  return () => {
    m.off?.('msg:custom', onCustom);
    m.off?.('change:timeline', onTimeline);
    m.off?.('change:warnings', onWarnings);
    transport?.dispose();
    view.destroy();
    try {
      m.send?.({ type: 'gone', request_id: replayId, view: viewId });
    } catch {
      // the kernel is gone already
    }
  };
}

export default { render };
