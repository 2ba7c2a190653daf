/**
 * What each panel draws, as colour keys ``[module][step]`` (colour.ts): one panel per rank on the
 * shared log scale of norms, or one panel of the spread across ranks. The canvas (paint.ts) and the
 * SVG export (export.ts) both draw these keys, so the picture and the file agree.
 */
import { CLASS_COLOURS, hex, keyOf, LEVELS, logPosition, NORM_RAMP, SPREAD_RAMP, type Rgb } from './colour';
import { at, Kind, kindOf, type RanksData, type Spread } from './data';

export type Mode = 'ranks' | 'spread';

export interface Panel {
  /** "rank 3", or "spread across ranks (max/min)". */
  label: string;
  /** The rank's index in ``grid.ranks``; -1 for the spread. */
  rank: number;
  /** ``[module][step]`` colour keys; -1 where nothing is drawn. */
  keys: Int16Array;
  ramp: Rgb[];
}

/** The spread scale's top, in log10 of the ratio: at least 2× (float noise between ranks stays grey). */
export function spreadTop(sp: Spread): number {
  return Math.max(Math.log10(2), sp.logMax);
}

export function panelsOf(d: RanksData, mode: Mode, sp: Spread | null): Panel[] {
  const n = d.nModules * d.nSteps;
  if (mode === 'spread' && sp) {
    const keys = new Int16Array(n);
    const top = spreadTop(sp);
    for (let j = 0; j < n; j++) {
      const k = sp.kind[j] as Kind;
      keys[j] = keyOf(k, k === Kind.Value ? Math.log10(sp.ratio[j]) / top : 0);
    }
    return [{ label: 'spread across ranks (max/min)', rank: -1, keys, ramp: SPREAD_RAMP }];
  }
  return d.grid.ranks.map((rank, r) => {
    const keys = new Int16Array(n);
    for (let m = 0; m < d.nModules; m++) {
      for (let s = 0; s < d.nSteps; s++) {
        const i = at(d, r, m, s);
        const k = kindOf(d, i);
        keys[m * d.nSteps + s] = keyOf(k, k === Kind.Value ? logPosition(d.values[i], d.logMin, d.logMax) : 0);
      }
    }
    return { label: `rank ${rank}`, rank: r, keys, ramp: NORM_RAMP };
  });
}

/** The legend's entries: the ramp's ends in words, then the classes that occur. */
export interface Legend {
  ramp: Rgb[];
  low: string;
  high: string;
  caption: string;
  classes: { key: 'zero' | 'nan' | 'inf' | 'missing'; label: string; colour: string | null; hatch: boolean }[];
}

export function legendOf(d: RanksData, mode: Mode, sp: Spread | null, panels: Panel[], fmt: (v: number) => string): Legend {
  const seen = new Set<number>();
  let missing = false;
  for (const p of panels) {
    for (let j = 0; j < p.keys.length; j++) {
      if (p.keys[j] >= LEVELS) seen.add(p.keys[j]);
      else if (p.keys[j] < 0) missing = true;
    }
  }
  const classes: Legend['classes'] = [];
  if (mode === 'spread' && sp) {
    if (seen.has(LEVELS + 2)) classes.push({ key: 'inf', label: '∞ (a rank’s norm is 0)', colour: hex(CLASS_COLOURS.ratioInf), hatch: false });
    if (seen.has(LEVELS + 1)) classes.push({ key: 'nan', label: 'a rank’s norm is NaN or inf', colour: hex(CLASS_COLOURS.nan), hatch: true });
    if (missing) classes.push({ key: 'missing', label: 'under 2 ranks recorded', colour: null, hatch: false });
    return {
      ramp: SPREAD_RAMP,
      low: '1×',
      high: `${fmt(10 ** spreadTop(sp))}×`,
      caption: 'max/min of the ranks’ norms, log scale',
      classes
    };
  }
  if (seen.has(LEVELS)) classes.push({ key: 'zero', label: '0', colour: hex(CLASS_COLOURS.zero), hatch: false });
  if (seen.has(LEVELS + 1)) classes.push({ key: 'nan', label: 'NaN', colour: hex(CLASS_COLOURS.nan), hatch: true });
  if (seen.has(LEVELS + 2)) classes.push({ key: 'inf', label: '±inf', colour: hex(CLASS_COLOURS.inf), hatch: true });
  if (missing) classes.push({ key: 'missing', label: 'no record', colour: null, hatch: false });
  const has = Number.isFinite(d.logMin);
  return {
    ramp: NORM_RAMP,
    low: has ? fmt(10 ** d.logMin) : '—',
    high: has ? fmt(10 ** d.logMax) : '—',
    caption: 'gradient norm ‖∇‖, log scale',
    classes
  };
}
