/**
 * Pure address math and geometry of the stride diagram: no DOM.
 *
 * Units (as in forgeviz/model/strides.py): a tensor's stride, storage_offset and
 * extent count elements of the TENSOR's dtype; a storage strip counts elements of
 * the strip's dtype.
 */

/** ``offset + Σ iₖ·strideₖ``: the storage element (tensor units) a logical index reads. */
export function storageIndex(index: readonly number[], stride: readonly number[], offset: number): number {
  let a = offset;
  for (let k = 0; k < index.length; k++) {
    a += index[k] * stride[k];
  }
  return a;
}

/** A storage element in tensor units → the strip element holding its first byte. */
export function toStripIndex(addr: number, tensorElementSize: number, stripElementSize: number): number {
  if (tensorElementSize === stripElementSize || !stripElementSize) {
    return addr;
  }
  return Math.floor((addr * tensorElementSize) / stripElementSize);
}

/** The strip elements ``[first, last]`` that one tensor element (tensor units) covers. */
export function stripSpan(addr: number, tensorElementSize: number, stripElementSize: number): [number, number] {
  const first = toStripIndex(addr, tensorElementSize, stripElementSize);
  if (tensorElementSize <= stripElementSize || !stripElementSize) {
    return [first, first];
  }
  return [first, Math.floor(((addr + 1) * tensorElementSize - 1) / stripElementSize)];
}

/** What the address math needs of a tensor (a TensorLayout fits). */
export interface Strided {
  stride: number[] | null;
  storage_offset: number;
  element_size: number;
}

/** The strip index a logical index of ``t`` reads (strip element size ``stripElementSize``). */
export function cellAddress(t: Strided, index: readonly number[], stripElementSize: number): number {
  return toStripIndex(storageIndex(index, t.stride ?? [], t.storage_offset), t.element_size, stripElementSize);
}

export function product(xs: readonly number[]): number {
  let p = 1;
  for (const x of xs) {
    p *= x;
  }
  return p;
}

/** Every index of the box ``start + [0, size)`` in row-major order (``[[]]`` for 0-d). */
export function boxIndices(start: readonly number[], size: readonly number[]): number[][] {
  const out: number[][] = [];
  const n = product(size);
  const d = size.length;
  for (let flat = 0; flat < n; flat++) {
    const idx = new Array<number>(d);
    let r = flat;
    for (let k = d - 1; k >= 0; k--) {
      idx[k] = start[k] + (r % size[k]);
      r = Math.floor(r / size[k]);
    }
    out.push(idx);
  }
  return out;
}

/** Row-major position of ``index`` inside the box, or -1 when outside. */
export function boxOffset(start: readonly number[], size: readonly number[], index: readonly number[]): number {
  let flat = 0;
  for (let k = 0; k < size.length; k++) {
    const r = index[k] - start[k];
    if (r < 0 || r >= size[k]) {
      return -1;
    }
    flat = flat * size[k] + r;
  }
  return flat;
}

export interface Box {
  start: number[];
  size: number[];
}

/** The box shown first, as forgeviz.model.strides.initial_window (used when the kernel sent none). */
export function initialBox(shape: readonly number[], maxWindow: number, inner = 16, leading = 4): Box {
  const d = shape.length;
  const size = new Array<number>(d).fill(0);
  let total = 1;
  for (let k = d - 1; k >= 0; k--) {
    const cap = k >= d - 2 ? inner : leading;
    let want = Math.min(shape[k], cap);
    while (want > 1 && total * want > maxWindow) {
      want--;
    }
    size[k] = want;
    total *= Math.max(want, 1);
  }
  return { start: new Array<number>(d).fill(0), size };
}

/**
 * Clip a box to the shape and shrink it (leading dims first) until it holds at
 * most ``maxWindow`` indices; a dim never shrinks below 1.
 */
