/** The memory view's DOM: warning strip, toolbar, status, notes, legend, canvas stage, panels. */
import { button, buttonGroup, createStatusLine, createWarningStrip, type StatusLine, toolbar, type WarningStrip } from '../common/chrome';
import { h } from '../common/dom';

export interface MemoryUi {
  warnings: WarningStrip;
  xmodeBtn: HTMLButtonElement;
  zoomIn: HTMLButtonElement;
  zoomOut: HTMLButtonElement;
  zoomReset: HTMLButtonElement;
  svgBtn: HTMLButtonElement;
  pngBtn: HTMLButtonElement;
  /** the toolbar's one-line summary (peak, live, events) */
  summary: HTMLSpanElement;
  status: StatusLine;
  /** the timeline's own message (e.g. no CUDA device) */
  message: HTMLDivElement;
  /** older history merged away */
  note: HTMLDivElement;
  legend: HTMLUListElement;
  canvas: HTMLCanvasElement;
  tooltip: HTMLDivElement;
  modeHint: HTMLDivElement;
  stage: HTMLDivElement;
  pinned: HTMLDivElement;
  transcript: HTMLDetailsElement;
  cudaBox: HTMLDivElement;
}

/** Build the view's elements and put them in ``el`` (replacing what it held). */
export function buildUi(el: HTMLElement): MemoryUi {
  const doc = el.ownerDocument;
  const warnings = createWarningStrip(doc);
  const xmodeBtn = button(doc, 'fv-mem-xmode', 'x: time', 'Switch the x axis between wall time and event index');
  xmodeBtn.setAttribute('data-mode', 'time');
  const zoomIn = button(doc, 'fv-mem-zoom-in', '+', 'Zoom in');
  const zoomOut = button(doc, 'fv-mem-zoom-out', '−', 'Zoom out');
  const zoomReset = button(doc, 'fv-mem-zoom-reset', 'Reset', 'Show the whole timeline');
  const svgBtn = button(doc, 'fv-export-svg', 'SVG', 'Download the current view as SVG');
  const pngBtn = button(doc, 'fv-export-png', 'PNG', 'Download the current view as PNG');
  const summary = h(doc, 'span', { class: 'fv-mem-summary', role: 'status', 'aria-live': 'polite' });
  const bar = toolbar(
    doc,
    'Memory timeline tools',
    buttonGroup(doc, 'span', xmodeBtn),
    buttonGroup(doc, 'span', zoomIn, zoomOut, zoomReset),
    buttonGroup(doc, 'span', svgBtn, pngBtn),
    summary
  );
  const status = createStatusLine(doc, 'error');
  const message = h(doc, 'div', { class: 'fv-message', hidden: true });
  const note = h(doc, 'div', { class: 'fv-mem-note', hidden: true });
  const legend = h(doc, 'ul', { class: 'fv-mem-legend', 'aria-label': 'Categories' });
  const canvas = h(doc, 'canvas', { class: 'fv-mem-canvas', tabindex: 0, role: 'img', 'aria-label': 'Memory timeline' });
  const tooltip = h(doc, 'div', { class: 'fv-mem-tooltip', role: 'tooltip', hidden: true });
  const modeHint = h(doc, 'div', { class: 'fv-mem-hint' });
  const stage = h(doc, 'div', { class: 'fv-mem-stage' }, canvas, tooltip);
  const pinned = h(doc, 'div', { class: 'fv-mem-pinned', hidden: true, 'aria-live': 'polite' });
  const transcript = h(doc, 'details', { class: 'fv-transcript' });
  const cudaBox = h(doc, 'div', { class: 'fv-mem-cuda-box', hidden: true });
  el.replaceChildren(warnings.el, bar, status.el, message, note, legend, stage, modeHint, cudaBox, pinned, transcript);
  return {
    warnings,
    xmodeBtn,
    zoomIn,
    zoomOut,
    zoomReset,
    svgBtn,
    pngBtn,
    summary,
    status,
    message,
    note,
    legend,
    canvas,
    tooltip,
    modeHint,
    stage,
    pinned,
    transcript,
    cudaBox
  };
}
