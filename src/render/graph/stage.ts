/**
 * The stage: the SVG the graph is drawn in, panned and zoomed by panzoom.ts. It holds what is
 * drawn (the layout and the DOT it came from), finds where a Ref is drawn, centres on it, fits
 * the drawing, puts a new drawing on the page (attach.ts), shows a message instead, and exports
 * what it shows as a standalone SVG. A big view (past ``BIG_VIEW_ITEMS`` boxes) is drawn windowed
 * (window.ts): the window follows each pan or zoom once it settles.
 */
import type { Graph } from '../../model/wire';
import { s } from '../common/dom';
import { standaloneSvg } from '../common/export';
import { attach, nextFrame } from './attach';
import { type DrawnGraph, drawGraph } from './draw';
import type { VisibleGraph } from './fold';
import type { InteractionState } from './interaction';
import type { Layout } from './layout';
import { createPanZoom, type PanZoom } from './panzoom';
import type { GraphUi } from './parts';
import { BIG_VIEW_ITEMS, drawWindowed, READABLE_SCALE } from './window';

/** A point to keep still on screen across a new layout: an item, a Module (box or cluster), a Node. */
export type Ref = { key: string } | { module: string } | { node: number };

/** ``ref`` was at ``screen`` (null: not drawn) before a new layout; from then on it is drawn as ``after``. */
export interface Anchor {
  ref: Ref;
  after: Ref;
  screen: { x: number; y: number } | null;
}

export interface Stage {
  readonly pz: PanZoom;
  /** The layout drawn now; null while a message shows. */
  laid(): Layout | null;
  /** Where ``ref`` is on screen now (px from the SVG's top left). */
  screenPoint(vis: VisibleGraph | null, ref: Ref): { x: number; y: number } | null;
  /** Pan so that ``ref`` is in the middle of the stage. */
  centreOn(vis: VisibleGraph | null, ref: Ref): void;
  fit(): void;
  /** A graph with a message instead of nodes: hide the SVG, show the text. */
  showMessage(text: string): void;
  /**
   * Show the drawing of ``vis`` laid out as ``lay``; ``decorate`` runs either way. Unless ``dot``
   * is drawn already (then null), draw it anew, keep ``anchor`` still or fit the drawing (always
   * for a ``newGraph``), and put it on the page (attach.ts): false when ``overtaken`` (a newer
   * layout, or destroy()) before all of it is there.
   */
  draw(
    lay: Layout,
    vis: VisibleGraph,
    dot: string,
    anchor: Anchor | null,
    newGraph: boolean,
    decorate: () => void,
    overtaken: () => boolean
  ): Promise<boolean> | null;
  /** What is drawn as a standalone SVG, culled Nodes too (``shown``'s message when nothing is). */
  exportSVG(shown: Graph | null): string;
  destroy(): void;
}

function stageHeight(lay: Layout): number {
  return Math.round(Math.min(560, Math.max(260, lay.height * 1.3 + 40)));
}

