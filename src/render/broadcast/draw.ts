/**
 * One frame of the broadcast animation as an SVG group: shapes as rows of dim boxes in
 * result-dim columns, per-dim verdicts, stretching, value grids, the result and the conflict.
 * Every frame of a plan has the same size (laid out for the whole plan, in frame-layout.ts), so
 * frames can be exported one by one into a GIF. The rows are drawn in draw-rows.ts, the value
 * grids in draw-values.ts. Pure DOM/SVG; imports nothing from Jupyter or anywidget.
 */
import type { BroadcastPlan } from '../../model/wire';
import { r2, s } from '../common/dom';
import { drawElementwiseRows, drawMatmulRows } from './draw-rows';
import { drawValueGrids } from './draw-values';
import { CHAR, FrameLayout, LINE, layoutFrames } from './frame-layout';
import { dimLabel, exprText, FrameState, frameState, tupleText, VERDICT_SYMBOL } from './layout';
import { dimBox, Pen, tableRows, text, title } from './pen';

export { OPERAND_COLORS, OPERAND_DASHES } from './pen';

export interface DrawOptions {
  /** mark what this frame adds with .fv-new so CSS can tween it (only while playing) */
  animate: boolean;
  /** draw the expression and the step's title and text on top (exports; the live view has HTML for that) */
  heading: boolean;
}

export interface DrawnFrame {
  g: SVGGElement;
  width: number;
  height: number;
  state: FrameState;
}

/** The heading of an exported frame: expression, source, "step k/n · title", the step's text. Returns the table's top. */
function drawHeading(doc: Document, plan: BroadcastPlan, st: FrameState, L: FrameLayout, root: SVGElement): number {
  const steps = plan.steps ?? [];
  const t = (x: number, y: number, content: string, cls: string) => s(doc, 'text', { x: r2(x), y: r2(y), class: cls }, content);
  let y = 16;
  const head = s(doc, 'g', { class: 'fv-bc-heading', 'aria-hidden': 'true' });
  head.appendChild(t(0, y, exprText(plan), 'fv-bc-expr'));
  if (plan.source) {
    y += LINE;
    head.appendChild(t(0, y, plan.source, 'fv-bc-src-line'));
  }
  y += 22;
  if (st.step) {
    head.appendChild(t(0, y, `step ${st.index + 1}/${steps.length} · ${st.step.title}`, 'fv-bc-step-title'));
    L.stepLines(st.index).forEach((l, n) => head.appendChild(t(0, y + 16 + n * 15, l, 'fv-bc-step-text')));
  } else {
    head.appendChild(t(0, y, plan.ok ? `result ${L.resultShape ? tupleText(L.resultShape) : ''}` : 'does not broadcast', 'fv-bc-step-title'));
  }
  root.appendChild(head);
  // room for the longest step's text, so every frame is the same size
  return y + 16 + L.maxStepLines * 15 + 8;
}

/** The column backgrounds, heads, the current column's mark and the verdicts compared so far. */
function drawColumns(pen: Pen, root: SVGElement): void {
  const { doc, st, animate } = pen;
  const { cols, CW } = pen.L;
  const { T, verdictTop, tableBottom } = pen.rows;
  const colLayer = s(doc, 'g', { class: 'fv-bc-cols' });
  root.appendChild(colLayer);
  for (const c of cols) {
    const compared = st.compared.has(c.dim) && !!c.check;
    const cls = ['fv-bc-col'];
    if (st.current === c.dim) {
      cls.push('fv-current');
    }
    if (compared) {
      cls.push(`fv-${c.check!.verdict}`);
    }
    if (animate && st.current === c.dim) {
      cls.push('fv-new');
    }
    const g = s(doc, 'g', { class: cls.join(' '), 'data-dim': c.dim });
    g.appendChild(title(pen, compared ? `${c.head} (${c.sub}): ${c.check!.text}` : `${c.head} (${c.sub})`));
    g.appendChild(s(doc, 'rect', { class: 'fv-bc-col-bg', x: r2(c.x - 3), y: T - 4, width: r2(CW + 6), height: r2(tableBottom - T + 4), rx: 5 }));
    if (st.current === c.dim) {
      g.appendChild(text(pen, c.x + CW / 2, T - 6, '▼', 'fv-bc-cur-mark', { 'text-anchor': 'middle' }));
    }
    g.append(text(pen, c.x + CW / 2, T + 12, c.head, 'fv-bc-col-head', { 'text-anchor': 'middle' }), text(pen, c.x + CW / 2, T + 25, c.sub, 'fv-bc-col-sub', { 'text-anchor': 'middle' }));
    if (compared) {
      const v = c.check!.verdict;
      g.append(
        text(pen, c.x + CW / 2, verdictTop + 17, VERDICT_SYMBOL[v], 'fv-bc-verdict-sym', { 'text-anchor': 'middle' }),
        text(pen, c.x + CW / 2, verdictTop + 31, v, 'fv-bc-verdict-word', { 'text-anchor': 'middle' })
      );
    }
    colLayer.appendChild(g);
  }
}

