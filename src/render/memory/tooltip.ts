/** The hover tooltip: what is under the cursor, filled in once the kernel's details arrive. */
import { CANVAS_HEIGHT, type MemoryContext, type MemoryHit } from './context';
import { fetchDetail, hitContent } from './details';
import { hitTest } from './hit';
import { frame, schedule } from './painter';
import { renderPinned } from './pinned';

export function showTooltip(ctx: MemoryContext, hit: MemoryHit | null): void {
  const { el } = ctx;
  const { tooltip } = ctx.ui;
  if (!hit) {
    tooltip.hidden = true;
    tooltip.replaceChildren();
    el.removeAttribute('data-fv-hover-storage');
    return;
  }
  tooltip.replaceChildren(...hitContent(ctx, hit, false));
  tooltip.hidden = false;
  tooltip.setAttribute('data-kind', hit.kind);
  if (hit.storage !== null) {
    tooltip.setAttribute('data-storage', String(hit.storage));
    el.setAttribute('data-fv-hover-storage', String(hit.storage));
  } else {
    tooltip.removeAttribute('data-storage');
    el.removeAttribute('data-fv-hover-storage');
  }
  const W = frame(ctx).W;
  const left = hit.x + 16 + 300 > W ? Math.max(0, hit.x - 16 - 300) : hit.x + 16;
  tooltip.style.left = `${Math.round(left)}px`;
  tooltip.style.top = `${Math.round(Math.min(hit.y + 12, CANVAS_HEIGHT - 40))}px`;
}

/** Hover at canvas CSS px; resolves once the storage's detail (if any) is shown. */
export async function hover(ctx: MemoryContext, x: number, y: number): Promise<MemoryHit | null> {
  const hit = hitTest(ctx, x, y);
  ctx.hoverHit = hit;
  showTooltip(ctx, hit);
  schedule(ctx, false);
  if (hit && hit.storage !== null) {
    const sid = hit.storage;
    try {
      await fetchDetail(ctx, sid);
    } catch {
      // shown in the tooltip
    }
    await Promise.resolve();
    if (!ctx.destroyed && ctx.hoverHit === hit) {
      showTooltip(ctx, hit);
    }
    if (!ctx.destroyed && ctx.pinnedHit && ctx.pinnedHit.storage === sid) {
      renderPinned(ctx);
    }
  }
  return hit;
}

/** Forget the hover (and redraw without its marks). */
export function leave(ctx: MemoryContext): void {
  ctx.hoverHit = null;
  showTooltip(ctx, null);
  schedule(ctx, false);
}