export function fitBox(shape: readonly number[], start: readonly number[], size: readonly number[], maxWindow: number): Box {
  const d = shape.length;
  const sz = shape.map((n, k) => Math.max(Math.min(size[k] ?? n, n), Math.min(1, n)));
  for (let k = 0; k < d && product(sz) > Math.max(1, maxWindow); k++) {
    const rest = product(sz) / Math.max(sz[k], 1);
    sz[k] = Math.max(1, Math.min(sz[k], Math.floor(maxWindow / Math.max(rest, 1))));
  }
  const st = shape.map((n, k) => Math.max(0, Math.min(start[k] ?? 0, n - sz[k])));
  return { start: st, size: sz };
}

/** Move the box one page (its own size) along ``dim`` by ``dir`` (+1 / -1), within the shape. */
export function pageBox(shape: readonly number[], box: Box, dim: number, dir: number, maxWindow: number): Box {
  const start = box.start.slice();
  start[dim] = start[dim] + dir * box.size[dim];
  return fitBox(shape, start, box.size, maxWindow);
}

/** Move the box as little as possible so it contains ``index``. */
export function boxToInclude(shape: readonly number[], box: Box, index: readonly number[], maxWindow: number): Box {
  const start = box.start.map((s, k) => {
    if (index[k] < s) {
      return index[k];
    }
    if (index[k] >= s + box.size[k]) {
      return index[k] - box.size[k] + 1;
    }
    return s;
  });
  return fitBox(shape, start, box.size, maxWindow);
}

/** ``(3, 4)`` as Python prints a tuple; ``(12,)``; ``()``. */
export function tupleText(xs: readonly number[]): string {
  return xs.length === 1 ? `(${xs[0]},)` : `(${xs.join(', ')})`;
}

/** ``t.T[1, 2]``; ``t[()]`` for a 0-d tensor. */
export function indexText(name: string, index: readonly number[]): string {
  return `${name}[${index.length ? index.join(', ') : '()'}]`;
}

/** ``offset 0 + 1·1 + 2·4`` */
export function addressFormula(index: readonly number[], stride: readonly number[], offset: number): string {
  return [`offset ${offset}`, ...index.map((i, k) => `${i}·${stride[k]}`)].join(' + ');
}

/** Parse a shape typed by a person: ``2, 6`` / ``(2, 6)`` / ``[2 6]`` / ``-1``. */
export function parseShape(text: string): { shape: number[] } | { error: string } {
  const expected = 'expected a shape such as "2, 6" or "-1": whole numbers separated by commas, at most one -1';
  const body = text.trim().replace(/^[([]\s*/, '').replace(/\s*[)\]]$/, '').trim();
  if (!body) {
    return { error: `empty shape: ${expected}` };
  }
  const parts = body.split(/\s*,\s*|\s+/).filter((p, i, all) => p !== '' || i < all.length - 1);
  const shape: number[] = [];
  for (const p of parts) {
    if (!/^[+-]?\d+$/.test(p)) {
      return { error: `"${p}" is not a whole number: ${expected}` };
    }
    const n = Number(p);
    if (n < -1) {
      return { error: `${n} is not a size: ${expected}` };
    }
    shape.push(n);
  }
  if (shape.filter(n => n === -1).length > 1) {
    return { error: `only one dimension can be -1: ${expected}` };
  }
  return { shape };
}

// ---- grid geometry ------------------------------------------------------------------------------

export interface GridCell {
  /** absolute logical index */
  index: number[];
  /** row-major position in the window's values */
  flat: number;
  x: number;
  y: number;
}

/** A box in SVG user units. */
export interface Rect {
  x: number;
  y: number;
  w: number;
  h: number;
}

export interface GridTile extends Rect {
  /** the leading index, e.g. [0, 1] */
  lead: number[];
  /** "[0, 1, :, :]" */
  label: string;
}

export interface GridMark {
  x: number;
  y: number;
  text: string;
  cls: string;
  anchor?: 'start' | 'middle' | 'end';
  vertical?: boolean;
}

export interface GridBlock extends Rect {
  dim: number;
}

export interface GridGeom {
  width: number;
  height: number;
  cw: number;
  ch: number;
  cells: GridCell[];
  tiles: GridTile[];
  blocks: GridBlock[];
  marks: GridMark[];
}

const TILE_LABEL_H = 13;
const COL_NUM_H = 11;
const ROW_NUM_W = 20;
const ELLIPSIS = 12;

