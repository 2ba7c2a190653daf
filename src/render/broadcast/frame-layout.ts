/**
 * The geometry of the broadcast animation's frames, computed once per plan: every frame of
 * a plan has the same size, so frames can be exported one by one into a GIF. Columns (one per
 * result dim, or batch dims plus the two matrix dims of a matmul), the value grids' slots and
 * the notes under the diagram. Pure arithmetic; no DOM.
 */
import type { BroadcastPlan, DimCheck, MatmulPlan, Operand } from '../../model/wire';
import {
  bytesLine,
  checksOf,
  dimLabel,
  dtypeName,
  expandCall,
  formatBytes,
  FrameState,
  GridGeom,
  gridGeometry,
  stretchedDims,
  tupleText,
  wrapText
} from './layout';

export const BOX_H = 30;
export const GAP = 8;
/** between batch and matrix columns */
export const MGAP = 22;
export const HEAD_H = 34;
export const VERDICT_H = 38;
/** height of a value cell */
export const VCH = 20;
export const LINE = 16;
/** average width of a 12px character */
export const CHAR = 6.6;

/** One column of the table: a result dim (elementwise), a batch dim or a matrix dim (matmul). */
export interface Col {
  dim: number;
  x: number;
  head: string;
  sub: string;
  check: DimCheck | null;
}

/** A note under the diagram (SVG text, so exports carry it), wrapped, and the frames that show it. */
export interface Note {
  cls: string;
  text: string;
  show: (st: FrameState) => boolean;
  lines: string[];
}

/** A value grid: an operand's (``i``) or the result's (``i`` = -1). */
export interface Slot {
  i: number;
  x: number;
  label: string;
  stretchLabel: string | null;
  geom: GridGeom;
  /** laid out over the result shape */
  full: boolean;
}

/** The operator (or "=") between two value grids. */
export interface OpMark {
  x: number;
  t: string;
  result: boolean;
}

export interface FrameLayout {
  mm: MatmulPlan | null;
  checks: DimCheck[];
  names: string[];
  /** each operand's name and its "shape · dtype · bytes" line */
  labels: { name: string; meta: string }[];
  resultShape: number[] | null;
  resultMeta: string;
  /** column width */
  CW: number;
  cols: Col[];
  /** matmul: how many batch columns */
  nb: number;
  tableW: number;
  rowPitch: number;
  /** value cell width */
  VCW: number;
  slots: Slot[];
  opMarks: OpMark[];
  valuesH: number;
  valuesW: number;
  W0: number;
  maxChars: number;
  notes: Note[];
  /** step ``i``'s text, wrapped */
  stepLines: (i: number) => string[];
  maxStepLines: number;
}

function operandLabel(o: Operand): { name: string; meta: string } {
  const meta = [tupleText(o.shape), o.dtype ? dtypeName(o.dtype) : 'shape only', o.nbytes !== null ? formatBytes(o.nbytes) : null].filter(Boolean).join(' · ');
  return { name: o.name, meta };
}

/** Column width: room for the widest size text ("1→64", "k=128"). */
function columnWidth(plan: BroadcastPlan, checks: DimCheck[], mm: MatmulPlan | null): number {
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
  return Math.max(54, ...sizeTexts.map(t => t.length * 7.6 + 16));
}

function columns(plan: BroadcastPlan, mm: MatmulPlan | null, checks: DimCheck[], LW: number, CW: number): { cols: Col[]; nb: number } {
  const checkAt = (d: number) => checks.find(c => c.dim === d) ?? null;
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
  return { cols, nb };
}

/** The value grids of an elementwise plan with small tensors: operands, then the result. */
function valueSlots(plan: BroadcastPlan, mm: MatmulPlan | null): Pick<FrameLayout, 'VCW' | 'slots' | 'opMarks' | 'valuesH' | 'valuesW'> {
  const valueOps = !mm ? plan.operands.map((o, i) => ({ o, i })).filter(({ o }) => o.values !== null && o.values.length > 0) : [];
  const hasResultValues = !mm && !!plan.result_values && !!plan.result_shape && plan.result_values.length > 0;
  const allValues = [...valueOps.flatMap(({ o }) => [...(o.values ?? []), ...(o.expanded_values ?? [])]), ...(hasResultValues ? plan.result_values! : [])];
  const VCW = Math.max(24, Math.min(64, Math.ceil(Math.max(1, ...allValues.map(v => v.length)) * 6.6 + 10)));
  const slots: Slot[] = [];
  let vx = 0;
  let valuesH = 0;
  const opSym = /^[^\w\s]+$/.test(plan.op) ? plan.op : ',';
  const opMarks: OpMark[] = [];
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
  return { VCW, slots, opMarks, valuesH, valuesW: vx };
}

