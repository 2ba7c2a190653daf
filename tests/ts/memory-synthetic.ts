/**
 * A synthetic but realistic memory trace (a training loop: seeded parameters, forward
 * activations and temporaries, backward gradients, optimizer state, cells), for benchmarks
 * and tests. Pure: no DOM, no window; deterministic for a given seed.
 */
import { CATEGORIES, NO_ID, NO_SMALL, type CellMark, type MemoryTimeline } from '../../src/model/wire';
import { ALLOC, emptyColumns, type EventColumns, FREE, RECATEGORIZE } from '../../src/render/memory/data';

const cat = (name: (typeof CATEGORIES)[number]) => CATEGORIES.indexOf(name);
const [PARAMETER, BUFFER, OPTIMIZER_STATE, GRADIENT, ACTIVATION, INPUT, TEMPORARY, OTHER] = (
  ['parameter', 'buffer', 'optimizer state', 'gradient', 'activation', 'input', 'temporary', 'other'] as const
).map(cat);

export interface SyntheticTrace {
  columns: EventColumns;
  timeline: MemoryTimeline;
}

const OPS = ['linear', 'addmm', 'relu', 'gelu', 'mm', 'add', 'mul', 'layer_norm', 'softmax', 'dropout', 'sum', 'zeros_like', 't', 'empty', 'copy_'];

/** A seeded random number generator (mulberry32): floats in [0, 1). */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** One event as a test writes it (wire-shaped; what is left out: none, or cell 0 line 0). */
export interface Ev {
  time: number;
  bytes: number;
  storage: number;
  action: number;
  category: number;
  node?: number;
  op?: number;
  module?: number;
  cell?: number;
  line?: number;
}

/** Write event ``e`` at row ``i`` of the columns. */
export function writeEvent(c: EventColumns, i: number, e: Ev): void {
  c.time[i] = e.time;
  c.bytes[i] = e.bytes;
  c.storage[i] = e.storage;
  c.action[i] = e.action;
  c.category[i] = e.category;
  c.node[i] = e.node ?? NO_ID;
  c.op[i] = e.op ?? NO_SMALL;
  c.module[i] = e.module ?? NO_SMALL;
  c.cell[i] = e.cell ?? 0;
  c.line[i] = e.line ?? 0;
}