interface Block {
  w: number;
  h: number;
  /** draw the block at (x, y) */
  place(x: number, y: number, lead: number[], out: GridGeom): void;
}

/**
 * Tile the window of a tensor: the last two dims are rows × columns of one tile;
 * dim -3 repeats tiles horizontally, dim -4 vertically, dim -5 horizontally again...
 */
export function gridGeometry(shape: readonly number[], start: readonly number[], size: readonly number[], cw: number, ch: number): GridGeom {
  const d = shape.length;
  const out: GridGeom = { width: 0, height: 0, cw, ch, cells: [], tiles: [], blocks: [], marks: [] };
  if (d === 0) {
    out.cells.push({ index: [], flat: 0, x: 0, y: 0 });
    out.width = cw;
    out.height = ch;
    return out;
  }
  const rowDim = d >= 2 ? d - 2 : -1;
  const colDim = d - 1;
  const rows = rowDim >= 0 ? size[rowDim] : 1;
  const cols = size[colDim];
  const before = (k: number) => (start[k] > 0 ? ELLIPSIS : 0);
  const after = (k: number) => (start[k] + size[k] < shape[k] ? ELLIPSIS : 0);
  const labelH = d > 2 ? TILE_LABEL_H : 0;
  const left = rowDim >= 0 ? ROW_NUM_W : 0;
  const top = labelH + COL_NUM_H;
  const cellsX = left + before(colDim);
  const cellsY = top + (rowDim >= 0 ? before(rowDim) : 0);
  const tileW = cellsX + cols * cw + after(colDim);
  const tileH = cellsY + rows * ch + (rowDim >= 0 ? after(rowDim) : 0);
  const strideOf = (k: number) => {
    let s = 1;
    for (let j = k + 1; j < d; j++) {
      s *= size[j];
    }
    return s;
  };
  const colStride = 1;
  const rowStride = rowDim >= 0 ? strideOf(rowDim) : 0;

  let block: Block = {
    w: tileW,
    h: tileH,
    place(x, y, lead, g) {
      const leadFlat = lead.reduce((acc, v, k) => acc + (v - start[k]) * strideOf(k), 0);
      const label = `[${[...lead, ...(rowDim >= 0 ? [':'] : []), ':'].join(', ')}]`;
      if (d > 2) {
        g.tiles.push({ lead: lead.slice(), label, x, y, w: tileW, h: tileH });
        g.marks.push({ x: x + cellsX, y: y + 9.5, text: label, cls: 'fv-tile-label' });
      }
      for (let c = 0; c < cols; c++) {
        g.marks.push({ x: x + cellsX + (c + 0.5) * cw, y: y + labelH + 8.5, text: String(start[colDim] + c), cls: 'fv-axis-num', anchor: 'middle' });
      }
      if (before(colDim)) {
        g.marks.push({ x: x + cellsX - ELLIPSIS / 2, y: y + cellsY + (rows * ch) / 2 + 3, text: '…', cls: 'fv-ellipsis', anchor: 'middle' });
      }
      if (after(colDim)) {
        g.marks.push({ x: x + cellsX + cols * cw + ELLIPSIS / 2, y: y + cellsY + (rows * ch) / 2 + 3, text: '…', cls: 'fv-ellipsis', anchor: 'middle' });
      }
      for (let r = 0; r < rows; r++) {
        if (rowDim >= 0) {
          g.marks.push({ x: x + cellsX - 3 - before(colDim), y: y + cellsY + (r + 0.5) * ch + 3, text: String(start[rowDim] + r), cls: 'fv-axis-num', anchor: 'end' });
        }
        for (let c = 0; c < cols; c++) {
          const index = [...lead];
          if (rowDim >= 0) {
            index.push(start[rowDim] + r);
          }
          index.push(start[colDim] + c);
          g.cells.push({ index, flat: leadFlat + r * rowStride + c * colStride, x: x + cellsX + c * cw, y: y + cellsY + r * ch });
        }
      }
      if (rowDim >= 0 && before(rowDim)) {
        g.marks.push({ x: x + cellsX + (cols * cw) / 2, y: y + top + ELLIPSIS / 2 + 2, text: '⋮', cls: 'fv-ellipsis', anchor: 'middle' });
      }
      if (rowDim >= 0 && after(rowDim)) {
        g.marks.push({ x: x + cellsX + (cols * cw) / 2, y: y + cellsY + rows * ch + ELLIPSIS / 2 + 3, text: '⋮', cls: 'fv-ellipsis', anchor: 'middle' });
      }
    }
  };

  // leading dims, innermost (dim -3) first
  for (let level = 1, k = d - 3; k >= 0; level++, k--) {
    const inner = block;
    const horizontal = level % 2 === 1;
    const gap = 6 + 4 * level;
    const n = size[k];
    const b0 = before(k) ? ELLIPSIS + 2 : 0;
    const a0 = after(k) ? ELLIPSIS + 2 : 0;
    const dim = k;
    const isOuter = k === 0;
    const w = horizontal ? b0 + n * inner.w + (n - 1) * gap + a0 : inner.w;
    const hh = horizontal ? inner.h : b0 + n * inner.h + (n - 1) * gap + a0;
    block = {
      w,
      h: hh,
      place(x, y, lead, g) {
        if (!isOuter) {
          g.blocks.push({ x: x - 3, y: y - 3, w: w + 6, h: hh + 6, dim });
        }
        const mid = horizontal ? y + inner.h / 2 : x + inner.w / 2;
        if (b0) {
          g.marks.push(horizontal ? { x: x + b0 / 2, y: mid, text: '…', cls: 'fv-ellipsis', anchor: 'middle' } : { x: mid, y: y + b0 / 2 + 3, text: '⋮', cls: 'fv-ellipsis', anchor: 'middle' });
        }
        for (let i = 0; i < n; i++) {
          const off = b0 + i * ((horizontal ? inner.w : inner.h) + gap);
          inner.place(horizontal ? x + off : x, horizontal ? y : y + off, [...lead, start[dim] + i], g);
        }
        if (a0) {
          const end = (horizontal ? w : hh) - a0 / 2;
          g.marks.push(horizontal ? { x: x + end, y: mid, text: '…', cls: 'fv-ellipsis', anchor: 'middle' } : { x: mid, y: y + end + 3, text: '⋮', cls: 'fv-ellipsis', anchor: 'middle' });
        }
      }
    };
  }
  // The outermost block places first, so leading indices are appended outermost-first.
  block.place(0, 0, [], out);
  out.cells.sort((a, b) => a.flat - b.flat);
  out.width = block.w;
  out.height = block.h;
  return out;
}

