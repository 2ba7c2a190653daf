/**
 * Graphviz layout off the main thread: one module Web Worker per page, built from a Blob URL.
 * The worker's source is the few lines below, not Graphviz: it receives the Graphviz ESM's bytes
 * (the kernel's forgeviz/static/graphviz.js), imports them from a Blob URL of its own, loads the
 * WASM once and answers ``{id, dot}`` with ``{id, json}`` or ``{id, error}``.
 *
 * Layouts go to the worker one at a time, so a deadline measures that layout alone: one that
 * runs past it stops the worker (Graphviz cannot be interrupted) and the next starts a fresh one.
 *
 * Big views (thousands of boxes, past what Graphviz lays out in time) go to the same worker: the
 * Graphviz ESM (src/graphviz-bundle.ts) also exports forgeviz's layered layout
 * (render/graph/layered.ts), so that code too reaches the page once, not in every widget's ESM.
 */
import type { LayeredInput, PackedLayout } from './render/graph/layered';

/**
 * The subset of @hpcc-js/wasm-graphviz's Graphviz we use. The main-thread Graphviz answers at
 * once, the worker's later: callers ``await`` either.
 */
export interface GraphvizLike {
  layout(dot: string, format: 'json', engine: 'dot'): string | Promise<string>;
  /** The layered layout of a big view, packed (layered.ts); absent where only Graphviz came. */
  layered?(input: LayeredInput): PackedLayout | Promise<PackedLayout>;
}

/** What the Graphviz ESM (forgeviz/static/graphviz.js, src/graphviz-bundle.ts) exports. */
export interface GraphvizModule {
  Graphviz?: { load(): Promise<GraphvizLike> };
  layeredLayout?: (input: LayeredInput) => unknown;
  packLayout?: (layout: never) => PackedLayout;
}

/**
 * The Graphviz of ``mod`` loaded, with the module's layered layout beside it.
 *
 *     const g = await loadWithLayered(await importFromSource(source));
 *     g.layered!(toLayered(vis))   // a PackedLayout
 */
export async function loadWithLayered(mod: GraphvizModule): Promise<GraphvizLike> {
  if (!mod.Graphviz || typeof mod.Graphviz.load !== 'function') {
    throw new Error('the Graphviz module from the kernel has no Graphviz export');
  }
  const g = await mod.Graphviz.load();
  const { layeredLayout, packLayout } = mod;
  return {
    layout: (dot, format, engine) => g.layout(dot, format, engine),
    layered: layeredLayout && packLayout ? input => packLayout(layeredLayout(input) as never) : undefined
  };
}

/**
 * The worker's program (plain ES2020, kept terse: it travels inside every widget ESM). On
 * ``{type: 'init', source}`` it imports ``source`` from a Blob URL of its own and loads Graphviz,
 * answering ``ready`` or ``failed``; on ``{id, dot}`` it answers ``{id, json}``, on ``{id, input}``
 * (a big view) ``{id, layout}`` (packed, its arrays moved), or ``{id, error}``. It must not bundle
 * Graphviz.
 */
export const WORKER_SOURCE =
  'let M,g,l;const t=e=>String(e&&e.message||e);' +
  'self.onmessage=async({data:m})=>{' +
  "if(m.type==='init'){l=(async()=>{const u=URL.createObjectURL(new Blob([m.source],{type:'text/javascript'}));" +
  'try{M=await import(u);g=await M.Graphviz.load()}finally{URL.revokeObjectURL(u)}})();' +
  "try{await l;self.postMessage({type:'ready'})}catch(e){self.postMessage({type:'failed',message:t(e)})}return}" +
  "try{await l;if(m.input){const p=M.packLayout(M.layeredLayout(m.input));self.postMessage({id:m.id,layout:p},[p.geometry.buffer,p.heads.buffer])}" +
  "else self.postMessage({id:m.id,json:g.layout(m.dot,'json','dot')})}catch(e){self.postMessage({id:m.id,error:t(e)})}}";

/** What we use of a Web Worker (a fake one in tests). */
export interface WorkerLike {
  onmessage: ((event: MessageEvent) => void) | null;
  onerror: ((event: Event) => void) | null;
  onmessageerror: ((event: MessageEvent) => void) | null;
  postMessage(message: unknown): void;
  terminate(): void;
}

export type WorkerConstructor = new (url: string, options?: WorkerOptions) => WorkerLike;

