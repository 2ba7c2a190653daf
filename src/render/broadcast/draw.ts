/**
 * One frame of the broadcast animation as an SVG group: shapes as rows of dim boxes in
 * result-dim columns, per-dim verdicts, stretching, value grids, the result and the conflict.
 * Every frame of a plan has the same size (laid out for the whole plan), so frames can be
 * exported one by one into a GIF. Pure DOM/SVG; imports nothing from Jupyter or anywidget.
 */
import type { BroadcastPlan, DimCheck, MatmulPlan, Operand } from '../../model/wire';
import { r2, s } from '../common/dom';
import {
  bytesLine,
  checksOf,
  dimLabel,
  dtypeName,
  expandCall,
  exprText,
  formatBytes,
  FrameState,
  frameState,
  GridGeom,
  gridGeometry,
  indexText,
  indicesOf,
  isRepeat,
  sourceIndex,
  stretchedDims,
  tupleText,
  VERDICT_SYMBOL,
  wrapText
} from './layout';

/** Okabe–Ito for the operands (the verdicts use green, sky blue and vermillion), plus a dash each. */
export const OPERAND_COLORS = ['#0072B2', '#E69F00', '#CC79A7', '#7F7F7F', '#000000'];
export const OPERAND_DASHES = ['none', '6 3', '2 2', '8 3 2 3', '1 3'];

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

const BOX_H = 30;
const GAP = 8;
const MGAP = 22; // between batch and matrix columns
const HEAD_H = 34;
const VERDICT_H = 38;
const VCH = 20;
const LINE = 16;
const CHAR = 6.6; // average width of a 12px character

type Attrs = Record<string, string | number | boolean | null | undefined>;

interface Col {
  dim: number;
  x: number;
  head: string;
  sub: string;
  check: DimCheck | null;
}

interface Note {
  cls: string;
  text: string;
  show: (st: FrameState) => boolean;
}

