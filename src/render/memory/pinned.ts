/** The pinned panel: a clicked storage's details, kept until unpinned; a click also highlights its autograd node. */
import { NO_ID, type StorageDetail } from '../../model/wire';
import { h } from '../common/dom';
import type { MemoryContext, MemoryHit } from './context';
import { fetchDetail, hitContent } from './details';
import { hitTest } from './hit';
import { schedule } from './painter';

export function renderPinned(ctx: MemoryContext): void {
  const { doc } = ctx;
  const { pinned } = ctx.ui;
  const hit = ctx.pinnedHit;
  if (!hit || hit.storage === null) {
    pinned.hidden = true;
    pinned.replaceChildren();
    pinned.removeAttribute('data-storage');
    return;
  }
  const close = h(doc, 'button', { type: 'button', class: 'fv-btn fv-mem-unpin', title: 'Unpin', 'aria-label': 'Unpin' }, '×');
  close.addEventListener('click', () => unpin(ctx));
  pinned.replaceChildren(close, ...hitContent(ctx, hit, true));
  pinned.hidden = false;
  pinned.setAttribute('data-storage', String(hit.storage));
}

/** Drop the pin (the panel and the block's outline). */
export function unpin(ctx: MemoryContext): void {
  ctx.pinnedHit = null;
  renderPinned(ctx);
  schedule(ctx, false);
  ctx.opts.onViewState?.();
}

/** Ask the graph view (if any) to highlight an autograd node. */
function highlight(ctx: MemoryContext, node: number): void {
  ctx.doc.dispatchEvent(new (ctx.win?.CustomEvent ?? CustomEvent)('forgeviz:highlight-node', { detail: { node } }));
}

/**
 * Pin ``hit`` (a storage's): the panel shows it at once, and again with the kernel's details once
 * they come (or says they are unavailable: never rejects). Resolves to the details, or null.
 */
export async function pin(ctx: MemoryContext, hit: MemoryHit & { storage: number }): Promise<StorageDetail | null> {
  ctx.pinnedHit = hit;
  renderPinned(ctx);
  schedule(ctx, false);
  ctx.opts.onViewState?.();
  // a failure is shown in the panel; the cache has the answer before this resumes (its handler came first)
  const d = await fetchDetail(ctx, hit.storage).catch(() => null);
  if (!ctx.destroyed && ctx.pinnedHit === hit) {
    renderPinned(ctx);
  }
  return d;
}

/** Click (pin) at canvas CSS px: pins the storage there, or unpins on empty space. */
export async function click(ctx: MemoryContext, x: number, y: number): Promise<MemoryHit | null> {
  const hit = hitTest(ctx, x, y);
  if (!hit || hit.storage === null || hit.event < 0) {
    unpin(ctx);
    return hit;
  }
  const node = ctx.store.cols.node[hit.event];
  const pinned = pin(ctx, hit as MemoryHit & { storage: number });
  if (node !== NO_ID) {
    highlight(ctx, node);
  }
  const d = await pinned;
  if (node === NO_ID && d?.node !== null && d?.node !== undefined && ctx.pinnedHit === hit) {
    highlight(ctx, d.node);
  }
  return hit;
}