/** The worker's answers. */
type Reply =
  | { type: 'ready' }
  | { type: 'failed'; message: string }
  | { id: number; json: string }
  | { id: number; layout: PackedLayout }
  | { id: number; error: string };

export const DEFAULT_TIMEOUT_MS = 20_000;

export interface LayoutPoolOptions {
  Worker: WorkerConstructor;
  /** The Graphviz ESM's source (forgeviz/static/graphviz.js). */
  source: ArrayBuffer;
  /** A layout that has not answered in this long stops the worker and rejects. */
  timeoutMs?: number;
  /** How long a worker may take to load Graphviz; ``timeoutMs`` when not given. */
  startTimeoutMs?: number;
  /** The main-thread Graphviz, used from then on when a fresh worker cannot start. */
  fallback?: () => Promise<GraphvizLike>;
}

/** A GraphvizLike whose layouts run in the page's worker. */
export interface LayoutPool extends GraphvizLike {
  layout(dot: string, format?: 'json', engine?: 'dot'): Promise<string>;
  layered(input: LayeredInput): Promise<PackedLayout>;
  /** Start the worker (if it is not running) and wait until Graphviz is loaded in it. */
  ready(): Promise<void>;
  /** Stop the worker; pending layouts reject. */
  terminate(): void;
}

/** A Graphviz layout (``dot``) or a big view's layered one (``input``). */
interface Job {
  id: number;
  dot?: string;
  input?: LayeredInput;
  resolve: (answer: string | PackedLayout) => void;
  reject: (err: Error) => void;
}

/** What a job's deadline says it was. */
function jobWhat(job: Job): string {
  if (job.input) {
    return `the layered layout of ${job.input.edges.length.toLocaleString('en-US')} edges`;
  }
  return `Graphviz layout of ${new TextEncoder().encode(job.dot ?? '').length.toLocaleString('en-US')} bytes of DOT`;
}

/** Run ``job`` on a main-thread Graphviz. */
async function runOn(g: GraphvizLike, job: Job): Promise<string | PackedLayout> {
  if (job.input) {
    if (!g.layered) {
      throw new Error('this page has Graphviz but not the layered layout for big views');
    }
    return g.layered(job.input);
  }
  return g.layout(job.dot ?? '', 'json', 'dot');
}

/** An error event's words: a script error has a message, a refused script (CSP, …) has none. */
export function workerErrorText(event: Event): string {
  const e = event as Partial<ErrorEvent>;
  if (e.message) {
    return e.filename ? `${e.message} (${e.filename}:${e.lineno ?? '?'})` : e.message;
  }
  return 'the worker script could not run (is it refused by a Content-Security-Policy?)';
}

function seconds(ms: number): string {
  return `${Number((ms / 1000).toPrecision(3))} s`;
}

/**
 * The page's layout worker: started on first use (or ``ready()``), restarted after a deadline or
 * a crash. A crash (the worker's error event) rejects every pending layout with its text.
 */
