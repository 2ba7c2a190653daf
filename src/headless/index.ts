/**
 * The headless renderer (esbuild → forgeviz/static/headless.js, an IIFE for a bare V8: Python's
 * mini-racer, see forgeviz/headless). It draws a view with the very renderers the browser runs,
 * in a happy-dom document, and returns the view's own ``exportSVG()``: one source of truth for
 * drawing. Not an anywidget view (it is not in forgeviz/views.json).
 *
 *     await forgevizRender('graph', JSON.stringify({graph, state, expanded}), 'dark')  // '<?xml …<svg …'
 *
 * ``traitsJson`` is the JSON of the widget's synced traits (graph: ``graph``, ``state``,
 * ``expanded``; strides: ``layout``; broadcast: ``plan``; all: ``warnings``). Each view is mounted
 * the way its widget entry mounts it (``defineEntry`` with a stand-in model that has only ``get``:
 * no kernel, no transport), then we wait for ``.fv-root[data-fv-state="ready"]``. Graphviz is the
 * same module the layout worker loads (src/graphviz-bundle.ts), laid out on this thread (no Worker).
 * The memory view is not drawn here: its timeline streams from the kernel (it says so).
 */
import { Window } from 'happy-dom';
import broadcastCss from '../../style/broadcast.css?raw';
import graphCss from '../../style/graph.css?raw';
import stridesCss from '../../style/strides.css?raw';
import * as graphvizModule from '../graphviz-bundle';
import { forgevizGlobal, getGraphviz } from '../graphviz-loader';
import { loadWithLayered } from '../layout-worker';
import { graphOfTrait, isGraphTrait } from '../model/table';
import type { BroadcastPlan, GraphState, StrideLayout } from '../model/wire';
import { createBroadcastView } from '../render/broadcast/view';
import { unpackLayout } from '../render/graph/layered';
import { createGraphView } from '../render/graph/view';
import { createStridesView } from '../render/strides/view';
import { defineEntry, hasArrays, type EntryModel, type EntryView } from '../widgets/entry';

/** The views drawn here, and the trait that holds each one's data. */
export const HEADLESS_VIEWS: Record<string, string> = { graph: 'graph', strides: 'layout', broadcast: 'plan' };

/**
 * JupyterLab's dark theme colours the views read (through base.css's --fv-* tokens); the light
 * theme is base.css's own fallbacks. The same values as the broadcast view's offline page.
 */
const DARK_VARS: Record<string, string> = {
  '--jp-layout-color0': '#111',
  '--jp-layout-color1': '#1e1e1e',
  '--jp-layout-color2': '#2b2b2b',
  '--jp-ui-font-color1': 'rgba(255,255,255,.87)',
  '--jp-ui-font-color2': 'rgba(255,255,255,.54)',
  '--jp-ui-font-color3': 'rgba(255,255,255,.38)',
  '--jp-border-color1': '#616161',
  '--jp-border-color2': '#424242'
};

const THEME_STYLE_ID = 'forgeviz-headless-theme';
/** How long a view may take to be ready (a big graph's layout included). */
const READY_TIMEOUT_MS = 120_000;

let win: Window | null = null;

/** The one happy-dom window; Graphviz for it is this module's, on this thread. */
function page(): Document {
  if (!win) {
    win = new Window({ width: 1200, height: 900 });
    // no screen, no frames: a frame is the next task (a big graph is attached frame by frame)
    const w = win as unknown as { requestAnimationFrame(cb: (t: number) => void): number; cancelAnimationFrame(id: number): void };
    w.requestAnimationFrame = cb => setTimeout(() => cb(Date.now()), 0) as unknown as number;
    w.cancelAnimationFrame = id => clearTimeout(id);
    const fv = forgevizGlobal();
    fv.loadGraphviz = () => loadWithLayered(graphvizModule);
  }
  return win.document as unknown as Document;
}

function setTheme(doc: Document, theme: string): void {
  const vars = theme === 'dark' ? DARK_VARS : {};
  let style = doc.getElementById(THEME_STYLE_ID);
  if (!style) {
    style = doc.createElement('style');
    style.id = THEME_STYLE_ID;
    doc.head.appendChild(style);
  }
  const decl = Object.entries(vars)
    .map(([k, v]) => `${k}:${v};`)
    .join('');
  // on the view root too: happy-dom does not hand inherited custom properties to getComputedStyle
  style.textContent = `:root,body,.fv-root{${decl}}`;
  doc.body.setAttribute('data-jp-theme-light', theme === 'dark' ? 'false' : 'true');
}

interface Exportable extends EntryView {
  exportSVG(): string;
}

/** No kernel here: a request the view makes (inspector, DOT) fails with this. */
const noKernel = (): Promise<never> => Promise.reject(new Error('no kernel connection (headless render)'));

const expandedOf = (v: unknown): string[] => (Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : []);
const isState = (v: unknown): v is GraphState => hasArrays(v, 'ids', 'module_ids');

