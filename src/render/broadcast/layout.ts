/**
 * The broadcast animation's pure parts: which frame shows what, value-grid geometry,
 * number and shape text. No DOM.
 */
import type { BroadcastPlan, DimCheck, Operand, Step } from '../../model/wire';

/** Python's tuple text: (3, 4), (3,), (). */
export function tupleText(shape: readonly number[]): string {
  return shape.length === 1 ? `(${shape[0]},)` : `(${shape.join(', ')})`;
}

export function dtypeName(d: string | null | undefined): string {
  return d ? d.replace(/^torch\./, '') : '';
}

/** Bytes in binary units, exact when they divide (forgeviz.model.broadcast.format_bytes). */
export function formatBytes(n: number): string {
  for (const [unit, size] of [
    ['GiB', 2 ** 30],
    ['MiB', 2 ** 20],
    ['KiB', 2 ** 10]
  ] as const) {
    if (n >= size) {
      const v = n / size;
      return n % size === 0 ? `${v.toFixed(0)} ${unit}` : `${v.toFixed(2)} ${unit}`;
    }
  }
  return `${n} B`;
}

/** "result 32 MiB from inputs 32 MiB + 4 KiB" (null when the result's size is unknown). */
export function bytesLine(plan: BroadcastPlan): string | null {
  if (plan.result_nbytes === null || plan.result_nbytes === undefined) {
    return null;
  }
  const inputs = plan.operands.filter(o => o.nbytes !== null).map(o => formatBytes(o.nbytes as number));
  return `result ${formatBytes(plan.result_nbytes)}${inputs.length ? ` from input${inputs.length === 1 ? '' : 's'} ${inputs.join(' + ')}` : ''}`;
}

const SYMBOL_OP = /^[^\w\s]+$/;

/** "a + b", "a @ b", "broadcast(a, b, c)". */
export function exprText(plan: BroadcastPlan): string {
  const names = plan.operands.map(o => o.name);
  if (SYMBOL_OP.test(plan.op) && names.length === 2) {
    return `${names[0]} ${plan.op} ${names[1]}`;
  }
  return `${plan.op || 'broadcast'}(${names.join(', ')})`;
}

/** "b.expand(3, 4)", parenthesised when the name is not a plain identifier path. */
export function expandCall(name: string, shape: readonly number[]): string {
  const base = /^[A-Za-z_][\w.]*$/.test(name) ? name : `(${name})`;
  return `${base}.expand(${shape.join(', ')})`;
}

export function indexText(name: string, index: readonly number[]): string {
  return `${name}[${index.join(', ')}]`;
}

export const VERDICT_SYMBOL: Record<DimCheck['verdict'], string> = { equal: '=', stretch: '↔', conflict: '✗' };

/** "dim -1" for a result dim. */
export function dimLabel(fromRight: number): string {
  return `dim ${fromRight}`;
}

// ---- frames ---------------------------------------------------------------------------------

/** What frame ``k`` shows: the plan plus everything steps[0..k] revealed. */
export interface FrameState {
  /** the frame index (0 when the plan has no steps) */
  index: number;
  step: Step | null;
  /** padded leading dims are drawn (as ghosts) */
  padded: boolean;
  /** dims whose verdict is shown: result dims (elementwise) or batch dims (matmul) */
  compared: Set<number>;
  /** the dim this frame is about */
  current: number | null;
  stretched: boolean;
  result: boolean;
  conflict: boolean;
  /** matmul: the inner dims were compared */
  inner: boolean;
}

/** Checks by dim, for elementwise result dims or matmul batch dims. */
export function checksOf(plan: BroadcastPlan): DimCheck[] {
  return plan.kind === 'matmul' ? plan.matmul?.batch_checks ?? [] : plan.checks;
}