export function createStage(doc: Document, el: HTMLElement, ui: GraphUi, io: InteractionState): Stage {
  const win = doc.defaultView;
  const { svg, viewport, message } = ui;
  /** The layout drawn now and the DOT it came from; null while a message shows. */
  let laid: Layout | null = null;
  let drawnDot: string | null = null;
  let laidVis: VisibleGraph | null = null;
  /** Decorates what is drawn (the core's): run again when a big view's window draws new items. */
  let decorateDrawn: () => void = () => undefined;

  const pz: PanZoom = createPanZoom(
    svg,
    viewport,
    () => {
      io.autoFit = false;
    },
    () => moveWindow()
  );
  const fit = () => {
    if (laid) {
      pz.fit(laid.width, laid.height);
    }
  };
  let resizeObs: ResizeObserver | null = null;
  if (win && 'ResizeObserver' in win) {
    resizeObs = new (win as Window & typeof globalThis).ResizeObserver(() => {
      if (io.autoFit) {
        fit();
      }
    });
    resizeObs.observe(ui.stage);
  }

  /** Top centre of what ``ref`` is drawn as, in graph coordinates (null: not drawn). */
  function refPoint(vis: VisibleGraph | null, ref: Ref, centre = false): { x: number; y: number } | null {
    const d = io.drawn;
    if (!d || !vis) {
      return null;
    }
    let key: string | undefined;
    if ('module' in ref) {
      const c = d.clusters.get(ref.module);
      if (c) {
        return { x: c.box.x + c.box.w / 2, y: centre ? c.box.y + c.box.h / 2 : c.box.y };
      }
      key = vis.moduleItem.get(ref.module);
    } else if ('node' in ref) {
      key = vis.nodeItem.get(ref.node);
    } else {
      key = ref.key;
    }
    const b = key === undefined ? undefined : d.itemBoxes.get(key);
    return b ? { x: b.cx, y: centre ? b.cy : b.cy - b.h / 2 } : null;
  }

  function screenPoint(vis: VisibleGraph | null, ref: Ref): { x: number; y: number } | null {
    const p = refPoint(vis, ref);
    const t = pz.get();
    return p ? { x: p.x * t.k + t.x, y: p.y * t.k + t.y } : null;
  }

  function centreOn(vis: VisibleGraph | null, ref: Ref) {
    const p = refPoint(vis, ref, true);
    if (!p) {
      return;
    }
    const t = pz.get();
    const w = svg.clientWidth || 0;
    const hh = svg.clientHeight || 0;
    // a big view zoomed out draws no item: zoom in to read the one centred
    const k = io.drawn?.window && t.k < READABLE_SCALE ? 1 : t.k;
    pz.set({ k, x: w / 2 - p.x * k, y: hh / 2 - p.y * k });
    io.autoFit = false;
    moveWindow();
  }

  /** A big view: draw the items within a screen of the visible part (say whether any were added). */
  function placeWindow(): boolean {
    const win = io.drawn?.window;
    const w = svg.clientWidth || 0;
    const hh = svg.clientHeight || 0;
    if (!win || !w || !hh) {
      return false;
    }
    const t = pz.get();
    const x0 = -t.x / t.k;
    const y0 = -t.y / t.k;
    const vw = w / t.k;
    const vh = hh / t.k;
    return win.update(t.k < READABLE_SCALE ? null : { x0: x0 - vw / 2, y0: y0 - vh / 2, x1: x0 + 1.5 * vw, y1: y0 + 1.5 * vh });
  }
  function moveWindow() {
    if (placeWindow()) {
      decorateDrawn();
    }
  }

  function showMessage(text: string) {
    laid = null;
    drawnDot = null;
    io.drawn = null;
    viewport.replaceChildren();
    svg.style.display = 'none';
    el.setAttribute('data-fv-mode', 'message');
    message.hidden = false;
    message.textContent = text;
  }

  const draw: Stage['draw'] = (lay, vis, dot, anchor, newGraph, decorate, overtaken) => {
    svg.style.display = '';
    el.setAttribute('data-fv-mode', 'graph');
    message.hidden = true;
    if (drawnDot === dot && io.drawn) {
      decorate();
      return null;
    }
    laid = lay;
    laidVis = vis;
    decorateDrawn = decorate;
    const drawn = lay.nodes.length > BIG_VIEW_ITEMS ? drawWindowed(doc, lay, vis, () => decorateDrawn()) : drawGraph(doc, lay, vis);
    io.drawn = drawn;
    drawnDot = dot;
    // a new graph gets the height it needs; an expand only ever grows the stage
    const prev = parseFloat(el.style.getPropertyValue('--fv-stage-h')) || 0;
    const want = stageHeight(lay);
    el.style.setProperty('--fv-stage-h', `${newGraph ? want : Math.max(prev, want)}px`);
    const to = anchor?.screen ? refPoint(vis, anchor.after) : null;
    if (anchor?.screen && to) {
      const t = pz.get();
      pz.set({ k: t.k, x: anchor.screen.x - to.x * t.k, y: anchor.screen.y - to.y * t.k });
      io.autoFit = false;
    } else if (newGraph || io.autoFit || !anchor) {
      io.autoFit = true;
      fit();
    }
    placeWindow();
    decorate(); // while detached: the page styles each element once, when it is attached
    return attach(viewport, drawn.g, () => nextFrame(doc, win), overtaken);
  };

  function exportSVG(shown: Graph | null): string {
    if (!io.drawn || !laid) {
      const W = 480;
      const text = shown?.message ?? 'no graph';
      const tmp = s(doc, 'g', { class: 'fv-graph' }) as SVGGElement;
      tmp.appendChild(s(doc, 'text', { x: 8, y: 20, class: 'fv-message-text' }, text));
      svg.appendChild(tmp);
      try {
        return standaloneSvg(tmp, el, W, 32, 'forgeviz: ' + text);
      } finally {
        tmp.remove();
      }
    }
    if (!io.drawn.window) {
      return standaloneSvg(io.drawn.g, el, laid.width, laid.height, 'forgeviz autograd graph');
    }
    // a big view exports every item: draw them all, decorated, where the page styles them, unseen
    const shownNow = io.drawn;
    const all: DrawnGraph = drawGraph(doc, laid, laidVis);
    const unseen = s(doc, 'g', { style: 'opacity:0', 'aria-hidden': 'true' });
    unseen.appendChild(all.g);
    viewport.appendChild(unseen);
    io.drawn = all;
    try {
      decorateDrawn();
      return standaloneSvg(all.g, el, laid.width, laid.height, 'forgeviz autograd graph');
    } finally {
      io.drawn = shownNow;
      unseen.remove();
      decorateDrawn();
    }
  }

  return {
    pz,
    laid: () => laid,
    screenPoint,
    centreOn,
    fit,
    showMessage,
    draw,
    exportSVG,
    destroy() {
      resizeObs?.disconnect();
      pz.destroy();
    }
  };
}
