/**
 * The ranks view as a standalone SVG, written from its panels' colour keys (no canvas needed: the
 * headless renderer has none): one rect per run of equal colour in a row, the legend, and the
 * peak memory bars. Presentation attributes only, no CSS, so readers that strip styles show it as drawn.
 */
import { bytesShort } from '../common/format';
import { colourOf, hex, INF, NAN } from './colour';
import type { RanksData } from './data';
import type { Geometry } from './geom';
import type { Legend, Panel } from './panels';

const esc = (t: string) => t.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

export interface SvgInk {
  bg: string;
  fg: string;
  fg2: string;
  bar: string;
}

const FONT = 'font-family="DejaVu Sans, sans-serif"';
/** About the width of one character of 11 px DejaVu Sans, to place legend entries. */
const CHAR_W = 6.2;

/** The picture: title, legend, each panel, the peaks. */
export function ranksSvg(d: RanksData, panels: Panel[], legend: Legend, g: Geometry, ink: SvgInk, title: string): string {
  const pad = 14;
  const out: string[] = [];
  let y = pad;
  const text = (x: number, yy: number, t: string, size = 12, extra = '') =>
    out.push(`<text x="${x}" y="${yy}" font-size="${size}" fill="${ink.fg}" ${FONT}${extra}>${esc(t)}</text>`);
  text(pad, y + 12, title, 14, ' font-weight="bold"');
  y += 24;
  // legend: the ramp as a gradient, its ends, the classes
  const stops = legend.ramp.map((c, i) => `<stop offset="${(i / (legend.ramp.length - 1)).toFixed(3)}" stop-color="${hex(c)}"/>`).join('');
  out.push(`<defs><linearGradient id="fv-ranks-ramp">${stops}</linearGradient></defs>`);
  text(pad, y + 11, legend.low, 11, ' text-anchor="start"');
  const lx = pad + 8 + CHAR_W * legend.low.length;
  out.push(`<rect x="${lx}" y="${y + 2}" width="160" height="10" fill="url(#fv-ranks-ramp)"/>`);
  text(lx + 166, y + 11, `${legend.high}  ${legend.caption}`, 11);
  let cx = lx + 166 + CHAR_W * (legend.high.length + legend.caption.length + 2) + 12;
  for (const c of legend.classes) {
    out.push(`<rect x="${cx}" y="${y + 2}" width="10" height="10" fill="${c.colour ?? 'none'}" stroke="${ink.fg2}" stroke-width="0.5"/>`);
    text(cx + 14, y + 11, c.label, 11);
    cx += 14 + CHAR_W * c.label.length + 12;
  }
  y += 24;
  let width = cx;
  for (const p of panels) {
    text(pad, y + 12, p.label, 12, ' font-weight="bold"');
    y += 18;
    const x0 = pad + g.gutter;
    if (g.labels) {
      d.grid.modules.forEach((m, i) => text(x0 - 6, y + i * g.cellH + g.cellH - 2, m || '(root)', Math.min(11, g.cellH), ' text-anchor="end"'));
    }
    for (let m = 0; m < d.nModules; m++) {
      let s = 0;
      while (s < d.nSteps) {
        const key = p.keys[m * d.nSteps + s];
        let e = s + 1;
        while (e < d.nSteps && p.keys[m * d.nSteps + e] === key) e++;
        if (key >= 0) {
          out.push(`<rect x="${x0 + s * g.cellW}" y="${y + m * g.cellH}" width="${(e - s) * g.cellW}" height="${g.cellH}" fill="${hex(colourOf(key, p.ramp))}"/>`);
        }
        s = e;
      }
    }
    if (g.cellW >= 4 && g.cellH >= 4) {
      // the canvas's non-colour cue: a stroke across each NaN (and, per rank, ±inf) cell
      let marks = '';
      for (let j = 0; j < p.keys.length; j++) {
        if (p.keys[j] === NAN || (p.keys[j] === INF && p.rank >= 0)) {
          const x = x0 + (j % d.nSteps) * g.cellW;
          const yy = y + Math.floor(j / d.nSteps) * g.cellH;
          marks += `M${x + 1} ${yy + g.cellH - 1}L${x + g.cellW - 1} ${yy + 1}`;
        }
      }
      if (marks) out.push(`<path d="${marks}" stroke="#ffffff" stroke-width="1" fill="none"/>`);
    }
    y += g.height + 4;
    text(x0, y + 11, `step ${d.grid.steps[0] ?? ''}`, 10);
    text(x0 + g.width, y + 11, `${d.grid.step_ends[d.nSteps - 1] ?? ''}`, 10, ' text-anchor="end"');
    y += 22;
    width = Math.max(width, x0 + g.width);
  }
  const peaks = d.grid.peaks.map((b, r) => [r, b] as const).filter(([, b]) => b !== null) as [number, number][];
  if (peaks.length) {
    text(pad, y + 12, 'peak memory per rank', 12, ' font-weight="bold"');
    y += 18;
    const most = Math.max(1, ...peaks.map(([, b]) => b));
    for (const [r, b] of peaks) {
      text(pad, y + 11, `rank ${d.grid.ranks[r]}`, 11);
      out.push(`<rect x="${pad + 64}" y="${y + 2}" width="${Math.max(1, (240 * b) / most).toFixed(1)}" height="10" fill="${ink.bar}"/>`);
      text(pad + 64 + 248, y + 11, bytesShort(b), 11);
      y += 16;
    }
    width = Math.max(width, pad + 64 + 320);
  }
  const W = Math.ceil(width + pad);
  const H = Math.ceil(y + pad);
  return (
    `<?xml version="1.0" encoding="UTF-8"?>\n<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" role="img">` +
    `<title>${esc(title)}</title><rect width="100%" height="100%" fill="${ink.bg}"/>${out.join('')}</svg>`
  );
}

/** The SVG's size, for the PNG export. */
export function svgSize(svg: string): { w: number; h: number } {
  const m = /width="(\d+)" height="(\d+)"/.exec(svg);
  return m ? { w: Number(m[1]), h: Number(m[2]) } : { w: 800, h: 600 };
}
