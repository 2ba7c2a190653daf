/** The ranks view: its adapter, panels, details of a click, the spread, off-scale cells, export, and its cost at 8 × 500 × 150. */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { LEVELS, NORM_RAMP, SPREAD_RAMP } from '../../src/render/ranks/colour';
import { decodeGrid, formatNorm, spreadOf } from '../../src/render/ranks/data';
import { panelsOf } from '../../src/render/ranks/panels';
import { createRanksView } from '../../src/render/ranks/view';
import widget from '../../src/widgets/ranks';
import { expectWidgetBundle } from './bundle';
import { drawsWhenItsDataComes, mounter } from './mount';
import { gridOf } from './ranks-fixtures';

const mount = mounter(widget);
const MODULES = ['fc1', 'fc2', 'head'];
/** Two ranks that agree except rank 1's fc2 at step 2, ten times larger. */
const divergent = () =>
  gridOf([0, 1], MODULES, [0, 1, 2, 3], (r, m, s) => (0.5 + m) * 10 ** -s * (r === 1 && m === 1 && s === 2 ? 10 : 1), [3 * 2 ** 20, 5 * 2 ** 20]);

/** Click the canvas of ``rank`` at module m, step s (happy-dom has no layout: offsetX/Y are set on the event). */
function clickCell(el: HTMLElement, rank: string, m: number, s: number) {
  const canvas = el.querySelector<HTMLCanvasElement>(`canvas.fv-ranks-canvas[data-fv-rank="${rank}"]`)!;
  const cw = Number(canvas.getAttribute('data-fv-cell-w'));
  const ch = Number(canvas.getAttribute('data-fv-cell-h'));
  const ev = new MouseEvent('click', { bubbles: true });
  Object.defineProperty(ev, 'offsetX', { value: s * cw + cw / 2 });
  Object.defineProperty(ev, 'offsetY', { value: m * ch + ch / 2 });
  canvas.dispatchEvent(ev);
}

