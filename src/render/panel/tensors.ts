/**
 * The Tensors section: a filter and a sort over the listing, the plain tensors then one folded group
 * per module, a "+N more" row, and the total bytes (each storage once). A click on a row, or Enter
 * or Space on it, opens it (``onOpen``).
 */
import type { TensorListing, TensorRow } from '../../model/wire';
import { MAX_TENSOR_ROWS } from '../../model/wire';
import { h } from '../common/dom';
import { bytesShort } from '../common/format';
import { groupRows, SORT_KEYS, type RowGroup, type SortKey } from './data';
import { bytesTitle, tensorRow } from './rows';
import { createSection } from './section';

export interface TensorsSection {
  readonly el: HTMLElement;
  set(listing: TensorListing | null): void;
}

const SORT_LABELS: Record<SortKey, string> = { name: 'by name', bytes: 'by bytes', size: 'by size' };

/**
 * Make the Tensors section; ``onOpen`` gets the row clicked.
 *
 * @example
 * const tensors = createTensorsSection(doc, row => open(row.name));
 * tensors.set(state.tensors);
 */
export function createTensorsSection(doc: Document, onOpen: (row: TensorRow) => void): TensorsSection {
  const filter = h(doc, 'input', { type: 'search', class: 'fv-panel-filter', placeholder: 'Filter by name', 'aria-label': 'Filter tensors by name' });
  const sort = h(
    doc,
    'select',
    { class: 'fv-panel-sort', 'aria-label': 'Sort tensors by', title: 'Sort tensors by' },
    ...SORT_KEYS.map(k => h(doc, 'option', { value: k }, SORT_LABELS[k]))
  );
  const section = createSection(doc, 'tensors', 'Tensors');
  const total = h(doc, 'div', { class: 'fv-panel-total' });
  const list = h(doc, 'div', { class: 'fv-panel-rows' });
  section.body.append(h(doc, 'div', { class: 'fv-panel-tools' }, filter, sort), total, list);

  let listing: TensorListing | null = null;
  let byName = new Map<string, TensorRow>();
  // the module groups the user opened, kept across states (each cell sends a new one)
  const open = new Set<string>();

  const groupEl = (g: RowGroup, filtering: boolean): HTMLElement => {
    const rows = g.rows.map(r => tensorRow(doc, r, g.module));
    if (g.module === null) {
      return h(doc, 'div', { class: 'fv-panel-plain' }, ...rows);
    }
    const module = g.module;
    const summary = h(
      doc,
      'summary',
      { class: 'fv-panel-group-head' },
      h(doc, 'span', { class: 'fv-panel-name' }, module),
      h(doc, 'span', { class: 'fv-panel-group-count' }, `${g.rows.length} tensor${g.rows.length === 1 ? '' : 's'}`),
      h(doc, 'span', { class: 'fv-panel-bytes', title: bytesTitle(g.bytes) }, bytesShort(g.bytes))
    );
    // while filtering, every group that matches is open; the user's own choice comes back after
    const details = h(doc, 'details', { class: 'fv-panel-group', 'data-fv-module': module, open: filtering || open.has(module) }, summary, ...rows);
    details.addEventListener('toggle', () => {
      if (!filtering) {
        details.open ? open.add(module) : open.delete(module);
      }
    });
    return details;
  };

  const render = () => {
    const focused = (doc.activeElement as HTMLElement | null)?.closest?.('[data-fv-tensor]')?.getAttribute('data-fv-tensor');
    if (!listing) {
      total.textContent = '';
      list.replaceChildren();
      section.setCount('');
      return;
    }
    const text = filter.value;
    const groups = groupRows(listing.rows, sort.value as SortKey, text);
    const shown = groups.reduce((n, g) => n + g.rows.length, 0);
    const count = listing.rows.length + listing.more;
    section.setCount(String(count));
    total.textContent = `${text.trim() ? `${shown} of ${listing.rows.length} shown · ` : ''}total ${bytesShort(listing.total_bytes)}`;
    total.title = `${bytesTitle(listing.total_bytes)}: every storage counted once`;
    const more =
      listing.more > 0 &&
      h(doc, 'div', { class: 'fv-panel-more', title: `the panel lists at most ${MAX_TENSOR_ROWS} tensors` }, `+${listing.more} more`);
    const empty = !groups.length && h(doc, 'div', { class: 'fv-panel-empty' }, listing.rows.length ? 'No tensor matches the filter' : 'No tensors in the notebook yet');
    list.replaceChildren(...groups.map(g => groupEl(g, !!text.trim())), ...[empty, more].filter((x): x is HTMLDivElement => !!x));
    if (focused) {
      [...list.querySelectorAll<HTMLElement>('[data-fv-tensor]')].find(r => r.getAttribute('data-fv-tensor') === focused)?.focus();
    }
  };

  const rowOf = (target: EventTarget | null): TensorRow | null => {
    const name = (target as Element | null)?.closest?.('[data-fv-tensor]')?.getAttribute('data-fv-tensor');
    return name != null ? (byName.get(name) ?? null) : null;
  };
  list.addEventListener('click', e => {
    const row = rowOf(e.target);
    if (row) {
      onOpen(row);
    }
  });
  list.addEventListener('keydown', e => {
    const row = (e.key === 'Enter' || e.key === ' ') && (e.target as Element).matches('[data-fv-tensor]') ? rowOf(e.target) : null;
    if (row) {
      e.preventDefault();
      onOpen(row);
    }
  });
  filter.addEventListener('input', render);
  sort.addEventListener('change', render);

  return {
    el: section.el,
    set(next: TensorListing | null) {
      listing = next;
      byName = new Map((next?.rows ?? []).map(r => [r.name, r]));
      if (!next) {
        open.clear();
      }
      render();
    }
  };
}