/** Notes of a matmul: promoted 1-D operands and the inner dims. */
function matmulNotes(mm: MatmulPlan, names: string[]): Omit<Note, 'lines'>[] {
  const notes: Omit<Note, 'lines'>[] = [];
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
  return notes;
}

/** Notes of an elementwise plan that stretches: stride 0, each stretched operand's strides. */
function strideNotes(plan: BroadcastPlan): Omit<Note, 'lines'>[] {
  const notes: Omit<Note, 'lines'>[] = [];
  if (!plan.checks.some(c => c.verdict === 'stretch')) {
    return notes;
  }
  notes.push({ cls: 'fv-bc-stride0', text: 'stride 0: the same values repeat, no memory is copied', show: f => f.stretched });
  plan.operands.forEach((o, i) => {
    if (stretchedDims(plan.checks, i).length === 0) {
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
  return notes;
}

/** Notes about the conflict: where it is and the fixes torch accepts. */
function conflictNotes(plan: BroadcastPlan, mm: MatmulPlan | null, checks: DimCheck[], names: string[]): Omit<Note, 'lines'>[] {
  const notes: Omit<Note, 'lines'>[] = [];
  const c = plan.conflict;
  if (!c) {
    return notes;
  }
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
  return notes;
}

/** Every note of the plan, in order, wrapped to ``maxChars``. */
function planNotes(plan: BroadcastPlan, mm: MatmulPlan | null, checks: DimCheck[], names: string[], maxChars: number): Note[] {
  const notes: Omit<Note, 'lines'>[] = [];
  if (mm) {
    notes.push(...matmulNotes(mm, names));
  } else if (plan.ok && plan.result_shape) {
    notes.push(...strideNotes(plan));
  }
  const bl = bytesLine(plan);
  if (bl) {
    notes.push({ cls: 'fv-bc-bytes', text: bl, show: f => f.result });
  }
  notes.push(...conflictNotes(plan, mm, checks, names));
  return notes.map(n => ({ ...n, lines: wrapText(n.text, maxChars) }));
}

/** The sizes and places shared by every frame of ``plan``. */
export function layoutFrames(plan: BroadcastPlan): FrameLayout {
  const steps = plan.steps ?? [];
  const names = plan.operands.map(o => o.name);
  const mm: MatmulPlan | null = plan.kind === 'matmul' ? plan.matmul : null;
  const checks = checksOf(plan);
  const resultShape = plan.result_shape ?? (mm ? mm.result_shape : null);
  const resultMeta = [plan.result_dtype ? dtypeName(plan.result_dtype) : null, plan.result_nbytes !== null ? formatBytes(plan.result_nbytes) : null].filter(Boolean).join(' · ');
  const labels = plan.operands.map(operandLabel);
  const LW = Math.max(96, ...labels.map(l => Math.max(l.name.length * 7.6, l.meta.length * 6) + 18), `result ${resultShape ? tupleText(resultShape) : ''}`.length * 7.6 + 18, resultMeta.length * 6 + 18);
  const CW = columnWidth(plan, checks, mm);
  const { cols, nb } = columns(plan, mm, checks, LW, CW);
  const tableW = cols.length ? cols[cols.length - 1].x + CW : LW;
  const rowPitch = mm ? BOX_H + 26 : BOX_H + 10;
  const values = valueSlots(plan, mm);
  const W0 = Math.max(520, tableW, values.valuesW);
  const maxChars = Math.max(40, Math.floor(W0 / CHAR));
  const notes = planNotes(plan, mm, checks, names, maxChars);
  const stepLines = (i: number) => (steps[i] ? wrapText(steps[i].text, maxChars).filter(Boolean) : []);
  const maxStepLines = Math.max(1, ...steps.map((_, i) => stepLines(i).length));
  return { mm, checks, names, labels, resultShape, resultMeta, CW, cols, nb, tableW, rowPitch, ...values, W0, maxChars, notes, stepLines, maxStepLines };
}
