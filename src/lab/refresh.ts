/**
 * Saving a notebook saves what its forgeviz views show now, not what they showed when displayed
 * (issue 15). A widget's output carries, next to the live view, its data as
 * ``application/vnd.forgeviz.v1+json`` and its pictures (``image/svg+xml``, ``image/png``), all made
 * by the kernel at display time; the live view goes on changing (a later ``loss.backward()`` sets the
 * graph's ``state``, the user expands Modules: ``expanded``).
 *
 * When a notebook is about to be written (its context's ``saveState`` says ``'started'``), the JSON
 * Lab writes is refreshed from each live view on the page (``globalThis.__forgeviz__.views``, listed
 * by src/widgets/entry.ts): the saved traits from the live model's current values, the picture
 * from the view's own ``exportSVG()`` in the light theme, the graph's summary line, and the graph's
 * inspector replies left out when a backward came after they were made (they would say "no grad").
 *
 * Every forgeviz output written also has its widget view set aside (issue 25): the
 * ``application/vnd.jupyter.widget-view+json`` part leaves ``data`` for the output's
 * ``metadata["application/vnd.forgeviz.v1+json"].widget_view``. JupyterLab without forgeviz would
 * otherwise draw that part first (ipywidgets' renderer outranks every built-in one) and, with no
 * kernel holding the model, say "Error displaying widget: model not found" instead of the SVG;
 * forgeviz's own renderer (mime.ts) reads it from the metadata and still draws the live widget
 * where the widget manager holds the model (the notebook reloaded from disk, its kernel alive).
 *
 * Only the JSON written is refreshed, not the notebook's model: setting an output's data in the
 * model makes Lab render that output again, which for a live widget means a second view of it.
 * So the page keeps the display-time bundle, and every save refreshes again.
 */
import type { JupyterFrontEnd } from '@jupyterlab/application';
import { isSavedPayload, SAVED_MIME, type SavedPayload } from './saved';

/** The live widget's mime type (@jupyter-widgets). */
export const WIDGET_MIME = 'application/vnd.jupyter.widget-view+json';

/** A widget view part (``{model_id, version_major, version_minor}``), as @jupyter-widgets reads it. */
export interface WidgetView {
  model_id: string;
  [key: string]: unknown;
}

/** Where a saved output keeps its widget view once set aside: ``metadata[SAVED_MIME][WIDGET_VIEW_KEY]``. */
export const WIDGET_VIEW_KEY = 'widget_view';

function isWidgetView(v: unknown): v is WidgetView {
  return !!v && typeof v === 'object' && typeof (v as WidgetView).model_id === 'string' && (v as WidgetView).model_id !== '';
}

/**
 * The widget view of a forgeviz output: its ``data``'s own, else the one set aside in its
 * ``metadata`` on save; null when it has neither.
 *
 *     widgetViewOf({}, { [SAVED_MIME]: { widget_view: { model_id: 'abc' } } })  // → { model_id: 'abc' }
 */
export function widgetViewOf(data: Record<string, unknown>, metadata: Record<string, unknown> | undefined): WidgetView | null {
  if (WIDGET_MIME in data) {
    return isWidgetView(data[WIDGET_MIME]) ? data[WIDGET_MIME] : null;
  }
  const aside = (metadata?.[SAVED_MIME] as Record<string, unknown> | undefined)?.[WIDGET_VIEW_KEY];
  return isWidgetView(aside) ? aside : null;
}

interface OutputJSON {
  data?: Record<string, unknown>;
  metadata?: Record<string, unknown>;
  [key: string]: unknown;
}

/**
 * ``output`` (nbformat JSON) with its widget view moved from ``data`` into its forgeviz part's
 * ``metadata`` (see above), as a copy; null when it is not a forgeviz output with a widget view in
 * its data (nothing to move).
 *
 *     setAsideWidgetView({ data: { [WIDGET_MIME]: v, [SAVED_MIME]: p, 'image/svg+xml': s }, metadata: {} })
 *     // → { data: { [SAVED_MIME]: p, 'image/svg+xml': s }, metadata: { [SAVED_MIME]: { widget_view: v } } }
 */
