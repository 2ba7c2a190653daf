/** Wire RanksGrids for the ranks view's tests, encoded as forgeviz/model/ranks.py's build_grid does. */
import type { RanksGrid } from '../../src/model/wire';

function b64(bytes: Uint8Array): string {
  let bin = '';
  for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(bin);
}

/**
 * A grid from ``norms(r, m, s)`` (undefined: no record) over ``ranks`` × ``modules`` × ``steps``.
 *
 *     gridOf([0, 1], ['fc1', 'fc2'], [0, 1, 2], (r, m, s) => 1 + r + m + s, [1024, 2048])
 */
export function gridOf(ranks: number[], modules: string[], steps: number[], norms: (r: number, m: number, s: number) => number | undefined,
  peaks: (number | null)[] = ranks.map(() => null), title: string | null = null): RanksGrid {
  const n = ranks.length * modules.length * steps.length;
  const values = new Float64Array(n);
  const missing = new Uint8Array(n);
  let i = 0;
  for (let r = 0; r < ranks.length; r++) {
    for (let m = 0; m < modules.length; m++) {
      for (let s = 0; s < steps.length; s++, i++) {
        const v = norms(r, m, s);
        values[i] = v ?? NaN;
        missing[i] = v === undefined ? 1 : 0;
      }
    }
  }
  return {
    title, ranks, steps, step_ends: [...steps], modules,
    norms: b64(new Uint8Array(values.buffer)),
    missing: missing.some(x => x) ? b64(missing) : '',
    peaks, merged: 1, note: null
  };
}
