/**
 * Saving refreshes what the notebook keeps of each live view (src/lab/refresh.ts): the saved traits
 * from the live model, the picture from the view's export (light theme), the graph's summary and
 * its stale inspector replies; every forgeviz output's widget view is set aside in its metadata
 * (JupyterLab without forgeviz then draws the SVG, not "model not found"); the registry of live
 * views (src/widgets/entry.ts).
 */
import { Graphviz } from '@hpcc-js/wasm-graphviz';
import { afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { SAVED_MIME, type SavedPayload } from '../../src/lab/saved';
import {
  graphSummary,
  LIGHT_VARS,
  lightSVG,
  refreshedData,
  refreshNotebookJSON,
  refreshOnSave,
  setAsideWidgetView,
  WIDGET_MIME,
  widgetViewOf,
  type LiveViewLike
} from '../../src/lab/refresh';
import graph from '../../src/widgets/graph';
import { s1Graph, traitOf, xDetail } from './fixtures';

type G = { __forgeviz__?: any };
afterEach(() => {
  document.body.replaceChildren();
  delete document.body.dataset.jpThemeLight;
  delete (globalThis as G).__forgeviz__;
});

const before = { backward_passes: 0, ids: [1, 2, 3, 4, 5], grad_passes: [0, 0, 0, 0, 0], grad_briefs: [null, null, null, null, null], freed: [], nonfinite: [], first_nonfinite: [], module_ids: [], module_grad_norms: [], module_param_grad_norms: [] };
const after = { ...before, backward_passes: 1, grad_passes: [1, 1, 1, 1, 1], grad_briefs: ['64', '32', '16', '16', '1'], freed: [3, 5] };

function payload(over: Partial<SavedPayload> = {}): SavedPayload {
  return {
    version: 1,
    view: 'graph',
    summary: 'forgeviz graph: 5 Nodes, loss ← x, y; no backward yet',
    traits: { graph: traitOf(s1Graph(false)), state: before, expanded: [], warnings: [] },
    details: { nodes: { '1': xDetail() }, modules: {} },
    messages: [],
    ...over
  };
}

function outputData(p: SavedPayload = payload()): Record<string, unknown> {
  return {
    [WIDGET_MIME]: { model_id: 'abc', version_major: 2, version_minor: 1 },
    'text/plain': p.summary,
    [SAVED_MIME]: p,
    'image/svg+xml': '<?xml version="1.0"?>\n<svg>old</svg>',
    'text/html': '<div class="forgeviz-static"><svg>old</svg></div>'
  };
}

function stub(values: Record<string, unknown>, svg = '<?xml version="1.0" encoding="UTF-8"?>\n<svg>new 64</svg>'): LiveViewLike {
  const el = document.body.appendChild(document.createElement('div'));
  return { el, model: { get: k => values[k] }, view: { exportSVG: () => svg } };
}

describe('an output refreshed from its live view', () => {
  it('takes the live traits, the export, the summary; drops inspector replies made before the backward', () => {
    const live = stub({ graph: traitOf(s1Graph(false)), state: after, expanded: ['m1'], warnings: [], static: false });
    const data = refreshedData(outputData(), live, () => lightSVG(live))!;
    const p = data[SAVED_MIME] as SavedPayload;
    expect(p.traits.state).toEqual(after);
    expect(p.traits.expanded).toEqual(['m1']);
    expect(Object.keys(p.traits).sort()).toEqual(['expanded', 'graph', 'state', 'warnings']); // only the saved keys
    expect(p.summary).toBe('forgeviz graph: 5 Nodes, loss ← x, y; grads after 1 backward');
    expect(data['text/plain']).toBe(p.summary);
    expect(p.details).toEqual({});
    expect(p.details_cut).toContain('before backward 1');
    expect(data['image/svg+xml']).toBe('<?xml version="1.0" encoding="UTF-8"?>\n<svg>new 64</svg>');
    expect(data['text/html']).toBe('<div class="forgeviz-static"><svg>new 64</svg></div>');
    expect(data[WIDGET_MIME]).toEqual({ model_id: 'abc', version_major: 2, version_minor: 1 });
  });

  it('leaves out the kernel\'s PNG when the view changed since, keeps it when it did not', () => {
    const withPng = { ...outputData(), 'image/png': 'iVBORw0KGgo=' };
    const changed = stub({ state: after });
    expect(refreshedData(withPng, changed, () => lightSVG(changed))!['image/png']).toBeUndefined();
    const same = stub({ state: before });
    expect(refreshedData(withPng, same, () => lightSVG(same))!['image/png']).toBe('iVBORw0KGgo=');
  });

  it('keeps the details when no backward came since, and the saved picture when the export fails', () => {
    const live = stub({ state: before, expanded: ['m2'] });
    const data = refreshedData(outputData(), live, () => null)!;
    const p = data[SAVED_MIME] as SavedPayload;
    expect(p.details).toEqual({ nodes: { '1': xDetail() }, modules: {} });
    expect(p.details_cut).toBeUndefined();
    expect(p.traits.graph).toEqual(traitOf(s1Graph(false))); // the model lacks it: as saved
    expect(data['image/svg+xml']).toBe('<?xml version="1.0"?>\n<svg>old</svg>');
  });

  it('leaves alone what is not a forgeviz widget, and a payload with messages (the memory timeline)', () => {
    const live = stub({ state: after });
    expect(refreshedData({ 'text/plain': 'x' }, live, () => '<svg/>')).toBeNull();
    const { [WIDGET_MIME]: view, ...noWidget } = outputData();
    expect(refreshedData(noWidget, live, () => '<svg/>')).toBeNull();
    expect(refreshedData(noWidget, live, () => '<svg/>', { [SAVED_MIME]: {} })).toBeNull();
    // a widget view set aside by an earlier save (a notebook reloaded from disk, its kernel alive, draws it live)
    const aside = refreshedData(noWidget, live, () => '<svg>new</svg>', { [SAVED_MIME]: { widget_view: view } })!;
    expect((aside[SAVED_MIME] as SavedPayload).traits.state).toEqual(after);
    expect(aside['image/svg+xml']).toBe('<svg>new</svg>');
    expect(WIDGET_MIME in aside).toBe(false);
    const memory = payload({ view: 'memory', traits: { timeline: {} }, messages: [{ content: { type: 'events' }, buffers: [] }] });
    expect(refreshedData(outputData(memory), live, () => '<svg/>')).toBeNull();
  });

  it('keeps a saved trait whose live value is binary', () => {
    const live = stub({ state: new DataView(new ArrayBuffer(4)) });
    expect((refreshedData(outputData(), live, () => null)![SAVED_MIME] as SavedPayload).traits.state).toEqual(before);
  });
});

describe("the graph's summary", () => {
  it('says the grads from the state, unless the state is older than the graph', () => {
    const s = 'forgeviz graph: 5 Nodes, loss ← x, y; no backward yet';
    expect(graphSummary(s, { state: { ...after, grad_passes: [2, 1, 1, 1, 1], backward_passes: 2 } })).toBe('forgeviz graph: 5 Nodes, loss ← x, y; grads after 2 backwards');
    expect(graphSummary(s, { graph: { backward_passes: 3 }, state: after })).toBe(s);
    expect(graphSummary('forgeviz graph: empty', { state: after })).toBe('forgeviz graph: empty');
  });
});

describe('the export', () => {
  it('is taken in the light theme when Lab shows the dark one, and the page is put back', () => {
    document.body.dataset.jpThemeLight = 'false';
    const el = document.body.appendChild(document.createElement('div'));
    el.style.setProperty('--jp-layout-color0', '#123456');
    let seen: [string, string, string] = ['', '', ''];
    const live: LiveViewLike = {
      el,
      model: { get: () => undefined },
      view: { exportSVG: () => ((seen = [el.style.getPropertyValue('--jp-layout-color0'), el.style.getPropertyValue('--jp-border-color1'), document.body.dataset.jpThemeLight!]), '<svg/>') }
    };
    expect(lightSVG(live)).toBe('<svg/>');
    expect(seen).toEqual([LIGHT_VARS['--jp-layout-color0'], LIGHT_VARS['--jp-border-color1'], 'true']);
    expect(el.style.getPropertyValue('--jp-layout-color0')).toBe('#123456');
    expect(el.style.getPropertyValue('--jp-border-color1')).toBe('');
    expect(document.body.dataset.jpThemeLight).toBe('false');
  });

  it('is not taken from a view off the page', () => {
    const live: LiveViewLike = { el: document.createElement('div'), model: { get: () => undefined }, view: { exportSVG: () => '<svg/>' } };
    expect(lightSVG(live)).toBeNull();
  });
});

/** A notebook panel of ``cells``, each a list of output nodes. */
function panelOf(cells: HTMLElement[][]) {
  return { content: { widgets: cells.map((nodes, i) => ({ model: { id: `c${i}` }, outputArea: { widgets: nodes.map(node => ({ node })) } })) } };
}

describe('the notebook JSON written on save', () => {
  it('has each output a live view draws refreshed, found by where the view is on the page', () => {
    const out0 = document.body.appendChild(document.createElement('div'));
    const out1 = document.body.appendChild(document.createElement('div'));
    const live = stub({ state: after });
    out1.appendChild(live.el);
    const original = { cell_type: 'code', id: 'c0', outputs: [{ output_type: 'stream', text: 'hi' }, { output_type: 'display_data', data: outputData() }] };
    const json = { cells: [{ cell_type: 'markdown', id: 'm' }, original] };
    const panel = panelOf([[], [out0, out1]]);
    panel.content.widgets[1].model.id = 'c0';
    expect(refreshNotebookJSON(json, panel, [live])).toBe(1);
    const data = (json.cells[1] as typeof original).outputs[1].data!;
    expect(WIDGET_MIME in data).toBe(false);
    expect(WIDGET_MIME in original.outputs[1].data!).toBe(true);
    expect((data[SAVED_MIME] as SavedPayload).traits.state).toEqual(after);
    expect(data['image/svg+xml']).toContain('new 64');
    expect((original.outputs[1].data![SAVED_MIME] as SavedPayload).traits.state).toEqual(before); // copied, not changed in place
  });

  it('refreshes from the save’s start to its end only', () => {
    const out = document.body.appendChild(document.createElement('div'));
    const live = stub({ state: after });
    out.appendChild(live.el);
    (globalThis as G).__forgeviz__ = { views: new Set([live]) };
    class Model {
      toJSON() {
        return { cells: [{ cell_type: 'code', id: 'c0', outputs: [{ output_type: 'display_data', data: outputData() }] }] };
      }
    }
    const model = new Model();
    let emit: (s: unknown, state: 'started' | 'completed' | 'failed') => void = () => {};
    refreshOnSave(panelOf([[out]]), { model, saveState: { connect: cb => (emit = cb) } });
    const stateOf = () => ((model.toJSON().cells[0].outputs[0].data[SAVED_MIME] as SavedPayload).traits.state as typeof before).backward_passes;
    expect(stateOf()).toBe(0);
    emit(null, 'started');
    expect(stateOf()).toBe(1);
    expect(model.toJSON().cells[0].outputs[0]).toMatchObject({ metadata: { [SAVED_MIME]: { widget_view: { model_id: 'abc' } } } });
    emit(null, 'completed');
    expect(stateOf()).toBe(0);
    expect(Object.prototype.hasOwnProperty.call(model, 'toJSON')).toBe(false);
  });
});

describe('the widget view of a saved output', () => {
  const view = { model_id: 'abc', version_major: 2, version_minor: 1 };

  it('is set aside from the data into the forgeviz metadata, the rest of the output kept', () => {
    const output = { output_type: 'display_data', data: outputData(), metadata: { 'image/png': { width: 10, height: 5 } } };
    const aside = setAsideWidgetView(output)!;
    expect(Object.keys(aside.data).sort()).toEqual([SAVED_MIME, 'image/svg+xml', 'text/html', 'text/plain'].sort());
    expect(aside.data[SAVED_MIME]).toBe(output.data[SAVED_MIME]);
    expect(aside.metadata).toEqual({ 'image/png': { width: 10, height: 5 }, [SAVED_MIME]: { widget_view: view } });
    expect(aside.output_type).toBe('display_data');
    expect(WIDGET_MIME in output.data).toBe(true); // a copy: the output given is left as it was
    expect(widgetViewOf(aside.data, aside.metadata)).toEqual(view);
    expect(widgetViewOf(output.data, output.metadata)).toEqual(view);
    expect(setAsideWidgetView(aside)).toBeNull(); // nothing left to move
    expect(setAsideWidgetView<{ data: Record<string, unknown>; metadata?: Record<string, unknown> }>({ data: outputData() })!.metadata).toEqual({ [SAVED_MIME]: { widget_view: view } });
  });

  it('is left where it is in what is not a forgeviz output (another widget, a picture)', () => {
    expect(setAsideWidgetView({ data: { [WIDGET_MIME]: view, 'text/plain': 'IntSlider(value=3)' }, metadata: {} })).toBeNull();
    expect(setAsideWidgetView({ data: { 'image/png': 'iVBOR' }, metadata: {} })).toBeNull();
    expect(widgetViewOf({ 'text/plain': 'x' }, {})).toBeNull();
    expect(widgetViewOf({ [WIDGET_MIME]: { model_id: '' } }, {})).toBeNull(); // a closed widget
    expect(widgetViewOf({}, { [SAVED_MIME]: { widget_view: 'abc' } })).toBeNull();
  });

  it('is set aside in every forgeviz output written, drawn live or not; refreshed from a live view counts', () => {
    const drawn = document.body.appendChild(document.createElement('div'));
    const undrawn = document.body.appendChild(document.createElement('div'));
    const live = stub({ state: after });
    drawn.appendChild(live.el);
    const slider = { output_type: 'display_data', data: { [WIDGET_MIME]: { model_id: 's' }, 'text/plain': 'IntSlider()' } as Record<string, unknown>, metadata: {} };
    const json = {
      cells: [
        { cell_type: 'code', id: 'c0', outputs: [{ output_type: 'display_data', data: outputData(), metadata: {} }, slider] },
        { cell_type: 'code', id: 'c1', outputs: [{ output_type: 'display_data', data: outputData(), metadata: {} }] },
        { cell_type: 'markdown', id: 'c2' }
      ]
    };
    expect(refreshNotebookJSON(json, panelOf([[drawn, document.createElement('div')], [undrawn], []]), [live])).toBe(1);
    const [first, second] = json.cells.map(c => c.outputs?.[0]);
    for (const out of [first!, second!]) {
      expect(WIDGET_MIME in out.data).toBe(false);
      expect(out.metadata).toEqual({ [SAVED_MIME]: { widget_view: view } });
    }
    expect((first!.data[SAVED_MIME] as SavedPayload).traits.state).toEqual(after); // refreshed
    expect((second!.data[SAVED_MIME] as SavedPayload).traits.state).toEqual(before); // as the kernel made it
    expect(json.cells[0].outputs![1]).toBe(slider); // another widget keeps its view
  });

  it('is set aside with no live view on the page at all (a notebook run headless, saved here)', () => {
    const json = { cells: [{ cell_type: 'code', id: 'c0', outputs: [{ output_type: 'display_data', data: outputData(), metadata: {} }] }] };
    expect(refreshNotebookJSON(json, panelOf([[document.createElement('div')]]), [])).toBe(0);
    expect(json.cells[0].outputs[0].metadata).toEqual({ [SAVED_MIME]: { widget_view: view } });
    expect(WIDGET_MIME in json.cells[0].outputs[0].data).toBe(false);
  });
});

let gv: Graphviz;
beforeAll(async () => {
  gv = await Graphviz.load();
});

describe('a live graph view', () => {
  it('is listed while drawn, and its export after a backward holds the ∇ 64 badge', async () => {
    const views = new Set<LiveViewLike>();
    (globalThis as G).__forgeviz__ = { loadGraphviz: async () => gv, views };
    const values: Record<string, unknown> = { graph: traitOf(s1Graph(false)), state: before, expanded: [], warnings: [] };
    const listeners = new Map<string, Set<() => void>>();
    const model = {
      get: (k: string) => values[k],
      set: (k: string, v: unknown) => (values[k] = v),
      save_changes: () => {},
      send: () => {},
      on: (n: string, cb: () => void) => (listeners.get(n) ?? listeners.set(n, new Set()).get(n)!).add(cb),
      off: (n?: string | null, cb?: (() => void) | null) => (n && cb ? listeners.get(n)?.delete(cb) : undefined)
    };
    const el = document.body.appendChild(document.createElement('div'));
    const cleanup = graph.render({ model, el });
    expect([...views].map(v => v.el)).toEqual([el]);
    const root = el.classList.contains('fv-root') ? el : el.querySelector('.fv-root');
    await vi.waitFor(() => expect(root?.getAttribute('data-fv-state')).toBe('ready'), { timeout: 10_000 });
    values.state = after;
    listeners.get('change:state')?.forEach(cb => cb());
    await vi.waitFor(() => expect(el.querySelector('.fv-node[data-node-id="1"] .fv-badge-text')?.textContent).toContain('64'));
    const [live] = views;
    const data = refreshedData(outputData(), live, () => lightSVG(live))!;
    expect((data[SAVED_MIME] as SavedPayload).traits.state).toEqual(after);
    expect(data['image/svg+xml']).toMatch(/<svg[\s\S]*64/);
    cleanup();
    expect(views.size).toBe(0);
  });
});
