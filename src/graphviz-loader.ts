/**
 * Graphviz is loaded ONCE PER PAGE and shared by every forgeviz view, never
 * bundled into the per-instance anywidget ESM. Where the page has Web Workers,
 * layouts run in one module worker (layout-worker.ts) so a large graph does not
 * freeze the page; elsewhere, or when the worker cannot start, on the main thread.
 */
import {
  createLayoutPool,
  DEFAULT_TIMEOUT_MS,
  type GraphvizLike,
  type GraphvizModule,
  loadWithLayered,
  pageWorker,
  type WorkerConstructor
} from './layout-worker';

export type { GraphvizLike };

export interface ForgevizGlobal {
  version?: string;
  /** Set by the JupyterLab extension: loads Graphviz on the main thread (where no worker runs). */
  loadGraphviz?: () => Promise<GraphvizLike>;
  /**
   * Where the layout worker gets the Graphviz ESM's source; when unset, from the kernel
   * (``fetchSource``). A host that serves forgeviz/static/graphviz.js itself can set it.
   */
  graphvizSource?: () => Promise<ArrayBuffer>;
  /** The shared, cached load. */
  graphviz?: Promise<GraphvizLike>;
  [key: string]: unknown;
}

export function forgevizGlobal(): ForgevizGlobal {
  const g = globalThis as { __forgeviz__?: ForgevizGlobal };
  if (!g.__forgeviz__) {
    g.__forgeviz__ = {};
  }
  return g.__forgeviz__;
}

/** Import an ES module from its source bytes via a Blob URL. */
export async function importFromSource(source: ArrayBuffer | string): Promise<Record<string, unknown>> {
  const url = URL.createObjectURL(new Blob([source], { type: 'text/javascript' }));
  try {
    return (await import(/* webpackIgnore: true */ /* @vite-ignore */ url)) as Record<string, unknown>;
  } finally {
    URL.revokeObjectURL(url);
  }
}

export interface GetGraphvizOptions {
  /** The Worker constructor; the page's by default, null for the main thread only. */
  Worker?: WorkerConstructor | null;
  /** A worker layout that has not answered in this long is stopped and rejects (20 s). */
  timeoutMs?: number;
  /** Told why the worker could not be used (the main thread lays out instead). */
  onWorkerFallback?: (err: unknown) => void;
}

/**
 * The page's Graphviz. With Web Workers: a worker fed the Graphviz ESM from
 * ``fetchSource`` (the kernel) or ``graphvizSource``. Without, or when the
 * worker fails to start: the main thread, as the Lab extension's
 * ``loadGraphviz`` provides it or else from ``fetchSource``. The first view's
 * options decide for the page. A failed load is forgotten so a later view can
 * retry.
 */
export function getGraphviz(
  fetchSource: () => Promise<ArrayBuffer>,
  importer: (source: ArrayBuffer) => Promise<Record<string, unknown>> = importFromSource,
  options: GetGraphvizOptions = {}
): Promise<GraphvizLike> {
  const fv = forgevizGlobal();
  if (fv.graphviz) {
    return fv.graphviz;
  }
  // One fetch of the source serves both the worker and a main-thread fallback.
  let source: Promise<ArrayBuffer> | null = null;
  const getSource = (): Promise<ArrayBuffer> => (source ??= (fv.graphvizSource ?? fetchSource)());
  const mainThread = async (): Promise<GraphvizLike> => {
    if (fv.loadGraphviz) {
      return fv.loadGraphviz();
    }
    return loadWithLayered((await importer(await getSource())) as GraphvizModule);
  };
  const load = async (): Promise<GraphvizLike> => {
    const Worker = options.Worker === undefined ? pageWorker() : options.Worker;
    if (Worker) {
      try {
        const pool = createLayoutPool({
          Worker,
          source: await getSource(),
          timeoutMs: options.timeoutMs ?? DEFAULT_TIMEOUT_MS,
          fallback: mainThread
        });
        await pool.ready();
        return pool;
      } catch (err) {
        // A refused worker (CSP), no module workers, no source from the kernel: as without workers.
        (options.onWorkerFallback ?? (e => console.debug('forgeviz: layout on the main thread:', e)))(err);
      }
    }
    return mainThread();
  };
  const p = load();
  fv.graphviz = p;
  p.catch(() => {
    if (fv.graphviz === p) {
      delete fv.graphviz;
    }
  });
  return p;
}
