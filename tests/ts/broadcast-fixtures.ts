/** Hand-written BroadcastPlans, shaped exactly like the wire types (src/model/wire.ts). */
import type { BroadcastPlan, DimCheck, Operand, Step } from '../../src/model/wire';

function operand(p: Partial<Operand> & Pick<Operand, 'name' | 'shape'>, ndim: number): Operand {
  const ghost = ndim - p.shape.length;
  return {
    name: p.name,
    shape: p.shape,
    padded: [...Array(ghost).fill(1), ...p.shape],
    ghost,
    dtype: p.dtype ?? null,
    element_size: p.element_size ?? null,
    nbytes: p.nbytes ?? null,
    stride: p.stride ?? null,
    expanded_stride: p.expanded_stride ?? null,
    values: p.values ?? null,
    expanded_values: p.expanded_values ?? null
  };
}

const step = (kind: Step['kind'], title: string, text: string, dim: number | null = null): Step => ({ kind, title, text, dim });

/** (3, 1) + (1, 3) → (3, 3), with values: a = [[0], [1], [2]], b = [[10, 20, 30]]. */
export function okPlan(): BroadcastPlan {
  const checks: DimCheck[] = [
    { dim: 1, from_right: -1, sizes: [1, 3], verdict: 'stretch', size: 3, stretched: [0], text: 'a has size 1 here and stretches to 3 (stride 0: the same values repeat, no copy)' },
    { dim: 0, from_right: -2, sizes: [3, 1], verdict: 'stretch', size: 3, stretched: [1], text: 'b has size 1 here and stretches to 3 (stride 0: the same values repeat, no copy)' }
  ];
  return {
    version: 1,
    kind: 'elementwise',
    op: '+',
    operands: [
      operand(
        {
          name: 'a',
          shape: [3, 1],
          dtype: 'torch.int64',
          element_size: 8,
          nbytes: 24,
          stride: [1, 1],
          expanded_stride: [1, 0],
          values: ['0', '1', '2'],
          expanded_values: ['0', '0', '0', '1', '1', '1', '2', '2', '2']
        },
        2
      ),
      operand(
        {
          name: 'b',
          shape: [1, 3],
          dtype: 'torch.int64',
          element_size: 8,
          nbytes: 24,
          stride: [3, 1],
          expanded_stride: [0, 1],
          values: ['10', '20', '30'],
          expanded_values: ['10', '20', '30', '10', '20', '30', '10', '20', '30']
        },
        2
      )
    ],
    ndim: 2,
    checks,
    ok: true,
    result_shape: [3, 3],
    result_dtype: 'torch.int64',
    result_nbytes: 72,
    result_values: ['10', '20', '30', '11', '21', '31', '12', '22', '32'],
    conflict: null,
    torch_message: '',
    matmul: null,
    steps: [
      step('align', 'Line the shapes up on the right', 'a (3, 1) and b (1, 3): dims are compared from the right, the last dim first'),
      step('pad', 'Pad with 1s on the left', 'both have 2 dims: nothing to pad'),
      step('compare', 'Compare dim -1', checks[0].text, 1),
      step('compare', 'Compare dim -2', checks[1].text, 0),
      step('stretch', 'Stretch the size-1 dims', 'a stretches along dim -1 and b along dim -2 to (3, 3): stride 0, the same values repeat, no memory is copied'),
      step('result', 'The result: (3, 3)', 'a + b has shape (3, 3)')
    ],
    source: 'cell [3], line 1: c = a + b',
    message: null
  };
}