/** The result's dim boxes: one per result dim, or a matmul's batch dims and (n, m), 1-D ones dropped. */
function resultDims(pen: Pen, rg: SVGElement, resultShape: number[]): void {
  const { mm, cols, nb } = pen.L;
  const { resultTop } = pen.rows;
  if (!mm) {
    resultShape.forEach((n, d) => {
      const col = cols[d];
      if (col) {
        rg.appendChild(dimBox(pen, ['fv-bc-rdim'], { 'data-dim': d, 'data-size': n }, col.x, resultTop, String(n), `result ${dimLabel(d - resultShape.length)}: size ${n}`, {}));
      }
    });
    return;
  }
  const bs = mm.batch_shape ?? [];
  bs.forEach((n, j) => {
    const c = nb - bs.length + j;
    rg.appendChild(dimBox(pen, ['fv-bc-rdim'], { 'data-dim': c, 'data-size': n }, cols[c].x, resultTop, String(n), `result batch ${dimLabel(j - bs.length)}: size ${n}`, {}));
  });
  const aOne = mm.a_shape.length === 1;
  const bOne = mm.b_shape.length === 1;
  const n = mm.a_matrix[0];
  const m2 = mm.b_matrix[1];
  rg.appendChild(
    dimBox(pen, aOne ? ['fv-bc-rdim', 'fv-ghost', 'fv-dropped'] : ['fv-bc-rdim'], { 'data-dim': nb, 'data-size': n }, cols[nb].x, resultTop, aOne ? '–' : String(n), aOne ? 'dropped: a was 1-D' : `result rows: n = ${n}`, { letter: 'n' })
  );
  rg.appendChild(
    dimBox(pen, bOne ? ['fv-bc-rdim', 'fv-ghost', 'fv-dropped'] : ['fv-bc-rdim'], { 'data-dim': nb + 1, 'data-size': m2 }, cols[nb + 1].x, resultTop, bOne ? '–' : String(m2), bOne ? 'dropped: b was 1-D' : `result cols: m = ${m2}`, { letter: 'm' })
  );
}

/** The rule under the table and the result row (or "✗ no result"); returns the result group, if drawn. */
function drawResult(pen: Pen, root: SVGElement): SVGElement | null {
  const { doc, st, animate } = pen;
  const { resultShape, resultMeta, tableW } = pen.L;
  const { ruleY, resultTop } = pen.rows;
  const resG = s(doc, 'g', { class: 'fv-bc-result-area' });
  root.appendChild(resG);
  resG.appendChild(s(doc, 'line', { class: 'fv-bc-rule', x1: 0, x2: r2(tableW), y1: r2(ruleY), y2: r2(ruleY) }));
  if (st.result && resultShape) {
    const cls = ['fv-bc-result'];
    if (animate && st.step?.kind === 'result') {
      cls.push('fv-new');
    }
    const rg = s(doc, 'g', { class: cls.join(' '), 'data-shape': resultShape.join(','), role: 'group', 'aria-label': `result ${tupleText(resultShape)}` });
    rg.append(text(pen, 0, resultTop + 13, `result ${tupleText(resultShape)}`, 'fv-bc-result-label'), text(pen, 0, resultTop + 27, resultMeta, 'fv-bc-meta'));
    resultDims(pen, rg, resultShape);
    resG.appendChild(rg);
    return rg;
  }
  if (st.conflict) {
    resG.appendChild(text(pen, 0, resultTop + 19, '✗ no result', 'fv-bc-noresult'));
  }
  return null;
}

/** The notes this frame shows, from ``top``; every note keeps its room. Returns the y below them. */
function drawNotes(pen: Pen, root: SVGElement, top: number): number {
  const notesG = s(pen.doc, 'g', { class: 'fv-bc-notes' });
  root.appendChild(notesG);
  let ny = top;
  for (const n of pen.L.notes) {
    if (n.show(pen.st)) {
      const g = s(pen.doc, 'g', { class: n.cls });
      n.lines.forEach((l, j) => g.appendChild(text(pen, 0, ny + j * LINE, l, 'fv-bc-note')));
      notesG.appendChild(g);
    }
    ny += n.lines.length * LINE;
  }
  return ny;
}

export function drawFrame(doc: Document, plan: BroadcastPlan, k: number, opts: DrawOptions): DrawnFrame {
  const st = frameState(plan, k);
  const L = layoutFrames(plan);
  const root = s(doc, 'g', { class: 'fv-bc-content', 'data-step': st.index }) as SVGGElement;
  // table top: room for the current column's mark, below the heading if any
  const T = opts.heading ? drawHeading(doc, plan, st, L, root) : 16;
  const pen: Pen = { doc, plan, st, L, animate: opts.animate, rows: tableRows(T, plan.operands.length, L.rowPitch) };

  drawColumns(pen, root);
  const rowsLayer = s(doc, 'g', { class: 'fv-bc-rows' });
  root.appendChild(rowsLayer);
  if (L.mm) {
    drawMatmulRows(pen, L.mm, rowsLayer);
  } else {
    drawElementwiseRows(pen, rowsLayer);
  }
  const resultGroup = drawResult(pen, root);
  let yCursor = pen.rows.tableBottom + 6;
  if (L.slots.length) {
    yCursor = drawValueGrids(pen, root, resultGroup, yCursor);
  }
  const ny = drawNotes(pen, root, yCursor + 12);

  const height = Math.ceil(ny + 2);
  const headW = opts.heading ? Math.max(exprText(plan).length * 8.5, (plan.source ?? '').length * 6) : 0;
  const width = Math.ceil(Math.max(L.tableW, L.valuesW, headW, ...L.notes.flatMap(n => n.lines.map(l => l.length * CHAR)), Math.min(L.W0, L.maxChars * CHAR)));
  return { g: root, width, height, state: st };
}
