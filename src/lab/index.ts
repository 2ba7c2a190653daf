/**
 * forgeviz JupyterLab extension. It provides Graphviz (WASM: forgeviz/static/graphviz.js, served
 * by Lab from this extension's static folder) to every forgeviz view on the page, so widgets never
 * ask the kernel for it, answers the graph inspector's "go to cell" (see goto.ts), and saves what
 * each view shows now (refresh.ts); and the side panel (panel.ts, its own plugin).
 */
import type { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { importFromSource } from '../graphviz-loader';
import { type GraphvizModule, loadWithLayered } from '../layout-worker';
import type { ForgevizGlobal, GraphvizLike } from '../graphviz-loader';
import { VERSION } from '../version';
import { installGoto } from './goto';
import { panelPlugin } from './panel';
import { installRefresh } from './refresh';

/**
 * Where Lab serves this extension's copy of forgeviz/static/graphviz.js (the build copies it into
 * forgeviz/labextension/static): ``<fullLabextensionsUrl>/forgeviz/static/graphviz.js``, from the
 * page config Lab writes into every page. Null when the page has none (not Lab).
 *
 * Example: ``graphvizUrl(doc)`` → ``"/lab/extensions/forgeviz/static/graphviz.js"``.
 */
export function graphvizUrl(doc: Document): string | null {
  const text = doc.getElementById('jupyter-config-data')?.textContent;
  if (!text) {
    return null;
  }
  try {
    const base = (JSON.parse(text) as { fullLabextensionsUrl?: string }).fullLabextensionsUrl;
    return base ? `${base.replace(/\/$/, '')}/forgeviz/static/graphviz.js` : null;
  } catch {
    return null;
  }
}

/**
 * Give every forgeviz view on the page Graphviz from the server (never from the kernel): its ESM
 * source for the layout worker (``graphvizSource``) and, where no worker can run, the module itself
 * on the main thread (``loadGraphviz``). Fetched once per page.
 */
export function installGlobal(doc: Document = document): ForgevizGlobal {
  const g = globalThis as { __forgeviz__?: ForgevizGlobal };
  const existing = g.__forgeviz__ ?? {};
  // the live views on the page, listed by each while it is drawn (src/widgets/entry.ts; read on save)
  const views = existing.views instanceof Set ? existing.views : new Set();
  const url = graphvizUrl(doc);
  if (!url) {
    g.__forgeviz__ = { ...existing, version: VERSION, views };
    return g.__forgeviz__;
  }
  let source: Promise<ArrayBuffer> | null = null;
  const graphvizSource = (): Promise<ArrayBuffer> => {
    source ??= fetch(url).then(response => {
      if (!response.ok) {
        throw new Error(`fetching ${url} for the graph layout failed: HTTP ${response.status}`);
      }
      return response.arrayBuffer();
    });
    source.catch(() => (source = null)); // a later view may retry
    return source;
  };
  g.__forgeviz__ = {
    ...existing,
    version: VERSION,
    views,
    graphvizSource,
    loadGraphviz: async (): Promise<GraphvizLike> => loadWithLayered((await importFromSource(await graphvizSource())) as GraphvizModule)
  };
  return g.__forgeviz__;
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'forgeviz:plugin',
  description: 'Provides Graphviz (WASM) to forgeviz autograd graph views, takes their source links to the cell, and saves what they show now.',
  autoStart: true,
  activate: (app: JupyterFrontEnd) => {
    installGlobal();
    installGoto(app.shell);
    installRefresh(app);
  }
};

export default [plugin, panelPlugin];
