/** Number and tensor formatting for the inspector (torch-like, 4–6 significant digits). */
import type { Histogram, TensorMeta, TensorSummary } from '../../model/wire';

/** WireFloat: numbers may arrive as the strings "NaN", "Infinity", "-Infinity". */
export function wireNumber(v: number | string | null | undefined): number | null {
  if (v === null || v === undefined) {
    return null;
  }
  return typeof v === 'number' ? v : Number(v);
}

/** Strip the ``torch.`` prefix from a dtype. */
const BYTE_UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];

/** ``n`` bytes in binary units: [value, unit], e.g. ``scaledBytes(1536)`` → ``[1.5, 'KiB']``. */
export function scaledBytes(n: number): [number, string] {
  let v = Math.abs(n);
  let u = 0;
  while (v >= 1024 && u < BYTE_UNITS.length - 1) {
    v /= 1024;
    u++;
  }
  return [n < 0 ? -v : v, BYTE_UNITS[u]];
}

/** "0 B", "512 B", "4 KiB", "1.5 MiB", "117 MiB" (up to 3 significant digits). */
export function bytesShort(n: number): string {
  if (!Number.isFinite(n)) {
    return '—';
  }
  const [v, u] = scaledBytes(n);
  return u === 'B' ? `${Math.round(v)} B` : `${Number(v.toPrecision(3))} ${u}`;
}

export function dtypeName(dtype: string): string {
  return dtype.startsWith('torch.') ? dtype.slice(6) : dtype;
}

function isIntegralDtype(dtype: string): boolean {
  const d = dtypeName(dtype);
  return d.startsWith('int') || d.startsWith('uint') || d === 'long' || d === 'short';
}

function isBoolDtype(dtype: string): boolean {
  return dtypeName(dtype) === 'bool';
}

function special(v: number): string | null {
  if (Number.isNaN(v)) {
    return 'nan';
  }
  if (v === Infinity) {
    return 'inf';
  }
  if (v === -Infinity) {
    return '-inf';
  }
  return null;
}

/** Compact one number: "64", "0.1235", "1.235e+05", "nan". */
export function formatNumber(v: number | string | null | undefined, digits = 4): string {
  const n = wireNumber(v);
  if (n === null) {
    return '—';
  }
  const sp = special(n);
  if (sp) {
    return sp;
  }
  if (n === 0) {
    return '0';
  }
  const a = Math.abs(n);
  if (Number.isInteger(n) && a < 1e9) {
    return String(n);
  }
  if (a >= 1e-4 && a < 1e6) {
    // up to `digits` significant digits, trailing zeros trimmed
    const p = Number(n.toPrecision(digits));
    return String(p);
  }
  return n.toExponential(digits - 1).replace(/\.?0+e/, 'e');
}

/** Format a flat list of values like torch prints a tensor: "[48., 32.]", "[[1., 2.], [3., 4.]]". */
export function formatValues(
  values: (number | string)[],
  shape: number[],
  dtype: string
): string {
  const nums = values.map(v => wireNumber(v) as number);
  const finite = nums.filter(v => Number.isFinite(v));
  let fmt: (v: number) => string;
  if (isBoolDtype(dtype)) {
    fmt = v => (v ? 'True' : 'False');
  } else if (isIntegralDtype(dtype)) {
    fmt = v => special(v) ?? String(v);
  } else {
    const maxAbs = finite.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
    const minAbs = finite.reduce((m, v) => (v !== 0 ? Math.min(m, Math.abs(v)) : m), Infinity);
    const allInt = finite.every(v => Number.isInteger(v));
    if (allInt && maxAbs < 1e8) {
      fmt = v => special(v) ?? `${v}.`;
    } else if (maxAbs < 1e4 && (minAbs === Infinity || minAbs >= 1e-4)) {
      fmt = v => special(v) ?? v.toFixed(4);
    } else {
      fmt = v => special(v) ?? v.toExponential(4);
    }
  }
  const total = shape.reduce((a, b) => a * b, 1);
  if (shape.length === 0 && nums.length === 1) {
    return fmt(nums[0]);
  }
  if (shape.length <= 1 || total !== nums.length) {
    const body = nums.map(fmt).join(', ');
    return `[${body}${total !== nums.length && shape.length > 0 ? ', …' : ''}]`;
  }
  const nest = (dim: number, offset: number): string => {
    if (dim === shape.length - 1) {
      return `[${nums.slice(offset, offset + shape[dim]).map(fmt).join(', ')}]`;
    }
    const stride = shape.slice(dim + 1).reduce((a, b) => a * b, 1);
    const parts: string[] = [];
    for (let i = 0; i < shape[dim]; i++) {
      parts.push(nest(dim + 1, offset + i * stride));
    }
    return `[${parts.join(', ')}]`;
  };
  return nest(0, 0);
}

/** Compact values for sums and histories: "64", "[16, 8]". */
export function formatCompact(t: TensorSummary | null | undefined): string {
  if (!t) {
    return '∅';
  }
  if (t.values) {
    const vals = t.values.map(v => formatNumber(v));
    return t.shape.length === 0 || (vals.length === 1 && t.numel === 1)
      ? vals[0]
      : `[${vals.join(', ')}]`;
  }
  return `‖${formatNumber(t.norm)}‖`;
}

/** "2×3 float32", "scalar float32". */
export function formatShape(shape: number[], dtype: string): string {
  const s = shape.length === 0 ? 'scalar' : shape.join('×');
  return `${s} ${dtypeName(dtype)}`;
}

export function formatMeta(m: TensorMeta | null): string {
  if (!m) {
    return '—';
  }
  const dev = m.device && m.device !== 'cpu' ? ` @ ${m.device}` : '';
  return `${formatShape(m.shape, m.dtype)}${dev}`;
}

/** Histogram bounds as numbers (WireFloat aware). */
export function histogramBounds(hist: Histogram): [number, number] {
  return [wireNumber(hist.lo) ?? 0, wireNumber(hist.hi) ?? 0];
}