export function frameState(plan: BroadcastPlan, k: number): FrameState {
  const steps = plan.steps ?? [];
  const checks = checksOf(plan);
  if (!steps.length) {
    // no steps: everything at once
    return {
      index: 0,
      step: null,
      padded: true,
      compared: new Set(checks.map(c => c.dim)),
      current: null,
      stretched: plan.ok,
      result: plan.ok && !!plan.result_shape,
      conflict: !plan.ok,
      inner: true
    };
  }
  const last = Math.max(0, Math.min(steps.length - 1, Math.floor(k)));
  const st: FrameState = {
    index: last,
    step: steps[last],
    padded: false,
    compared: new Set(),
    current: null,
    stretched: false,
    result: false,
    conflict: false,
    inner: false
  };
  for (let i = 0; i <= last; i++) {
    const s = steps[i];
    switch (s.kind) {
      case 'pad':
        st.padded = true;
        break;
      case 'compare':
      case 'batch':
        st.padded = true;
        if (s.dim !== null) {
          st.compared.add(s.dim);
        } else if (s.kind === 'batch') {
          // a matmul's batch dims all at once
          checks.forEach(c => st.compared.add(c.dim));
        }
        break;
      case 'stretch':
        st.padded = true;
        st.stretched = true;
        break;
      case 'result':
        st.padded = true;
        st.result = true;
        break;
      case 'inner':
        st.inner = true;
        break;
      case 'conflict':
        st.conflict = true;
        if (plan.kind === 'elementwise') {
          st.padded = true;
          const d = s.dim ?? plan.conflict?.dim ?? null;
          if (d !== null) {
            st.compared.add(d);
          }
        } else {
          st.inner = true;
          // the batch dims that clash are shown with the conflict
          if (checks.some(c => c.verdict === 'conflict')) {
            st.padded = true;
            checks.filter(c => c.verdict === 'conflict').forEach(c => st.compared.add(c.dim));
          }
        }
        break;
      default:
        break;
    }
  }
  const cur = steps[last];
  if ((cur.kind === 'compare' || cur.kind === 'batch') && cur.dim !== null) {
    st.current = cur.dim;
  } else if (cur.kind === 'conflict') {
    if (plan.kind === 'elementwise') {
      st.current = cur.dim ?? plan.conflict?.dim ?? null;
    } else {
      st.current = checks.filter(c => c.verdict === 'conflict').reduce<number | null>((m, c) => (m === null ? c.dim : Math.max(m, c.dim)), null);
    }
  }
  return st;
}

/** The result dims along which operand ``i`` stretches (size 1 or padded, result size > 1). */
export function stretchedDims(checks: readonly DimCheck[], i: number): number[] {
  return checks.filter(c => c.verdict === 'stretch' && c.stretched.includes(i)).map(c => c.dim).sort((a, b) => a - b);
}

/** True when some index along a stretched dim is past 0: the cell repeats an original. */
export function isRepeat(index: readonly number[], stretched: readonly number[]): boolean {
  return stretched.some(d => index[d] > 0);
}

/** The operand's own index for a result index: stretched dims read index 0, padded dims drop. */
export function sourceIndex(op: Operand, index: readonly number[]): number[] {
  const out: number[] = [];
  const lead = index.length - op.shape.length;
  for (let d = Math.max(0, lead); d < index.length; d++) {
    const size = op.shape[d - lead];
    out.push(size === 1 ? 0 : index[d]);
  }
  return out;
}

// ---- value grids ----------------------------------------------------------------------------

export interface GridCell {
  index: number[];
  flat: number;
  x: number;
  y: number;
}

export interface GridGeom {
  width: number;
  height: number;
  cells: GridCell[];
  /** the cell position of an index (over ``shape``, or any index within it) */
  at(index: readonly number[]): { x: number; y: number };
}

/** All indices of ``shape``, row-major. */
export function indicesOf(shape: readonly number[]): number[][] {
  const total = shape.reduce((a, b) => a * b, 1);
  const out: number[][] = [];
  for (let f = 0; f < total; f++) {
    const idx = new Array<number>(shape.length);
    let r = f;
    for (let d = shape.length - 1; d >= 0; d--) {
      idx[d] = r % shape[d];
      r = Math.floor(r / shape[d]);
    }
    out.push(idx);
  }
  return out;
}

const BLOCK_GAP = 6;

/**
 * A grid of ``shape``: the last dim runs across, the one before down, and any leading
 * dims stack blocks downward with a gap.
 */
export function gridGeometry(shape: readonly number[], cw: number, ch: number): GridGeom {
  const n = shape.length;
  const cols = n >= 1 ? shape[n - 1] : 1;
  const rows = n >= 2 ? shape[n - 2] : 1;
  const lead = shape.slice(0, Math.max(0, n - 2));
  const blocks = lead.reduce((a, b) => a * b, 1);
  const blockH = rows * ch + BLOCK_GAP;
  const at = (index: readonly number[]) => {
    let b = 0;
    for (let d = 0; d < lead.length; d++) {
      b = b * lead[d] + (index[d] ?? 0);
    }
    const r = n >= 2 ? index[n - 2] : 0;
    const c = n >= 1 ? index[n - 1] : 0;
    return { x: c * cw, y: b * blockH + r * ch };
  };
  const cells = indicesOf(shape).map((index, flat) => ({ index, flat, ...at(index) }));
  return { width: cols * cw, height: blocks * blockH - BLOCK_GAP, cells, at };
}

/** Greedy word wrap to ``max`` characters a line. */
export function wrapText(text: string, max: number): string[] {
  const out: string[] = [];
  for (const para of text.split('\n')) {
    let line = '';
    for (const word of para.split(/\s+/).filter(Boolean)) {
      if (!line) {
        line = word;
      } else if (line.length + 1 + word.length <= max) {
        line += ` ${word}`;
      } else {
        out.push(line);
        line = word;
      }
    }
    out.push(line);
  }
  return out;
}
