/**
 * Graphviz is loaded ONCE PER PAGE and shared by every forgeviz view, never
 * bundled into the per-instance anywidget ESM.
 */

/** The subset of @hpcc-js/wasm-graphviz's Graphviz we use. */
export interface GraphvizLike {
  layout(dot: string, format: 'json', engine: 'dot'): string;
}

export interface ForgevizGlobal {
  version?: string;
  /** Set by the JupyterLab extension: loads the bundled WASM from a lazy chunk. */
  loadGraphviz?: () => Promise<GraphvizLike>;
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

/**
 * The page's Graphviz. ``fetchSource`` asks the kernel for the bundled module;
 * it is used only when no Lab extension registered ``loadGraphviz`` and no
 * earlier view already loaded it. A failed load is forgotten so a later view
 * can retry.
 */
export function getGraphviz(
  fetchSource: () => Promise<ArrayBuffer>,
  importer: (source: ArrayBuffer) => Promise<Record<string, unknown>> = importFromSource
): Promise<GraphvizLike> {
  const fv = forgevizGlobal();
  if (fv.graphviz) {
    return fv.graphviz;
  }
  const load = async (): Promise<GraphvizLike> => {
    if (fv.loadGraphviz) {
      return fv.loadGraphviz();
    }
    const mod = await importer(await fetchSource());
    const Graphviz = mod.Graphviz as { load(): Promise<GraphvizLike> } | undefined;
    if (!Graphviz || typeof Graphviz.load !== 'function') {
      throw new Error('the Graphviz module from the kernel has no Graphviz export');
    }
    return Graphviz.load();
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
