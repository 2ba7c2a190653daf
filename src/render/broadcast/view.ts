/**
 * The broadcasting animation: how shapes align, pad, compare, stretch and combine, one
 * frame per step of the plan the kernel computed. Starts on the last frame (the whole
 * answer), steps with buttons or the arrow keys, plays at 0.25×–4× one step a second.
 * Pure DOM/SVG; imports nothing from Jupyter or anywidget.
 *
 * The parts: draw.ts (one frame as SVG; frame-layout.ts, draw-rows.ts, draw-values.ts),
 * panel.ts (checks, conflict, transcript), player.ts (stepping and playing), export.ts
 * (SVG, PNG, GIF, HTML); the chrome comes from common/chrome.ts.
 */
import type { BroadcastPlan } from '../../model/wire';
import { button, buttonGroup, createStatusLine, createWarningStrip, errorMessage, exportButtons, StatusLine, toolbar } from '../common/chrome';
import { h, s } from '../common/dom';
import { drawFrame } from './draw';
import { bindGifExport, bindHtmlExport, exportPng, exportSvg, ExportHost, Rasterize, Theme } from './export';
import { exprText } from './layout';
import { renderChecks, renderConflict, renderTranscript } from './panel';
import { createPlayer } from './player';
import { BroadcastState, lastIndex } from './state';

export { svgToRgba } from '../common/export';
export { currentTheme, GIF_DELAY_MS } from './export';
export type { Theme } from './export';

export interface BroadcastViewOptions {
  /** The self-contained HTML page from the kernel; null where there is no kernel (a static page). */
  requestHtml: ((theme: Theme) => Promise<string>) | null;
  /** SVG text → RGBA pixels (default: an <img> drawn on a canvas); tests stub it. */
  rasterize?: Rasterize;
}

export interface BroadcastView {
  setPlan(plan: BroadcastPlan): void;
  setWarnings(warnings: string[]): void;
  /** Show frame ``k`` (clamped); stops playing. */
  setStep(k: number): void;
  step(): number;
  exportSVG(): string;
  destroy(): void;
}

export const MIN_SPEED = 0.25;
export const MAX_SPEED = 4;

/** The player's controls: first, previous, play, next, last, the step counter and the speed. */
function createControls(doc: Document) {
  const playBtn = button(doc, 'fv-bc-play', '▶ Play', 'Play the steps');
  playBtn.setAttribute('aria-pressed', 'false');
  return {
    firstBtn: button(doc, 'fv-bc-first', '|◀', 'First step'),
    prevBtn: button(doc, 'fv-bc-prev', '◀', 'Previous step'),
    playBtn,
    nextBtn: button(doc, 'fv-bc-next', '▶', 'Next step'),
    lastBtn: button(doc, 'fv-bc-last', '▶|', 'Last step'),
    counter: h(doc, 'span', { class: 'fv-bc-counter', 'aria-hidden': 'true' }),
    speed: h(doc, 'input', {
      type: 'range',
      class: 'fv-bc-speed',
      min: MIN_SPEED,
      max: MAX_SPEED,
      step: 0.25,
      value: 1,
      'aria-label': 'Playback speed (steps per second)'
    }),
    speedOut: h(doc, 'output', { class: 'fv-bc-speed-out' }, '1×')
  };
}

/** Everything under the toolbar: header, message, caption, the frame's SVG, the checks panel, the transcript. */
function createBody(doc: Document) {
  const exprEl = h(doc, 'code', { class: 'fv-bc-title' });
  const source = h(doc, 'span', { class: 'fv-bc-source', hidden: true });
  const captionTitle = h(doc, 'strong', { class: 'fv-bc-caption-title' });
  const captionText = h(doc, 'span', { class: 'fv-bc-caption-text' });
  const svg = s(doc, 'svg', { class: 'fv-bc-canvas', role: 'img' }) as SVGSVGElement;
  const checksList = h(doc, 'ol', { class: 'fv-bc-checks', 'aria-label': 'dims checked so far, right to left' });
  const conflictBox = h(doc, 'div', { class: 'fv-bc-conflict-box', hidden: true });
  return {
    exprEl,
    source,
    header: h(doc, 'div', { class: 'fv-bc-header', hidden: true }, exprEl, source),
    message: h(doc, 'div', { class: 'fv-message', hidden: true }),
    captionTitle,
    captionText,
    caption: h(doc, 'div', { class: 'fv-bc-caption', role: 'status', 'aria-live': 'polite' }, captionTitle, ' ', captionText),
    svg,
    stage: h(doc, 'div', { class: 'fv-bc-stage' }, svg),
    checksList,
    conflictBox,
    panel: h(doc, 'div', { class: 'fv-bc-panel' }, checksList, conflictBox),
    transcript: h(doc, 'details', { class: 'fv-transcript' })
  };
}

