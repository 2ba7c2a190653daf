/**
 * anywidget entry (esbuild → forgeviz/static/graph.js): a thin adapter from
 * the widget model to the pure graph renderer.
 *
 * Traits: ``graph`` (wire Graph JSON), ``warnings`` (list of strings).
 * Custom messages: see src/model/wire.ts (inspect / dot / graphviz / error).
 */
import css from '../../style/graph.css?raw';
import { getGraphviz } from '../graphviz-loader';
import type { Graph } from '../model/wire';
import { createGraphView } from '../render/graph/view';
import { createTransport } from '../transport';
import { defineEntry, kernel } from './entry';

export const render = defineEntry({
  trait: 'graph',
  is: (g): g is Graph => !!g,
  styleId: 'forgeviz-style',
  css,
  connect: createTransport,
  create({ el, transport }) {
    const t = kernel(transport);
    return createGraphView(el, {
      layout: async dot => (await getGraphviz(() => t().graphvizSource())).layout(dot, 'json', 'dot'),
      requestDetail: node => t().inspect(node),
      requestDot: () => t().dot()
    });
  },
  show: (view, g) => void view.setGraph(g)
});

export default { render };
