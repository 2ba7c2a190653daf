/**
 * Pointer and keyboard on the graph: a click or Enter selects a Node, expands a module box or a
 * stack (a stack's bar k: member k), or collapses an expanded module (its cluster's label); the
 * arrow keys move the focus to the nearest item that way, and a focused item off-screen is
 * panned into view.
 */
import type { DrawnGraph } from './draw';
import type { NodeBox } from './layout';
import type { PanZoom } from './panzoom';

/** What the handlers read and write of the view's state. */
export interface InteractionState {
  /** The items drawn now; null while there is no graph. */
  drawn: DrawnGraph | null;
  /** Refit on resize; a pan to a focused item turns it off. */
  autoFit: boolean;
}

/** What a click or Enter does. */
export interface ItemActions {
  selectNode(id: number): void;
  /** Expand a module box, or a stack's member ``instance`` (0 when the stack itself was hit). */
  openItem(key: string, instance: number): void;
  /** Collapse an expanded module (its cluster's label was hit). */
  closeModule(moduleId: string): void;
}

/**
 * The item nearest ``from`` in the direction of an arrow key: the smallest distance along
 * that direction plus twice the distance across it; null where none lies that way.
 */
export function nearestNode<K>(boxes: ReadonlyMap<K, NodeBox>, from: K, key: string): K | null {
  const a = boxes.get(from);
  if (!a) {
    return null;
  }
  let best: K | null = null;
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

type Target =
  | { kind: 'node'; id: number; key: string }
  | { kind: 'box'; key: string; instance: number }
  | { kind: 'cluster'; moduleId: string };

function targetOf(e: Event): Target | null {
  const t = e.target as Element | null;
  const el = t?.closest?.('.fv-node, .fv-box, .fv-cluster-head');
  if (!el) {
    return null;
  }
  if (el.classList.contains('fv-cluster-head')) {
    const id = el.closest('.fv-cluster')?.getAttribute('data-module-id');
    return id === null || id === undefined ? null : { kind: 'cluster', moduleId: id };
  }
  const key = el.getAttribute('data-fv-key') ?? '';
  if (el.classList.contains('fv-box')) {
    const bar = t?.closest?.('.fv-bar');
    return { kind: 'box', key, instance: bar ? Number(bar.getAttribute('data-instance')) || 0 : 0 };
  }
  const id = el.getAttribute('data-node-id');
  return id === null ? null : { kind: 'node', id: Number(id), key };
}

function act(target: Target, actions: ItemActions): void {
  if (target.kind === 'node') {
    actions.selectNode(target.id);
  } else if (target.kind === 'box') {
    actions.openItem(target.key, target.instance);
  } else {
    actions.closeModule(target.moduleId);
  }
}

/** Listen on ``svg`` for clicks, keys and focus on items; returns the function that stops listening. */
export function bindNodeEvents(svg: SVGSVGElement, pz: PanZoom, state: InteractionState, actions: ItemActions): () => void {
  const onClick = (e: MouseEvent) => {
    if (pz.dragged()) {
      return;
    }
    const target = targetOf(e) ?? overviewTarget(e);
    if (target) {
      act(target, actions);
    }
  };
  /** A big view zoomed out draws most items as overview paths: the box under the pointer. */
  const overviewTarget = (e: MouseEvent): Target | null => {
    const win = state.drawn?.window;
    if (!win) {
      return null;
    }
    const r = svg.getBoundingClientRect();
    const t = pz.get();
    const b = win.hit((e.clientX - r.left - t.x) / t.k, (e.clientY - r.top - t.y) / t.k);
    if (!b) {
      return null;
    }
    return b.kind === 'node' ? { kind: 'node', id: b.id, key: b.key } : { kind: 'box', key: b.key, instance: 0 };
  };
  const onKey = (e: KeyboardEvent) => {
    const target = targetOf(e);
    if (!target) {
      return;
    }
    if (e.key === 'Enter' || e.key === ' ' || e.key === 'Spacebar') {
      e.preventDefault();
      act(target, actions);
    } else if (e.key.startsWith('Arrow') && target.kind !== 'cluster') {
      e.preventDefault();
      const best = state.drawn ? nearestNode(state.drawn.itemBoxes, target.key, e.key) : null;
      if (best !== null) {
        // in a big view the item may be outside the window: draw it first
        (state.drawn?.items.get(best) ?? state.drawn?.window?.ensure(best))?.el.focus();
      }
    }
  };
  const onFocus = (e: FocusEvent) => {
    const target = targetOf(e);
    const b = target && target.kind !== 'cluster' ? state.drawn?.itemBoxes.get(target.key) : undefined;
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