export function setAsideWidgetView<T extends OutputJSON>(output: T): T | null {
  const data = output.data;
  if (!data || !(SAVED_MIME in data) || !(WIDGET_MIME in data)) {
    return null;
  }
  const { [WIDGET_MIME]: view, ...rest } = data;
  const metadata = output.metadata ?? {};
  const own = metadata[SAVED_MIME];
  const mine = own && typeof own === 'object' && !Array.isArray(own) ? (own as Record<string, unknown>) : {};
  return { ...output, data: rest, metadata: { ...metadata, [SAVED_MIME]: { ...mine, [WIDGET_VIEW_KEY]: view } } };
}

/** What the refresh needs of a live view (src/widgets/entry.ts ``LiveView``). */
export interface LiveViewLike {
  el: HTMLElement;
  model: { get(key: string): unknown };
  view: { exportSVG?(): string };
}

/** The page's live views (an empty list where the Lab extension made no registry). */
export function liveViews(): LiveViewLike[] {
  const views = (globalThis as { __forgeviz__?: { views?: Set<LiveViewLike> } }).__forgeviz__?.views;
  return views ? [...views] : [];
}

/**
 * JupyterLab's light theme as the views read it (base.css's fallbacks, which the headless light
 * picture uses too): set on a view for its export while Lab shows the dark theme.
 */
export const LIGHT_VARS: Record<string, string> = {
  '--jp-layout-color0': '#ffffff',
  '--jp-layout-color1': '#ffffff',
  '--jp-layout-color2': '#eeeeee',
  '--jp-ui-font-color1': 'rgba(0, 0, 0, 0.87)',
  '--jp-ui-font-color2': 'rgba(0, 0, 0, 0.54)',
  '--jp-ui-font-color3': 'rgba(0, 0, 0, 0.38)',
  '--jp-border-color1': '#bdbdbd',
  '--jp-border-color2': '#e0e0e0',
  '--jp-brand-color1': '#1976d2',
  '--jp-content-link-color': '#0072b2'
};

/**
 * The live view's own SVG export in the light theme; null when it cannot export, is not on the
 * page (a detached element has no computed style to inline) or its export fails. Synchronous: the
 * page is never painted with the light values.
 */
export function lightSVG(live: LiveViewLike): string | null {
  if (typeof live.view.exportSVG !== 'function' || !live.el.isConnected) {
    return null;
  }
  const body = live.el.ownerDocument.body;
  const dark = body?.dataset.jpThemeLight === 'false';
  const style = live.el.style;
  const before = new Map<string, string>();
  if (dark) {
    for (const [k, v] of Object.entries(LIGHT_VARS)) {
      before.set(k, style.getPropertyValue(k));
      style.setProperty(k, v);
    }
    body.dataset.jpThemeLight = 'true'; // what the broadcast view's export reads
  }
  try {
    return live.view.exportSVG();
  } catch (err) {
    console.warn('forgeviz: the saved picture could not be refreshed', err);
    return null;
  } finally {
    if (dark) {
      before.forEach((v, k) => (v ? style.setProperty(k, v) : style.removeProperty(k)));
      body.dataset.jpThemeLight = 'false';
    }
  }
}

/** Whether ``v`` holds binary data (a trait the JSON cannot keep: the saved value stays). */
function hasBinary(v: unknown, depth = 0): boolean {
  if (v instanceof ArrayBuffer || ArrayBuffer.isView(v)) {
    return true;
  }
  if (!v || typeof v !== 'object' || depth > 64) {
    return false;
  }
  return Object.values(v as Record<string, unknown>).some(x => hasBinary(x, depth + 1));
}

interface StateLike {
  backward_passes: number;
  grad_passes: number[];
}

