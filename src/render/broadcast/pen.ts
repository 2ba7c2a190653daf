/**
 * What drawing one frame of the broadcast animation needs: the plan, the frame's state, the
 * plan's layout, the table's rows for this frame, and the small SVG pieces every part draws
 * (text, titles, a dim box). Pure SVG.
 */
import type { BroadcastPlan } from '../../model/wire';
import { r2, s } from '../common/dom';
import { BOX_H, FrameLayout, HEAD_H, VERDICT_H } from './frame-layout';
import type { FrameState } from './layout';

/** Okabe–Ito for the operands (the verdicts use green, sky blue and vermillion), plus a dash each. */
export const OPERAND_COLORS = ['#0072B2', '#E69F00', '#CC79A7', '#7F7F7F', '#000000'];
export const OPERAND_DASHES = ['none', '6 3', '2 2', '8 3 2 3', '1 3'];

export type Attrs = Record<string, string | number | boolean | null | undefined>;

/** The table's rows, from its top ``T`` (below the heading, if any). */
export interface TableRows {
  T: number;
  rowTop: (i: number) => number;
  verdictTop: number;
  ruleY: number;
  resultTop: number;
  tableBottom: number;
}

export function tableRows(T: number, nOps: number, rowPitch: number): TableRows {
  const rowTop = (i: number) => T + HEAD_H + i * rowPitch;
  const verdictTop = rowTop(nOps) - (rowPitch - BOX_H) + 6;
  const ruleY = verdictTop + VERDICT_H;
  const resultTop = ruleY + 8;
  const tableBottom = resultTop + BOX_H + 6;
  return { T, rowTop, verdictTop, ruleY, resultTop, tableBottom };
}

/** One frame being drawn. */
export interface Pen {
  doc: Document;
  plan: BroadcastPlan;
  st: FrameState;
  L: FrameLayout;
  /** mark what this frame adds with .fv-new */
  animate: boolean;
  rows: TableRows;
}

export function text(pen: Pen, x: number, y: number, content: string, cls: string, extra: Attrs = {}): SVGElement {
  return s(pen.doc, 'text', { x: r2(x), y: r2(y), class: cls, ...extra }, content);
}

export function title(pen: Pen, t: string): SVGElement {
  return s(pen.doc, 'title', {}, t);
}

export const colorOf = (i: number) => OPERAND_COLORS[i % OPERAND_COLORS.length];
export const dashOf = (i: number) => OPERAND_DASHES[i % OPERAND_DASHES.length];

export interface DimBoxOptions {
  /** half width: a size-1 dim before it stretches */
  narrow?: boolean;
  /** draw "1→n" and a double arrow: stretched to ``n`` */
  stretchTo?: number | null;
  color?: string;
  dash?: string;
  /** a corner letter: n, k, m */
  letter?: string;
  clash?: boolean;
}

/** A dim box in the column at ``x``: its size, and how it stretches or clashes. */
export function dimBox(pen: Pen, cls: string[], attrs: Attrs, x: number, top: number, label: string, tip: string, o: DimBoxOptions): SVGElement {
  const { doc } = pen;
  const CW = pen.L.CW;
  const g = s(doc, 'g', { class: cls.join(' '), ...attrs });
  g.appendChild(title(pen, tip));
  const w = o.narrow ? CW * 0.5 : CW;
  const bx = x + (CW - w) / 2;
  g.appendChild(s(doc, 'rect', { class: 'fv-bc-box', x: r2(bx + 0.5), y: r2(top + 0.5), width: r2(w - 1), height: BOX_H - 1, rx: 4, stroke: o.color, fill: o.color, 'stroke-dasharray': o.dash }));
  if (o.letter) {
    g.appendChild(text(pen, bx + 4, top + 10, o.letter, 'fv-bc-letter'));
  }
  if (o.stretchTo !== undefined && o.stretchTo !== null) {
    g.appendChild(text(pen, x + CW / 2, top + 14, `${label}→${o.stretchTo}`, 'fv-bc-size', { 'text-anchor': 'middle' }));
    // a double arrow across the box: the static cue for "stretched"
    const ay = top + 22;
    const x1 = bx + 6;
    const x2 = bx + w - 6;
    g.appendChild(s(doc, 'path', { class: 'fv-bc-arrow', d: `M${r2(x1)},${r2(ay)} H${r2(x2)} M${r2(x1 + 4)},${r2(ay - 3)} L${r2(x1)},${r2(ay)} L${r2(x1 + 4)},${r2(ay + 3)} M${r2(x2 - 4)},${r2(ay - 3)} L${r2(x2)},${r2(ay)} L${r2(x2 - 4)},${r2(ay + 3)}` }));
  } else {
    g.appendChild(text(pen, x + CW / 2, top + 19, label, 'fv-bc-size', { 'text-anchor': 'middle' }));
  }
  if (o.clash) {
    g.appendChild(text(pen, bx + w - 8, top + 19, '✗', 'fv-bc-clash-mark', { 'text-anchor': 'middle' }));
  }
  return g;
}
