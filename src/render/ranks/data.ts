/**
 * The ranks view's numbers: the wire grid decoded, the log colour scale's domain, and the spread
 * across ranks (max/min per module and step). Pure; no DOM.
 */
import type { RanksGrid } from '../../model/wire';

/** What a cell holds: a norm (or ratio) on the scale, a zero, a NaN, an ±inf, or nothing. */
export const enum Kind {
  Value = 0,
  Zero = 1,
  NaN = 2,
  Inf = 3,
  Missing = 4
}

export interface RanksData {
  grid: RanksGrid;
  nRanks: number;
  nModules: number;
  nSteps: number;
  /** The norms, ``[rank][module][step]``; NaN where missing too (``missing`` tells them apart). */
  values: Float64Array;
  /** 1 where no row gave the cell; null when every cell was given. */
  missing: Uint8Array | null;
  /** log10 of the smallest and largest finite positive norm (NaN, NaN when there is none). */
  logMin: number;
  logMax: number;
}

/** base64 → bytes. */
export function base64Bytes(b64: string): Uint8Array {
  const bin = atob(b64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) {
    out[i] = bin.charCodeAt(i);
  }
  return out;
}

/**
 * Decode a wire grid; throws saying what is wrong when its blocks do not match its axes.
 *
 * @example
 * const d = decodeGrid(grid); d.values[(r * d.nModules + m) * d.nSteps + s]  // rank r, module m, step s
 */
export function decodeGrid(grid: RanksGrid): RanksData {
  const nRanks = grid.ranks.length;
  const nModules = grid.modules.length;
  const nSteps = grid.steps.length;
  const cells = nRanks * nModules * nSteps;
  const bytes = base64Bytes(grid.norms ?? '');
  if (bytes.length !== cells * 8) {
    throw new Error(`expected ${cells} norms (${nRanks} ranks × ${nModules} modules × ${nSteps} steps), got ${bytes.length / 8}`);
  }
  const values = new Float64Array(cells);
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  for (let i = 0; i < cells; i++) {
    values[i] = dv.getFloat64(i * 8, true);
  }
  let missing: Uint8Array | null = null;
  if (grid.missing) {
    missing = base64Bytes(grid.missing);
    if (missing.length !== cells) {
      throw new Error(`expected ${cells} missing flags, got ${missing.length}`);
    }
  }
  let lo = Infinity;
  let hi = -Infinity;
  for (let i = 0; i < cells; i++) {
    const v = values[i];
    if (v > 0 && v < Infinity) {
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
  }
  const found = lo <= hi;
  return { grid, nRanks, nModules, nSteps, values, missing, logMin: found ? Math.log10(lo) : NaN, logMax: found ? Math.log10(hi) : NaN };
}

/** Where cell (rank index, module index, step index) sits in ``values``. */
export function at(d: RanksData, r: number, m: number, s: number): number {
  return (r * d.nModules + m) * d.nSteps + s;
}

/** What kind of cell ``i`` of ``values`` is. */
export function kindOf(d: RanksData, i: number): Kind {
  if (d.missing && d.missing[i]) return Kind.Missing;
  const v = d.values[i];
  if (Number.isNaN(v)) return Kind.NaN;
  if (!Number.isFinite(v)) return Kind.Inf;
  return v === 0 ? Kind.Zero : Kind.Value;
}

/** The spread across ranks: per module and step, max/min of the ranks' norms. */
export interface Spread {
  /** ``[module][step]`` ratios (≥ 1; Infinity when the smallest is 0 and the largest is not). */
  ratio: Float64Array;
  /** ``[module][step]``: Value (a finite ratio), Inf (a rank's norm is 0, another's not), NaN (a rank's norm is NaN or inf), Missing (under 2 ranks). */
  kind: Uint8Array;
  /** log10 of the largest finite ratio (0 when every ratio is 1). */
  logMax: number;
  /** Where the largest finite ratio is, or null. */
  top: { m: number; s: number; ratio: number } | null;
}

/**
 * max/min across ranks of every module and step: equal ranks give 1, a rank that diverges a large ratio.
 *
 * @example
 * const sp = spreadOf(decodeGrid(grid)); sp.ratio[m * grid.steps.length + s]
 */
export function spreadOf(d: RanksData): Spread {
  const n = d.nModules * d.nSteps;
  const ratio = new Float64Array(n);
  const kind = new Uint8Array(n);
  let logMax = 0;
  let top: Spread['top'] = null;
  for (let m = 0; m < d.nModules; m++) {
    for (let s = 0; s < d.nSteps; s++) {
      let lo = Infinity;
      let hi = -Infinity;
      let count = 0;
      let bad = false;
      for (let r = 0; r < d.nRanks; r++) {
        const i = at(d, r, m, s);
        if (d.missing && d.missing[i]) continue;
        const v = d.values[i];
        count++;
        if (!Number.isFinite(v)) {
          bad = true;
          continue;
        }
        if (v < lo) lo = v;
        if (v > hi) hi = v;
      }
      const j = m * d.nSteps + s;
      if (count < 2) {
        kind[j] = Kind.Missing;
        ratio[j] = NaN;
      } else if (bad) {
        kind[j] = Kind.NaN;
        ratio[j] = NaN;
      } else if (lo === 0) {
        kind[j] = hi === 0 ? Kind.Value : Kind.Inf;
        ratio[j] = hi === 0 ? 1 : Infinity;
      } else {
        kind[j] = Kind.Value;
        ratio[j] = hi / lo;
        const l = Math.log10(hi / lo);
        if (l > logMax) logMax = l;
        if (!top || hi / lo > top.ratio) top = { m, s, ratio: hi / lo };
      }
    }
  }
  return { ratio, kind, logMax, top };
}

/** A norm as the page shows it: 6 significant digits ("0.0123457", "1.23457e-7", "NaN", "inf"). */
export function formatNorm(v: number): string {
  if (Number.isNaN(v)) return 'NaN';
  if (v === Infinity) return 'inf';
  if (v === -Infinity) return '-inf';
  if (v === 0) return '0';
  const a = Math.abs(v);
  return a >= 1e-4 && a < 1e6 ? String(Number(v.toPrecision(6))) : v.toExponential(5).replace(/\.?0+e/, 'e');
}

/** A step column's label: "12", or "10–19" for merged steps. */
export function stepLabel(grid: RanksGrid, s: number): string {
  const a = grid.steps[s];
  const b = grid.step_ends[s] ?? a;
  return a === b ? String(a) : `${a}–${b}`;
}