function stateOf(v: unknown): StateLike | null {
  const s = v as StateLike | null;
  return s && typeof s === 'object' && typeof s.backward_passes === 'number' && Array.isArray(s.grad_passes) ? s : null;
}

const GRADS_TAIL = /; (no backward yet|grads after \d+ backwards?)$/;

/**
 * The graph's summary line with its gradient part from ``traits.state`` (as forgeviz/widgets/graph.py
 * writes it: the most backward passes any Node's gradient has seen); unchanged when the state is
 * missing or older than the graph, or the line has no such part.
 */
export function graphSummary(summary: string, traits: Record<string, unknown>): string {
  const state = stateOf(traits.state);
  const graphPasses = (traits.graph as { backward_passes?: unknown } | null)?.backward_passes;
  if (!GRADS_TAIL.test(summary) || !state || !state.grad_passes.length || (typeof graphPasses === 'number' && graphPasses > state.backward_passes)) {
    return summary;
  }
  const passes = Math.max(0, ...state.grad_passes.filter(p => typeof p === 'number'));
  const tail = passes ? `grads after ${passes} backward${passes === 1 ? '' : 's'}` : 'no backward yet';
  return summary.replace(GRADS_TAIL, `; ${tail}`);
}

/**
 * An output's data refreshed from its live view: null when the output is not a forgeviz widget's
 * (no widget view, in ``data`` or set aside in ``metadata``, or no forgeviz JSON this version reads),
 * or its saved data must stay as the kernel made it (a payload with custom messages: the memory
 * timeline's events go with its traits).
 *
 * - ``traits``: each saved key from the live model (a value it lacks, or binary, stays as saved);
 * - ``summary`` and ``text/plain``: a graph's gradient part, from its state;
 * - ``details`` (a graph's inspector replies): left out, with ``details_cut`` saying why, when the
 *   state has seen a backward they had not (they would show no gradient); otherwise as saved;
 * - ``image/svg+xml`` and ``text/html``: from ``svg()`` (the view's export), where the output had
 *   them and an export came back; ``image/png`` then left out if the traits changed (it cannot be
 *   rasterised again here).
 */
export function refreshedData(
  data: Record<string, unknown>,
  live: LiveViewLike,
  svg: () => string | null,
  metadata?: Record<string, unknown>
): Record<string, unknown> | null {
  const payload = data[SAVED_MIME];
  if (!widgetViewOf(data, metadata) || !isSavedPayload(payload) || (payload.messages?.length ?? 0) > 0) {
    return null;
  }
  const traits: Record<string, unknown> = {};
  for (const [key, saved] of Object.entries(payload.traits)) {
    const now = live.model.get(key);
    traits[key] = now === undefined || hasBinary(now) ? saved : JSON.parse(JSON.stringify(now));
  }
  const next: SavedPayload = { ...payload, traits };
  if (payload.view === 'graph') {
    if (typeof payload.summary === 'string') {
      next.summary = graphSummary(payload.summary, traits);
    }
    const was = stateOf(payload.traits.state)?.backward_passes ?? 0;
    const now = stateOf(traits.state)?.backward_passes ?? 0;
    if (now > was && payload.details && Object.keys(payload.details).length) {
      next.details = {};
      next.details_cut = `the inspector's replies were made before backward ${now}: run the notebook to inspect its gradients`;
    }
  }
  const out: Record<string, unknown> = { ...data, [SAVED_MIME]: next };
  if (typeof next.summary === 'string' && typeof data['text/plain'] === 'string') {
    out['text/plain'] = next.summary;
  }
  if ('image/svg+xml' in data) {
    const picture = svg();
    if (picture) {
      const inline = picture.startsWith('<?xml') ? picture.slice(picture.indexOf('?>') + 2).trimStart() : picture;
      out['image/svg+xml'] = picture;
      if ('text/html' in data) {
        out['text/html'] = `<div class="forgeviz-static">${inline}</div>`;
      }
      // the kernel rasterised the PNG (resvg), which no synchronous save can redo here: a PNG of
      // what the view showed before goes, rather than show readers an older picture
      if ('image/png' in data && JSON.stringify(traits) !== JSON.stringify(payload.traits)) {
        delete out['image/png'];
      }
    }
  }
  return out;
}