/** Mount ``view`` on ``el`` as its widget entry would (src/widgets/<view>.ts), and return it. */
function mount(view: string, model: EntryModel, el: HTMLElement): { view: Exportable; cleanup: () => void } {
  let made: Exportable | null = null;
  let cleanup: () => void;
  if (view === 'graph') {
    cleanup = defineEntry({
      trait: 'graph',
      is: isGraphTrait,
      styleId: 'forgeviz-style',
      css: graphCss,
      create({ el: root }) {
        const gv = () => getGraphviz(noKernel, undefined, { Worker: null });
        const v = createGraphView(root, {
          layout: async dot => (await gv()).layout(dot, 'json', 'dot'),
          layoutLayered: async input => {
            const g = await gv();
            if (!g.layered) {
              throw new Error('the headless Graphviz has no layered layout');
            }
            return unpackLayout(await g.layered(input), input);
          },
          requestDetail: noKernel,
          requestModule: noKernel,
          requestDot: noKernel,
          expanded: expandedOf(model.get('expanded'))
        });
        made = v;
        return v;
      },
      show: (v, g) => {
        // as the widget entry: the graph, then the state trait unless it is older than the graph
        const graph = graphOfTrait(g);
        void v.setGraph(graph);
        const s = model.get('state');
        if (isState(s) && s.backward_passes >= graph.backward_passes) {
          v.setState(s);
        }
      }
    })({ model, el });
  } else if (view === 'strides') {
    cleanup = defineEntry({
      trait: 'layout',
      is: (v): v is StrideLayout => hasArrays(v, 'tensors', 'strips'),
      styleId: 'forgeviz-strides-style',
      css: stridesCss,
      create({ el: root }) {
        const v = createStridesView(root, { requestValues: noKernel, requestStorage: noKernel, tryOp: noKernel });
        made = v;
        return v;
      },
      show: (v, l) => v.setLayout(l)
    })({ model, el });
  } else if (view === 'broadcast') {
    cleanup = defineEntry({
      trait: 'plan',
      is: (v): v is BroadcastPlan => hasArrays(v, 'operands', 'steps'),
      styleId: 'forgeviz-broadcast-style',
      css: broadcastCss,
      create({ el: root }) {
        const v = createBroadcastView(root, { requestHtml: null });
        made = v;
        return v;
      },
      show: (v, p) => v.setPlan(p)
    })({ model, el });
  } else {
    throw new Error(`the ${view} view cannot be drawn headless`);
  }
  return { view: made!, cleanup };
}

/** Settle when ``el`` is ready; reject with the view's own status text when it says error. */
function whenReady(el: HTMLElement): Promise<void> {
  const t0 = Date.now();
  return new Promise((resolve, reject) => {
    const poll = () => {
      const state = el.getAttribute('data-fv-state');
      if (state === 'ready') {
        resolve();
      } else if (state === 'error') {
        const status = el.querySelector('.fv-status')?.textContent?.trim();
        reject(new Error(status || 'the view could not be drawn'));
      } else if (Date.now() - t0 > READY_TIMEOUT_MS) {
        reject(new Error(`the view was not ready after ${READY_TIMEOUT_MS / 1000} s (state: ${state})`));
      } else {
        setTimeout(poll, 2);
      }
    };
    poll();
  });
}

/**
 * Draw ``view`` from its widget's traits (JSON) in ``theme`` ('light' or 'dark') and return the
 * standalone SVG its export button would save. Rejects with a message saying what was wrong.
 */
export async function forgevizRender(view: string, traitsJson: string, theme: string): Promise<string> {
  const trait = HEADLESS_VIEWS[view];
  if (!trait) {
    throw new Error(`the ${view} view cannot be drawn headless (only ${Object.keys(HEADLESS_VIEWS).join(', ')})`);
  }
  if (theme !== 'light' && theme !== 'dark') {
    throw new Error(`theme must be 'light' or 'dark', got '${theme}'`);
  }
  const traits = JSON.parse(traitsJson) as Record<string, unknown>;
  const doc = page();
  setTheme(doc, theme);
  const el = doc.createElement('div');
  doc.body.appendChild(el);
  const model: EntryModel = { get: key => traits[key] };
  const { view: v, cleanup } = mount(view, model, el);
  try {
    if (el.getAttribute('data-fv-state') !== 'ready' && el.getAttribute('data-fv-state') !== 'error') {
      // nothing shown yet unless the trait held the view's data
      const value = traits[trait];
      const shown = view === 'graph' ? isGraphTrait(value) : hasArrays(value, ...(view === 'strides' ? ['tensors', 'strips'] : ['operands', 'steps']));
      if (!shown) {
        throw new Error(`the '${trait}' trait holds no ${view} to draw`);
      }
    }
    await whenReady(el);
    return v.exportSVG();
  } finally {
    cleanup();
    el.remove();
  }
}

(globalThis as { forgevizRender?: typeof forgevizRender }).forgevizRender = forgevizRender;
(globalThis as { forgevizHeadlessViews?: string[] }).forgevizHeadlessViews = Object.keys(HEADLESS_VIEWS);
