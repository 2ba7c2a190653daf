/**
 * The ranks view's colours: viridis (perceptually uniform, colour-blind-safe) on log10 of the
 * norm, and a light-to-vermillion ramp for the spread across ranks; classes off the scale have
 * their own colours and, where a cell is big enough, a diagonal stroke (a non-colour cue).
 */
import { Kind } from './data';

export type Rgb = [number, number, number];

/** Levels of each ramp: the canvas and the SVG export both quantise to these, so they agree. */
export const LEVELS = 64;

/** Viridis as a polynomial in t ∈ [0, 1] (Matt Zucker's fit of matplotlib's table, CC0). */
function viridis(t: number): Rgb {
  const c0 = [0.2777273272234177, 0.005407344544966578, 0.3340998053353061];
  const c1 = [0.1050930431085774, 1.404613529898575, 1.384590162594685];
  const c2 = [-0.3308618287255563, 0.214847559468213, 0.09509516302823659];
  const c3 = [-4.634230498983486, -5.799100973351585, -19.33244095627987];
  const c4 = [6.228269936347081, 14.17993336680509, 56.69055260068105];
  const c5 = [4.776384997670288, -13.74514537774601, -65.35303263337234];
  const c6 = [-5.435455855934631, 4.645852612178535, 26.3124352495832];
  const out = [0, 1, 2].map(k => c0[k] + t * (c1[k] + t * (c2[k] + t * (c3[k] + t * (c4[k] + t * (c5[k] + t * c6[k]))))));
  return out.map(x => Math.round(255 * Math.min(1, Math.max(0, x)))) as Rgb;
}

/** Light grey (ratio 1: the ranks agree) through Okabe–Ito orange and vermillion to a dark brown. */
const SPREAD_STOPS: Rgb[] = [
  [238, 238, 238],
  [230, 159, 0],
  [213, 94, 0],
  [84, 30, 0]
];

function ramp(stops: Rgb[], t: number): Rgb {
  const x = Math.min(1, Math.max(0, t)) * (stops.length - 1);
  const i = Math.min(stops.length - 2, Math.floor(x));
  const f = x - i;
  return [0, 1, 2].map(k => Math.round(stops[i][k] + f * (stops[i + 1][k] - stops[i][k]))) as Rgb;
}

export const NORM_RAMP: Rgb[] = Array.from({ length: LEVELS }, (_, i) => viridis(i / (LEVELS - 1)));
export const SPREAD_RAMP: Rgb[] = Array.from({ length: LEVELS }, (_, i) => ramp(SPREAD_STOPS, i / (LEVELS - 1)));

/** Colours of the classes off the scale (Okabe–Ito where it has one). */
export const CLASS_COLOURS: Record<'zero' | 'nan' | 'inf' | 'ratioInf', Rgb> = {
  zero: [255, 255, 255],
  nan: [204, 121, 167],
  inf: [0, 0, 0],
  ratioInf: [0, 0, 0]
};

/** The level (0 … LEVELS-1) of ``t`` ∈ [0, 1]. */
export function level(t: number): number {
  return Math.min(LEVELS - 1, Math.max(0, Math.round(t * (LEVELS - 1))));
}

/** ``#rrggbb``. */
export function hex(c: Rgb): string {
  return `#${c.map(x => x.toString(16).padStart(2, '0')).join('')}`;
}

/** A log scale from ``lo`` to ``hi`` (log10 units); a flat scale maps everything to its middle. */
export function logPosition(v: number, lo: number, hi: number): number {
  return hi > lo ? (Math.log10(v) - lo) / (hi - lo) : 0.5;
}

/**
 * A cell's colour key: the ramp level (0 … LEVELS-1), or one of the class keys past it. Missing is -1
 * (not painted). Both the canvas and the SVG export go through it.
 */
export const ZERO = LEVELS;
export const NAN = LEVELS + 1;
export const INF = LEVELS + 2;

export function keyOf(kind: Kind, t: number): number {
  switch (kind) {
    case Kind.Value:
      return level(t);
    case Kind.Zero:
      return ZERO;
    case Kind.NaN:
      return NAN;
    case Kind.Inf:
      return INF;
    default:
      return -1;
  }
}

/** The colour of a key on ``ramp`` (spread: its inf is a ratio of ∞, drawn the same black). */
export function colourOf(key: number, rampColours: Rgb[]): Rgb {
  if (key === ZERO) return CLASS_COLOURS.zero;
  if (key === NAN) return CLASS_COLOURS.nan;
  if (key === INF) return CLASS_COLOURS.inf;
  return rampColours[key];
}
