/**
 * Minimal pan & zoom for an SVG group: wheel zoom about the pointer, drag to pan. Only the
 * group's transform changes while the user moves; ``onSettle`` runs once the view has been
 * still for a moment (the graph view culls off-screen Nodes of huge graphs then).
 */

export interface Transform {
  x: number;
  y: number;
  k: number;
}

export interface PanZoom {
  get(): Transform;
  set(t: Transform): void;
  zoomBy(factor: number, cx?: number, cy?: number): void;
  fit(width: number, height: number, maxScale?: number): void;
  /** True right after a drag, so the click that ends it is not a selection. */
  dragged(): boolean;
  destroy(): void;
}

const MIN_K = 0.05;
const MAX_K = 8;

export function createPanZoom(
  svg: SVGSVGElement,
  group: SVGGElement,
  onInteract: () => void = () => undefined,
  onSettle: () => void = () => undefined,
  settleMs = 120
): PanZoom {
  let t: Transform = { x: 0, y: 0, k: 1 };
  /** The farthest zoom out: MIN_K, or less where the last fit needed less. */
  let minK = MIN_K;
  let drag: { id: number; x0: number; y0: number; tx: number; ty: number; moved: boolean } | null = null;
  let justDragged = false;

  let settleTimer: ReturnType<typeof setTimeout> | null = null;
  const apply = () => {
    group.setAttribute('transform', `translate(${round(t.x)},${round(t.y)}) scale(${round(t.k, 4)})`);
    if (settleTimer !== null) {
      clearTimeout(settleTimer);
    }
    settleTimer = setTimeout(() => {
      settleTimer = null;
      onSettle();
    }, settleMs);
  };
  const size = () => ({ w: svg.clientWidth || 0, h: svg.clientHeight || 0 });
  const local = (e: { clientX: number; clientY: number }) => {
    const r = svg.getBoundingClientRect();
    return { x: e.clientX - r.left, y: e.clientY - r.top };
  };

  const zoomBy = (factor: number, cx?: number, cy?: number) => {
    const { w, h } = size();
    const px = cx ?? w / 2;
    const py = cy ?? h / 2;
    const k = Math.min(MAX_K, Math.max(minK, t.k * factor));
    const f = k / t.k;
    t = { k, x: px - (px - t.x) * f, y: py - (py - t.y) * f };
    apply();
  };

  const onWheel = (e: WheelEvent) => {
    e.preventDefault();
    const p = local(e);
    const unit = e.deltaMode === 1 ? 16 : e.deltaMode === 2 ? 400 : 1;
    const factor = Math.pow(2, (-e.deltaY * unit) / 500);
    zoomBy(factor, p.x, p.y);
    onInteract();
  };
  const onDown = (e: PointerEvent) => {
    if (e.button !== 0) {
      return;
    }
    drag = { id: e.pointerId, x0: e.clientX, y0: e.clientY, tx: t.x, ty: t.y, moved: false };
    justDragged = false;
  };
  const onMove = (e: PointerEvent) => {
    if (!drag || e.pointerId !== drag.id) {
      return;
    }
    const dx = e.clientX - drag.x0;
    const dy = e.clientY - drag.y0;
    if (!drag.moved && Math.hypot(dx, dy) < 4) {
      return;
    }
    if (!drag.moved) {
      drag.moved = true;
      svg.classList.add('fv-panning');
      try {
        svg.setPointerCapture?.(e.pointerId);
      } catch {
        // capture is best effort
      }
    }
    t = { ...t, x: drag.tx + dx, y: drag.ty + dy };
    apply();
    onInteract();
  };
  const onUp = (e: PointerEvent) => {
    if (!drag || e.pointerId !== drag.id) {
      return;
    }
    justDragged = drag.moved;
    drag = null;
    svg.classList.remove('fv-panning');
  };

  svg.addEventListener('wheel', onWheel, { passive: false });
  svg.addEventListener('pointerdown', onDown);
  svg.addEventListener('pointermove', onMove);
  svg.addEventListener('pointerup', onUp);
  svg.addEventListener('pointercancel', onUp);
  apply();

  return {
    get: () => ({ ...t }),
    set(nt) {
      t = { ...nt };
      apply();
    },
    zoomBy,
    fit(width, height, maxScale = 1.6) {
      const { w, h } = size();
      if (!w || !h || !width || !height) {
        t = { x: 12, y: 12, k: 1 };
      } else {
        const pad = 16;
        // a drawing too big to fit at MIN_K (a 10,000-op chain) is fitted all the same, and may be zoomed out to that
        const k = Math.min(maxScale, (w - 2 * pad) / width, (h - 2 * pad) / height);
        minK = Math.min(MIN_K, k);
        t = { k, x: (w - width * k) / 2, y: (h - height * k) / 2 };
      }
      apply();
    },
    dragged() {
      const d = justDragged;
      justDragged = false;
      return d;
    },
    destroy() {
      if (settleTimer !== null) {
        clearTimeout(settleTimer);
      }
      svg.removeEventListener('wheel', onWheel);
      svg.removeEventListener('pointerdown', onDown);
      svg.removeEventListener('pointermove', onMove);
      svg.removeEventListener('pointerup', onUp);
      svg.removeEventListener('pointercancel', onUp);
    }
  };
}

function round(v: number, d = 2): number {
  const p = Math.pow(10, d);
  return Math.round(v * p) / p;
}
