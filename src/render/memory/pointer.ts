/** The canvas's pointer, wheel and keyboard: hover, click to pin, drag to pan, wheel and keys to zoom. */
import type { MemoryContext } from './context';
import { valueAtX } from './draw';
import { frame } from './painter';
import { click, unpin } from './pinned';
import { hover, leave } from './tooltip';
import { panBy, resetZoom, zoomBy } from './zoom';

/** Listen on the canvas; returns the function that stops listening. */
export function bindPointer(ctx: MemoryContext): () => void {
  const { el, store } = ctx;
  const { canvas } = ctx.ui;
  const local = (e: { clientX: number; clientY: number }) => {
    const r = canvas.getBoundingClientRect();
    return { x: e.clientX - r.left, y: e.clientY - r.top };
  };
  let drag: { x: number; moved: boolean; id: number } | null = null;
  let suppressClick = false;
  const onDown = (e: PointerEvent) => {
    if (e.button !== 0) {
      return;
    }
    drag = { x: e.clientX, moved: false, id: e.pointerId };
    suppressClick = false;
  };
  const onMove = (e: PointerEvent) => {
    if (drag && (e.buttons & 1) === 1) {
      const dx = e.clientX - drag.x;
      if (drag.moved || Math.abs(dx) > 3) {
        if (!drag.moved) {
          try {
            canvas.setPointerCapture?.(drag.id);
          } catch {
            // not capturable (synthetic events)
          }
        }
        drag.moved = true;
        drag.x = e.clientX;
        el.setAttribute('data-fv-dragging', 'true');
        panBy(ctx, -dx);
        return;
      }
    }
    const p = local(e);
    void hover(ctx, p.x, p.y);
  };
  const onUp = () => {
    if (drag?.moved) {
      suppressClick = true;
    }
    drag = null;
    el.removeAttribute('data-fv-dragging');
  };
  const onClick = (e: MouseEvent) => {
    if (suppressClick) {
      suppressClick = false;
      return;
    }
    const p = local(e);
    void click(ctx, p.x, p.y);
  };
  const onWheel = (e: WheelEvent) => {
    if (!store.n) {
      return;
    }
    e.preventDefault();
    const f = frame(ctx);
    const p = local(e);
    const unit = e.deltaMode === 1 ? 16 : e.deltaMode === 2 ? 400 : 1;
    const dy = (e.deltaY || 0) * unit;
    const dx = (e.deltaX || 0) * unit;
    if (Math.abs(dx) > Math.abs(dy)) {
      panBy(ctx, dx);
      return;
    }
    const px = Number.isFinite(p.x) ? Math.max(f.left, Math.min(f.right, p.x)) : (f.left + f.right) / 2;
    zoomBy(ctx, Math.exp(dy * 0.002), valueAtX(f, px));
  };
  const onKey = (e: KeyboardEvent) => {
    if (onKeyDown(ctx, e.key)) {
      e.preventDefault();
    }
  };
  const onLeave = () => leave(ctx);
  const listeners: [string, EventListener, AddEventListenerOptions?][] = [
    ['pointerdown', onDown as EventListener],
    ['pointermove', onMove as EventListener],
    ['pointerup', onUp],
    ['pointercancel', onUp],
    ['pointerleave', onLeave],
    ['click', onClick as EventListener],
    ['wheel', onWheel as EventListener, { passive: false }],
    ['keydown', onKey as EventListener]
  ];
  for (const [type, fn, options] of listeners) {
    canvas.addEventListener(type, fn, options);
  }
  return () => {
    for (const [type, fn] of listeners) {
      canvas.removeEventListener(type, fn);
    }
  };
}

/** Arrows pan, +/− zoom, 0 shows everything, Escape unpins and hides the tooltip; false: not a key of ours. */
function onKeyDown(ctx: MemoryContext, key: string): boolean {
  const f = frame(ctx);
  if (key === 'ArrowLeft') {
    panBy(ctx, -(f.right - f.left) * 0.1);
  } else if (key === 'ArrowRight') {
    panBy(ctx, (f.right - f.left) * 0.1);
  } else if (key === '+' || key === '=') {
    zoomBy(ctx, 0.5);
  } else if (key === '-' || key === '_') {
    zoomBy(ctx, 2);
  } else if (key === '0') {
    resetZoom(ctx);
  } else if (key === 'Escape') {
    unpin(ctx);
    leave(ctx);
  } else {
    return false;
  }
  return true;
}
