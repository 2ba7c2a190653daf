/**
 * Pointer and keyboard on the graph: a click or Enter selects a node, the arrow keys move the
 * focus to the nearest node that way, and a focused node off-screen is panned into view.
 */
import type { DrawnGraph } from './draw';
import type { NodeBox } from './layout';
import type { PanZoom } from './panzoom';

/** What the handlers read and write of the view's state. */
export interface InteractionState {
  /** The nodes drawn now; null while there is no graph. */
  drawn: DrawnGraph | null;
  /** Refit on resize; a pan to a focused node turns it off. */
  autoFit: boolean;
}

/**
 * The node nearest ``from`` in the direction of an arrow key: the smallest distance along
 * that direction plus twice the distance across it; null where none lies that way.
 */
export function nearestNode(boxes: ReadonlyMap<number, NodeBox>, from: number, key: string): number | null {
  const a = boxes.get(from);
  if (!a) {
    return null;
  }
  let best: number | null = null;
  let bestScore = Infinity;
  for (const [id, b] of boxes) {
    if (id === from) {
      continue;
    }
    const dx = b.cx - a.cx;
    const dy = b.cy - a.cy;
    let main: number;
    let cross: number;
    if (key === 'ArrowDown') {
      [main, cross] = [dy, dx];
    } else if (key === 'ArrowUp') {
      [main, cross] = [-dy, dx];
    } else if (key === 'ArrowRight') {
      [main, cross] = [dx, dy];
    } else {
      [main, cross] = [-dx, dy];
    }
    if (main <= 1) {
      continue;
    }
    const score = main + 2 * Math.abs(cross);
    if (score < bestScore) {
      bestScore = score;
      best = id;
    }
  }
  return best;
}

function nodeFromEvent(e: Event): number | null {
  const t = e.target as Element | null;
  const ng = t?.closest?.('.fv-node');
  const id = ng?.getAttribute('data-node-id');
  return id === null || id === undefined ? null : Number(id);
}

/** Listen on ``svg`` for clicks, keys and focus on nodes; returns the function that stops listening. */
export function bindNodeEvents(svg: SVGSVGElement, pz: PanZoom, state: InteractionState, select: (id: number) => void): () => void {
  const onClick = (e: MouseEvent) => {
    if (pz.dragged()) {
      return;
    }
    const id = nodeFromEvent(e);
    if (id !== null) {
      select(id);
    }
  };
  const onKey = (e: KeyboardEvent) => {
    const id = nodeFromEvent(e);
    if (id === null) {
      return;
    }
    if (e.key === 'Enter' || e.key === ' ' || e.key === 'Spacebar') {
      e.preventDefault();
      select(id);
    } else if (e.key.startsWith('Arrow')) {
      e.preventDefault();
      const best = state.drawn ? nearestNode(state.drawn.boxes, id, e.key) : null;
      if (best !== null) {
        state.drawn?.nodeEls.get(best)?.focus();
      }
    }
  };
  const onFocus = (e: FocusEvent) => {
    const id = nodeFromEvent(e);
    const b = id === null ? undefined : state.drawn?.boxes.get(id);
    if (!b) {
      return;
    }
    const w = svg.clientWidth;
    const hh = svg.clientHeight;
    if (!w || !hh) {
      return;
    }
    const t = pz.get();
    const x = b.cx * t.k + t.x;
    const y = b.cy * t.k + t.y;
    if (x < 0 || y < 0 || x > w || y > hh) {
      pz.set({ ...t, x: w / 2 - b.cx * t.k, y: hh / 2 - b.cy * t.k });
      state.autoFit = false;
    }
  };
  svg.addEventListener('click', onClick);
  svg.addEventListener('keydown', onKey);
  svg.addEventListener('focusin', onFocus);
  return () => {
    svg.removeEventListener('click', onClick);
    svg.removeEventListener('keydown', onKey);
    svg.removeEventListener('focusin', onFocus);
  };
}