const ROOT_ATTRS = ['data-fv-state', 'data-step', 'data-steps', 'data-step-kind', 'data-kind', 'data-ok', 'tabindex', 'role', 'aria-label', 'data-playing', 'data-fv-exporting'];

export function createBroadcastView(el: HTMLElement, opts: BroadcastViewOptions): BroadcastView {
  const doc = el.ownerDocument;
  const win = doc.defaultView;
  el.classList.add('fv-root', 'fv-broadcast');
  el.setAttribute('data-fv-state', 'loading');
  el.setAttribute('tabindex', '0');
  el.setAttribute('role', 'region');
  el.setAttribute('aria-label', 'Broadcasting, step by step (Left/Right: step, Space: play or pause)');

  const st: BroadcastState = { plan: null, k: 0, playing: false, destroyed: false };

  // ---- chrome -----------------------------------------------------------------------------
  const warnings = createWarningStrip(doc);
  const status: StatusLine = createStatusLine(doc, 'error');
  const c = createControls(doc);
  const b = createBody(doc);
  const host: ExportHost = { doc, el, svg: b.svg, st };
  const exported = exportButtons(doc, status, {
    what: 'this step',
    fileName: () => `forgeviz-broadcast-step${st.k}`,
    svg: () => exportSvg(host),
    png: () => exportPng(host)
  });
  const gifBtn = button(doc, 'fv-export-gif', 'GIF', 'Download every step as an animated GIF');
  const htmlBtn = button(doc, 'fv-export-html', 'HTML', 'Download the animation as an offline HTML page');
  htmlBtn.hidden = !opts.requestHtml;
  const tools = toolbar(
    doc,
    'Broadcast animation controls',
    buttonGroup(doc, 'span', c.firstBtn, c.prevBtn, c.playBtn, c.nextBtn, c.lastBtn),
    c.counter,
    h(doc, 'label', { class: 'fv-bc-speed-label' }, 'speed ', c.speed, ' ', c.speedOut),
    h(doc, 'span', { class: 'fv-bc-spacer' }),
    buttonGroup(doc, 'span', exported.svg, exported.png, gifBtn, htmlBtn)
  );
  el.replaceChildren(warnings.el, tools, status.el, b.header, b.message, b.caption, b.stage, b.panel, b.transcript);

  const reducedMotion = () => !!win?.matchMedia?.('(prefers-reduced-motion: reduce)').matches;
  const speedValue = () => {
    const v = Number(c.speed.value);
    return Number.isFinite(v) && v > 0 ? Math.min(MAX_SPEED, Math.max(MIN_SPEED, v)) : 1;
  };
  const intervalMs = () => 1000 / speedValue();

  // ---- drawing ------------------------------------------------------------------------------
  /** The live SVG of frame ``st.k``: sized to the frame, with a label and a title. */
  function drawLive(plan: BroadcastPlan) {
    const animate = st.playing && !reducedMotion();
    el.classList.toggle('fv-bc-animate', animate);
    el.style.setProperty('--fv-bc-tween', `${Math.round(Math.min(600, intervalMs() * 0.6))}ms`);
    const frame = drawFrame(doc, plan, st.k, { animate, heading: false });
    const pad = 8;
    b.svg.setAttribute('width', String(frame.width + 2 * pad));
    b.svg.setAttribute('height', String(frame.height + 2 * pad));
    b.svg.setAttribute('viewBox', `0 0 ${frame.width + 2 * pad} ${frame.height + 2 * pad}`);
    frame.g.setAttribute('transform', `translate(${pad},${pad})`);
    const steps = plan.steps ?? [];
    const step = frame.state.step;
    b.svg.setAttribute('aria-label', step ? `${exprText(plan)}, step ${st.k + 1} of ${steps.length}: ${step.title}. ${step.text}` : exprText(plan));
    b.svg.replaceChildren(s(doc, 'title', {}, `${exprText(plan)}: broadcasting, step ${st.k + 1} of ${Math.max(1, steps.length)}`), frame.g);
    return frame.state;
  }

  function render() {
    const plan = st.plan;
    if (!plan) {
      return;
    }
    const fs = drawLive(plan);
    const steps = plan.steps ?? [];
    const step = fs.step;
    const k = st.k;
    el.setAttribute('data-step', String(k));
    el.setAttribute('data-steps', String(steps.length));
    el.setAttribute('data-step-kind', step?.kind ?? 'none');
    b.captionTitle.textContent = step ? step.title : plan.ok ? 'result' : 'does not broadcast';
    b.captionText.textContent = step ? step.text : plan.message ?? '';
    c.counter.textContent = steps.length ? `step ${k + 1} of ${steps.length}` : '';
    c.firstBtn.disabled = k <= 0;
    c.prevBtn.disabled = k <= 0;
    c.nextBtn.disabled = k >= lastIndex(st);
    c.lastBtn.disabled = k >= lastIndex(st);
    c.playBtn.disabled = steps.length <= 1;
    gifBtn.disabled = steps.length < 1;
    renderChecks(doc, b.checksList, plan, fs);
    renderConflict(doc, b.conflictBox, plan, fs);
  }

  // ---- stepping -----------------------------------------------------------------------------
  const player = createPlayer(st, { el, playBtn: c.playBtn, intervalMs, render });
  const { manual } = player;
  c.firstBtn.addEventListener('click', () => manual(0));
  c.prevBtn.addEventListener('click', () => manual(st.k - 1));
  c.nextBtn.addEventListener('click', () => manual(st.k + 1));
  c.lastBtn.addEventListener('click', () => manual(lastIndex(st)));
  c.playBtn.addEventListener('click', () => player.togglePlay());
  c.speed.addEventListener('input', () => {
    c.speedOut.textContent = `${speedValue()}×`;
    if (st.playing) {
      player.schedule();
    }
  });

  const onKey = (e: KeyboardEvent) => {
    const t = e.target as HTMLElement | null;
    const tag = t?.tagName?.toLowerCase();
    if (tag === 'input' || tag === 'textarea' || tag === 'select' || e.altKey || e.ctrlKey || e.metaKey) {
      return;
    }
    if (e.key === 'ArrowRight') {
      e.preventDefault();
      manual(st.k + 1);
    } else if (e.key === 'ArrowLeft') {
      e.preventDefault();
      manual(st.k - 1);
    } else if (e.key === 'Home') {
      e.preventDefault();
      manual(0);
    } else if (e.key === 'End') {
      e.preventDefault();
      manual(lastIndex(st));
    } else if ((e.key === ' ' || e.key === 'Spacebar') && t === el) {
      e.preventDefault();
      player.togglePlay();
    }
  };
  el.addEventListener('keydown', onKey);

  // ---- export ------------------------------------------------------------------------------------
  bindGifExport(host, gifBtn, status, opts.rasterize);
  bindHtmlExport(host, htmlBtn, status, opts.requestHtml);

  // ---- public API ----------------------------------------------------------------------------------
  function setPlan(p: BroadcastPlan) {
    player.setPlaying(false);
    try {
      st.plan = p;
      st.k = lastIndex(st); // the whole answer first: good for static notebooks
      b.header.hidden = false;
      b.exprEl.textContent = exprText(p);
      b.source.hidden = !p.source;
      b.source.textContent = p.source ?? '';
      b.message.hidden = !p.message;
      b.message.textContent = p.message ?? '';
      el.setAttribute('data-kind', p.kind);
      el.setAttribute('data-ok', String(p.ok));
      renderTranscript(doc, b.transcript, st.plan);
      render();
      status.show(null);
      el.setAttribute('data-fv-state', 'ready');
    } catch (err) {
      el.setAttribute('data-fv-state', 'error');
      status.show(`Could not draw the broadcast: ${errorMessage(err)}`);
    }
  }

  render();
  renderTranscript(doc, b.transcript, st.plan);
  c.counter.textContent = '';
  for (const btn of [c.firstBtn, c.prevBtn, c.playBtn, c.nextBtn, c.lastBtn, gifBtn]) {
    btn.disabled = true;
  }

  return {
    setPlan,
    exportSVG: () => exportSvg(host),
    setStep(i: number) {
      manual(i);
    },
    step: () => st.k,
    setWarnings: warnings.set,
    destroy() {
      st.destroyed = true;
      player.setPlaying(false);
      el.removeEventListener('keydown', onKey);
      el.replaceChildren();
      el.classList.remove('fv-root', 'fv-broadcast', 'fv-bc-animate');
      for (const a of ROOT_ATTRS) {
        el.removeAttribute(a);
      }
      el.style.removeProperty('--fv-bc-tween');
    }
  };
}
