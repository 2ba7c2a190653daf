/**
 * The broadcasting animation: how shapes align, pad, compare, stretch and combine, one
 * frame per step of the plan the kernel computed. Starts on the last frame (the whole
 * answer), steps with buttons or the arrow keys, plays at 0.25×–4× one step a second.
 * Pure DOM/SVG; imports nothing from Jupyter or anywidget.
 */
import type { BroadcastPlan } from '../../model/wire';
import { drawFrame } from './draw';
import { checksOf, dimLabel, exprText, frameState, tupleText, VERDICT_SYMBOL } from './layout';
import { h, s } from '../common/dom';
import { download, standaloneSvg, svgToPng } from '../common/export';
import { encodeGif, RgbaFrame } from './gif';

export type Theme = 'light' | 'dark';

export interface BroadcastViewOptions {
  /** The self-contained HTML page from the kernel; null where there is no kernel (a static page). */
  requestHtml: ((theme: Theme) => Promise<string>) | null;
  /** SVG text → RGBA pixels (default: an <img> drawn on a canvas); tests stub it. */
  rasterize?: (doc: Document, svgText: string, width: number, height: number) => Promise<RgbaFrame>;
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
/** GIF frames hold ~1 s each; the last one 3 s. */
export const GIF_DELAY_MS = 1000;
const GIF_MAX_WIDTH = 1000;
const EXPORT_PAD = 14; // standaloneSvg pads each side

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** Rasterise a standalone SVG to RGBA on a white canvas (the SVG → image path of export.ts). */
export function svgToRgba(doc: Document, svgText: string, width: number, height: number): Promise<RgbaFrame> {
  return new Promise((resolve, reject) => {
    const img = new (doc.defaultView as Window & typeof globalThis).Image();
    const url = URL.createObjectURL(new Blob([svgText], { type: 'image/svg+xml' }));
    img.onload = () => {
      try {
        const canvas = doc.createElement('canvas');
        canvas.width = Math.max(1, Math.round(width));
        canvas.height = Math.max(1, Math.round(height));
        const ctx = canvas.getContext('2d');
        if (!ctx) {
          throw new Error('no 2D canvas context');
        }
        ctx.fillStyle = '#ffffff';
        ctx.fillRect(0, 0, canvas.width, canvas.height);
        ctx.drawImage(img, 0, 0, canvas.width, canvas.height);
        const data = ctx.getImageData(0, 0, canvas.width, canvas.height);
        resolve({ data: data.data, width: canvas.width, height: canvas.height });
      } catch (err) {
        reject(err);
      } finally {
        URL.revokeObjectURL(url);
      }
    };
    img.onerror = () => {
      URL.revokeObjectURL(url);
      reject(new Error('could not rasterise the SVG'));
    };
    img.src = url;
  });
}

export function currentTheme(doc: Document): Theme {
  return doc.body?.dataset.jpThemeLight === 'false' ? 'dark' : 'light';
}

export function createBroadcastView(el: HTMLElement, opts: BroadcastViewOptions): BroadcastView {
  const doc = el.ownerDocument;
  const win = doc.defaultView;
  el.classList.add('fv-root', 'fv-broadcast');
  el.setAttribute('data-fv-state', 'loading');
  el.setAttribute('tabindex', '0');
  el.setAttribute('role', 'region');
  el.setAttribute('aria-label', 'Broadcasting, step by step (Left/Right: step, Space: play or pause)');

  // ---- chrome -----------------------------------------------------------------------------
  const btn = (cls: string, label: string, tip: string) => h(doc, 'button', { type: 'button', class: `fv-btn ${cls}`, title: tip, 'aria-label': tip }, label);
  const warningStrip = h(doc, 'div', { class: 'fv-warning', role: 'alert', hidden: true });
  const firstBtn = btn('fv-bc-first', '|◀', 'First step');
  const prevBtn = btn('fv-bc-prev', '◀', 'Previous step');
  const playBtn = btn('fv-bc-play', '▶ Play', 'Play the steps');
  playBtn.setAttribute('aria-pressed', 'false');
  const nextBtn = btn('fv-bc-next', '▶', 'Next step');
  const lastBtn = btn('fv-bc-last', '▶|', 'Last step');
  const counter = h(doc, 'span', { class: 'fv-bc-counter', 'aria-hidden': 'true' });
  const speed = h(doc, 'input', {
    type: 'range',
    class: 'fv-bc-speed',
    min: MIN_SPEED,
    max: MAX_SPEED,
    step: 0.25,
    value: 1,
    'aria-label': 'Playback speed (steps per second)'
  });
  const speedOut = h(doc, 'output', { class: 'fv-bc-speed-out' }, '1×');
  const svgBtn = btn('fv-export-svg', 'SVG', 'Download this step as SVG');
  const pngBtn = btn('fv-export-png', 'PNG', 'Download this step as PNG');
  const gifBtn = btn('fv-export-gif', 'GIF', 'Download every step as an animated GIF');
  const htmlBtn = btn('fv-export-html', 'HTML', 'Download the animation as an offline HTML page');
  htmlBtn.hidden = !opts.requestHtml;
  const toolbar = h(
    doc,
    'div',
    { class: 'fv-toolbar', role: 'toolbar', 'aria-label': 'Broadcast animation controls' },
    h(doc, 'span', { class: 'fv-btn-group' }, firstBtn, prevBtn, playBtn, nextBtn, lastBtn),
    counter,
    h(doc, 'label', { class: 'fv-bc-speed-label' }, 'speed ', speed, ' ', speedOut),
    h(doc, 'span', { class: 'fv-bc-spacer' }),
    h(doc, 'span', { class: 'fv-btn-group' }, svgBtn, pngBtn, gifBtn, htmlBtn)
  );
  const status = h(doc, 'div', { class: 'fv-status', role: 'status', hidden: true });
  const exprEl = h(doc, 'code', { class: 'fv-bc-title' });
  const source = h(doc, 'span', { class: 'fv-bc-source', hidden: true });
  const header = h(doc, 'div', { class: 'fv-bc-header', hidden: true }, exprEl, source);
  const message = h(doc, 'div', { class: 'fv-message', hidden: true });
  const captionTitle = h(doc, 'strong', { class: 'fv-bc-caption-title' });
  const captionText = h(doc, 'span', { class: 'fv-bc-caption-text' });
  const caption = h(doc, 'div', { class: 'fv-bc-caption', role: 'status', 'aria-live': 'polite' }, captionTitle, ' ', captionText);
  const svg = s(doc, 'svg', { class: 'fv-bc-canvas', role: 'img' }) as SVGSVGElement;
  const stage = h(doc, 'div', { class: 'fv-bc-stage' }, svg);
  const checksList = h(doc, 'ol', { class: 'fv-bc-checks', 'aria-label': 'dims checked so far, right to left' });
  const conflictBox = h(doc, 'div', { class: 'fv-bc-conflict-box', hidden: true });
  const panel = h(doc, 'div', { class: 'fv-bc-panel' }, checksList, conflictBox);
  const transcript = h(doc, 'details', { class: 'fv-transcript' });
  el.replaceChildren(warningStrip, toolbar, status, header, message, caption, stage, panel, transcript);

  // ---- state ------------------------------------------------------------------------------
  let plan: BroadcastPlan | null = null;
  let k = 0;
  let playing = false;
  let timer: ReturnType<typeof setTimeout> | null = null;
  let destroyed = false;
  let width = 0;
  let height = 0;

  const nSteps = () => plan?.steps?.length ?? 0;
  const lastIndex = () => Math.max(0, nSteps() - 1);
  const reducedMotion = () => !!win?.matchMedia?.('(prefers-reduced-motion: reduce)').matches;
  const speedValue = () => {
    const v = Number(speed.value);
    return Number.isFinite(v) && v > 0 ? Math.min(MAX_SPEED, Math.max(MIN_SPEED, v)) : 1;
  };
  const intervalMs = () => 1000 / speedValue();

  function showStatus(t: string | null, kind: 'error' | 'info' = 'error') {
    status.hidden = !t;
    status.textContent = t ?? '';
    status.setAttribute('data-kind', kind);
  }

  // ---- drawing ------------------------------------------------------------------------------
  function render() {
    if (!plan) {
      return;
    }
    const animate = playing && !reducedMotion();
    el.classList.toggle('fv-bc-animate', animate);
    el.style.setProperty('--fv-bc-tween', `${Math.round(Math.min(600, intervalMs() * 0.6))}ms`);
    const frame = drawFrame(doc, plan, k, { animate, heading: false });
    width = frame.width;
    height = frame.height;
    const pad = 8;
    svg.setAttribute('width', String(width + 2 * pad));
    svg.setAttribute('height', String(height + 2 * pad));
    svg.setAttribute('viewBox', `0 0 ${width + 2 * pad} ${height + 2 * pad}`);
    frame.g.setAttribute('transform', `translate(${pad},${pad})`);
    const st = frame.state;
    const steps = plan.steps ?? [];
    const step = st.step;
    svg.setAttribute('aria-label', step ? `${exprText(plan)}, step ${k + 1} of ${steps.length}: ${step.title}. ${step.text}` : exprText(plan));
    svg.replaceChildren(s(doc, 'title', {}, `${exprText(plan)}: broadcasting, step ${k + 1} of ${Math.max(1, steps.length)}`), frame.g);

    el.setAttribute('data-step', String(k));
    el.setAttribute('data-steps', String(steps.length));
    el.setAttribute('data-step-kind', step?.kind ?? 'none');
    captionTitle.textContent = step ? step.title : plan.ok ? 'result' : 'does not broadcast';
    captionText.textContent = step ? step.text : plan.message ?? '';
    counter.textContent = steps.length ? `step ${k + 1} of ${steps.length}` : '';
    firstBtn.disabled = k <= 0;
    prevBtn.disabled = k <= 0;
    nextBtn.disabled = k >= lastIndex();
    lastBtn.disabled = k >= lastIndex();
    playBtn.disabled = steps.length <= 1;
    gifBtn.disabled = steps.length < 1;

    // checked dims so far, as words
    const checks = checksOf(plan);
    const nd = plan.kind === 'matmul' ? checks.length : plan.ndim;
    checksList.replaceChildren(
      ...checks
        .filter(c => st.compared.has(c.dim))
        .map(c =>
          h(
            doc,
            'li',
            { class: `fv-bc-check fv-${c.verdict}`, 'data-dim': c.dim },
            h(doc, 'span', { class: 'fv-bc-sym', 'aria-hidden': 'true' }, VERDICT_SYMBOL[c.verdict]),
            ' ',
            h(doc, 'strong', {}, `${plan!.kind === 'matmul' ? 'batch ' : ''}${dimLabel(c.dim - nd)}`),
            ` ${c.verdict}: ${c.text}`
          )
        )
    );
    checksList.hidden = checksList.children.length === 0;

    // the conflict, its fixes and torch's own words
    if (st.conflict && !plan.ok) {
      const conflictStep = steps.find(x => x.kind === 'conflict');
      const why = plan.conflict?.text ?? conflictStep?.text ?? plan.message ?? 'the shapes do not broadcast';
      const fixes = plan.conflict?.fixes ?? [];
      conflictBox.replaceChildren(h(doc, 'div', { class: 'fv-bc-conflict', role: 'alert', 'data-dim': plan.conflict ? plan.conflict.dim : null }, why));
      conflictBox.append(
        fixes.length
          ? h(doc, 'div', { class: 'fv-bc-fixes' }, h(doc, 'div', { class: 'fv-bc-fixes-title' }, 'Fixes torch accepts:'), h(doc, 'ul', {}, ...fixes.map(f => h(doc, 'li', {}, h(doc, 'code', { class: 'fv-bc-fix' }, f)))))
          : '',
        plan.torch_message ? h(doc, 'div', { class: 'fv-bc-torch' }, h(doc, 'div', { class: 'fv-bc-torch-title' }, 'torch says:'), h(doc, 'pre', { class: 'fv-torch-msg' }, plan.torch_message)) : ''
      );
      conflictBox.hidden = false;
    } else {
      conflictBox.replaceChildren();
      conflictBox.hidden = true;
    }
  }

  function renderTranscript() {
    transcript.replaceChildren(h(doc, 'summary', {}, 'Text description'));
    if (!plan) {
      return;
    }
    const shapes = plan.operands.map(o => `${o.name} ${tupleText(o.shape)}`).join(', ');
    const verdict = plan.ok
      ? `${exprText(plan)} broadcasts: ${shapes} give ${plan.result_shape ? tupleText(plan.result_shape) : 'a result'}.`
      : `${exprText(plan)} fails: ${shapes}. ${plan.conflict?.text ?? ''}`;
    transcript.appendChild(h(doc, 'p', { class: 'fv-transcript-summary' }, verdict));
    if (plan.message) {
      transcript.appendChild(h(doc, 'p', {}, plan.message));
    }
    const ol = h(doc, 'ol', { class: 'fv-transcript-steps' });
    (plan.steps ?? []).forEach((st, i) => ol.appendChild(h(doc, 'li', { 'data-step': i, 'data-kind': st.kind }, h(doc, 'strong', {}, st.title), `: ${st.text}`)));
    transcript.appendChild(ol);
    if (plan.conflict?.fixes.length) {
      transcript.appendChild(h(doc, 'p', {}, `Fixes: ${plan.conflict.fixes.join('; ')}`));
    }
    if (plan.torch_message) {
      transcript.appendChild(h(doc, 'p', {}, `torch: ${plan.torch_message}`));
    }
  }

  // ---- stepping -----------------------------------------------------------------------------
  function go(next: number) {
    if (!plan) {
      return;
    }
    const n = Math.max(0, Math.min(lastIndex(), Math.floor(next)));
    if (n === k && el.getAttribute('data-step') === String(n)) {
      return;
    }
    k = n;
    render();
  }

  function clearTimer() {
    if (timer !== null) {
      clearTimeout(timer);
      timer = null;
    }
  }

  function setPlaying(on: boolean) {
    playing = on && !!plan && nSteps() > 1;
    playBtn.setAttribute('aria-pressed', String(playing));
    playBtn.textContent = playing ? '❙❙ Pause' : '▶ Play';
    playBtn.setAttribute('aria-label', playing ? 'Pause' : 'Play the steps');
    playBtn.title = playing ? 'Pause' : 'Play the steps';
    el.toggleAttribute('data-playing', playing);
    clearTimer();
    if (playing) {
      schedule();
    }
    // the class stays until the next draw, so the last frame's tween finishes
  }

  function schedule() {
    clearTimer();
    timer = setTimeout(tick, intervalMs());
  }

  function tick() {
    timer = null;
    if (!playing || destroyed) {
      return;
    }
    go(k + 1);
    if (k >= lastIndex()) {
      setPlaying(false);
    } else {
      schedule();
    }
  }

  function togglePlay() {
    if (playing) {
      setPlaying(false);
      return;
    }
    if (k >= lastIndex()) {
      k = 0; // from the start again
    }
    setPlaying(true);
    render();
  }

  /** A manual step pauses playback. */
  function manual(next: number) {
    if (playing) {
      setPlaying(false);
    }
    go(next);
  }

  firstBtn.addEventListener('click', () => manual(0));
  prevBtn.addEventListener('click', () => manual(k - 1));
  nextBtn.addEventListener('click', () => manual(k + 1));
  lastBtn.addEventListener('click', () => manual(lastIndex()));
  playBtn.addEventListener('click', () => togglePlay());
  speed.addEventListener('input', () => {
    speedOut.textContent = `${speedValue()}×`;
    if (playing) {
      schedule();
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
      manual(k + 1);
    } else if (e.key === 'ArrowLeft') {
      e.preventDefault();
      manual(k - 1);
    } else if (e.key === 'Home') {
      e.preventDefault();
      manual(0);
    } else if (e.key === 'End') {
      e.preventDefault();
      manual(lastIndex());
    } else if ((e.key === ' ' || e.key === 'Spacebar') && t === el) {
      e.preventDefault();
      togglePlay();
    }
  };
  el.addEventListener('keydown', onKey);

  // ---- export ------------------------------------------------------------------------------------
  /** A standalone SVG of frame ``i``, drawn fresh (no tweening) next to the live one. */
  function frameSvg(i: number): { text: string; w: number; h: number } {
    const p = plan!;
    const frame = drawFrame(doc, p, i, { animate: false, heading: true });
    frame.g.setAttribute('class', `${frame.g.getAttribute('class')} fv-bc-export`);
    svg.appendChild(frame.g);
    try {
      const st = frameState(p, i);
      const t = st.step ? `${exprText(p)}: step ${i + 1} of ${nSteps()}, ${st.step.title}` : exprText(p);
      return { text: standaloneSvg(frame.g, el, frame.width, frame.height, `forgeviz broadcasting: ${t}`), w: frame.width + 2 * EXPORT_PAD, h: frame.height + 2 * EXPORT_PAD };
    } finally {
      frame.g.remove();
    }
  }

  function exportSVG(): string {
    if (!plan) {
      const g = s(doc, 'g', { class: 'fv-bc-export' }) as SVGGElement;
      g.appendChild(s(doc, 'text', { x: 0, y: 14, class: 'fv-bc-note' }, 'no broadcast to show yet'));
      svg.appendChild(g);
      try {
        return standaloneSvg(g, el, 320, 20, 'forgeviz broadcasting');
      } finally {
        g.remove();
      }
    }
    return frameSvg(k).text;
  }

  svgBtn.addEventListener('click', () => {
    try {
      download(doc, `forgeviz-broadcast-step${k}.svg`, new Blob([exportSVG()], { type: 'image/svg+xml' }));
    } catch (err) {
      showStatus(`SVG export failed: ${errorMessage(err)}`);
    }
  });
  pngBtn.addEventListener('click', async () => {
    const step = k;
    try {
      const f = plan ? frameSvg(step) : { text: exportSVG(), w: 348, h: 48 };
      download(doc, `forgeviz-broadcast-step${step}.png`, await svgToPng(doc, f.text, f.w, f.h));
    } catch (err) {
      showStatus(`PNG export failed: ${errorMessage(err)}`);
    }
  });
  gifBtn.addEventListener('click', async () => {
    if (!plan) {
      return;
    }
    const p = plan;
    gifBtn.disabled = true;
    el.setAttribute('data-fv-exporting', 'gif');
    showStatus(`Encoding ${Math.max(1, nSteps())} frames as a GIF…`, 'info');
    try {
      // serialise every frame first (synchronously, with the live styles), then rasterise
      const texts = Array.from({ length: Math.max(1, nSteps()) }, (_, i) => frameSvg(i));
      const rasterize = opts.rasterize ?? svgToRgba;
      const frames: RgbaFrame[] = [];
      for (const f of texts) {
        const scale = Math.min(1, GIF_MAX_WIDTH / f.w);
        frames.push(await rasterize(doc, f.text, Math.round(f.w * scale), Math.round(f.h * scale)));
        if (destroyed || plan !== p) {
          return;
        }
      }
      const bytes = encodeGif(frames, { delayMs: GIF_DELAY_MS, lastDelayMs: 3 * GIF_DELAY_MS });
      download(doc, 'forgeviz-broadcast.gif', new Blob([bytes as BlobPart], { type: 'image/gif' }));
      showStatus(null);
    } catch (err) {
      showStatus(`GIF export failed: ${errorMessage(err)}`);
    } finally {
      el.removeAttribute('data-fv-exporting');
      if (!destroyed) {
        gifBtn.disabled = nSteps() < 1;
      }
    }
  });
  htmlBtn.addEventListener('click', async () => {
    if (!opts.requestHtml) {
      return;
    }
    htmlBtn.disabled = true;
    el.setAttribute('data-fv-exporting', 'html');
    showStatus('Asking the kernel for the HTML page…', 'info');
    try {
      const html = await opts.requestHtml(currentTheme(doc));
      if (destroyed) {
        return;
      }
      download(doc, 'forgeviz-broadcast.html', new Blob([html], { type: 'text/html' }));
      showStatus(null);
    } catch (err) {
      if (!destroyed) {
        showStatus(`HTML export failed: ${errorMessage(err)}`);
      }
    } finally {
      el.removeAttribute('data-fv-exporting');
      htmlBtn.disabled = false;
    }
  });

  // ---- public API ----------------------------------------------------------------------------------
  function setPlan(p: BroadcastPlan) {
    setPlaying(false);
    try {
      plan = p;
      k = lastIndex(); // the whole answer first: good for static notebooks
      header.hidden = false;
      exprEl.textContent = exprText(p);
      source.hidden = !p.source;
      source.textContent = p.source ?? '';
      message.hidden = !p.message;
      message.textContent = p.message ?? '';
      el.setAttribute('data-kind', p.kind);
      el.setAttribute('data-ok', String(p.ok));
      renderTranscript();
      render();
      showStatus(null);
      el.setAttribute('data-fv-state', 'ready');
    } catch (err) {
      el.setAttribute('data-fv-state', 'error');
      showStatus(`Could not draw the broadcast: ${errorMessage(err)}`);
    }
  }

  render();
  renderTranscript();
  counter.textContent = '';
  for (const b of [firstBtn, prevBtn, playBtn, nextBtn, lastBtn, gifBtn]) {
    b.disabled = true;
  }

  return {
    setPlan,
    exportSVG,
    setStep(i: number) {
      manual(i);
    },
    step: () => k,
    setWarnings(warnings: string[]) {
      const list = (warnings ?? []).filter(w => typeof w === 'string' && w.length);
      warningStrip.hidden = list.length === 0;
      warningStrip.replaceChildren(...list.map(w => h(doc, 'div', { class: 'fv-warning-item' }, h(doc, 'span', { class: 'fv-warning-icon', 'aria-hidden': 'true' }, '⚠'), ` ${w}`)));
    },
    destroy() {
      destroyed = true;
      setPlaying(false);
      el.removeEventListener('keydown', onKey);
      el.replaceChildren();
      el.classList.remove('fv-root', 'fv-broadcast', 'fv-bc-animate');
      for (const a of ['data-fv-state', 'data-step', 'data-steps', 'data-step-kind', 'data-kind', 'data-ok', 'tabindex', 'role', 'aria-label', 'data-playing', 'data-fv-exporting']) {
        el.removeAttribute(a);
      }
      el.style.removeProperty('--fv-bc-tween');
    }
  };
}
