/**
 * anywidget entry (esbuild → forgeviz/static/graph.js): a thin adapter from
 * the widget model to the pure graph renderer.
 *
 * Traits: ``graph`` (wire Graph JSON with its lists as tables, see src/model/table.ts; re-sent when the
 * structure changes), ``state`` (wire
 * GraphState after each backward: applied with no new layout), ``expanded`` (the expanded Module
 * ids; the browser writes it, so expansion survives re-display and refresh), ``warnings``, and for a
 * recorded run's graph ``steps`` (a RunSteps: the step slider; moving it sends a ``step`` request).
 * Custom messages: see src/model/wire.ts (inspect / module / dot / graphviz / error).
 */
import css from '../../style/graph.css?raw';
import { getGraphviz } from '../graphviz-loader';
import { graphOfTrait, isGraphTrait, type GraphTrait } from '../model/table';
import type { GraphState, RunSteps } from '../model/wire';
import { unpackLayout } from '../render/graph/layered';
import { createGraphView, GraphView } from '../render/graph/view';
import { createTransport } from '../transport';
import { defineEntry, hasArrays, kernel, type EntryModel } from './entry';

/** The model calls beyond ``EntryModel`` that writing a trait needs (absent on the static page). */
interface WritableModel {
  set?(key: string, value: unknown): void;
  save_changes?(): void;
}

/**
 * A saved output's inspector reply for a Node (``'nodes'``, by id) or a Module (``'modules'``), from
 * the ``details`` a static model holds (the Lab renderer of a saved notebook: src/lab/saved.ts).
 */
function savedDetail<T>(model: EntryModel, kind: 'nodes' | 'modules', id: string): Promise<T> {
  const details = model.get('details') as Record<string, Record<string, T> | undefined> | undefined;
  const detail = details?.[kind]?.[id];
  if (detail) {
    return Promise.resolve(detail);
  }
  const cut = model.get('details_cut');
  return Promise.reject(new Error(`no kernel, and this saved graph has no details for it${typeof cut === 'string' ? ` (${cut})` : ''}`));
}

const isState = (v: unknown): v is GraphState => hasArrays(v, 'ids', 'module_ids');
const isRunSteps = (v: unknown): v is RunSteps => hasArrays(v, 'steps', 'ranks');
const expandedOf = (v: unknown): string[] => (Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : []);

const render = defineEntry({
  trait: 'graph',
  is: (g): g is GraphTrait => isGraphTrait(g),
  styleId: 'forgeviz-style',
  css,
  connect: createTransport,
  // the kernel then knows a browser draws it, and leaves its saved output to Lab (src/lab/refresh.ts)
  announce: 'view',
  create({ el, transport, model }) {
    const t = kernel(transport);
    const writable = model as unknown as WritableModel;
    const view = createGraphView(el, {
      layout: async dot => (await getGraphviz(() => t().graphvizSource())).layout(dot, 'json', 'dot'),
      layoutLayered: async input => {
        const g = await getGraphviz(() => t().graphvizSource());
        if (!g.layered) {
          throw new Error('this page has Graphviz but not the layered layout for big views');
        }
        return unpackLayout(await g.layered(input), input);
      },
      requestDetail: node => (transport ? transport.inspect(node) : savedDetail(model, 'nodes', String(node))),
      requestModule: id => (transport ? transport.module(id) : savedDetail(model, 'modules', id)),
      requestDot: () => t().dot(),
      // a recorded run's view (its ``steps`` trait): the kernel answers by changing ``steps`` and ``state``
      requestStep: transport
        ? async (step, rank) => {
            await transport.request('step', { step, rank });
          }
        : undefined,
      expanded: expandedOf(model.get('expanded')),
      onExpandedChange: ids => {
        if (typeof writable.set === 'function') {
          writable.set('expanded', ids);
          writable.save_changes?.();
        }
      }
    });
    /** The state trait, unless it is older than the graph shown (the graph then has it already). */
    let graphPasses = -1;
    const onState = () => {
      const s = model.get('state');
      if (isState(s) && s.backward_passes >= graphPasses) {
        view.setState(s);
      }
    };
    const onExpanded = () => void view.setExpanded(expandedOf(model.get('expanded')));
    const onSteps = () => {
      const s = model.get('steps');
      view.setSteps(isRunSteps(s) ? s : null);
    };
    model.on?.('change:state', onState);
    model.on?.('change:expanded', onExpanded);
    model.on?.('change:steps', onSteps);
    onSteps();
    const out: GraphView = {
      ...view,
      setGraph(g) {
        graphPasses = g.backward_passes;
        const drawn = view.setGraph(g);
        // the state may be newer than the graph (the graph is sent only when its structure changes)
        onState();
        return drawn;
      },
      destroy() {
        model.off?.('change:state', onState);
        model.off?.('change:expanded', onExpanded);
        model.off?.('change:steps', onSteps);
        view.destroy();
      }
    };
    return out;
  },
  show: (view, g) => void view.setGraph(graphOfTrait(g))
});

export default { render };
