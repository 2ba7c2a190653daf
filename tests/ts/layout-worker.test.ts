/**
 * Graphviz layout in a worker: the real worker program run in a fake worker scope, then the
 * page's side against scripted fake workers (answers, deadline, crash, fallback to the main thread).
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import vm from 'node:vm';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { getGraphviz, type GraphvizLike } from '../../src/graphviz-loader';
import { createLayoutPool, WORKER_SOURCE, type WorkerLike } from '../../src/layout-worker';
import { toLayered } from '../../src/render/graph/dotgen';
import { allModules, foldGraph, indexGraph } from '../../src/render/graph/fold';
import { layeredLayout, packLayout, unpackLayout } from '../../src/render/graph/layered';
import { gptGraph } from './gpt-fixture';

type G = { __forgeviz__?: unknown };
afterEach(() => {
  delete (globalThis as G).__forgeviz__;
});

const GRAPHVIZ_ESM = path.join(process.cwd(), 'node_modules', '@hpcc-js', 'wasm-graphviz', 'dist', 'index.js');

function bytes(text: string): ArrayBuffer {
  return new TextEncoder().encode(text).buffer as ArrayBuffer;
}

/** A Blob stand-in that keeps its parts, so a "Blob URL" can be a data: URL Node can import. */
class PartsBlob {
  constructor(readonly parts: (ArrayBuffer | string)[]) {}
}
const inScopeURL = {
  createObjectURL(blob: PartsBlob): string {
    const buf = Buffer.concat(blob.parts.map(p => (typeof p === 'string' ? Buffer.from(p) : Buffer.from(p))));
    return `data:text/javascript;base64,${buf.toString('base64')}`;
  },
  revokeObjectURL() {}
};

/** Runs WORKER_SOURCE itself, in-process: ``self`` is a fake scope, messages are cloned and async. */
class InProcessWorker implements WorkerLike {
  static made: { url: string; options?: WorkerOptions }[] = [];
  onmessage: ((event: MessageEvent) => void) | null = null;
  onerror: ((event: Event) => void) | null = null;
  onmessageerror: ((event: MessageEvent) => void) | null = null;
  private scope: { onmessage: ((event: { data: unknown }) => void) | null; postMessage(m: unknown): void };
  constructor(url: string, options?: WorkerOptions) {
    InProcessWorker.made.push({ url, options });
    this.scope = {
      onmessage: null,
      postMessage: (m: unknown) => setTimeout(() => this.onmessage?.({ data: structuredClone(m) } as MessageEvent))
    };
    // vm with Node's own loader: the program's import() of a data: URL works outside Vite's runner.
    const program = new vm.Script(`(function (self, URL, Blob) {${WORKER_SOURCE}})`, {
      importModuleDynamically: vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER
    } as vm.ScriptOptions);
    program.runInThisContext()(this.scope, inScopeURL, PartsBlob);
  }
  postMessage(m: unknown): void {
    setTimeout(() => this.scope.onmessage?.({ data: structuredClone(m) }));
  }
  terminate(): void {
    this.scope.onmessage = null;
  }
}

describe('the worker program', () => {
  it('imports the Graphviz ESM it is sent, loads it once and answers layouts by id', async () => {
    const source = readFileSync(GRAPHVIZ_ESM);
    const fetchSource = vi.fn(async () => source.buffer.slice(source.byteOffset, source.byteOffset + source.byteLength) as ArrayBuffer);
    const gv = await getGraphviz(fetchSource, undefined, { Worker: InProcessWorker });
    const [a, b] = await Promise.all([gv.layout('digraph { a -> b }', 'json', 'dot'), gv.layout('digraph { c }', 'json', 'dot')]);
    expect(JSON.parse(a).objects.map((o: { name: string }) => o.name)).toEqual(['a', 'b']);
    expect(JSON.parse(b).objects.map((o: { name: string }) => o.name)).toEqual(['c']);
    await expect(gv.layout('digraph { a -> }', 'json', 'dot')).rejects.toThrow(/syntax error/i);
    expect(fetchSource).toHaveBeenCalledTimes(1);
    expect(InProcessWorker.made).toHaveLength(1);
    expect(InProcessWorker.made[0].options).toMatchObject({ type: 'module' });
    expect(InProcessWorker.made[0].url).toMatch(/^blob:/);
  });

  it('answers a big view\'s layered layout from the same module, packed, as the page would lay it out', async () => {
    // the Graphviz ESM with the layered layout beside it, as src/graphviz-bundle.ts builds it
    const source = `${readFileSync(GRAPHVIZ_ESM, 'utf8')}\nexport const layeredLayout = ${layeredLayout.toString()};\nexport const packLayout = ${packLayout.toString()};`;
    const gv = await getGraphviz(async () => bytes(source), undefined, { Worker: InProcessWorker });
    const ix = indexGraph(gptGraph());
    const input = toLayered(foldGraph(ix, allModules(ix)));
    const [packed, json] = await Promise.all([gv.layered!(input), gv.layout('digraph { a -> b }', 'json', 'dot')]);
    expect(packed.geometry).toBeInstanceOf(Float64Array);
    expect(unpackLayout(packed, input)).toEqual(layeredLayout(input));
    expect(JSON.parse(json).objects).toHaveLength(2); // Graphviz jobs still answer in between
  });

  it('says when the module it is sent has no Graphviz', async () => {
    const pool = createLayoutPool({ Worker: InProcessWorker, source: bytes('export const nothing = 1;') });
    await expect(pool.ready()).rejects.toThrow(/could not load Graphviz/);
  });
});

