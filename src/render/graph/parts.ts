/**
 * The graph view's DOM below the toolbar (the stage with the graph SVG and its message, the
 * inspector beside it, the transcript below) and the legend; GraphUi: the elements that
 * core.ts and stage.ts write to (view.ts makes the toolbar and puts it all in place).
 */
import type { StatusLine } from '../common/chrome';
import { h, s } from '../common/dom';
import { createInspectorPanel, type InspectorPanel } from './inspector';

export interface GraphUi {
  status: StatusLine;
  depthSel: HTMLSelectElement;
  /** "Expand all", "Collapse all" and the depth menu: hidden for a graph with no Modules. */
  foldTools: HTMLElement;
  /** The module path of the selection (crumbs.ts). */
  crumbs: HTMLElement;
  stage: HTMLDivElement;
  svg: SVGSVGElement;
  viewport: SVGGElement;
  /** Shown instead of the SVG when the graph is a message. */
  message: HTMLDivElement;
  inspector: InspectorPanel;
  transcript: HTMLDetailsElement;
}

/** The stage (graph SVG and message), the inspector beside it and the transcript below. */
export function createBody(doc: Document) {
  const stage = h(doc, 'div', { class: 'fv-stage' });
  const svg = s(doc, 'svg', { class: 'fv-canvas', role: 'group', 'aria-label': 'autograd graph' }) as SVGSVGElement;
  const viewport = s(doc, 'g', { class: 'fv-viewport' }) as SVGGElement;
  svg.appendChild(viewport);
  const message = h(doc, 'div', { class: 'fv-message', hidden: true });
  stage.append(svg, message);
  const inspector = createInspectorPanel(doc);
  const body = h(doc, 'div', { class: 'fv-body' }, stage, inspector.el);
  const transcript = h(doc, 'details', { class: 'fv-transcript' });
  return { body, stage, svg, viewport, message, inspector, transcript };
}

export function legend(doc: Document): HTMLDivElement {
  return h(
    doc,
    'div',
    { class: 'fv-legend', 'aria-hidden': 'true' },
    h(doc, 'span', { class: 'fv-lg fv-lg-leaf' }, 'leaf'),
    h(doc, 'span', { class: 'fv-lg fv-lg-op' }, 'op'),
    h(doc, 'span', { class: 'fv-lg fv-lg-module' }, 'module'),
    h(doc, 'span', { class: 'fv-lg fv-lg-freed' }, 'freed'),
    h(doc, 'span', { class: 'fv-lg fv-lg-nonfinite' }, '⚠ non-finite'),
    h(doc, 'span', { class: 'fv-lg fv-lg-grad' }, '∇ grad')
  );
}