/** What the refresh reads of a notebook panel (a NotebookPanel: its cells and their output areas). */
export interface NotebookLike {
  content: { widgets: readonly { model: { id: string }; outputArea?: { widgets: readonly { node: HTMLElement }[] } }[] };
}

interface NotebookJSON {
  cells?: { id?: string; cell_type?: string; outputs?: OutputJSON[] }[];
}

/**
 * ``json`` (a notebook's nbformat JSON, about to be written) with each output that a live forgeviz
 * view draws refreshed (``refreshedData``), and every forgeviz output's widget view set aside
 * (``setAsideWidgetView``), drawn or not (a cell scrolled out of a windowed notebook, a notebook
 * run headless then opened here); the cells and outputs changed are copies, the rest is ``json``'s
 * own. Returns how many outputs were refreshed from a live view.
 */
export function refreshNotebookJSON(json: NotebookJSON, panel: NotebookLike, views: LiveViewLike[] = liveViews()): number {
  if (!Array.isArray(json.cells)) {
    return 0;
  }
  let count = 0;
  json.cells = json.cells.map((saved, c) => {
    if (!saved || saved.cell_type !== 'code' || !Array.isArray(saved.outputs)) {
      return saved;
    }
    const cell = panel.content.widgets[c];
    const area = cell && (!saved.id || saved.id === cell.model.id) ? cell.outputArea : undefined;
    let changed = false;
    const outputs = saved.outputs.map((output, o) => {
      let next = output;
      const node = area?.widgets[o]?.node;
      const live = node && output?.data ? views.find(v => node.contains(v.el)) : undefined;
      if (live) {
        const data = refreshedData(output.data!, live, () => lightSVG(live), output.metadata);
        if (data) {
          next = { ...output, data };
          count++;
        }
      }
      if (next) {
        next = setAsideWidgetView(next) ?? next;
      }
      changed ||= next !== output;
      return next;
    });
    return changed ? { ...saved, outputs } : saved;
  });
  return count;
}

type SaveState = 'started' | 'completed' | 'failed';

interface ContextLike {
  model: { toJSON(): unknown };
  saveState: { connect(cb: (sender: unknown, state: SaveState) => void): unknown };
}

/**
 * Refresh what ``context`` writes for ``panel``: from the save's start to its end the model's
 * ``toJSON`` (what Lab writes) returns the refreshed JSON. A failure leaves the JSON as it was.
 */
export function refreshOnSave(panel: NotebookLike, context: ContextLike): void {
  const model = context.model as { toJSON(): unknown; __fvOriginal__?: () => unknown };
  context.saveState.connect((_, state) => {
    if (state === 'started' && !model.__fvOriginal__) {
      const original = model.toJSON;
      model.__fvOriginal__ = original;
      model.toJSON = function (this: unknown) {
        const json = original.call(model);
        try {
          refreshNotebookJSON(json as NotebookJSON, panel);
        } catch (err) {
          console.warn('forgeviz: the saved outputs could not be refreshed', err);
        }
        return json;
      };
    } else if (state !== 'started' && model.__fvOriginal__) {
      const original = model.__fvOriginal__;
      delete model.__fvOriginal__;
      if (Object.prototype.hasOwnProperty.call(model, 'toJSON') && original === Object.getPrototypeOf(model).toJSON) {
        delete (model as { toJSON?: unknown }).toJSON;
      } else {
        model.toJSON = original;
      }
    }
  });
}

/** Refresh every notebook this Lab saves (a widget extension: one per notebook panel). */
export function installRefresh(app: JupyterFrontEnd): void {
  app.docRegistry?.addWidgetExtension('Notebook', {
    createNew: (panel, context) => refreshOnSave(panel as unknown as NotebookLike, context as unknown as ContextLike)
  });
}
