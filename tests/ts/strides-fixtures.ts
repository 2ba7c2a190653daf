/** Stride-diagram fixtures shaped exactly like src/model/wire.ts (StrideLayout and friends).
 *  Values are what torch would show for t = torch.arange(12.).reshape(3, 4) and friends. */
import type { Fact, StorageStrip, StrideLayout, TensorLayout, ValueWindow, ViewVerdict } from '../../src/model/wire';

/** Row-major values of the box, from a function of the logical index. */
export function windowOf(start: number[], size: number[], f: (index: number[]) => string): ValueWindow {
  const values: string[] = [];
  const n = size.reduce((a, b) => a * b, 1);
  for (let flat = 0; flat < n; flat++) {
    const idx = new Array<number>(size.length);
    let r = flat;
    for (let k = size.length - 1; k >= 0; k--) {
      idx[k] = start[k] + (r % size[k]);
      r = Math.floor(r / size[k]);
    }
    values.push(f(idx));
  }
  return { start, size, values };
}

const contiguousFact = (yes: boolean, reason: string): Fact => ({ key: 'contiguous', label: 'is_contiguous()', value: yes ? 'True' : 'False', reason });

export const VIEW_T_FLAT_FAILS: ViewVerdict = {
  op: 'view',
  shape: [-1],
  works: false,
  copies: false,
  result_stride: null,
  bytes: 0,
  reason:
    'dims 0 and 1 (sizes 4 and 3, strides 1 and 4) are not next to each other in memory: one dim spanning both would need stride[0] = stride[1]·size[1] = 12, but it is 1. A view never moves data, so it cannot merge them.',
  torch_message: 'view size is not compatible with input tensor\'s size and stride (at least one dimension spans across two contiguous subspaces). Use .reshape(...) instead.'
};

function verdicts(contiguous: boolean, numel: number, elementSize: number): ViewVerdict[] {
  const bytes = numel * elementSize;
  return [
    contiguous
      ? { op: 'view', shape: [-1], works: true, copies: false, result_stride: [1], bytes: 0, reason: 'every new dim walks memory with one stride: the view gets stride (1,) and shares the storage', torch_message: '' }
      : VIEW_T_FLAT_FAILS,
    {
      op: 'reshape',
      shape: [-1],
      works: true,
      copies: !contiguous,
      result_stride: [1],
      bytes: contiguous ? 0 : bytes,
      reason: contiguous ? 'a view is possible, so reshape returns one' : 'no view is possible, so reshape copies',
      torch_message: ''
    },
    {
      op: 'contiguous',
      shape: [],
      works: true,
      copies: !contiguous,
      result_stride: null,
      bytes: contiguous ? 0 : bytes,
      reason: contiguous ? 'already contiguous: returns the tensor itself' : 'allocates a row-major copy',
      torch_message: ''
    }
  ];
}

function tensor(over: Partial<TensorLayout> & Pick<TensorLayout, 'id' | 'name' | 'shape' | 'stride'>): TensorLayout {
  const numel = over.shape.reduce((a, b) => a * b, 1);
  const contiguous = over.is_contiguous ?? true;
  return {
    kind: 'tensor',
    storage_offset: 0,
    numel,
    dtype: 'torch.float32',
    element_size: 4,
    device: 'cpu',
    layout: 'strided',
    strip: 0,
    has_data: true,
    is_contiguous: contiguous,
    memory_format: contiguous ? 'contiguous' : 'none',
    extent: null,
    facts: [],
    verdicts: verdicts(contiguous, numel, over.element_size ?? 4),
    window: null,
    panel: null,
    ...over
  };
}

function strip(over: Partial<StorageStrip> & Pick<StorageStrip, 'id' | 'length' | 'tensors'>): StorageStrip {
  const values = over.values ?? Array.from({ length: over.length }, (_, i) => String(i));
  return {
    nbytes: over.length * 4,
    dtype: 'torch.float32',
    element_size: 4,
    device: 'cpu',
    data_ptr: '0x55d0c0a01240',
    copy: false,
    has_data: true,
    window_start: 0,
    ...over,
    values
  };
}

/** t = arange(12.).reshape(3, 4); t.T; t[:, 1:3] — all on strip 0. */
export function sharedLayout(): StrideLayout {
  const t = tensor({
    id: 0,
    name: 't',
    shape: [3, 4],
    stride: [4, 1],
    extent: [0, 11],
    facts: [contiguousFact(true, 'stride (4, 1) is row-major order for shape (3, 4)')],
    window: windowOf([0, 0], [3, 4], ([i, j]) => String(4 * i + j))
  });
  const tT = tensor({
    id: 1,
    name: 't.T',
    shape: [4, 3],
    stride: [1, 4],
    is_contiguous: false,
    extent: [0, 11],
    facts: [contiguousFact(false, 'row-major order for shape (4, 3) needs stride (3, 1); this tensor has (1, 4)')],
    window: windowOf([0, 0], [4, 3], ([i, j]) => String(4 * j + i))
  });
  const sl = tensor({
    id: 2,
    name: 't[:, 1:3]',
    shape: [3, 2],
    stride: [4, 1],
    storage_offset: 1,
    is_contiguous: false,
    extent: [1, 10],
    window: windowOf([0, 0], [3, 2], ([i, j]) => String(4 * i + 1 + j))
  });
  return {
    version: 1,
    tensors: [t, tT, sl],
    strips: [strip({ id: 0, length: 12, tensors: [0, 1, 2] })],
    overlaps: [
      { a: 0, b: 1, elements: 12, exact: true },
      { a: 0, b: 2, elements: 6, exact: true },
      { a: 1, b: 2, elements: 6, exact: true }
    ],
    max_window: 1024,
    message: null
  };
}

