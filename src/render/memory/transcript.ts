/** The text description under the view: the timeline in words, for screen readers and for copying. */
import { CATEGORIES, type MemoryTimeline } from '../../model/wire';
import { h } from '../common/dom';
import type { MemoryStore } from './data';
import { bytesExact, timeText } from './geom';

/** Fill ``transcript`` (keeping it open or closed) from the store and the timeline. */
export function renderTranscript(transcript: HTMLDetailsElement, store: MemoryStore, t: MemoryTimeline | null): void {
  const doc = transcript.ownerDocument;
  const n = store.n;
  const items: Node[] = [h(doc, 'summary', {}, 'Text description')];
  items.push(h(doc, 'p', { class: 'fv-mem-tr-summary' }, summaryLine(store, t)));
  items.push(h(doc, 'h5', {}, 'Live bytes per category at the end'));
  items.push(
    h(doc, 'ul', { class: 'fv-mem-tr-categories' }, ...CATEGORIES.map((name, c) => h(doc, 'li', { 'data-category': name }, `${name}: ${bytesExact(store.liveAt(n - 1, c))}`)))
  );
  const cells = t?.cells ?? [];
  if (cells.length) {
    items.push(h(doc, 'h5', {}, 'Cells'));
    const shown = cells.slice(0, 100);
    items.push(
      h(
        doc,
        'ul',
        { class: 'fv-mem-tr-cells' },
        ...shown.map(c => h(doc, 'li', {}, `[${c.cell}] starts at ${timeText(c.time)} (event ${c.index.toLocaleString('en-US')})`)),
        cells.length > shown.length ? h(doc, 'li', {}, `… and ${cells.length - shown.length} more`) : null
      )
    );
  }
  const open = transcript.open;
  transcript.replaceChildren(...items);
  transcript.open = open;
}

/** Events, merged history, the peak, live bytes at the end and before tracking. */
function summaryLine(store: MemoryStore, t: MemoryTimeline | null): string {
  const n = store.n;
  const device = t?.device ?? 'cpu';
  const dropped = t?.dropped ?? 0;
  const parts = [`${device} memory timeline: ${n.toLocaleString('en-US')} events`];
  if (dropped) {
    parts.push(` (${dropped.toLocaleString('en-US')} older ones merged away)`);
  }
  parts.push('.');
  if (store.peakIndex >= 0) {
    parts.push(` Peak ${bytesExact(store.peakBytes)} at ${timeText(store.cols.time[store.peakIndex])} (event ${store.peakIndex.toLocaleString('en-US')}).`);
  }
  if (n) {
    parts.push(` Live at the end: ${bytesExact(store.totalAt(n - 1))}`);
    parts.push(t ? `; ${bytesExact(t.baseline_bytes)} existed before tracking.` : '.');
  }
  return parts.join('');
}
