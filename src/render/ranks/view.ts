/**
 * The ranks view: per-module gradient norms per rank per step as heatmaps (one canvas per panel,
 * painted from one pixel a cell and scaled: cost follows cells, never one DOM node a cell), a
 * "Spread across ranks" mode (max/min per module and step), a click's details (every rank's norm
 * there), and peak memory per rank as bars. Pure DOM/canvas; imports nothing from Jupyter.
 *
 * Parts: data.ts (decode, spread, number words), colour.ts, panels.ts (colour keys, legend),
 * geom.ts, export.ts (the SVG, from the same keys); the chrome comes from common/chrome.ts.
 *
 * Hooks for tests: ``.fv-root[data-fv-state="ready"][data-fv-mode="ranks"|"spread"]``; each
 * ``canvas.fv-ranks-canvas[data-fv-rank]`` (a rank, or "spread") with ``data-fv-cell-w``/``-h``;
 * ``.fv-ranks-detail`` with ``data-fv-rank``, ``data-fv-step``, ``data-fv-module``, ``data-fv-norm``
 * (the full float) once a cell is clicked.
 */
import type { RanksGrid } from '../../model/wire';
import { button, buttonGroup, errorMessage, exportButtons, toolbar, viewRoot } from '../common/chrome';
import { h } from '../common/dom';
import { cssVar } from '../common/export';
import { bytesShort } from '../common/format';
import { colourOf, hex, INF, LEVELS, NAN } from './colour';
import { at, decodeGrid, formatNorm, stepLabel, spreadOf, type RanksData, type Spread } from './data';
import { ranksSvg, svgSize } from './export';
import { cellAt, geometryOf, type Geometry } from './geom';
import { legendOf, panelsOf, type Mode, type Panel } from './panels';

export { decodeGrid, spreadOf } from './data';
export { panelsOf } from './panels';

export interface RanksView {
  setGrid(grid: RanksGrid): void;
  setWarnings(warnings: string[]): void;
  setMode(mode: Mode): void;
  /** "By rank" draws only the rank at this index of ``grid.ranks``; -1: every rank. */
  showRank(r: number): void;
  /** Pin the details of (rank index, module index, step index). */
  select(r: number, m: number, s: number): void;
  exportSVG(): string;
  destroy(): void;
}

/** Paint ``p`` onto ``canvas``: one pixel a cell on a scratch canvas, scaled up unsmoothed; then a stroke across NaN/inf cells big enough to carry one. */
export function paintPanel(canvas: HTMLCanvasElement, d: RanksData, g: Geometry, p: Panel): boolean {
  canvas.width = Math.max(1, g.width);
  canvas.height = Math.max(1, g.height);
  const ctx = canvas.getContext('2d');
  if (!ctx || d.nSteps === 0 || d.nModules === 0) {
    return false; // no canvas here (a headless DOM): the export draws from the keys instead
  }
  const scratch = canvas.ownerDocument.createElement('canvas');
  scratch.width = d.nSteps;
  scratch.height = d.nModules;
  const sctx = scratch.getContext('2d') as CanvasRenderingContext2D;
  const img = sctx.createImageData(d.nSteps, d.nModules);
  const px = img.data;
  const colours = Array.from({ length: LEVELS + 3 }, (_, k) => colourOf(k, p.ramp));
  for (let j = 0; j < p.keys.length; j++) {
    const key = p.keys[j];
    if (key < 0) continue;
    const c = colours[key];
    const o = j * 4;
    px[o] = c[0];
    px[o + 1] = c[1];
    px[o + 2] = c[2];
    px[o + 3] = 255;
  }
  sctx.putImageData(img, 0, 0);
  ctx.imageSmoothingEnabled = false;
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  ctx.drawImage(scratch, 0, 0, g.width, g.height);
  if (g.cellW >= 4 && g.cellH >= 4) {
    ctx.strokeStyle = '#ffffff';
    ctx.lineWidth = 1;
    ctx.beginPath();
    for (let j = 0; j < p.keys.length; j++) {
      if (p.keys[j] === NAN || (p.keys[j] === INF && p.rank >= 0)) {
        const x = (j % d.nSteps) * g.cellW;
        const y = Math.floor(j / d.nSteps) * g.cellH;
        ctx.moveTo(x + 1, y + g.cellH - 1);
        ctx.lineTo(x + g.cellW - 1, y + 1);
      }
    }
    ctx.stroke();
  }
  return true;
}

