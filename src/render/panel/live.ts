/**
 * The memory section's live line: the kernel's live bytes by category while a cell runs (PanelLive),
 * one swatch per category that holds any, then the total.
 */
import type { PanelLive } from '../../model/wire';
import { CATEGORIES, CATEGORY_COLORS } from '../../model/wire';
import { h } from '../common/dom';
import { bytesShort } from '../common/format';
import { bytesTitle } from './rows';

export interface LiveLine {
  /** ``div.fv-panel-live[role=status]``, hidden until the first update */
  readonly el: HTMLDivElement;
  set(live: PanelLive | null): void;
}

/**
 * Make the live line.
 *
 * @example
 * const line = createLiveLine(doc);
 * line.set({ type: 'live', seq: 3, time: 1.5, live_bytes: [4096, 0, 0, 0, 1024, 0, 0, 0], events: 12 });
 * // "parameter 4 KiB · activation 1 KiB · live 5 KiB"
 */
export function createLiveLine(doc: Document): LiveLine {
  const el = h(doc, 'div', { class: 'fv-panel-live', role: 'status', 'aria-live': 'off', hidden: true });
  return {
    el,
    set(live: PanelLive | null) {
      el.hidden = !live;
      if (!live) {
        el.replaceChildren();
        return;
      }
      const bytes = CATEGORIES.map((_, c) => live.live_bytes[c] ?? 0);
      const total = bytes.reduce((a, b) => a + b, 0);
      el.title = `${live.time.toFixed(1)} s, ${live.events} event${live.events === 1 ? '' : 's'} in the timeline`;
      el.replaceChildren(
        ...CATEGORIES.flatMap((name, c) =>
          bytes[c] > 0
            ? [
                h(
                  doc,
                  'span',
                  { class: 'fv-panel-live-cat', 'data-category': name, title: bytesTitle(bytes[c]) },
                  h(doc, 'span', { class: 'fv-panel-swatch', style: `background:${CATEGORY_COLORS[c]}`, 'aria-hidden': 'true' }),
                  `${name} ${bytesShort(bytes[c])}`
                )
              ]
            : []
        ),
        h(doc, 'span', { class: 'fv-panel-live-total', title: bytesTitle(total) }, `live ${bytesShort(total)}`)
      );
    }
  };
}