export function createLayoutPool(options: LayoutPoolOptions): LayoutPool {
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const startTimeoutMs = options.startTimeoutMs ?? timeoutMs;
  let worker: WorkerLike | null = null;
  let starting: Promise<WorkerLike> | null = null;
  let fallback: Promise<GraphvizLike> | null = null;
  const queue: Job[] = [];
  let current: { job: Job; settle: () => void } | null = null;
  let pumping = false;
  let nextId = 1;

  const stop = (): void => {
    worker?.terminate();
    worker = null;
    starting = null;
  };

  /** A running worker with Graphviz loaded in it. */
  const start = (): Promise<WorkerLike> => {
    if (starting) {
      return starting;
    }
    const p = new Promise<WorkerLike>((resolve, reject) => {
      const url = URL.createObjectURL(new Blob([WORKER_SOURCE], { type: 'text/javascript' }));
      let w: WorkerLike;
      try {
        w = new options.Worker(url, { type: 'module', name: 'forgeviz-layout' });
      } catch (err) {
        URL.revokeObjectURL(url);
        reject(err instanceof Error ? err : new Error(String(err)));
        return;
      }
      const done = (): void => {
        clearTimeout(timer);
        URL.revokeObjectURL(url);
      };
      const fail = (err: Error): void => {
        done();
        w.terminate();
        if (starting === p) {
          starting = null;
        }
        reject(err);
      };
      const timer = setTimeout(
        () => fail(new Error(`the layout worker did not load Graphviz within ${seconds(startTimeoutMs)}`)),
        startTimeoutMs
      );
      w.onmessage = event => {
        const m = event.data as Reply;
        if ('type' in m && m.type === 'ready') {
          done();
          worker = w;
          attach(w);
          resolve(w);
        } else if ('type' in m && m.type === 'failed') {
          fail(new Error(`the layout worker could not load Graphviz: ${m.message}`));
        }
      };
      w.onerror = event => {
        event.preventDefault?.();
        fail(new Error(`the layout worker did not start: ${workerErrorText(event)}`));
      };
      w.onmessageerror = () => fail(new Error('the layout worker sent a message that could not be read'));
      w.postMessage({ type: 'init', source: options.source });
    });
    starting = p;
    return p;
  };

  /** Rejects the layout in flight and every queued one: the worker is gone. */
  const crash = (err: Error): void => {
    stop();
    const jobs = [...(current ? [current.job] : []), ...queue.splice(0)];
    current?.settle();
    current = null;
    jobs.forEach(j => j.reject(err));
  };

  const attach = (w: WorkerLike): void => {
    w.onmessage = event => {
      const m = event.data as Reply;
      if (!current || !('id' in m) || m.id !== current.job.id) {
        return;
      }
      const { job, settle } = current;
      current = null;
      settle();
      if ('json' in m) {
        job.resolve(m.json);
      } else if ('layout' in m) {
        job.resolve(m.layout);
      } else {
        job.reject(new Error(m.error));
      }
    };
    w.onerror = event => {
      event.preventDefault?.();
      crash(new Error(`the layout worker failed: ${workerErrorText(event)}`));
    };
    w.onmessageerror = () => crash(new Error('the layout worker sent a message that could not be read'));
  };

  /** Send one job and wait until it is answered, runs past its deadline, or the worker dies. */
  const run = (w: WorkerLike, job: Job): Promise<void> =>
    new Promise<void>(settled => {
      const timer = setTimeout(() => {
        if (current?.job !== job) {
          return;
        }
        current = null;
        stop();
        settled();
        job.reject(
          new Error(
            `${jobWhat(job)} did not answer within ${seconds(timeoutMs)}; its worker was stopped (the next layout starts a fresh one)`
          )
        );
      }, timeoutMs);
      current = {
        job,
        settle: () => {
          clearTimeout(timer);
          settled();
        }
      };
      w.postMessage(job.input ? { id: job.id, input: job.input } : { id: job.id, dot: job.dot });
    });

  const pump = async (): Promise<void> => {
    if (pumping) {
      return;
    }
    pumping = true;
    try {
      while (queue.length) {
        let w: WorkerLike;
        try {
          w = await start();
        } catch (err) {
          // A fresh worker cannot start: the main thread takes these, and all later ones.
          const jobs = queue.splice(0);
          if (!options.fallback) {
            jobs.forEach(j => j.reject(err as Error));
            continue;
          }
          fallback ??= options.fallback();
          for (const j of jobs) {
            fallback.then(g => runOn(g, j)).then(j.resolve, j.reject);
          }
          continue;
        }
        const job = queue.shift();
        if (job) {
          await run(w, job);
        }
      }
    } finally {
      pumping = false;
    }
  };

  const submit = (job: Omit<Job, 'id' | 'resolve' | 'reject'>): Promise<string | PackedLayout> => {
    if (fallback) {
      const fb = fallback;
      return fb.then(g => runOn(g, { id: 0, ...job, resolve: () => undefined, reject: () => undefined }));
    }
    return new Promise((resolve, reject) => {
      queue.push({ id: nextId++, ...job, resolve, reject });
      void pump();
    });
  };

  return {
    layout: async (dot: string) => (await submit({ dot })) as string,
    layered: async (input: LayeredInput) => (await submit({ input })) as PackedLayout,
    async ready() {
      await start();
    },
    terminate() {
      crash(new Error('the layout worker was stopped'));
    }
  };
}

/** The page's Worker constructor, or null where there is none (jsdom, happy-dom, old runtimes). */
export function pageWorker(): WorkerConstructor | null {
  const W = (globalThis as { Worker?: WorkerConstructor }).Worker;
  return typeof W === 'function' ? W : null;
}

