/**
 * The operand rows of a broadcast frame: each operand's name and meta, then one dim box per
 * column: padded (ghost), stretching, stretched or clashing. Elementwise plans have one box per
 * result dim; matmuls have batch dims, the (n, k) / (k, m) matrices and their inner dims linked.
 */
import type { MatmulPlan } from '../../model/wire';
import { r2, s } from '../common/dom';
import { BOX_H, GAP } from './frame-layout';
import { dimLabel, tupleText } from './layout';
import { colorOf, dashOf, dimBox, Pen, text, title } from './pen';

/** The row of operand ``i``: its swatch, name and "shape · dtype · bytes" line. */
function rowFrame(pen: Pen, i: number): SVGElement {
  const { doc, plan } = pen;
  const o = plan.operands[i];
  const top = pen.rows.rowTop(i);
  const row = s(doc, 'g', { class: 'fv-bc-row', 'data-operand': i, role: 'group', 'aria-label': `${o.name}: shape ${tupleText(o.shape)}` });
  const lab = pen.L.labels[i];
  row.append(
    s(doc, 'line', { class: 'fv-bc-swatch', x1: 0, x2: 14, y1: top + 9, y2: top + 9, stroke: colorOf(i), 'stroke-dasharray': dashOf(i), 'stroke-width': 3 }),
    text(pen, 20, top + 13, lab.name, 'fv-bc-name'),
    text(pen, 0, top + 27, lab.meta, 'fv-bc-meta')
  );
  return row;
}

/** Dim ``d`` of elementwise operand ``i``: null while it is a padded dim not yet shown. */
function elementwiseDim(pen: Pen, i: number, d: number): SVGElement | null {
  const { plan, st, animate } = pen;
  const o = plan.operands[i];
  const conflict = plan.conflict;
  const ghost = d < o.ghost;
  if (ghost && !st.padded) {
    return null;
  }
  const col = pen.L.cols[d];
  const check = col.check;
  const size = o.padded[d];
  const stretches = !!check && check.verdict === 'stretch' && check.stretched.includes(i);
  // the pair torch reports, once the conflict is shown; in any other clashing column,
  // every size that is not 1, once that column is compared
  const clash =
    st.conflict && !!conflict && conflict.dim === d ? conflict.operands.includes(i) : !ghost && size !== 1 && check?.verdict === 'conflict' && st.compared.has(d);
  const cls = ['fv-bc-dim'];
  if (ghost) {
    cls.push('fv-ghost');
  }
  if (size === 1 && stretches) {
    cls.push('fv-one');
  }
  if (stretches && st.stretched) {
    cls.push('fv-stretched');
  }
  if (clash) {
    cls.push('fv-clash');
  }
  if (animate && ((ghost && st.step?.kind === 'pad') || (stretches && st.step?.kind === 'stretch') || (clash && st.current === d))) {
    cls.push('fv-new');
  }
  const fr = d - plan.ndim;
  let tip = ghost
    ? `${o.name}, ${dimLabel(fr)}: padded — ${o.name} has only ${o.shape.length} dim${o.shape.length === 1 ? '' : 's'}, so it counts as size 1`
    : `${o.name}, ${dimLabel(fr)} (dim ${d}): size ${size}`;
  if (stretches && check?.size !== null && check?.size !== undefined) {
    tip += st.stretched ? `, stretched to ${check.size} with stride 0` : `, stretches to ${check.size}`;
  }
  if (clash) {
    tip += ': clashes, neither this size nor the other is 1';
  }
  return dimBox(pen, cls, { 'data-operand': i, 'data-dim': d, 'data-size': size }, col.x, pen.rows.rowTop(i), String(size), tip, {
    narrow: stretches && !st.stretched,
    stretchTo: stretches && st.stretched ? check!.size : null,
    color: colorOf(i),
    dash: ghost ? '4 3' : undefined,
    clash
  });
}

/** Rows of an elementwise plan: one box per result dim. */
export function drawElementwiseRows(pen: Pen, rowsLayer: SVGElement): void {
  pen.plan.operands.forEach((_o, i) => {
    const row = rowFrame(pen, i);
    for (let d = 0; d < pen.plan.ndim; d++) {
      const box = elementwiseDim(pen, i, d);
      if (box) {
        row.appendChild(box);
      }
    }
    rowsLayer.appendChild(row);
  });
}

/** Batch dim ``c`` of matmul operand ``i``: null while it is a padded dim not yet shown. */
function batchDim(pen: Pen, mm: MatmulPlan, i: number, c: number): SVGElement | null {
  const { st, animate } = pen;
  const { nb, names, cols, checks } = pen.L;
  const batch = [mm.a_batch, mm.b_batch][i];
  const lead = nb - batch.length;
  const ghost = c < lead;
  if (ghost && !st.padded) {
    return null;
  }
  const check = cols[c].check;
  const size = ghost ? 1 : batch[c - lead];
  const stretches = !!check && check.verdict === 'stretch' && check.stretched.includes(i);
  const batchConflict = checks.some(x => x.verdict === 'conflict' && x.dim === c);
  const clash = st.conflict && batchConflict && size !== 1 && st.compared.has(c);
  const cls = ['fv-bc-dim'];
  if (ghost) {
    cls.push('fv-ghost');
  }
  if (stretches && size === 1) {
    cls.push('fv-one');
  }
  if (stretches && st.compared.has(c)) {
    cls.push('fv-stretched');
  }
  if (clash) {
    cls.push('fv-clash');
  }
  if (animate && st.step?.kind === 'batch' && (ghost || stretches)) {
    cls.push('fv-new');
  }
  const tip = ghost ? `${names[i]}: batch ${dimLabel(c - nb)} padded (size 1)` : `${names[i]}: batch ${dimLabel(c - nb)}, size ${size}`;
  return dimBox(pen, cls, { 'data-operand': i, 'data-dim': c, 'data-size': size }, cols[c].x, pen.rows.rowTop(i), String(size), tip, {
    narrow: stretches && !st.compared.has(c),
    stretchTo: stretches && st.compared.has(c) ? check!.size : null,
    color: colorOf(i),
    dash: ghost ? '4 3' : undefined,
    clash
  });
}