/** ``n`` events of a small MLP training loop (``layers`` layers), as columns plus the JSON half. */
export function buildSynthetic(n: number, seed = 1, layers = 12): SyntheticTrace {
  const cols = emptyColumns(n);
  const rand = rng(seed);
  const modules = ['model', ...Array.from({ length: layers }, (_, k) => `model.layers.${k}`)];
  const cells: CellMark[] = [];
  let i = 0;
  let t = 0;
  let sid = 0;
  let node = 0;
  let cell = 1;
  let live = 0;
  let peak = 0;
  let peakTime = 0;
  const cat = new Map<number, number>();
  const size = new Map<number, number>();

  const emit = (action: number, s: number, category: number, op: number, module: number, line: number, nodeId = NO_ID as number) => {
    if (i >= n) {
      return;
    }
    const b = size.get(s)!;
    const before = t === 0; // the parameters, made before any cell ran
    writeEvent(cols, i, { time: t, bytes: b, storage: s, action, category, node: nodeId, op, module, cell: before ? 0 : cell, line: before ? 0 : line });
    if (action === ALLOC) {
      live += b;
      cat.set(s, category);
      if (live > peak) {
        peak = live;
        peakTime = t;
      }
    } else if (action === FREE) {
      live -= b;
      cat.delete(s);
    } else {
      cat.set(s, category);
    }
    i++;
  };
  const alloc = (bytes: number, category: number, op: number, module: number, line: number, nodeId?: number) => {
    const s = sid++;
    size.set(s, bytes);
    emit(ALLOC, s, category, op, module, line, nodeId);
    return s;
  };
  const free = (s: number, op = NO_SMALL as number, module = NO_SMALL as number, line = 0) => {
    if (cat.has(s)) {
      emit(FREE, s, cat.get(s)!, op, module, line);
    }
  };
  const recat = (s: number, category: number) => {
    if (cat.has(s) && cat.get(s) !== category) {
      emit(RECATEGORIZE, s, category, NO_SMALL, NO_SMALL, 0);
    }
  };
  const tick = (mean: number) => {
    t += mean * (0.5 + rand());
  };

  // seeded: parameters (weight + bias per layer), a norm's running statistics (buffers) and a few
  // other storages, at time 0
  const hidden = 256 * (1 + Math.floor(rand() * 4));
  const params: number[] = [];
  for (let k = 0; k < layers; k++) {
    params.push(alloc(hidden * hidden * 4, PARAMETER, NO_SMALL, NO_SMALL, 0));
    params.push(alloc(hidden * 4, PARAMETER, NO_SMALL, NO_SMALL, 0));
    alloc(hidden * 4 * 2, BUFFER, NO_SMALL, NO_SMALL, 0);
  }
  for (let k = 0; k < 3; k++) {
    alloc(4096 * (1 + Math.floor(rand() * 64)), OTHER, NO_SMALL, NO_SMALL, 0);
  }
  const baseline = live;
  const grads: number[] = [];
  let state: number[] = [];
  let iteration = 0;
  const batch = 32 * (1 + Math.floor(rand() * 8));
  tick(0.01);
  while (i < n) {
    if (iteration % 40 === 0) {
      cell = cells.length ? cells[cells.length - 1].cell + 1 + Math.floor(rand() * 2) : 3;
      cells.push({ cell, time: t, index: i });
    }
    // zero_grad(set_to_none=True)
    while (grads.length) {
      free(grads.pop()!, NO_SMALL, NO_SMALL, 4);
    }
    const act = batch * hidden * 4;
    const input = alloc(act, TEMPORARY, OPS.indexOf('empty'), NO_SMALL, 2);
    recat(input, INPUT);
    const saved: number[] = [];
    // forward
    for (let k = 0; k < layers; k++) {
      tick(2e-5);
      const mod = k + 1;
      const out = alloc(act, TEMPORARY, OPS.indexOf('addmm'), mod, 5, node++);
      const tmp = alloc(act, TEMPORARY, OPS.indexOf(rand() < 0.5 ? 'mul' : 'add'), mod, 5);
      tick(1e-5);
      const activ = alloc(act, TEMPORARY, OPS.indexOf(rand() < 0.5 ? 'relu' : 'gelu'), mod, 5, node++);
      free(tmp, NO_SMALL, mod, 5);
      recat(out, ACTIVATION);
      recat(activ, ACTIVATION);
      saved.push(out, activ);
    }
    tick(2e-5);
    const loss = alloc(4, TEMPORARY, OPS.indexOf('sum'), 0, 6, node++);
    // backward
    for (let k = layers - 1; k >= 0; k--) {
      tick(3e-5);
      const mod = k + 1;
      const g = alloc(act, TEMPORARY, OPS.indexOf('mm'), mod, 7);
      const wg = alloc(hidden * hidden * 4, TEMPORARY, OPS.indexOf('mm'), mod, 7);
      const bg = alloc(hidden * 4, TEMPORARY, OPS.indexOf('sum'), mod, 7);
      recat(wg, GRADIENT);
      recat(bg, GRADIENT);
      grads.push(wg, bg);
      free(saved.pop()!, NO_SMALL, mod, 7);
      free(saved.pop()!, NO_SMALL, mod, 7);
      free(g, NO_SMALL, mod, 7);
    }
    free(loss, NO_SMALL, 0, 7);
    free(input, NO_SMALL, 0, 7);
    // optimizer.step(): state once, then a temporary per parameter
    tick(5e-5);
    if (!state.length) {
      state = params.flatMap(p => {
        const a = alloc(size.get(p)!, TEMPORARY, OPS.indexOf('zeros_like'), NO_SMALL, 8);
        const b = alloc(size.get(p)!, TEMPORARY, OPS.indexOf('zeros_like'), NO_SMALL, 8);
        recat(a, OPTIMIZER_STATE);
        recat(b, OPTIMIZER_STATE);
        return [a, b];
      });
    }
    for (const p of params) {
      const tmp = alloc(size.get(p)!, TEMPORARY, OPS.indexOf('mul'), NO_SMALL, 8);
      free(tmp, NO_SMALL, NO_SMALL, 8);
    }
    tick(1e-3);
    iteration++;
  }
  const lastTime = n ? cols.time[n - 1] : 0;
  const timeline: MemoryTimeline = {
    version: 1,
    device: 'cpu',
    own_bytes: 0,
    count: n,
    dropped: 0,
    max_events: Math.max(n, 1_000_000),
    categories: [...CATEGORIES],
    ops: OPS,
    modules,
    cells: cells.filter(c => c.index < n && c.time <= lastTime),
    peak_bytes: peak,
    peak_time: peakTime,
    live_bytes: live,
    baseline_bytes: baseline,
    message: null,
    cuda: null
  };
  return { columns: cols, timeline };
}