describe('ranks view', () => {
  it('waits for a grid, then draws one panel per rank, a log legend and the peaks', () => {
    const { el } = drawsWhenItsDataComes(mount, 'grid', divergent(), 'ranks');
    expect(el.getAttribute('data-fv-mode')).toBe('ranks');
    expect([...el.querySelectorAll('canvas.fv-ranks-canvas')].map(c => c.getAttribute('data-fv-rank'))).toEqual(['0', '1']);
    expect(el.querySelector('.fv-ranks-legend')!.textContent).toContain('log scale');
    expect(el.querySelector('.fv-ranks-legend')!.textContent).toContain(`${formatNorm(0.0005)}${formatNorm(2.5)}`); // the smallest and largest norm
    expect([...el.querySelectorAll('.fv-ranks-peak')].map(p => [p.getAttribute('data-fv-rank'), p.querySelector('.fv-ranks-peak-bytes')!.textContent])).toEqual([
      ['0', '3 MiB'],
      ['1', '5 MiB']
    ]);
    expect(el.querySelector<HTMLElement>('.fv-ranks-peak-bar[style*="100.0%"]')).toBeTruthy();
    // one rank alone, then all again
    const select = el.querySelector<HTMLSelectElement>('select.fv-ranks-select')!;
    expect([...select.options].map(o => o.textContent)).toEqual(['all 2 ranks', 'rank 0', 'rank 1']);
    select.value = '1';
    select.dispatchEvent(new Event('change'));
    expect([...el.querySelectorAll('canvas.fv-ranks-canvas')].map(c => c.getAttribute('data-fv-rank'))).toEqual(['1']);
    select.value = '-1';
    select.dispatchEvent(new Event('change'));
    expect(el.querySelectorAll('canvas.fv-ranks-canvas')).toHaveLength(2);
  });

  it('a click shows rank, step, module and norm exactly, and every rank’s norm there', () => {
    const { el } = drawsWhenItsDataComes(mount, 'grid', divergent(), 'ranks');
    clickCell(el, '1', 1, 2);
    const d = el.querySelector<HTMLElement>('.fv-ranks-detail')!;
    expect(d.hidden).toBe(false);
    expect([d.dataset.fvRank, d.dataset.fvStep, d.dataset.fvModule]).toEqual(['1', '2', 'fc2']);
    expect(Number(d.dataset.fvNorm)).toBe(1.5 * 10 ** -2 * 10);
    expect(d.querySelector('.fv-ranks-value')!.textContent).toBe('0.15');
    const rows = [...d.querySelectorAll('tr')].map(r => [r.getAttribute('data-fv-rank'), r.querySelector('td')!.textContent, r.classList.contains('fv-ranks-here')]);
    expect(rows).toEqual([
      ['0', '0.015', false],
      ['1', '0.15', true]
    ]);
  });

  it('the spread mode makes the rank that diverges stand out', () => {
    const { el } = drawsWhenItsDataComes(mount, 'grid', divergent(), 'ranks');
    el.querySelector<HTMLButtonElement>('.fv-ranks-mode-spread')!.click();
    expect(el.getAttribute('data-fv-mode')).toBe('spread');
    expect([...el.querySelectorAll('canvas.fv-ranks-canvas')].map(c => c.getAttribute('data-fv-rank'))).toEqual(['spread']);
    const data = decodeGrid(divergent());
    const sp = spreadOf(data);
    expect(sp.ratio[1 * 4 + 2]).toBeCloseTo(10, 12);
    expect(sp.top).toEqual({ m: 1, s: 2, ratio: sp.ratio[1 * 4 + 2] });
    const keys = panelsOf(data, 'spread', sp)[0].keys;
    // the one divergent cell is at the top of the ramp, every other at its bottom (ratio 1)
    expect([...keys].filter(k => k === LEVELS - 1)).toHaveLength(1);
    expect(keys[1 * 4 + 2]).toBe(LEVELS - 1);
    expect([...keys].filter(k => k === 0)).toHaveLength(11);
    expect(SPREAD_RAMP[0]).not.toEqual(SPREAD_RAMP[LEVELS - 1]);
    // a click in the spread pins the rank furthest from the others there
    clickCell(el, 'spread', 1, 2);
    expect(el.querySelector<HTMLElement>('.fv-ranks-detail')!.dataset.fvRank).toBe('1');
    expect(el.querySelector('.fv-transcript')!.textContent).toContain('largest spread across ranks: fc2 at step 2, max/min 10× (rank 1 stands out)');
  });

  it('NaN, inf, 0 and missing cells are their own classes, labelled in the legend', () => {
    const g = gridOf([0, 1], ['a', 'b'], [0, 1], (r, m, s) => [[1, NaN], [Infinity, 0]][m][s] * (r + 1) || (r === 1 && m === 1 && s === 1 ? undefined : [[1, NaN], [Infinity, 0]][m][s]));
    const { el } = drawsWhenItsDataComes(mount, 'grid', g, 'ranks');
    expect([...el.querySelectorAll('.fv-ranks-class')].map(c => c.getAttribute('data-fv-class'))).toEqual(['zero', 'nan', 'inf', 'missing']);
    const keys = panelsOf(decodeGrid(g), 'ranks', null)[0].keys;
    expect([...keys]).toEqual([LEVELS / 2 | 0, LEVELS + 1, LEVELS + 2, LEVELS].map((k, i) => (i === 0 ? keys[0] : k)));
    clickCell(el, '0', 0, 1);
    expect(el.querySelector('.fv-ranks-value')!.textContent).toBe('NaN');
    // the export strokes the NaN and inf cells, as the canvas does (a cue beyond colour)
    const host = document.createElement('div');
    document.body.appendChild(host);
    const view = createRanksView(host);
    view.setGrid(g);
    expect(view.exportSVG().match(/<path d="(M[\d.]+ [\d.]+L[\d.]+ [\d.]+)+"/g)).toHaveLength(2); // one path a panel
    clickCell(el, '1', 1, 1);
    expect(el.querySelector('.fv-ranks-value')!.textContent).toBe('no record');
  });

  it('a grid whose blocks do not match its axes says so', () => {
    const g = { ...divergent(), modules: ['fc1'] };
    const { el } = drawsWhenItsDataComes(mount, 'grid', divergent(), 'ranks');
    const view = createRanksView(el);
    view.setGrid(g);
    expect(el.getAttribute('data-fv-state')).toBe('error');
    expect(el.querySelector('.fv-status')!.textContent).toBe('Could not read the ranks data: expected 8 norms (2 ranks × 1 modules × 4 steps), got 24');
  });

  it('the SVG export draws the same colours, a rect per run of equal colour, and the peaks', () => {
    const { el } = drawsWhenItsDataComes(mount, 'grid', gridOf([0, 1], ['a'], [0, 1, 2, 3], () => 1, [100, 200], 'flat'), 'ranks');
    const host = document.createElement('div');
    document.body.appendChild(host);
    const view = createRanksView(host);
    view.setGrid(gridOf([0, 1], ['a'], [0, 1, 2, 3], () => 1, [100, 200], 'flat'));
    const svg = view.exportSVG();
    expect(svg).toContain('<title>flat</title>');
    const fills = [...svg.matchAll(/<rect x="[\d.]+" y="[\d.]+" width="[\d.]+" height="[\d.]+" fill="(#[0-9a-f]{6})"\/>/g)].map(m => m[1]);
    // one run per panel row (all equal), then two peak bars
    const mid = NORM_RAMP[Math.round(0.5 * (LEVELS - 1))].map(x => x.toString(16).padStart(2, '0')).join('');
    expect(fills.slice(0, 2)).toEqual([`#${mid}`, `#${mid}`]);
    expect(svg).toContain('200 B');
    expect(el.getAttribute('data-fv-state')).toBe('ready');
  });

  it('8 ranks × 500 steps × 150 modules: decode, spread and colour keys (a figure, not an assertion on time)', () => {
    const ranks = [...Array(8).keys()];
    const modules = Array.from({ length: 150 }, (_, i) => `layers.${i}.weight`);
    const steps = [...Array(500).keys()];
    const g = gridOf(ranks, modules, steps, (r, m, s) => (1 + m) * 1e-3 * (1 + 0.01 * s) * (r === 5 && s > 300 ? 4 : 1));
    const t0 = performance.now();
    const d = decodeGrid(g);
    const sp = spreadOf(d);
    const panels = panelsOf(d, 'ranks', sp);
    const spreadPanel = panelsOf(d, 'spread', sp);
    const t1 = performance.now();
    const host = document.createElement('div');
    document.body.appendChild(host);
    const view = createRanksView(host);
    view.setGrid(g);
    const t2 = performance.now();
    const svg = view.exportSVG();
    const t3 = performance.now();
    console.log(`ranks 8x500x150 (600k cells): decode+spread+keys ${(t1 - t0).toFixed(0)} ms; setGrid (DOM, no canvas in happy-dom) ${(t2 - t1).toFixed(0)} ms; SVG export ${(t3 - t2).toFixed(0)} ms, ${(svg.length / 1e6).toFixed(2)} MB`);
    expect(panels).toHaveLength(8);
    expect(host.querySelectorAll('canvas')).toHaveLength(8); // 8 canvases, not 600k nodes
    expect(host.querySelectorAll('*').length).toBeLessThan(400);
    expect(sp.top!.ratio).toBeCloseTo(4, 12);
    expect(spreadPanel[0].keys[150 * 500 - 1]).toBe(LEVELS - 1);
    expect(host.querySelector('.fv-transcript')!.textContent).toContain('(rank 5 stands out)');
  });
});

const built = path.join(process.cwd(), 'forgeviz', 'static', 'ranks.js');

describe.skipIf(!existsSync(built))('forgeviz/static/ranks.js (after jlpm build:esm:prod)', () => {
  it('is a small, offline ESM with a default export, and draws a grid with a minimal static model', async () => {
    expect(expectWidgetBundle(built)).toContain('forgeviz-ranks-style');
    const mod = await import(/* @vite-ignore */ built);
    const el = document.createElement('div');
    document.body.appendChild(el);
    const values: Record<string, unknown> = { grid: divergent(), warnings: [], static: true };
    mod.default.render({ model: { get: (k: string) => values[k] }, el });
    expect(el.getAttribute('data-fv-state')).toBe('ready');
    expect(el.querySelectorAll('canvas.fv-ranks-canvas')).toHaveLength(2);
  });
});
