/**
 * The JupyterLab mime renderer of saved forgeviz outputs (``application/vnd.forgeviz.v1+json``):
 * a notebook reopened with no kernel draws each view from its saved data (see saved.ts), with the
 * view's own bundle, served by Lab from this extension's static folder
 * (``<fullLabextensionsUrl>/forgeviz/static/views/<view>.js``, copied there by
 * scripts/copy-graphviz.mjs). A graph's inspector answers from the saved details.
 *
 * Rank and safety decide when it draws (OutputArea picks the first renderer, lowest rank first,
 * whose mime type the bundle has; for an untrusted output only ``safe`` renderers): the live
 * widget's renderer (@jupyter-widgets, rank -10, not safe) wins in a trusted output; this one (rank
 * 10, safe) wins in an untrusted one, which is what a notebook saved elsewhere, or run headless,
 * is when it is opened. Outputs the kernel makes in this session are trusted: they stay live.
 */
import type { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';
import { installGlobal } from './index';
import { isSavedPayload, mountSaved, SAVED_MIME, type EntryModule } from './saved';

/** Where Lab serves the bundle of ``view`` (null off Lab). */
export function viewUrl(doc: Document, view: string): string | null {
  const text = doc.getElementById('jupyter-config-data')?.textContent;
  if (!text || !/^[a-z]+$/.test(view)) {
    return null;
  }
  try {
    const base = (JSON.parse(text) as { fullLabextensionsUrl?: string }).fullLabextensionsUrl;
    return base ? `${base.replace(/\/$/, '')}/forgeviz/static/views/${view}.js` : null;
  } catch {
    return null;
  }
}

const loaded = new Map<string, Promise<EntryModule>>();

/** The entry module of ``view``, imported once per page. */
function loadView(view: string): Promise<EntryModule> {
  const url = viewUrl(document, view);
  if (!url) {
    return Promise.reject(new Error(`no URL for the forgeviz ${view} bundle on this page`));
  }
  let p = loaded.get(url);
  if (!p) {
    p = import(/* webpackIgnore: true */ url) as Promise<EntryModule>;
    p.catch(() => loaded.delete(url));
    loaded.set(url, p);
  }
  return p;
}

/** One saved forgeviz output, drawn. */
export class SavedRenderer extends Widget implements IRenderMime.IRenderer {
  private cleanup: (() => void) | null = null;

  constructor(private readonly load: (view: string) => Promise<EntryModule> = loadView) {
    super();
    this.addClass('fv-saved-output');
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const payload = model.data[SAVED_MIME];
    this.cleanup?.();
    this.cleanup = null;
    this.node.replaceChildren();
    if (!isSavedPayload(payload)) {
      this.node.textContent = 'forgeviz: this saved output was made by another version of forgeviz';
      return;
    }
    const g = globalThis as { __forgeviz__?: { graphvizSource?: unknown } };
    if (!g.__forgeviz__?.graphvizSource) {
      installGlobal();
    }
    try {
      const entry = await this.load(payload.view);
      const el = document.createElement('div');
      this.node.appendChild(el);
      this.cleanup = mountSaved(el, payload, entry);
    } catch (err) {
      this.node.textContent = `${payload.summary ?? 'forgeviz'} (could not draw it: ${err instanceof Error ? err.message : String(err)})`;
    }
  }

  dispose(): void {
    this.cleanup?.();
    this.cleanup = null;
    this.node.replaceChildren();
    super.dispose();
  }
}

/** The renderer factory: safe (it draws JSON with forgeviz's own code), rank 10 (see above). */
export const rendererFactory: IRenderMime.IRendererFactory = {
  safe: true,
  mimeTypes: [SAVED_MIME],
  defaultRank: 10,
  createRenderer: () => new SavedRenderer()
};

const extension: IRenderMime.IExtension = {
  id: 'forgeviz:saved',
  description: 'Draws forgeviz views saved in a notebook, with no kernel.',
  rendererFactory,
  rank: 10,
  dataType: 'json'
};

export default extension;
