/** The ranks view's geometry: cell sizes that fit the width, and the gutter for module names. */
import type { RanksData } from './data';

export interface Geometry {
  cellW: number;
  cellH: number;
  /** Width left of the cells for module names (0 when rows are too thin to label). */
  gutter: number;
  /** Whether module names are drawn (rows at least LABEL_MIN_H tall). */
  labels: boolean;
  width: number;
  height: number;
}

/** Rows thinner than this carry no name (hover says it). */
export const LABEL_MIN_H = 9;
/** The tallest a panel grows by itself, in pixels. */
const PANEL_MAX_H = 360;

export function geometryOf(d: RanksData, available: number): Geometry {
  const cellH = Math.max(2, Math.min(16, Math.floor(PANEL_MAX_H / Math.max(1, d.nModules))));
  const labels = cellH >= LABEL_MIN_H;
  const longest = d.grid.modules.reduce((n, m) => Math.max(n, (m || '(root)').length), 0);
  const gutter = labels ? Math.min(220, 7 * longest + 10) : 0;
  const cellW = Math.max(1, Math.min(24, Math.floor((Math.max(240, available) - gutter - 8) / Math.max(1, d.nSteps))));
  return { cellW, cellH, gutter, labels, width: d.nSteps * cellW, height: d.nModules * cellH };
}

/** The cell (module, step) under a point of a panel's canvas, or null. */
export function cellAt(g: Geometry, d: RanksData, x: number, y: number): { m: number; s: number } | null {
  const s = Math.floor(x / g.cellW);
  const m = Math.floor(y / g.cellH);
  return s >= 0 && s < d.nSteps && m >= 0 && m < d.nModules ? { m, s } : null;
}