/** e = arange(12.).reshape(3, 4).expand(2, 3, 4): stride (0, 4, 1). */
export function expandLayout(): StrideLayout {
  const e = tensor({
    id: 0,
    name: 'e',
    shape: [2, 3, 4],
    stride: [0, 4, 1],
    is_contiguous: false,
    extent: [0, 11],
    facts: [{ key: 'expand', label: 'expanded dims', value: 'dim 0', reason: 'stride 0: every index of dim 0 reads the same elements' }],
    window: windowOf([0, 0, 0], [2, 3, 4], ([, i, j]) => String(4 * i + j))
  });
  return {
    version: 1,
    tensors: [e],
    strips: [strip({ id: 0, length: 12, tensors: [0] })],
    overlaps: [],
    max_window: 1024,
    message: null
  };
}

/** A 4-D contiguous tensor x = arange(120.).reshape(2, 3, 4, 5). */
export function fourDLayout(): StrideLayout {
  const x = tensor({
    id: 0,
    name: 'x',
    shape: [2, 3, 4, 5],
    stride: [60, 20, 5, 1],
    extent: [0, 119],
    window: windowOf([0, 0, 0, 0], [2, 3, 4, 5], ([a, b, c, d]) => String(60 * a + 20 * b + 5 * c + d))
  });
  return {
    version: 1,
    tensors: [x],
    strips: [strip({ id: 0, length: 120, tensors: [0] })],
    overlaps: [],
    max_window: 1024,
    message: null
  };
}

/** A big matrix: only a window of it and of its storage travels. */
export function bigLayout(maxWindow = 1024): StrideLayout {
  const big = tensor({
    id: 0,
    name: 'big',
    shape: [100, 50],
    stride: [50, 1],
    extent: [0, 4999],
    window: windowOf([0, 0], [16, 16], ([i, j]) => String(50 * i + j))
  });
  return {
    version: 1,
    tensors: [big],
    strips: [strip({ id: 0, length: 5000, tensors: [0], values: Array.from({ length: 256 }, (_, i) => String(i)) })],
    overlaps: [],
    max_window: maxWindow,
    message: null
  };
}

/** A sparse COO tensor: no strides, a panel instead. */
export function sparseLayout(): StrideLayout {
  const sp = tensor({
    id: 0,
    name: 's',
    shape: [3, 3],
    stride: null,
    layout: 'sparse_coo',
    strip: -1,
    is_contiguous: false,
    memory_format: 'none',
    extent: null,
    verdicts: [],
    panel: {
      layout: 'sparse_coo',
      title: 'sparse COO tensor',
      explanation: 'A COO tensor stores the coordinates of its nonzero elements and their values, not a strided block.',
      parts: [
        { name: 'indices', shape: [2, 2], dtype: 'torch.int64', note: 'row and column of each nonzero', values: ['0', '2', '1', '0'] },
        { name: 'values', shape: [2], dtype: 'torch.float32', note: 'one value per nonzero', values: ['3', '4'] }
      ]
    }
  });
  return { version: 1, tensors: [sp], strips: [], overlaps: [], max_window: 1024, message: null };
}

/** m = torch.empty(3, 4, device='meta').T: a real layout, no values. */
export function metaLayout(): StrideLayout {
  const m = tensor({
    id: 0,
    name: 'm',
    shape: [4, 3],
    stride: [1, 4],
    device: 'meta',
    has_data: false,
    is_contiguous: false,
    extent: [0, 11],
    window: null
  });
  return {
    version: 1,
    tensors: [m],
    strips: [strip({ id: 0, length: 12, tensors: [0], device: 'meta', has_data: false, data_ptr: '', values: [] })],
    overlaps: [],
    max_window: 1024,
    message: null
  };
}

/** t and c = t.T.contiguous(): c has its own storage (strip 1, copy). */
export function copyLayout(): StrideLayout {
  const base = sharedLayout();
  const t = base.tensors[0];
  const c = tensor({
    id: 1,
    name: 'c',
    shape: [4, 3],
    stride: [3, 1],
    strip: 1,
    extent: [0, 11],
    window: windowOf([0, 0], [4, 3], ([i, j]) => String(4 * j + i))
  });
  return {
    version: 1,
    tensors: [t, c],
    strips: [
      strip({ id: 0, length: 12, tensors: [0] }),
      strip({ id: 1, length: 12, tensors: [1], copy: true, data_ptr: '0x55d0c0a01300', values: Array.from({ length: 12 }, (_, i) => String(4 * (i % 3) + Math.floor(i / 3))) })
    ],
    overlaps: [],
    max_window: 1024,
    message: null
  };
}
