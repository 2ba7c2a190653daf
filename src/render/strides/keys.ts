/**
 * Keys that name a cell across redraws: ``c:<tensor>|<i,j,…>`` for a logical cell,
 * ``s:<strip>|<addr>`` for a storage cell. A redraw replaces the elements; the key finds the new one.
 */
import { groupOfStrip, groupOfTensor, Hot, StridesContext } from './state';

/** The key of a logical cell in its group's ``cellEls``/``cellRects``: ``<tensor>|<i,j,…>``. */
export const key = (tensor: number, index: readonly number[]) => `${tensor}|${index.join(',')}`;

/** The key of the cell ``e`` is in, or null. */
export function keyOfEl(e: Element): string | null {
  const c = e.closest('.fv-cell, .fv-storage-cell');
  if (!c) {
    return null;
  }
  return c.classList.contains('fv-cell') ? `c:${c.getAttribute('data-tensor')}|${c.getAttribute('data-index')}` : `s:${c.getAttribute('data-strip')}|${c.getAttribute('data-addr')}`;
}

function elOfKey(ctx: StridesContext, k: string): SVGGElement | null {
  const [kind, rest] = [k.slice(0, 2), k.slice(2)];
  const [a, b] = rest.split('|');
  if (kind === 'c:') {
    return groupOfTensor(ctx, Number(a))?.cellEls.get(rest) ?? null;
  }
  return groupOfStrip(ctx, Number(a))?.stripEls.get(Number(b)) ?? null;
}

/** Focus the cell drawn for ``k``, if it is drawn. */
export function focusKey(ctx: StridesContext, k: string) {
  const target = elOfKey(ctx, k);
  if (target && ctx.doc.activeElement !== target) {
    (target as unknown as HTMLElement).focus?.();
  }
}

export function hotFromKey(k: string): Hot | null {
  const [a, b] = k.slice(2).split('|');
  if (k.startsWith('c:')) {
    return { kind: 'cell', tensor: Number(a), index: b === '' ? [] : b.split(',').map(Number) };
  }
  if (k.startsWith('s:')) {
    return { kind: 'storage', strip: Number(a), addr: Number(b) };
  }
  return null;
}

export const hotKey = (x: Hot | null) => (!x ? '' : x.kind === 'cell' ? `c:${key(x.tensor, x.index)}` : `s:${x.strip}|${x.addr}`);
