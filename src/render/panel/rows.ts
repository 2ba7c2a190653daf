/** One tensor row of the panel, as DOM: its name and bytes, then its shape, dtype, device and grad. */
import type { TensorRow } from '../../model/wire';
import { h } from '../common/dom';
import { bytesShort, formatNumber, formatShape } from '../common/format';

/** "1,234 bytes" for a tooltip. */
export function bytesTitle(n: number): string {
  return `${Math.round(n).toLocaleString('en-US')} byte${n === 1 ? '' : 's'}`;
}

/**
 * The bytes cell: a counted storage's bytes, or, for a storage an earlier row counted, its bytes
 * in parentheses marked as shared (they add nothing to the totals).
 *
 * @example
 * bytesCell(doc, row) // <span class="fv-panel-bytes">1.5 MiB</span>
 */
export function bytesCell(doc: Document, row: TensorRow): HTMLSpanElement {
  const text = bytesShort(row.storage_bytes);
  return row.counted
    ? h(doc, 'span', { class: 'fv-panel-bytes', title: bytesTitle(row.storage_bytes) }, text)
    : h(doc, 'span', { class: 'fv-panel-bytes fv-panel-bytes-shared', title: `${bytesTitle(row.storage_bytes)}, a storage counted at an earlier row: not added to the total` }, `(${text})`);
}

const chip = (doc: Document, cls: string, text: string, title: string) => h(doc, 'span', { class: `fv-panel-chip ${cls}`, title }, text);

/**
 * The row of ``row``: ``div.fv-panel-row[data-fv-tensor=<name>][role=button][tabindex=0]``. Inside
 * a module's group the module's prefix is left out of the shown name (the hook keeps the full name).
 *
 * @example
 * tensorRow(doc, row, 'model') // shows "fc1.weight" for "model.fc1.weight"
 */
export function tensorRow(doc: Document, row: TensorRow, module: string | null): HTMLDivElement {
  const shown = module && row.name.startsWith(`${module}.`) ? row.name.slice(module.length + 1) : row.name;
  const grad: (Node | false)[] = [
    row.requires_grad && chip(doc, 'fv-panel-rg', 'requires_grad', 'requires_grad=True'),
    row.requires_grad && row.leaf && chip(doc, 'fv-panel-leaf', 'leaf', 'a leaf: its .grad is kept'),
    !row.leaf && !!row.grad_fn && h(doc, 'span', { class: 'fv-panel-gradfn', title: 'grad_fn: the op that made it' }, row.grad_fn),
    row.grad_norm !== null && h(doc, 'span', { class: 'fv-panel-norm', title: 'the norm of its .grad' }, `‖grad‖ ${formatNumber(row.grad_norm)}`)
  ];
  return h(
    doc,
    'div',
    { class: 'fv-panel-row', 'data-fv-tensor': row.name, role: 'button', tabindex: 0, title: `Open ${row.name}` },
    h(doc, 'div', { class: 'fv-panel-row-main' }, h(doc, 'span', { class: 'fv-panel-name' }, shown), bytesCell(doc, row)),
    h(
      doc,
      'div',
      { class: 'fv-panel-facts' },
      h(doc, 'span', { class: 'fv-panel-shape' }, formatShape(row.shape, row.dtype)),
      h(doc, 'span', { class: 'fv-panel-device' }, row.device),
      row.kind === 'buffer' && chip(doc, 'fv-panel-buffer', 'buffer', 'a buffer of its module'),
      row.shared && chip(doc, 'fv-panel-shared', 'shared', 'another row reads the same storage'),
      ...grad
    )
  );
}
