/**
 * The JupyterLab mime renderer of saved forgeviz outputs (``application/vnd.forgeviz.v1+json``):
 * a notebook reopened with no kernel draws each view from its saved data (see saved.ts), with the
 * view's own bundle, served by Lab from this extension's static folder
 * (``<fullLabextensionsUrl>/forgeviz/static/views/<view>.js``, copied there by
 * scripts/copy-graphviz.mjs). A graph's inspector answers from the saved details.
 *
 * Rank and safety decide when it draws (OutputArea picks the first renderer, lowest rank first,
 * whose mime type the bundle has; for an untrusted output only ``safe`` renderers). This one is
 * safe and ranks -20, before the live widget's renderer (@jupyter-widgets, -10, not safe), so it
 * draws every forgeviz output:
 *
 * - untrusted (a notebook saved elsewhere, or run headless): the saved data;
 * - trusted, with the widget view: the live widget, through the output area's own widget renderer
 *   (what Lab would have used); when that renderer says it has no such widget model ("Error
 *   displaying widget: model not found": a notebook saved in Lab, and so trusted, reopened with no
 *   kernel or a new one), the saved data instead. The widget view is the output's own, or the one
 *   Lab's save set aside in its metadata (refresh.ts ``widgetViewOf``: then it is handed to the
 *   widget renderer as the output's data, as a copy).
 */
import type { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Panel, type Widget } from '@lumino/widgets';
import { installGlobal } from './index';
import { WIDGET_MIME, widgetViewOf, type WidgetView } from './refresh';
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

/** What the widget view's renderer says when it cannot draw (@jupyter-widgets/jupyterlab-manager). */
export const WIDGET_ERROR = 'Error displaying widget';

interface RendermimeLike {
  getFactory(mimeType: string): unknown;
  createRenderer(mimeType: string): IRenderMime.IRenderer;
}

/** The rendermime of the output area holding ``widget`` (its nearest ancestor with one), or null. */
export function rendermimeOf(widget: Widget): RendermimeLike | null {
  for (let w: Widget | null = widget.parent; w; w = w.parent) {
    const rm = (w as { rendermime?: RendermimeLike }).rendermime;
    if (rm && typeof rm.getFactory === 'function' && typeof rm.createRenderer === 'function') {
      return rm;
    }
  }
  return null;
}

/**
 * ``model`` as the widget renderer reads it: with the widget view in its data (a copy of one set
 * aside in the metadata: that renderer blanks the ``model_id`` of the object it was given when the
 * widget closes, and the saved metadata stays as it is).
 */
export function withWidgetView(model: IRenderMime.IMimeModel, view: WidgetView): IRenderMime.IMimeModel {
  if (model.data[WIDGET_MIME] === view) {
    return model;
  }
  return {
    trusted: model.trusted,
    data: { ...model.data, [WIDGET_MIME]: { ...view } as IRenderMime.IMimeModel['data'][string] },
    metadata: model.metadata,
    setData: options => model.setData(options)
  };
}

/** How long the widget renderer may say "Loading widget..." before the saved data is shown meanwhile. */
export const LIVE_WAIT_MS = 1500;

/** One forgeviz output: the live widget when it can be drawn, else its saved data (see above). */
export class SavedRenderer extends Panel implements IRenderMime.IRenderer {
  private cleanup: (() => void) | null = null;
  private live: IRenderMime.IRenderer | null = null;
  private watch: MutationObserver | null = null;
  private timer: ReturnType<typeof setTimeout> | null = null;
  /** which renderModel call is current */
  private turn = 0;

  constructor(private readonly load: (view: string) => Promise<EntryModule> = loadView) {
    super();
  }

  private stopWatching(): void {
    this.watch?.disconnect();
    this.watch = null;
    if (this.timer !== null) {
      clearTimeout(this.timer);
      this.timer = null;
    }
  }

  private clearSaved(): void {
    this.cleanup?.();
    this.cleanup = null;
    this.removeClass('fv-saved-output');
  }

