/** The memory view's DOM: warning strip, toolbar, status, notes, legend, canvas stage, panels. */
import { h } from '../common/dom';

export interface MemoryUi {
  warningStrip: HTMLDivElement;
  xmodeBtn: HTMLButtonElement;
  zoomIn: HTMLButtonElement;
  zoomOut: HTMLButtonElement;
  zoomReset: HTMLButtonElement;
  svgBtn: HTMLButtonElement;
  pngBtn: HTMLButtonElement;
  /** the toolbar's one-line summary (peak, live, events) */
  summary: HTMLSpanElement;
  status: HTMLDivElement;
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
  const warningStrip = h(doc, 'div', { class: 'fv-warning', role: 'alert', hidden: true });
  const btn = (cls: string, label: string, title: string) => h(doc, 'button', { type: 'button', class: `fv-btn ${cls}`, title, 'aria-label': title }, label);
  const xmodeBtn = btn('fv-mem-xmode', 'x: time', 'Switch the x axis between wall time and event index');
  xmodeBtn.setAttribute('data-mode', 'time');
  const zoomIn = btn('fv-mem-zoom-in', '+', 'Zoom in');
  const zoomOut = btn('fv-mem-zoom-out', '−', 'Zoom out');
  const zoomReset = btn('fv-mem-zoom-reset', 'Reset', 'Show the whole timeline');
  const svgBtn = btn('fv-export-svg', 'SVG', 'Download the current view as SVG');
  const pngBtn = btn('fv-export-png', 'PNG', 'Download the current view as PNG');
  const summary = h(doc, 'span', { class: 'fv-mem-summary', role: 'status', 'aria-live': 'polite' });
  const toolbar = h(
    doc,
    'div',
    { class: 'fv-toolbar', role: 'toolbar', 'aria-label': 'Memory timeline tools' },
    h(doc, 'span', { class: 'fv-btn-group' }, xmodeBtn),
    h(doc, 'span', { class: 'fv-btn-group' }, zoomIn, zoomOut, zoomReset),
    h(doc, 'span', { class: 'fv-btn-group' }, svgBtn, pngBtn),
    summary
  );
  const status = h(doc, 'div', { class: 'fv-status', role: 'status', hidden: true });
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
  el.replaceChildren(warningStrip, toolbar, status, message, note, legend, stage, modeHint, cudaBox, pinned, transcript);
  return {
    warningStrip,
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

/** Show a line in the status strip (``null`` hides it). */
export function showStatus(ui: MemoryUi, text: string | null, kind: 'info' | 'error' = 'error'): void {
  ui.status.hidden = !text;
  ui.status.textContent = text ?? '';
  ui.status.setAttribute('data-kind', kind);
}

export function setWarnings(ui: MemoryUi, warnings: string[]): void {
  const doc = ui.warningStrip.ownerDocument;
  const list = (warnings ?? []).filter(w => typeof w === 'string' && w.length);
  ui.warningStrip.hidden = list.length === 0;
  ui.warningStrip.replaceChildren(...list.map(w => h(doc, 'div', { class: 'fv-warning-item' }, h(doc, 'span', { class: 'fv-warning-icon', 'aria-hidden': 'true' }, '⚠'), ` ${w}`)));
}

export function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