/** (3, 4) + (3,) fails at dim -1: 4 vs 3. */
export function conflictPlan(): BroadcastPlan {
  const text = 'at dim -1 (dim 1 of the result) a has size 4 and b has size 3: they differ and neither is 1, so neither can stretch';
  return {
    version: 1,
    kind: 'elementwise',
    op: '+',
    operands: [
      operand({ name: 'a', shape: [3, 4], dtype: 'torch.float32', element_size: 4, nbytes: 48, stride: [4, 1], values: Array.from({ length: 12 }, (_, i) => `${i}.`) }, 2),
      operand({ name: 'b', shape: [3], dtype: 'torch.float32', element_size: 4, nbytes: 12, stride: [1], values: ['0.', '1.', '2.'] }, 2)
    ],
    ndim: 2,
    checks: [
      { dim: 1, from_right: -1, sizes: [4, 3], verdict: 'conflict', size: null, stretched: [], text: 'sizes a: 4, b: 3 differ and none of them is 1, so they cannot stretch to match' },
      { dim: 0, from_right: -2, sizes: [3, null], verdict: 'stretch', size: 3, stretched: [1], text: 'b has size 1 here and stretches to 3 (stride 0: the same values repeat, no copy)' }
    ],
    ok: false,
    result_shape: null,
    result_dtype: null,
    result_nbytes: null,
    result_values: null,
    conflict: {
      dim: 1,
      from_right: -1,
      operands: [0, 1],
      sizes: [4, 3],
      text,
      fixes: ['b.unsqueeze(-1)  # (3, 1): result (3, 4)', 'a.T  # (4, 3): result (4, 3)']
    },
    torch_message: 'The size of tensor a (4) must match the size of tensor b (3) at non-singleton dimension 1',
    matmul: null,
    steps: [
      step('align', 'Line the shapes up on the right', 'a (3, 4) and b (3,): dims are compared from the right'),
      step('pad', 'Pad with 1s on the left', 'b has 1 dim: it is padded to (1, 3)'),
      step('compare', 'Compare dim -1', 'sizes a: 4, b: 3 differ and none of them is 1, so they cannot stretch to match', 1),
      step('conflict', '✗ dim -1 cannot broadcast', text, 1)
    ],
    source: null,
    message: null
  };
}

/** B3: (64, 128, 1024) + (1, 1, 1024) float32: 32 MiB + 4 KiB → 32 MiB, no values. */
export function bigPlan(): BroadcastPlan {
  const checks: DimCheck[] = [
    { dim: 2, from_right: -1, sizes: [1024, 1024], verdict: 'equal', size: 1024, stretched: [], text: 'all sizes are 1024' },
    { dim: 1, from_right: -2, sizes: [128, 1], verdict: 'stretch', size: 128, stretched: [1], text: 'bias has size 1 here and stretches to 128 (stride 0: the same values repeat, no copy)' },
    { dim: 0, from_right: -3, sizes: [64, 1], verdict: 'stretch', size: 64, stretched: [1], text: 'bias has size 1 here and stretches to 64 (stride 0: the same values repeat, no copy)' }
  ];
  return {
    version: 1,
    kind: 'elementwise',
    op: '+',
    operands: [
      operand({ name: 'x', shape: [64, 128, 1024], dtype: 'torch.float32', element_size: 4, nbytes: 33554432, stride: [131072, 1024, 1], expanded_stride: [131072, 1024, 1] }, 3),
      operand({ name: 'bias', shape: [1, 1, 1024], dtype: 'torch.float32', element_size: 4, nbytes: 4096, stride: [1024, 1024, 1], expanded_stride: [0, 0, 1] }, 3)
    ],
    ndim: 3,
    checks,
    ok: true,
    result_shape: [64, 128, 1024],
    result_dtype: 'torch.float32',
    result_nbytes: 33554432,
    result_values: null,
    conflict: null,
    torch_message: '',
    matmul: null,
    steps: [
      step('align', 'Line the shapes up on the right', 'x (64, 128, 1024) and bias (1, 1, 1024)'),
      step('pad', 'Pad with 1s on the left', 'both have 3 dims: nothing to pad'),
      step('compare', 'Compare dim -1', checks[0].text, 2),
      step('compare', 'Compare dim -2', checks[1].text, 1),
      step('compare', 'Compare dim -3', checks[2].text, 0),
      step('stretch', 'Stretch the size-1 dims', 'bias stretches to (64, 128, 1024) with stride 0: no copy'),
      step('result', 'The result: (64, 128, 1024)', 'x + bias has shape (64, 128, 1024): 32 MiB')
    ],
    source: null,
    message: null
  };
}