/** The matrix frame of matmul operand ``i`` and its two dims (n, k) or (k, m). */
function matrixDims(pen: Pen, mm: MatmulPlan, i: number, row: SVGElement): void {
  const { doc, st } = pen;
  const { nb, names, cols, CW } = pen.L;
  const top = pen.rows.rowTop(i);
  const m = [mm.a_matrix, mm.b_matrix][i];
  const mx = cols[nb].x;
  const innerCol = [nb + 1, nb]; // where each operand's k sits
  const innerClash = st.inner && !mm.inner_ok;
  row.appendChild(s(doc, 'rect', { class: 'fv-bc-matrix', x: r2(mx - 3), y: r2(top - 3), width: r2(2 * CW + GAP + 6), height: BOX_H + 6, rx: 6 }));
  const oneD = [mm.a_shape, mm.b_shape][i].length === 1;
  const letters = i === 0 ? ['n', 'k'] : ['k', 'm'];
  [0, 1].forEach(j => {
    const colIdx = nb + j;
    const promoted = oneD && ((i === 0 && j === 0) || (i === 1 && j === 1));
    const isK = colIdx === innerCol[i];
    const clash = isK && innerClash;
    const cls = ['fv-bc-dim', 'fv-bc-mdim'];
    if (promoted) {
      cls.push('fv-ghost', 'fv-promoted');
    }
    if (isK) {
      cls.push('fv-bc-k');
      if (st.step?.kind === 'inner') {
        cls.push('fv-current');
      }
    }
    if (clash) {
      cls.push('fv-clash');
    }
    const size = m[j] ?? 1;
    const tip = promoted
      ? `${names[i]} is 1-D: promoted with a size-1 ${j === 0 ? 'row' : 'column'} dim that the result drops`
      : `${names[i]}: ${letters[j]} = ${size}${isK ? ' (the inner dim: must equal the other k)' : ''}`;
    row.appendChild(
      dimBox(pen, cls, { 'data-operand': i, 'data-dim': colIdx, 'data-size': size }, cols[colIdx].x, top, String(size), tip, {
        color: colorOf(i),
        dash: promoted ? '4 3' : undefined,
        letter: letters[j],
        clash
      })
    );
  });
}

/** The link between a's k and b's k, "=" or "≠". */
function innerLink(pen: Pen, mm: MatmulPlan): SVGElement {
  const { doc, st, animate } = pen;
  const { nb, cols, CW } = pen.L;
  const [ka, kb] = mm.inner;
  const ax = cols[nb + 1].x + CW / 2;
  const ay = pen.rows.rowTop(0) + BOX_H;
  const bx = cols[nb].x + CW / 2;
  const by = pen.rows.rowTop(1);
  const cls = ['fv-bc-inner', mm.inner_ok ? 'fv-equal' : 'fv-conflict'];
  if (st.step?.kind === 'inner') {
    cls.push('fv-current');
    if (animate) {
      cls.push('fv-new');
    }
  }
  const g = s(doc, 'g', { class: cls.join(' '), 'data-k': `${ka},${kb}` });
  const mxp = (ax + bx) / 2;
  const myp = (ay + by) / 2;
  g.append(
    title(pen, mm.inner_ok ? `inner dims: ${ka} = ${kb}` : `inner dims: ${ka} ≠ ${kb}`),
    s(doc, 'path', { class: 'fv-bc-inner-path', d: `M${r2(ax)},${r2(ay)} L${r2(bx)},${r2(by)}` }),
    s(doc, 'circle', { class: 'fv-bc-inner-dot', cx: r2(mxp), cy: r2(myp), r: 8 }),
    text(pen, mxp, myp + 4, mm.inner_ok ? '=' : '≠', 'fv-bc-inner-sym', { 'text-anchor': 'middle' }),
    text(pen, mxp + 14, myp + 4, mm.inner_ok ? `k: ${ka} = ${kb}` : `k: ${ka} ≠ ${kb} ✗`, 'fv-bc-inner-text')
  );
  return g;
}

/** Rows of a matmul: batch dims, the matrix, and the inner dims linked once compared. */
export function drawMatmulRows(pen: Pen, mm: MatmulPlan, rowsLayer: SVGElement): void {
  const nOps = pen.plan.operands.length;
  [0, 1].forEach(i => {
    if (i >= nOps) {
      return;
    }
    const row = rowFrame(pen, i);
    for (let c = 0; c < pen.L.nb; c++) {
      const box = batchDim(pen, mm, i, c);
      if (box) {
        row.appendChild(box);
      }
    }
    matrixDims(pen, mm, i, row);
    rowsLayer.appendChild(row);
  });
  if (pen.st.inner && mm.inner.length === 2 && nOps >= 2) {
    rowsLayer.appendChild(innerLink(pen, mm));
  }
}