/** A storage window laid out in rows: where element ``addr`` sits. */
export interface StripGeom {
  start: number;
  count: number;
  perRow: number;
  /** width of one element */
  ew: number;
  rows: number;
}

export function stripGeometry(start: number, count: number, cellW: number, elementSize: number, bytes: boolean, maxWidth = 880): StripGeom {
  const ew = bytes ? elementSize * Math.max(11, Math.ceil(cellW / Math.max(1, elementSize))) : cellW;
  const fit = Math.max(1, Math.floor(maxWidth / ew));
  let perRow: number;
  if (count <= fit && count <= 32) {
    perRow = Math.max(1, count);
  } else if (bytes) {
    perRow = fit;
  } else {
    perRow = fit >= 32 ? 32 : Math.min(16, fit);
  }
  return { start, count, perRow, ew, rows: Math.max(1, Math.ceil(count / perRow)) };
}

/** Elements of one strip drawn at once: ~512 cells at most (bytes mode draws a cell per byte). */
export function stripDrawCount(length: number, elementSize: number, bytes: boolean, maxWindow: number): number {
  const cap = bytes ? Math.max(4, Math.floor(512 / Math.max(1, elementSize))) : 256;
  return Math.max(0, Math.min(length, cap, Math.max(1, maxWindow)));
}

/** Start of a strip window that contains ``addr``, a little context before it, aligned to rows. */
export function stripWindowFor(addr: number, length: number, count: number, perRow: number): number {
  const aligned = Math.floor(addr / perRow) * perRow - perRow * Math.floor(count / perRow / 4);
  return Math.max(0, Math.min(aligned, length - count));
}