/** (2, 3, 4) @ (2, 4, 5) → (2, 3, 5). */
export function matmulPlan(): BroadcastPlan {
  const batch: DimCheck[] = [{ dim: 0, from_right: -1, sizes: [2, 2], verdict: 'equal', size: 2, stretched: [], text: 'all sizes are 2' }];
  return {
    version: 1,
    kind: 'matmul',
    op: '@',
    operands: [
      operand({ name: 'a', shape: [2, 3, 4], dtype: 'torch.float32', element_size: 4, nbytes: 96, stride: [12, 4, 1] }, 3),
      operand({ name: 'b', shape: [2, 4, 5], dtype: 'torch.float32', element_size: 4, nbytes: 160, stride: [20, 5, 1] }, 3)
    ],
    ndim: 3,
    checks: batch,
    ok: true,
    result_shape: [2, 3, 5],
    result_dtype: 'torch.float32',
    result_nbytes: 120,
    result_values: null,
    conflict: null,
    torch_message: '',
    matmul: {
      a_shape: [2, 3, 4],
      b_shape: [2, 4, 5],
      a_matrix: [3, 4],
      b_matrix: [4, 5],
      promoted: [],
      inner: [4, 4],
      inner_ok: true,
      a_batch: [2],
      b_batch: [2],
      batch_checks: batch,
      batch_shape: [2],
      result_shape: [2, 3, 5]
    },
    steps: [
      step('align', 'Split off the matrices', 'the last two dims of each are the matrices: a (3, 4), b (4, 5); the rest are batch dims'),
      step('inner', 'Match the inner dims', "a's 4 columns meet b's 4 rows: equal"),
      step('batch', 'Broadcast the batch dims', 'batch (2,) and (2,) broadcast to (2,)'),
      step('result', 'The result: (2, 3, 5)', 'batch (2,) + (3, 5)')
    ],
    source: null,
    message: null
  };
}

/** (3, 4) @ (5, 6): the inner dims differ. */
export function matmulFailPlan(): BroadcastPlan {
  const text = 'a has 4 columns but b has 5 rows: the inner dims of a matmul must be equal';
  return {
    version: 1,
    kind: 'matmul',
    op: '@',
    operands: [
      operand({ name: 'a', shape: [3, 4], dtype: 'torch.float32', element_size: 4, nbytes: 48, stride: [4, 1] }, 2),
      operand({ name: 'b', shape: [5, 6], dtype: 'torch.float32', element_size: 4, nbytes: 120, stride: [6, 1] }, 2)
    ],
    ndim: 2,
    checks: [],
    ok: false,
    result_shape: null,
    result_dtype: null,
    result_nbytes: null,
    result_values: null,
    conflict: { dim: -1, from_right: -1, operands: [0, 1], sizes: [4, 5], text, fixes: ['a @ b[:4]  # (4, 6): result (3, 6)'] },
    torch_message: 'mat1 and mat2 shapes cannot be multiplied (3x4 and 5x6)',
    matmul: {
      a_shape: [3, 4],
      b_shape: [5, 6],
      a_matrix: [3, 4],
      b_matrix: [5, 6],
      promoted: [],
      inner: [4, 5],
      inner_ok: false,
      a_batch: [],
      b_batch: [],
      batch_checks: [],
      batch_shape: [],
      result_shape: null
    },
    steps: [
      step('align', 'Split off the matrices', 'a (3, 4) and b (5, 6) are both matrices, no batch dims'),
      step('inner', 'Match the inner dims', "a's 4 columns meet b's 5 rows: they differ"),
      step('conflict', '✗ the inner dims differ', text, -1)
    ],
    source: null,
    message: null
  };
}

/** (2, 3) + (4, 1) + (1, 5): dim -1 clashes (3 vs 5) but torch's left fold reports dim -2 (2 vs 4). */
export function threeConflictPlan(): BroadcastPlan {
  const text = 'at dim -2 (dim 0 of the result) a has size 2 and b has size 4: they differ and neither is 1, so neither can stretch';
  const checks: DimCheck[] = [
    { dim: 1, from_right: -1, sizes: [3, 1, 5], verdict: 'conflict', size: null, stretched: [], text: 'sizes a: 3, c: 5 differ and none of them is 1, so they cannot stretch to match' },
    { dim: 0, from_right: -2, sizes: [2, 4, 1], verdict: 'conflict', size: null, stretched: [], text: 'sizes a: 2, b: 4 differ and none of them is 1, so they cannot stretch to match' }
  ];
  return {
    ...conflictPlan(),
    op: 'broadcast',
    operands: [operand({ name: 'a', shape: [2, 3] }, 2), operand({ name: 'b', shape: [4, 1] }, 2), operand({ name: 'c', shape: [1, 5] }, 2)],
    checks,
    conflict: { dim: 0, from_right: -2, operands: [0, 1], sizes: [2, 4], text, fixes: [] },
    torch_message: 'The size of tensor a (2) must match the size of tensor b (4) at non-singleton dimension 0',
    steps: [
      step('align', 'Align the shapes on the right', 'a (2, 3), b (4, 1), c (1, 5)'),
      step('pad', 'Pad missing leading dims with 1', 'every operand already has 2 dims'),
      step('compare', 'Compare dim -1', checks[0].text, 1),
      step('compare', 'Compare dim -2', checks[1].text, 0),
      step('conflict', '✗ dim -2 cannot broadcast', text, 0)
    ]
  };
}