/** A scripted worker: ``answer`` decides each layout's reply (undefined: never answers). */
function scripted(answer: (dot: string) => { json: string } | { error: string } | 'crash' | undefined, start: 'ready' | 'failed' | 'error' = 'ready') {
  const workers: FakeWorker[] = [];
  class FakeWorker implements WorkerLike {
    onmessage: ((event: MessageEvent) => void) | null = null;
    onerror: ((event: Event) => void) | null = null;
    onmessageerror: ((event: MessageEvent) => void) | null = null;
    posted: unknown[] = [];
    terminated = false;
    constructor() {
      workers.push(this);
    }
    postMessage(m: { type?: string; id?: number; dot?: string; source?: ArrayBuffer }): void {
      this.posted.push(m);
      setTimeout(() => {
        if (this.terminated) {
          return;
        }
        if (m.type === 'init') {
          if (start === 'error') {
            this.onerror?.(new Event('error'));
          } else {
            this.onmessage?.({ data: start === 'ready' ? { type: 'ready' } : { type: 'failed', message: 'no wasm' } } as MessageEvent);
          }
          return;
        }
        const a = answer(m.dot!);
        if (a === 'crash') {
          this.onerror?.(Object.assign(new Event('error'), { message: 'RuntimeError: memory access out of bounds' }));
        } else if (a) {
          this.onmessage?.({ data: { id: m.id, ...a } } as MessageEvent);
        }
      }, 1);
    }
    terminate(): void {
      this.terminated = true;
    }
  }
  return { Worker: FakeWorker, workers };
}

describe('the layout pool', () => {
  it('sends one layout at a time and matches answers by id', async () => {
    const { Worker, workers } = scripted(dot => ({ json: `laid out ${dot}` }));
    const pool = createLayoutPool({ Worker, source: bytes('src') });
    const results = await Promise.all([pool.layout('A'), pool.layout('B'), pool.layout('C')]);
    expect(results).toEqual(['laid out A', 'laid out B', 'laid out C']);
    expect(workers).toHaveLength(1);
    const posted = workers[0].posted as { type?: string; id?: number; source?: ArrayBuffer }[];
    expect(posted[0].type).toBe('init');
    expect(new TextDecoder().decode(posted[0].source)).toBe('src');
    expect(posted.slice(1).map(m => m.id)).toEqual([1, 2, 3]);
  });

  it('passes Graphviz errors on as rejections', async () => {
    const { Worker } = scripted(() => ({ error: 'syntax error in line 1' }));
    const pool = createLayoutPool({ Worker, source: bytes('src') });
    await expect(pool.layout('digraph {')).rejects.toThrow('syntax error in line 1');
  });

  it('stops a layout past its deadline, says how big and how long, and starts afresh', async () => {
    const { Worker, workers } = scripted(dot => (dot.startsWith('slow') ? undefined : { json: 'ok' }));
    const pool = createLayoutPool({ Worker, source: bytes('src'), timeoutMs: 60 });
    const slow = pool.layout('slow é');
    const queued = pool.layout('next');
    await expect(slow).rejects.toThrow('Graphviz layout of 7 bytes of DOT did not answer within 0.06 s');
    expect(workers[0].terminated).toBe(true);
    // the one queued behind it goes to a fresh worker, with its own deadline
    await expect(queued).resolves.toBe('ok');
    expect(workers).toHaveLength(2);
    await expect(pool.layout('again')).resolves.toBe('ok');
    expect(workers).toHaveLength(2);
  });

  it('rejects every pending layout with the error text when the worker dies', async () => {
    const { Worker, workers } = scripted(dot => (dot === 'boom' ? 'crash' : { json: 'ok' }));
    const pool = createLayoutPool({ Worker, source: bytes('src') });
    const all = [pool.layout('boom'), pool.layout('x'), pool.layout('y')].map(p => p.catch((e: Error) => e.message));
    const messages = await Promise.all(all);
    expect(messages).toEqual(Array(3).fill('the layout worker failed: RuntimeError: memory access out of bounds'));
    expect(workers[0].terminated).toBe(true);
    await expect(pool.layout('x')).resolves.toBe('ok');
    expect(workers).toHaveLength(2);
  });

  it('lays out on the main thread from then on when a fresh worker cannot start', async () => {
    let starts = 0;
    const { Worker } = scripted(dot => (dot === 'slow' ? undefined : { json: 'worker' }));
    class FlakyWorker extends Worker {
      constructor() {
        if (++starts > 1) {
          throw new Error('no more workers');
        }
        super();
      }
    }
    const main: GraphvizLike = { layout: vi.fn(() => 'main') };
    const pool = createLayoutPool({ Worker: FlakyWorker, source: bytes('src'), timeoutMs: 30, fallback: async () => main });
    await expect(pool.layout('slow')).rejects.toThrow(/did not answer/);
    await expect(pool.layout('x')).resolves.toBe('main');
    await expect(pool.layout('y')).resolves.toBe('main');
    expect(main.layout).toHaveBeenCalledTimes(2);
  });
});