export function createRanksView(el: HTMLElement): RanksView {
  const doc = el.ownerDocument;
  const { warnings, status } = viewRoot(el, 'fv-ranks', 'error');
  el.setAttribute('data-fv-mode', 'ranks');

  const ranksBtn = button(doc, 'fv-ranks-mode-ranks', 'By rank', 'Gradient norms, one panel per rank');
  const spreadBtn = button(doc, 'fv-ranks-mode-spread', 'Spread across ranks', 'max/min of the ranks’ norms per module and step: a rank that diverges stands out');
  const exported = exportButtons(doc, status, {
    what: 'the ranks view',
    fileName: 'forgeviz-ranks',
    svg: () => exportSVG(),
    png: () => {
      const text = exportSVG();
      const { w, h: hh } = svgSize(text);
      return { text, w, h: hh };
    }
  });
  const readout = h(doc, 'div', { class: 'fv-readout fv-ranks-readout', role: 'status', 'aria-live': 'polite' });
  // which ranks "By rank" draws: all (small multiples) or one
  const rankSelect = h(doc, 'select', { class: 'fv-ranks-select', 'aria-label': 'Ranks shown', title: 'Ranks shown' });
  const bar = toolbar(doc, 'Ranks view tools', buttonGroup(doc, 'div', ranksBtn, spreadBtn), rankSelect, buttonGroup(doc, 'div', exported.svg, exported.png), readout);
  const heading = h(doc, 'div', { class: 'fv-ranks-title', hidden: true });
  const message = h(doc, 'div', { class: 'fv-message', hidden: true });
  const legendEl = h(doc, 'div', { class: 'fv-ranks-legend' });
  const panelsEl = h(doc, 'div', { class: 'fv-ranks-panels' });
  const detail = h(doc, 'div', { class: 'fv-ranks-detail', hidden: true, 'aria-live': 'polite' });
  const peaksEl = h(doc, 'div', { class: 'fv-ranks-peaks' });
  const transcript = h(doc, 'details', { class: 'fv-transcript' });
  el.replaceChildren(warnings.el, bar, status.el, heading, message, legendEl, panelsEl, detail, peaksEl, transcript);

  let data: RanksData | null = null;
  let spread: Spread | null = null;
  let mode: Mode = 'ranks';
  let geom: Geometry | null = null;
  let panels: Panel[] = [];
  let pinned: { r: number; m: number; s: number } | null = null;
  /** The rank index "By rank" shows alone; -1: every rank. */
  let only = -1;

  const name = (m: number) => data!.grid.modules[m] || '(root)';

  /** One line on a cell: "rank 1 · step 3 · fc1 · ‖∇‖ 0.123457" (the spread: its ratio). */
  function describe(panel: Panel, m: number, s: number): string {
    const d = data!;
    const where = `step ${stepLabel(d.grid, s)} · ${name(m)}`;
    if (panel.rank < 0) {
      const j = m * d.nSteps + s;
      return `${where} · max/min across ranks ${Number.isNaN(spread!.ratio[j]) ? 'n/a' : `${formatNorm(spread!.ratio[j])}×`}`;
    }
    const i = at(d, panel.rank, m, s);
    const v = d.missing && d.missing[i] ? 'no record' : formatNorm(d.values[i]);
    return `rank ${d.grid.ranks[panel.rank]} · ${where} · ‖∇‖ ${v}`;
  }

  function showDetail(r: number, m: number, s: number) {
    const d = data!;
    pinned = { r, m, s };
    const i = at(d, r, m, s);
    const given = !(d.missing && d.missing[i]);
    detail.hidden = false;
    detail.setAttribute('data-fv-rank', String(d.grid.ranks[r]));
    detail.setAttribute('data-fv-step', String(d.grid.steps[s]));
    detail.setAttribute('data-fv-module', d.grid.modules[m]);
    detail.setAttribute('data-fv-norm', given ? String(d.values[i]) : '');
    const rows = d.grid.ranks.map((rank, k) => {
      const j = at(d, k, m, s);
      const v = d.missing && d.missing[j] ? 'no record' : formatNorm(d.values[j]);
      return h(doc, 'tr', { 'data-fv-rank': rank, class: k === r ? 'fv-ranks-here' : null }, h(doc, 'th', { scope: 'row' }, `rank ${rank}`), h(doc, 'td', { class: 'fv-ranks-norm' }, v));
    });
    const merged = d.grid.merged > 1 ? ` (steps ${stepLabel(d.grid, s)}: the largest)` : '';
    detail.replaceChildren(
      h(doc, 'div', { class: 'fv-ranks-detail-head' }, `rank ${d.grid.ranks[r]} · step ${d.grid.steps[s]} · ${name(m)} · ‖∇‖ `, h(doc, 'b', { class: 'fv-ranks-value' }, given ? formatNorm(d.values[i]) : 'no record'), merged),
      h(doc, 'table', { class: 'fv-ranks-table', 'aria-label': `every rank's norm of ${name(m)} at step ${d.grid.steps[s]}` }, h(doc, 'tbody', {}, ...rows))
    );
  }

  function renderPanels() {
    const d = data!;
    const available = el.clientWidth || 900;
    geom = geometryOf(d, available);
    const g = geom;
    panels = panelsOf(d, mode, spread).filter(p => mode === 'spread' || only < 0 || p.rank === only);
    const legend = legendOf(d, mode, spread, panels, formatNorm);
    const gradient = `linear-gradient(to right, ${legend.ramp.map(c => hex(c)).join(', ')})`;
    legendEl.replaceChildren(
      h(doc, 'span', { class: 'fv-ranks-legend-end' }, legend.low),
      h(doc, 'span', { class: 'fv-ranks-ramp', style: `background: ${gradient}`, 'aria-hidden': 'true' }),
      h(doc, 'span', { class: 'fv-ranks-legend-end' }, legend.high),
      h(doc, 'span', { class: 'fv-ranks-legend-caption' }, legend.caption),
      ...legend.classes.map(c =>
        h(doc, 'span', { class: 'fv-ranks-class', 'data-fv-class': c.key },
          h(doc, 'span', { class: `fv-ranks-swatch${c.hatch ? ' fv-ranks-hatch' : ''}`, style: c.colour ? `background-color: ${c.colour}` : null, 'aria-hidden': 'true' }),
          c.label)
      )
    );
    panelsEl.replaceChildren(
      ...panels.map(p => {
        const canvas = h(doc, 'canvas', {
          class: 'fv-ranks-canvas',
          tabindex: 0,
          role: 'img',
          'aria-label': `${p.label}: ${d.nModules} modules × ${d.nSteps} steps; click or use the arrow keys for a cell's norms`,
          'data-fv-rank': p.rank < 0 ? 'spread' : d.grid.ranks[p.rank],
          'data-fv-cell-w': g.cellW,
          'data-fv-cell-h': g.cellH,
          style: `width: ${g.width}px; height: ${g.height}px`
        });
        paintPanel(canvas, d, g, p);
        const names = g.labels
          ? h(doc, 'div', { class: 'fv-ranks-names', style: `width: ${g.gutter}px` }, ...d.grid.modules.map((_, m) => h(doc, 'div', { style: `height: ${g.cellH}px; line-height: ${g.cellH}px` }, name(m))))
          : null;
        const pick = (ev: MouseEvent) => cellAt(g, d, ev.offsetX, ev.offsetY);
        canvas.addEventListener('mousemove', ev => {
          const c = pick(ev);
          readout.textContent = c ? describe(p, c.m, c.s) : '';
        });
        canvas.addEventListener('mouseleave', () => (readout.textContent = ''));
        canvas.addEventListener('click', ev => {
          const c = pick(ev);
          if (c) {
            showDetail(p.rank < 0 ? spreadRank(c.m, c.s) : p.rank, c.m, c.s);
          }
        });
        canvas.addEventListener('keydown', ev => {
          const here = pinned ?? { r: Math.max(0, p.rank), m: 0, s: 0 };
          const step: Record<string, [number, number]> = { ArrowLeft: [0, -1], ArrowRight: [0, 1], ArrowUp: [-1, 0], ArrowDown: [1, 0] };
          const mv = step[ev.key];
          if (!mv && ev.key !== 'Enter') return;
          ev.preventDefault();
          const m = Math.min(d.nModules - 1, Math.max(0, here.m + (mv?.[0] ?? 0)));
          const s = Math.min(d.nSteps - 1, Math.max(0, here.s + (mv?.[1] ?? 0)));
          showDetail(p.rank < 0 ? spreadRank(m, s) : p.rank, m, s);
          readout.textContent = describe(p, m, s);
        });
        return h(doc, 'figure', { class: 'fv-ranks-panel', 'data-fv-rank': p.rank < 0 ? 'spread' : d.grid.ranks[p.rank] },
          h(doc, 'figcaption', {}, p.label),
          h(doc, 'div', { class: 'fv-ranks-body' }, names, canvas),
          h(doc, 'div', { class: 'fv-ranks-axis', style: `margin-left: ${g.gutter}px; width: ${g.width}px` },
            h(doc, 'span', {}, `step ${d.grid.steps[0] ?? ''}`), h(doc, 'span', {}, String(d.grid.step_ends[d.nSteps - 1] ?? ''))));
      })
    );
    el.setAttribute('data-fv-mode', mode);
    rankSelect.hidden = mode === 'spread' || d.nRanks < 2;
    ranksBtn.setAttribute('aria-pressed', String(mode === 'ranks'));
    spreadBtn.setAttribute('aria-pressed', String(mode === 'spread'));
  }

  /**
   * The rank that stands out at (m, s): the one furthest (log scale) from the median of the others;
   * of two equally far (always so with 2 ranks), the larger norm. A NaN or inf counts as furthest.
   */
  function spreadRank(m: number, s: number): number {
    const d = data!;
    const given: [number, number][] = [];
    d.grid.ranks.forEach((_, r) => {
      const i = at(d, r, m, s);
      if (!(d.missing && d.missing[i])) given.push([r, d.values[i]]);
    });
    if (!given.length) return 0;
    const log = (v: number) => Math.log10(Math.max(v, Number.MIN_VALUE));
    let best = given[0][0];
    let bestDist = -1;
    let bestValue = -Infinity;
    for (const [r, v] of given) {
      const others = given.filter(([k]) => k !== r).map(([, w]) => log(w)).sort((a, b) => a - b);
      const median = others.length ? others[Math.floor((others.length - 1) / 2)] : log(v);
      const dist = Number.isFinite(v) ? Math.abs(log(v) - median) : Infinity;
      if (dist > bestDist || (dist === bestDist && v > bestValue)) {
        best = r;
        bestDist = dist;
        bestValue = v;
      }
    }
    return best;
  }

  function renderPeaks() {
    const d = data!;
    const given = d.grid.peaks.map((b, r) => [r, b] as const).filter(([, b]) => b !== null) as [number, number][];
    peaksEl.hidden = given.length === 0;
    const most = Math.max(1, ...given.map(([, b]) => b));
    peaksEl.replaceChildren(
      h(doc, 'div', { class: 'fv-ranks-peaks-head' }, 'Peak memory per rank'),
      ...given.map(([r, b]) =>
        h(doc, 'div', { class: 'fv-ranks-peak', 'data-fv-rank': d.grid.ranks[r], 'data-fv-bytes': b },
          h(doc, 'span', { class: 'fv-ranks-peak-rank' }, `rank ${d.grid.ranks[r]}`),
          h(doc, 'span', { class: 'fv-ranks-peak-track' }, h(doc, 'span', { class: 'fv-ranks-peak-bar', style: `width: ${((100 * b) / most).toFixed(1)}%` })),
          h(doc, 'span', { class: 'fv-ranks-peak-bytes' }, bytesShort(b)))
      )
    );
  }

  function renderTranscript() {
    const d = data!;
    const lines: string[] = [];
    d.grid.ranks.forEach((rank, r) => {
      let lo = Infinity;
      let hi = -Infinity;
      let nan = 0;
      let inf = 0;
      for (let m = 0; m < d.nModules; m++) {
        for (let s = 0; s < d.nSteps; s++) {
          const i = at(d, r, m, s);
          if (d.missing && d.missing[i]) continue;
          const v = d.values[i];
          if (Number.isNaN(v)) nan++;
          else if (!Number.isFinite(v)) inf++;
          else {
            lo = Math.min(lo, v);
            hi = Math.max(hi, v);
          }
        }
      }
      const peak = d.grid.peaks[r];
      lines.push(`rank ${rank}: ‖∇‖ ${lo <= hi ? `${formatNorm(lo)} … ${formatNorm(hi)}` : 'none finite'}; ${nan} NaN, ${inf} inf` + (peak !== null ? `; peak memory ${bytesShort(peak)}` : ''));
    });
    const top = spread?.top;
    if (top && top.ratio > 1) {
      lines.push(`largest spread across ranks: ${name(top.m)} at step ${stepLabel(d.grid, top.s)}, max/min ${formatNorm(top.ratio)}× (rank ${d.grid.ranks[spreadRank(top.m, top.s)]} stands out)`);
    }
    transcript.replaceChildren(
      h(doc, 'summary', {}, 'Text transcript'),
      h(doc, 'p', {}, `${d.nRanks} ranks × ${d.nModules} modules × ${d.nSteps} ${d.grid.merged > 1 ? `columns of ${d.grid.merged} steps` : 'steps'}.`),
      h(doc, 'ul', {}, ...lines.map(l => h(doc, 'li', {}, l)))
    );
  }

  function draw() {
    try {
      renderPanels();
      el.setAttribute('data-fv-state', 'ready');
    } catch (err) {
      el.setAttribute('data-fv-state', 'error');
      status.show(`Could not draw the ranks view: ${errorMessage(err)}`, 'error');
    }
  }

  function setMode(next: Mode) {
    if (next === 'spread' && (!data || data.nRanks < 2)) return;
    mode = next;
    if (data) draw();
  }
  ranksBtn.addEventListener('click', () => setMode('ranks'));
  rankSelect.addEventListener('change', () => {
    only = Number(rankSelect.value);
    if (data) draw();
  });
  spreadBtn.addEventListener('click', () => setMode('spread'));

  function exportSVG(): string {
    if (!data || !geom) return '';
    const ink = {
      bg: cssVar(el, '--jp-layout-color0', '#ffffff'),
      fg: cssVar(el, '--jp-ui-font-color1', '#1f1f1f'),
      fg2: cssVar(el, '--jp-ui-font-color2', '#666666'),
      bar: '#0072B2'
    };
    const legend = legendOf(data, mode, spread, panels, formatNorm);
    return ranksSvg(data, panels, legend, geom, ink, data.grid.title ?? (mode === 'spread' ? 'Gradient norm spread across ranks' : 'Gradient norm per module, per rank'));
  }

  return {
    setGrid(grid: RanksGrid) {
      try {
        data = decodeGrid(grid);
        spread = data.nRanks >= 2 ? spreadOf(data) : null;
        if (mode === 'spread' && !spread) mode = 'ranks';
        spreadBtn.disabled = !spread;
        only = -1;
        rankSelect.replaceChildren(
          h(doc, 'option', { value: -1 }, `all ${data.nRanks} ranks`),
          ...grid.ranks.map((rank, r) => h(doc, 'option', { value: r }, `rank ${rank}`))
        );
        heading.hidden = !grid.title;
        heading.textContent = grid.title ?? '';
        message.hidden = !grid.note && data.nSteps > 0;
        message.textContent = grid.note ?? (data.nSteps === 0 ? 'No gradient norms recorded.' : '');
        pinned = null;
        detail.hidden = true;
        status.show(null);
        renderPeaks();
        renderTranscript();
      } catch (err) {
        el.setAttribute('data-fv-state', 'error');
        status.show(`Could not read the ranks data: ${errorMessage(err)}`, 'error');
        return;
      }
      draw();
    },
    setWarnings: w => warnings.set(w),
    setMode,
    showRank(r: number) {
      only = data && r >= 0 && r < data.nRanks ? r : -1;
      rankSelect.value = String(only);
      if (data) draw();
    },
    select(r, m, s) {
      if (data) showDetail(r, m, s);
    },
    exportSVG,
    destroy() {
      el.replaceChildren();
    }
  };
}