/** a 1-D operand: (2, 3, 4) @ (4,) → (2, 3). */
export function matvecPlan(): BroadcastPlan {
  const p = matmulPlan();
  p.operands[1] = operand({ name: 'v', shape: [4], dtype: 'torch.float32', element_size: 4, nbytes: 16, stride: [1] }, 3);
  p.checks = [];
  p.result_shape = [2, 3];
  p.result_nbytes = 24;
  p.matmul = {
    a_shape: [2, 3, 4],
    b_shape: [4],
    a_matrix: [3, 4],
    b_matrix: [4, 1],
    promoted: ['v is 1-D: treated as a column (4, 1), and that 1 is dropped from the result'],
    inner: [4, 4],
    inner_ok: true,
    a_batch: [2],
    b_batch: [],
    batch_checks: [{ dim: 0, from_right: -1, sizes: [2, null], verdict: 'stretch', size: 2, stretched: [1], text: 'v has size 1 here and stretches to 2 (stride 0: the same values repeat, no copy)' }],
    batch_shape: [2],
    result_shape: [2, 3]
  };
  return p;
}

/** Walk a GIF's blocks and count its images (image descriptors, not stray 0x2C bytes in LZW data). */
export function countGifImages(bytes: Uint8Array): number {
  const sig = String.fromCharCode(...bytes.slice(0, 6));
  if (sig !== 'GIF89a' && sig !== 'GIF87a') {
    throw new Error(`not a GIF: ${sig}`);
  }
  let p = 13;
  const lsdFlags = bytes[10];
  if (lsdFlags & 0x80) {
    p += 3 * (1 << ((lsdFlags & 7) + 1));
  }
  const skipSubBlocks = () => {
    while (bytes[p] !== 0) {
      p += bytes[p] + 1;
    }
    p += 1;
  };
  let images = 0;
  while (p < bytes.length) {
    const b = bytes[p];
    if (b === 0x3b) {
      return images;
    }
    if (b === 0x21) {
      p += 2; // introducer, label
      skipSubBlocks();
    } else if (b === 0x2c) {
      images++;
      const flags = bytes[p + 9];
      p += 10;
      if (flags & 0x80) {
        p += 3 * (1 << ((flags & 7) + 1));
      }
      p += 1; // LZW minimum code size
      skipSubBlocks();
    } else {
      throw new Error(`unexpected block 0x${b.toString(16)} at ${p}`);
    }
  }
  throw new Error('no GIF trailer');
}

/** Count graphic control extensions (0x21 0xF9 0x04) while walking the blocks. */
export function countGifControlExtensions(bytes: Uint8Array): number {
  let n = 0;
  for (let i = 0; i + 2 < bytes.length; i++) {
    if (bytes[i] === 0x21 && bytes[i + 1] === 0xf9 && bytes[i + 2] === 0x04) {
      n++;
    }
  }
  return n;
}

/** (2, 3, 4) @ (3, 4, 5): the inner dims match, the batch dims clash (2 vs 3). */
export function matmulBatchFailPlan(): BroadcastPlan {
  const p = matmulPlan();
  const text = 'at dim -1 (dim 0 of the result) a has size 2 and b has size 3: they differ and neither is 1, so neither can stretch';
  const batch: DimCheck[] = [{ dim: 0, from_right: -1, sizes: [2, 3], verdict: 'conflict', size: null, stretched: [], text: 'sizes a: 2, b: 3 differ and none of them is 1, so they cannot stretch to match' }];
  p.operands[1] = operand({ name: 'b', shape: [3, 4, 5], dtype: 'torch.float32', element_size: 4, nbytes: 240, stride: [20, 5, 1] }, 3);
  p.checks = batch;
  p.ok = false;
  p.result_shape = null;
  p.result_dtype = null;
  p.result_nbytes = null;
  p.conflict = { dim: 0, from_right: -1, operands: [0, 1], sizes: [2, 3], text, fixes: [] };
  p.torch_message = 'Expected size for first two dimensions of batch2 tensor to be: [2, 4] but got: [3, 4].';
  p.matmul = { ...p.matmul!, b_shape: [3, 4, 5], b_batch: [3], batch_checks: batch, batch_shape: null, result_shape: null };
  p.steps = [p.steps[0], p.steps[1], step('batch', 'Broadcast the batch dims', 'batch (2,) and (3,)'), step('conflict', '✗ the batch dims cannot broadcast', text, 0)];
  return p;
}
