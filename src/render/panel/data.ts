/**
 * The tensor listing as the panel shows it: grouped (plain tensors, then one group per module),
 * filtered by name and sorted. Plain data, no DOM.
 */
import type { TensorRow } from '../../model/wire';

/** How the rows are ordered: by name (A→Z), by storage bytes or by element count (largest first). */
export type SortKey = 'name' | 'bytes' | 'size';

export const SORT_KEYS: readonly SortKey[] = ['name', 'bytes', 'size'];

/** Rows of one module (``module`` its namespace name), or the plain tensors (``module`` null). */
export interface RowGroup {
  module: string | null;
  rows: TensorRow[];
  /** storage bytes of the rows that count them (``counted``): a shared storage once */
  bytes: number;
  /** elements of all the rows */
  size: number;
}

/**
 * The element count of a shape (1 for a scalar).
 *
 * @example
 * numel([2, 3]) // 6
 */
export function numel(shape: readonly number[]): number {
  return shape.reduce((a, b) => a * b, 1);
}

/**
 * The bytes ``rows`` hold, each storage once: rows whose storage an earlier row counted
 * (``counted: false``) add nothing.
 *
 * @example
 * countedBytes([w, wView]) // w.storage_bytes, when wView.counted is false
 */
export function countedBytes(rows: readonly TensorRow[]): number {
  return rows.reduce((sum, r) => sum + (r.counted ? r.storage_bytes : 0), 0);
}

const byName = (a: string, b: string) => a.localeCompare(b, 'en', { numeric: true });

/**
 * The comparator of ``key``; ties fall back to the name, so the order is stable across states.
 *
 * @example
 * rows.slice().sort(compareRows('bytes'))
 */
export function compareRows(key: SortKey): (a: TensorRow, b: TensorRow) => number {
  if (key === 'bytes') {
    return (a, b) => b.storage_bytes - a.storage_bytes || byName(a.name, b.name);
  }
  if (key === 'size') {
    return (a, b) => numel(b.shape) - numel(a.shape) || byName(a.name, b.name);
  }
  return (a, b) => byName(a.name, b.name);
}

/**
 * Does ``row``'s name hold ``filter`` (case-insensitive; an empty filter holds every row)?
 *
 * @example
 * matchesFilter(row, 'fc1') // true for "model.fc1.weight"
 */
export function matchesFilter(row: TensorRow, filter: string): boolean {
  const f = filter.trim().toLowerCase();
  return !f || row.name.toLowerCase().includes(f);
}

/**
 * The rows that ``filter`` keeps, in groups: the plain tensors first, then one group per module;
 * rows sorted by ``key`` within a group, module groups by the same key (name, their counted bytes,
 * their elements). A group the filter empties is left out.
 *
 * @example
 * groupRows(listing.rows, 'bytes', '')
 * // [{ module: null, rows: [x, w] }, { module: 'model', rows: [model.fc1.weight, ...] }]
 */
export function groupRows(rows: readonly TensorRow[], key: SortKey, filter: string): RowGroup[] {
  const plain: TensorRow[] = [];
  const modules = new Map<string, TensorRow[]>();
  for (const row of rows) {
    if (!matchesFilter(row, filter)) {
      continue;
    }
    if (row.module === null) {
      plain.push(row);
    } else {
      const list = modules.get(row.module) ?? [];
      list.push(row);
      modules.set(row.module, list);
    }
  }
  const cmp = compareRows(key);
  const group = (module: string | null, list: TensorRow[]): RowGroup => ({
    module,
    rows: list.sort(cmp),
    bytes: countedBytes(list),
    size: list.reduce((n, r) => n + numel(r.shape), 0)
  });
  const groups = [...modules].map(([m, list]) => group(m, list));
  groups.sort((a, b) => {
    const tie = byName(a.module ?? '', b.module ?? '');
    return key === 'bytes' ? b.bytes - a.bytes || tie : key === 'size' ? b.size - a.size || tie : tie;
  });
  return plain.length ? [group(null, plain), ...groups] : groups;
}