  private clear(): void {
    this.stopWatching();
    this.live?.dispose();
    this.live = null;
    this.clearSaved();
    this.node.replaceChildren();
    this.removeClass('fv-live-output');
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const turn = ++this.turn;
    this.clear();
    const view = model.trusted ? widgetViewOf(model.data, model.metadata) : null;
    if (view) {
      await Promise.resolve(); // the output area adds this renderer to itself after calling renderModel
      const rendermime = turn === this.turn ? rendermimeOf(this) : null;
      if (turn !== this.turn) {
        return;
      }
      if (rendermime?.getFactory(WIDGET_MIME)) {
        return this.renderLive(model, withWidgetView(model, view), rendermime, turn);
      }
    }
    return this.renderSaved(model, () => turn === this.turn);
  }

  /**
   * The live widget, by the output area's widget renderer. While that one waits for the widget
   * manager (no kernel yet, or none at all) the saved data is shown after ``LIVE_WAIT_MS``, until
   * the widget's view comes; when it says it has no such model, the saved data for good.
   */
  private async renderLive(model: IRenderMime.IMimeModel, liveModel: IRenderMime.IMimeModel, rendermime: RendermimeLike, turn: number): Promise<void> {
    const live = rendermime.createRenderer(WIDGET_MIME);
    this.live = live;
    this.addClass('fv-live-output');
    this.addWidget(live);
    const current = () => turn === this.turn && this.live === live;
    let savedShown = false;
    const settle = () => {
      if (!current()) {
        return;
      }
      if ((live.node.textContent ?? '').startsWith(WIDGET_ERROR)) {
        this.clear();
        void this.renderSaved(model, () => turn === this.turn);
      } else if (live.node.firstElementChild) {
        this.stopWatching(); // the widget's view is in
        if (savedShown) {
          savedShown = false;
          this.clearSaved();
          live.show();
        }
      }
    };
    this.watch = new MutationObserver(settle);
    this.watch.observe(live.node, { childList: true, characterData: true, subtree: true });
    this.timer = setTimeout(() => {
      this.timer = null;
      if (current() && !live.node.firstElementChild) {
        savedShown = true;
        live.hide();
        void this.renderSaved(model, () => current() && savedShown);
      }
    }, LIVE_WAIT_MS);
    try {
      await live.renderModel(liveModel);
    } finally {
      settle();
    }
  }

  /** The saved data, unless ``wanted()`` says otherwise by the time its view's bundle is loaded. */
  private async renderSaved(model: IRenderMime.IMimeModel, wanted: () => boolean): Promise<void> {
    const payload = model.data[SAVED_MIME];
    this.addClass('fv-saved-output');
    /** a line of text in place of the drawing (a hidden live renderer may be beside it) */
    const note = (text: string) => {
      const d = this.node.appendChild(document.createElement('div'));
      d.textContent = text;
      this.cleanup = () => d.remove();
    };
    if (!isSavedPayload(payload)) {
      note('forgeviz: this saved output was made by another version of forgeviz');
      return;
    }
    const g = globalThis as { __forgeviz__?: { graphvizSource?: unknown } };
    if (!g.__forgeviz__?.graphvizSource) {
      installGlobal();
    }
    try {
      const entry = await this.load(payload.view);
      if (!wanted()) {
        return;
      }
      const el = document.createElement('div');
      this.node.appendChild(el);
      const unmount = mountSaved(el, payload, entry);
      this.cleanup = () => {
        unmount();
        el.remove();
      };
    } catch (err) {
      if (wanted()) {
        note(`${payload.summary ?? 'forgeviz'} (could not draw it: ${err instanceof Error ? err.message : String(err)})`);
      }
    }
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.turn++;
    this.clear();
    super.dispose();
  }
}

/** The renderer factory: safe (it draws JSON with forgeviz's own code, or Lab's widget renderer for a trusted output), rank -20 (see above). */
export const rendererFactory: IRenderMime.IRendererFactory = {
  safe: true,
  mimeTypes: [SAVED_MIME],
  defaultRank: -20,
  createRenderer: () => new SavedRenderer()
};

const extension: IRenderMime.IExtension = {
  id: 'forgeviz:saved',
  description: 'Draws forgeviz views saved in a notebook, with no kernel.',
  rendererFactory,
  rank: -20,
  dataType: 'json'
};

export default extension;