describe('getGraphviz', () => {
  it('shares one worker between every view of the page', async () => {
    const { Worker, workers } = scripted(() => ({ json: '{}' }));
    const fetchSource = vi.fn(async () => bytes('src'));
    const [g1, g2] = await Promise.all([
      getGraphviz(fetchSource, undefined, { Worker }),
      getGraphviz(fetchSource, undefined, { Worker })
    ]);
    expect(g1).toBe(g2);
    await Promise.all([g1.layout('a', 'json', 'dot'), g2.layout('b', 'json', 'dot')]);
    expect(workers).toHaveLength(1);
    expect(fetchSource).toHaveBeenCalledTimes(1);
  });

  it('without Workers, lays out on the main thread exactly as before (Lab first)', async () => {
    const lab: GraphvizLike = { layout: () => 'lab' };
    (globalThis as G).__forgeviz__ = { loadGraphviz: async () => lab };
    const fetchSource = vi.fn(async () => bytes('src'));
    // happy-dom has no Worker: the default finds none
    expect((await getGraphviz(fetchSource)).layout('x', 'json', 'dot')).toBe('lab');
    expect(fetchSource).not.toHaveBeenCalled();
  });

  it.each(['failed', 'error'] as const)('falls back when the worker start %s', async start => {
    const { Worker, workers } = scripted(() => ({ json: 'worker' }), start);
    const fetchSource = vi.fn(async () => bytes('src'));
    const importer = vi.fn(async () => ({ Graphviz: { load: async () => ({ layout: () => 'main' }) } }));
    const onWorkerFallback = vi.fn();
    const gv = await getGraphviz(fetchSource, importer, { Worker, onWorkerFallback });
    expect(await gv.layout('x', 'json', 'dot')).toBe('main');
    expect(workers[0].terminated).toBe(true);
    expect(fetchSource).toHaveBeenCalledTimes(1);
    expect(onWorkerFallback.mock.calls[0][0].message).toMatch(
      start === 'failed' ? 'could not load Graphviz: no wasm' : /did not start: .*Content-Security-Policy/
    );
  });

  it('falls back to the Lab extension when the Worker constructor throws', async () => {
    const lab: GraphvizLike = { layout: () => 'lab' };
    (globalThis as G).__forgeviz__ = { loadGraphviz: async () => lab };
    class NoModuleWorkers {
      constructor() {
        throw new TypeError('module workers are not supported');
      }
    }
    const gv = await getGraphviz(async () => bytes('src'), undefined, {
      Worker: NoModuleWorkers as never,
      onWorkerFallback: () => {}
    });
    expect(gv).toBe(lab);
  });

  it('in Lab, also falls back when the kernel cannot send the source', async () => {
    const lab: GraphvizLike = { layout: () => 'lab' };
    (globalThis as G).__forgeviz__ = { loadGraphviz: async () => lab };
    const { Worker, workers } = scripted(() => ({ json: 'worker' }));
    const gv = await getGraphviz(async () => Promise.reject(new Error('no kernel')), undefined, {
      Worker,
      onWorkerFallback: () => {}
    });
    expect(gv).toBe(lab);
    expect(workers).toHaveLength(0);
  });
});