export function drawFrame(doc: Document, plan: BroadcastPlan, k: number, opts: DrawOptions): DrawnFrame {
  const st = frameState(plan, k);
  const steps = plan.steps ?? [];
  const animate = opts.animate;
  const root = s(doc, 'g', { class: 'fv-bc-content', 'data-step': st.index }) as SVGGElement;
  const names = plan.operands.map(o => o.name);
  const colorOf = (i: number) => OPERAND_COLORS[i % OPERAND_COLORS.length];
  const dashOf = (i: number) => OPERAND_DASHES[i % OPERAND_DASHES.length];
  const mm: MatmulPlan | null = plan.kind === 'matmul' ? plan.matmul : null;
  const checks = checksOf(plan);
  const checkAt = (d: number) => checks.find(c => c.dim === d) ?? null;

  const text = (x: number, y: number, content: string, cls: string, extra: Attrs = {}) => s(doc, 'text', { x: r2(x), y: r2(y), class: cls, ...extra }, content);
  const title = (t: string) => s(doc, 'title', {}, t);

  // ---- sizes for the whole plan (every frame the same) --------------------------------------
  const labelOf = (o: Operand) => {
    const meta = [tupleText(o.shape), o.dtype ? dtypeName(o.dtype) : 'shape only', o.nbytes !== null ? formatBytes(o.nbytes) : null].filter(Boolean).join(' · ');
    return { name: o.name, meta };
  };
  const resultShape = plan.result_shape ?? (mm ? mm.result_shape : null);
  const resultMeta = [plan.result_dtype ? dtypeName(plan.result_dtype) : null, plan.result_nbytes !== null ? formatBytes(plan.result_nbytes) : null].filter(Boolean).join(' · ');
  const labels = plan.operands.map(labelOf);
  const LW = Math.max(96, ...labels.map(l => Math.max(l.name.length * 7.6, l.meta.length * 6) + 18), `result ${resultShape ? tupleText(resultShape) : ''}`.length * 7.6 + 18, resultMeta.length * 6 + 18);
  const sizeTexts: string[] = [];
  for (const o of plan.operands) {
    o.padded.forEach(n => sizeTexts.push(String(n)));
  }
  for (const c of checks) {
    if (c.size !== null) {
      sizeTexts.push(`1→${c.size}`);
    }
  }
  if (mm) {
    [...mm.a_matrix, ...mm.b_matrix, ...mm.a_batch, ...mm.b_batch].forEach(n => sizeTexts.push(`k=${n}`));
  }
  const CW = Math.max(54, ...sizeTexts.map(t => t.length * 7.6 + 16));

  // columns
  const cols: Col[] = [];
  let nb = 0;
  if (mm) {
    nb = Math.max(mm.a_batch.length, mm.b_batch.length);
    for (let c = 0; c < nb; c++) {
      cols.push({ dim: c, x: LW + c * (CW + GAP), head: dimLabel(c - nb - 2), sub: 'batch', check: checkAt(c) });
    }
    cols.push({ dim: nb, x: LW + nb * (CW + GAP) + (nb ? MGAP : 0), head: 'dim -2', sub: 'rows', check: null });
    cols.push({ dim: nb + 1, x: LW + (nb + 1) * (CW + GAP) + (nb ? MGAP : 0), head: 'dim -1', sub: 'cols', check: null });
  } else {
    for (let d = 0; d < plan.ndim; d++) {
      cols.push({ dim: d, x: LW + d * (CW + GAP), head: dimLabel(d - plan.ndim), sub: `dim ${d}`, check: checkAt(d) });
    }
  }
  const tableW = cols.length ? cols[cols.length - 1].x + CW : LW;
  const rowPitch = mm ? BOX_H + 26 : BOX_H + 10;

  // value grids (elementwise, small tensors)
  const valueOps = !mm ? plan.operands.map((o, i) => ({ o, i })).filter(({ o }) => o.values !== null && o.values.length > 0) : [];
  const hasResultValues = !mm && !!plan.result_values && !!plan.result_shape && plan.result_values.length > 0;
  const allValues = [...valueOps.flatMap(({ o }) => [...(o.values ?? []), ...(o.expanded_values ?? [])]), ...(hasResultValues ? plan.result_values! : [])];
  const VCW = Math.max(24, Math.min(64, Math.ceil(Math.max(1, ...allValues.map(v => v.length)) * 6.6 + 10)));
  interface Slot {
    i: number; // operand, -1 = result
    x: number;
    label: string;
    stretchLabel: string | null;
    geom: GridGeom;
    full: boolean; // laid out over the result shape
  }
  const slots: Slot[] = [];
  let vx = 0;
  let valuesH = 0;
  const opSym = /^[^\w\s]+$/.test(plan.op) ? plan.op : ',';
  const opMarks: { x: number; t: string; result: boolean }[] = [];
  for (const { o, i } of valueOps) {
    const full = !!plan.result_shape && !!o.expanded_values && plan.ok;
    const geom = gridGeometry(full ? plan.result_shape! : o.padded, VCW, VCH);
    const stretchLabel = full && stretchedDims(plan.checks, i).length ? expandCall(o.name, plan.result_shape!) : null;
    const w = Math.max(geom.width, o.name.length * 7.2, (stretchLabel ?? '').length * 6.4);
    if (slots.length) {
      opMarks.push({ x: vx + 12, t: opSym, result: false });
      vx += 24;
    }
    slots.push({ i, x: vx, label: o.name, stretchLabel, geom, full });
    vx += w + 8;
    valuesH = Math.max(valuesH, geom.height);
  }
  if (hasResultValues) {
    const geom = gridGeometry(plan.result_shape!, VCW, VCH);
    if (slots.length) {
      opMarks.push({ x: vx + 12, t: '=', result: true });
      vx += 24;
    }
    const label = `result ${tupleText(plan.result_shape!)}`;
    slots.push({ i: -1, x: vx, label, stretchLabel: null, geom, full: true });
    vx += Math.max(geom.width, label.length * 7.2) + 8;
    valuesH = Math.max(valuesH, geom.height);
  }
  const valuesW = vx;

  const W0 = Math.max(520, tableW, valuesW);
  const maxChars = Math.max(40, Math.floor(W0 / CHAR));

  // notes (SVG text under the diagram, so exports carry them)
  const notes: Note[] = [];
  const isStretched = (i: number) => stretchedDims(plan.checks, i).length > 0;
  if (mm) {
    for (const p of mm.promoted) {
      notes.push({ cls: 'fv-bc-promoted-line', text: p, show: () => true });
    }
    if (mm.inner.length === 2) {
      const [ka, kb] = mm.inner;
      const [na, nbn] = [names[0] ?? 'a', names[1] ?? 'b'];
      notes.push({
        cls: 'fv-bc-inner-line',
        text: mm.inner_ok
          ? `inner dims: ${na} has ${ka} columns, ${nbn} has ${kb} rows: equal, so they multiply (k = ${ka})`
          : `✗ inner dims: ${na} has ${ka} columns but ${nbn} has ${kb} rows: a matmul needs them equal`,
        show: f => f.inner
      });
    }
  } else if (plan.ok && plan.result_shape) {
    if (plan.checks.some(c => c.verdict === 'stretch')) {
      notes.push({ cls: 'fv-bc-stride0', text: 'stride 0: the same values repeat, no memory is copied', show: f => f.stretched });
      plan.operands.forEach((o, i) => {
        if (!isStretched(i)) {
          return;
        }
        const call = expandCall(o.name, plan.result_shape!);
        if (o.stride && o.expanded_stride) {
          notes.push({ cls: 'fv-bc-stride-line', text: `${o.name}: stride ${tupleText(o.stride)} → ${call}: stride ${tupleText(o.expanded_stride)}`, show: f => f.stretched });
        } else {
          const dims = stretchedDims(plan.checks, i).map(d => dimLabel(d - plan.ndim)).join(', ');
          notes.push({ cls: 'fv-bc-stride-line', text: `${o.name} stretches along ${dims} with stride 0`, show: f => f.stretched });
        }
        notes.push({ cls: 'fv-bc-link', text: `see it in the stride view: forgeviz.strides(${call})`, show: f => f.stretched });
      });
    }
  }
  const bl = bytesLine(plan);
  if (bl) {
    notes.push({ cls: 'fv-bc-bytes', text: bl, show: f => f.result });
  }
  if (plan.conflict) {
    const c = plan.conflict;
    const [i, j] = c.operands;
    // a matmul whose inner dims differ says so in its inner line
    if (!mm || (mm.inner_ok && checks.some(x => x.verdict === 'conflict'))) {
      const where = mm ? `batch ${dimLabel(c.from_right)}` : dimLabel(c.from_right);
      notes.push({
        cls: 'fv-bc-conflict-mark',
        text: `✗ conflict at ${where}: ${names[i] ?? '?'} has ${c.sizes[0]}, ${names[j] ?? '?'} has ${c.sizes[1]}, and neither is 1`,
        show: f => f.conflict
      });
    }
    for (const fix of c.fixes) {
      notes.push({ cls: 'fv-bc-fix-line', text: `fix: ${fix}`, show: f => f.conflict });
    }
  }
  const noteLines = notes.map(n => ({ ...n, lines: wrapText(n.text, maxChars) }));

  // heading: expression, source, "step k/n · title", the step's text (room for the longest)
  const stepLines = (i: number) => (steps[i] ? wrapText(steps[i].text, maxChars).filter(Boolean) : []);
  const maxStepLines = Math.max(1, ...steps.map((_, i) => stepLines(i).length));
  let T = 16; // table top: room for the current column's mark
  if (opts.heading) {
    let y = 16;
    const head = s(doc, 'g', { class: 'fv-bc-heading', 'aria-hidden': 'true' });
    head.appendChild(text(0, y, exprText(plan), 'fv-bc-expr'));
    if (plan.source) {
      y += LINE;
      head.appendChild(text(0, y, plan.source, 'fv-bc-src-line'));
    }
    y += 22;
    if (st.step) {
      head.appendChild(text(0, y, `step ${st.index + 1}/${steps.length} · ${st.step.title}`, 'fv-bc-step-title'));
      stepLines(st.index).forEach((l, n) => head.appendChild(text(0, y + 16 + n * 15, l, 'fv-bc-step-text')));
    } else {
      head.appendChild(text(0, y, plan.ok ? `result ${resultShape ? tupleText(resultShape) : ''}` : 'does not broadcast', 'fv-bc-step-title'));
    }
    root.appendChild(head);
    T = y + 16 + maxStepLines * 15 + 8;
  }

  // ---- the table ------------------------------------------------------------------------------
  const nOps = plan.operands.length;
  const rowTop = (i: number) => T + HEAD_H + i * rowPitch;
  const verdictTop = rowTop(nOps) - (rowPitch - BOX_H) + 6;
  const ruleY = verdictTop + VERDICT_H;
  const resultTop = ruleY + 8;
  const tableBottom = resultTop + BOX_H + 6;

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
    g.appendChild(title(compared ? `${c.head} (${c.sub}): ${c.check!.text}` : `${c.head} (${c.sub})`));
    g.appendChild(s(doc, 'rect', { class: 'fv-bc-col-bg', x: r2(c.x - 3), y: T - 4, width: r2(CW + 6), height: r2(tableBottom - T + 4), rx: 5 }));
    if (st.current === c.dim) {
      g.appendChild(text(c.x + CW / 2, T - 6, '▼', 'fv-bc-cur-mark', { 'text-anchor': 'middle' }));
    }
    g.append(text(c.x + CW / 2, T + 12, c.head, 'fv-bc-col-head', { 'text-anchor': 'middle' }), text(c.x + CW / 2, T + 25, c.sub, 'fv-bc-col-sub', { 'text-anchor': 'middle' }));
    if (compared) {
      const v = c.check!.verdict;
      g.append(
        text(c.x + CW / 2, verdictTop + 17, VERDICT_SYMBOL[v], 'fv-bc-verdict-sym', { 'text-anchor': 'middle' }),
        text(c.x + CW / 2, verdictTop + 31, v, 'fv-bc-verdict-word', { 'text-anchor': 'middle' })
      );
    }
    colLayer.appendChild(g);
  }

  /** A dim box. */
  function dimBox(cls: string[], attrs: Attrs, x: number, top: number, label: string, tip: string, opts2: { narrow?: boolean; stretchTo?: number | null; color?: string; dash?: string; letter?: string; clash?: boolean }): SVGElement {
    const g = s(doc, 'g', { class: cls.join(' '), ...attrs });
    g.appendChild(title(tip));
    const w = opts2.narrow ? CW * 0.5 : CW;
    const bx = x + (CW - w) / 2;
    g.appendChild(s(doc, 'rect', { class: 'fv-bc-box', x: r2(bx + 0.5), y: r2(top + 0.5), width: r2(w - 1), height: BOX_H - 1, rx: 4, stroke: opts2.color, fill: opts2.color, 'stroke-dasharray': opts2.dash }));
    if (opts2.letter) {
      g.appendChild(text(bx + 4, top + 10, opts2.letter, 'fv-bc-letter'));
    }
    if (opts2.stretchTo !== undefined && opts2.stretchTo !== null) {
      g.appendChild(text(x + CW / 2, top + 14, `${label}→${opts2.stretchTo}`, 'fv-bc-size', { 'text-anchor': 'middle' }));
      // a double arrow across the box: the static cue for "stretched"
      const ay = top + 22;
      const x1 = bx + 6;
      const x2 = bx + w - 6;
      g.appendChild(s(doc, 'path', { class: 'fv-bc-arrow', d: `M${r2(x1)},${r2(ay)} H${r2(x2)} M${r2(x1 + 4)},${r2(ay - 3)} L${r2(x1)},${r2(ay)} L${r2(x1 + 4)},${r2(ay + 3)} M${r2(x2 - 4)},${r2(ay - 3)} L${r2(x2)},${r2(ay)} L${r2(x2 - 4)},${r2(ay + 3)}` }));
    } else {
      g.appendChild(text(x + CW / 2, top + 19, label, 'fv-bc-size', { 'text-anchor': 'middle' }));
    }
    if (opts2.clash) {
      g.appendChild(text(bx + w - 8, top + 19, '✗', 'fv-bc-clash-mark', { 'text-anchor': 'middle' }));
    }
    return g;
  }

  const rowsLayer = s(doc, 'g', { class: 'fv-bc-rows' });
  root.appendChild(rowsLayer);

  function rowFrame(i: number): SVGElement {
    const o = plan.operands[i];
    const top = rowTop(i);
    const row = s(doc, 'g', { class: 'fv-bc-row', 'data-operand': i, role: 'group', 'aria-label': `${o.name}: shape ${tupleText(o.shape)}` });
    const lab = labels[i];
    row.append(
      s(doc, 'line', { class: 'fv-bc-swatch', x1: 0, x2: 14, y1: top + 9, y2: top + 9, stroke: colorOf(i), 'stroke-dasharray': dashOf(i), 'stroke-width': 3 }),
      text(20, top + 13, lab.name, 'fv-bc-name'),
      text(0, top + 27, lab.meta, 'fv-bc-meta')
    );
    return row;
  }

  if (!mm) {
    // ---- elementwise rows ----------------------------------------------------------------------
    const conflict = plan.conflict;
    plan.operands.forEach((o, i) => {
      const row = rowFrame(i);
      const top = rowTop(i);
      for (let d = 0; d < plan.ndim; d++) {
        const ghost = d < o.ghost;
        if (ghost && !st.padded) {
          continue;
        }
        const col = cols[d];
        const check = col.check;
        const size = o.padded[d];
        const stretches = !!check && check.verdict === 'stretch' && check.stretched.includes(i);
        // the pair torch reports, once the conflict is shown; in any other clashing column,
        // every size that is not 1, once that column is compared
        const clash =
          st.conflict && !!conflict && conflict.dim === d
            ? conflict.operands.includes(i)
            : !ghost && size !== 1 && check?.verdict === 'conflict' && st.compared.has(d);
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
        let tip = ghost ? `${o.name}, ${dimLabel(fr)}: padded — ${o.name} has only ${o.shape.length} dim${o.shape.length === 1 ? '' : 's'}, so it counts as size 1` : `${o.name}, ${dimLabel(fr)} (dim ${d}): size ${size}`;
        if (stretches && check?.size !== null && check?.size !== undefined) {
          tip += st.stretched ? `, stretched to ${check.size} with stride 0` : `, stretches to ${check.size}`;
        }
        if (clash) {
          tip += ': clashes, neither this size nor the other is 1';
        }
        row.appendChild(
          dimBox(cls, { 'data-operand': i, 'data-dim': d, 'data-size': size }, col.x, top, String(size), tip, {
            narrow: stretches && !st.stretched,
            stretchTo: stretches && st.stretched ? check!.size : null,
            color: colorOf(i),
            dash: ghost ? '4 3' : undefined,
            clash
          })
        );
      }
      rowsLayer.appendChild(row);
    });
  } else {
    // ---- matmul rows: batch dims + the (n, k) / (k, m) matrices ---------------------------------
    const shapes = [mm.a_shape, mm.b_shape];
    const batches = [mm.a_batch, mm.b_batch];
    const matrices = [mm.a_matrix, mm.b_matrix];
    const innerCol = [nb + 1, nb]; // where each operand's k sits
    const batchConflictDims = new Set(checks.filter(c => c.verdict === 'conflict').map(c => c.dim));
    const innerClash = st.inner && !mm.inner_ok;
    [0, 1].forEach(i => {
      if (i >= nOps) {
        return;
      }
      const row = rowFrame(i);
      const top = rowTop(i);
      const batch = batches[i];
      const lead = nb - batch.length;
      for (let c = 0; c < nb; c++) {
        const ghost = c < lead;
        if (ghost && !st.padded) {
          continue;
        }
        const check = cols[c].check;
        const size = ghost ? 1 : batch[c - lead];
        const stretches = !!check && check.verdict === 'stretch' && check.stretched.includes(i);
        const clash = st.conflict && batchConflictDims.has(c) && size !== 1 && st.compared.has(c);
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
        row.appendChild(
          dimBox(cls, { 'data-operand': i, 'data-dim': c, 'data-size': size }, cols[c].x, top, String(size), tip, {
            narrow: stretches && !st.compared.has(c),
            stretchTo: stretches && st.compared.has(c) ? check!.size : null,
            color: colorOf(i),
            dash: ghost ? '4 3' : undefined,
            clash
          })
        );
      }
      // the matrix frame and its two dims
      const m = matrices[i];
      const mx = cols[nb].x;
      row.appendChild(s(doc, 'rect', { class: 'fv-bc-matrix', x: r2(mx - 3), y: r2(top - 3), width: r2(2 * CW + GAP + 6), height: BOX_H + 6, rx: 6 }));
      const oneD = shapes[i].length === 1;
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
        row.appendChild(dimBox(cls, { 'data-operand': i, 'data-dim': colIdx, 'data-size': size }, cols[colIdx].x, top, String(size), tip, { color: colorOf(i), dash: promoted ? '4 3' : undefined, letter: letters[j], clash }));
      });
      rowsLayer.appendChild(row);
    });
    // the inner dims, connected
    if (st.inner && mm.inner.length === 2 && nOps >= 2) {
      const [ka, kb] = mm.inner;
      const ax = cols[nb + 1].x + CW / 2;
      const ay = rowTop(0) + BOX_H;
      const bx = cols[nb].x + CW / 2;
      const by = rowTop(1);
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
        title(mm.inner_ok ? `inner dims: ${ka} = ${kb}` : `inner dims: ${ka} ≠ ${kb}`),
        s(doc, 'path', { class: 'fv-bc-inner-path', d: `M${r2(ax)},${r2(ay)} L${r2(bx)},${r2(by)}` }),
        s(doc, 'circle', { class: 'fv-bc-inner-dot', cx: r2(mxp), cy: r2(myp), r: 8 }),
        text(mxp, myp + 4, mm.inner_ok ? '=' : '≠', 'fv-bc-inner-sym', { 'text-anchor': 'middle' }),
        text(mxp + 14, myp + 4, mm.inner_ok ? `k: ${ka} = ${kb}` : `k: ${ka} ≠ ${kb} ✗`, 'fv-bc-inner-text')
      );
      rowsLayer.appendChild(g);
    }
  }

  // ---- result row ------------------------------------------------------------------------------
  const resG = s(doc, 'g', { class: 'fv-bc-result-area' });
  root.appendChild(resG);
  resG.appendChild(s(doc, 'line', { class: 'fv-bc-rule', x1: 0, x2: r2(tableW), y1: r2(ruleY), y2: r2(ruleY) }));
  let resultGroup: SVGElement | null = null;
  if (st.result && resultShape) {
    const cls = ['fv-bc-result'];
    if (animate && st.step?.kind === 'result') {
      cls.push('fv-new');
    }
    const rg = s(doc, 'g', { class: cls.join(' '), 'data-shape': resultShape.join(','), role: 'group', 'aria-label': `result ${tupleText(resultShape)}` });
    rg.append(text(0, resultTop + 13, `result ${tupleText(resultShape)}`, 'fv-bc-result-label'), text(0, resultTop + 27, resultMeta, 'fv-bc-meta'));
    if (!mm) {
      resultShape.forEach((n, d) => {
        const col = cols[d];
        if (col) {
          rg.appendChild(dimBox(['fv-bc-rdim'], { 'data-dim': d, 'data-size': n }, col.x, resultTop, String(n), `result ${dimLabel(d - resultShape.length)}: size ${n}`, {}));
        }
      });
    } else {
      const bs = mm.batch_shape ?? [];
      bs.forEach((n, j) => {
        const c = nb - bs.length + j;
        rg.appendChild(dimBox(['fv-bc-rdim'], { 'data-dim': c, 'data-size': n }, cols[c].x, resultTop, String(n), `result batch ${dimLabel(j - bs.length)}: size ${n}`, {}));
      });
      const aOne = mm.a_shape.length === 1;
      const bOne = mm.b_shape.length === 1;
      const n = mm.a_matrix[0];
      const m2 = mm.b_matrix[1];
      rg.appendChild(
        dimBox(aOne ? ['fv-bc-rdim', 'fv-ghost', 'fv-dropped'] : ['fv-bc-rdim'], { 'data-dim': nb, 'data-size': n }, cols[nb].x, resultTop, aOne ? '–' : String(n), aOne ? 'dropped: a was 1-D' : `result rows: n = ${n}`, { letter: 'n' })
      );
      rg.appendChild(
        dimBox(bOne ? ['fv-bc-rdim', 'fv-ghost', 'fv-dropped'] : ['fv-bc-rdim'], { 'data-dim': nb + 1, 'data-size': m2 }, cols[nb + 1].x, resultTop, bOne ? '–' : String(m2), bOne ? 'dropped: b was 1-D' : `result cols: m = ${m2}`, { letter: 'm' })
      );
    }
    resG.appendChild(rg);
    resultGroup = rg;
  } else if (st.conflict) {
    resG.appendChild(text(0, resultTop + 19, '✗ no result', 'fv-bc-noresult'));
  }

  // ---- value grids ------------------------------------------------------------------------------
  let yCursor = tableBottom + 6;
  if (slots.length) {
    const VT = yCursor + 6;
    const gy = VT + 18;
    const vLayer = s(doc, 'g', { class: 'fv-bc-valuegrids' });
    root.appendChild(vLayer);
    for (const m of opMarks) {
      if (!m.result || st.result) {
        vLayer.appendChild(text(m.x, gy + Math.min(valuesH, 3 * VCH) / 2 + 5, m.t, 'fv-bc-op', { 'text-anchor': 'middle' }));
      }
    }
    const maxChars2 = Math.max(1, Math.floor((VCW - 4) / 5.8));
    const clip = (v: string) => (v.length <= maxChars2 ? v : `${v.slice(0, Math.max(1, maxChars2 - 1))}…`);
    // The tooltip sits on a wrapper, so a cell's own text is just its value.
    const cell = (cls: string, attrs: Attrs, x: number, yy: number, v: string, tip: string, color: string | undefined) => {
      const c = s(doc, 'g', { class: cls, ...attrs, role: 'img', 'aria-label': tip });
      c.append(s(doc, 'rect', { class: 'fv-bc-vbox', x: 0.5, y: 0.5, width: VCW - 1, height: VCH - 1, fill: color }), text(VCW / 2, VCH / 2 + 4, clip(v), 'fv-bc-vtext', { 'text-anchor': 'middle' }));
      return s(doc, 'g', { class: 'fv-bc-vcell', transform: `translate(${r2(x)},${r2(yy)})` }, title(tip), c);
    };
    for (const slot of slots) {
      if (slot.i < 0) {
        if (!st.result || !resultGroup) {
          continue;
        }
        // the result grid lives inside g.fv-bc-result
        const grid = s(doc, 'g', { class: 'fv-bc-grid fv-bc-result-grid', transform: `translate(${r2(slot.x)},${r2(VT)})` });
        grid.appendChild(text(0, 12, slot.label, 'fv-bc-grid-label'));
        const vals = plan.result_values!;
        for (const c of slot.geom.cells) {
          const v = vals[c.flat] ?? '';
          const from = plan.operands.map(o => indexText(o.name, sourceIndex(o, c.index))).join(', ');
          grid.appendChild(cell('fv-bc-value', { 'data-index': c.index.join(',') }, c.x, 18 + c.y, v, `${indexText('result', c.index)} = ${v} ← ${from}`, undefined));
        }
        resultGroup.appendChild(grid);
        continue;
      }
      const o = plan.operands[slot.i];
      const stretchedHere = slot.full && st.stretched;
      const grid = s(doc, 'g', { class: `fv-bc-grid fv-bc-values${stretchedHere ? ' fv-stretched' : ''}`, 'data-operand': slot.i, transform: `translate(${r2(slot.x)},${r2(VT)})` });
      grid.appendChild(text(0, 12, stretchedHere && slot.stretchLabel ? slot.stretchLabel : slot.label, 'fv-bc-grid-label'));
      const sdims = stretchedDims(plan.checks, slot.i);
      const color = colorOf(slot.i);
      if (stretchedHere && o.expanded_values) {
        for (const c of slot.geom.cells) {
          const rep = isRepeat(c.index, sdims);
          const src = indexText(o.name, sourceIndex(o, c.index));
          const v = o.expanded_values[c.flat] ?? '';
          const cls = `fv-bc-ovalue ${rep ? 'fv-repeat' : 'fv-orig'}${rep && animate && st.step?.kind === 'stretch' ? ' fv-new' : ''}`;
          const tip = rep ? `${indexText(slot.stretchLabel ?? o.name, c.index)} = ${v}: the same element as ${src} (stride 0, not a copy)` : `${src} = ${v}`;
          grid.appendChild(cell(cls, { 'data-operand': slot.i, 'data-index': c.index.join(',') }, c.x, 18 + c.y, v, tip, color));
        }
      } else {
        const vals = o.values ?? [];
        indicesOf(o.padded).forEach((idx, f) => {
          const pos = slot.geom.at(idx);
          const v = vals[f] ?? '';
          const own = idx.slice(o.ghost);
          grid.appendChild(cell('fv-bc-ovalue fv-orig', { 'data-operand': slot.i, 'data-index': idx.join(',') }, pos.x, 18 + pos.y, v, `${indexText(o.name, own)} = ${v}`, color));
        });
      }
      vLayer.appendChild(grid);
    }
    yCursor = VT + 18 + valuesH + 10;
  }

  // ---- notes ------------------------------------------------------------------------------------
  const notesG = s(doc, 'g', { class: 'fv-bc-notes' });
  root.appendChild(notesG);
  let ny = yCursor + 12;
  for (const n of noteLines) {
    if (n.show(st)) {
      const g = s(doc, 'g', { class: n.cls });
      n.lines.forEach((l, j) => g.appendChild(text(0, ny + j * LINE, l, 'fv-bc-note')));
      notesG.appendChild(g);
    }
    ny += n.lines.length * LINE;
  }
  const height = Math.ceil(ny + 2);
  const headW = opts.heading ? Math.max(exprText(plan).length * 8.5, (plan.source ?? '').length * 6) : 0;
  const width = Math.ceil(Math.max(tableW, valuesW, headW, ...noteLines.flatMap(n => n.lines.map(l => l.length * CHAR)), Math.min(W0, maxChars * CHAR)));
  return { g: root as SVGGElement, width, height, state: st };
}
