/**
 * anywidget entry (esbuild → forgeviz/static/widget.js): a thin adapter from
 * the widget model to the pure graph renderer.
 *
 * Traits: ``graph`` (wire Graph JSON), ``warnings`` (list of strings).
 * Custom messages: see src/model/wire.ts (inspect / dot / graphviz / error).
 */
import type { AnyModel, RenderProps } from '@anywidget/types';
import css from '../../style/graph.css?raw';
import { getGraphviz } from '../graphviz-loader';
import type { Graph } from '../model/wire';
import { createGraphView } from '../render/graph/view';
import { createTransport } from '../transport';
import { VERSION } from '../version';

const STYLE_ID = 'forgeviz-style';

/** Inject the stylesheet once per document (updated when the version changes). */
export function ensureStyle(doc: Document): void {
  const existing = doc.getElementById(STYLE_ID);
  if (existing && existing.getAttribute('data-version') === VERSION) {
    return;
  }
  const style = existing ?? doc.createElement('style');
  style.id = STYLE_ID;
  style.setAttribute('data-version', VERSION);
  style.textContent = css;
  if (!existing) {
    doc.head.appendChild(style);
  }
}

interface Traits {
  graph: Graph | null;
  warnings: string[];
}

export function render({ model, el }: Pick<RenderProps<Traits>, 'model' | 'el'>): () => void {
  ensureStyle(el.ownerDocument);
  const transport = createTransport(model as AnyModel);
  const view = createGraphView(el, {
    layout: async dot => (await getGraphviz(() => transport.graphvizSource())).layout(dot, 'json', 'dot'),
    requestDetail: node => transport.inspect(node),
    requestDot: () => transport.dot()
  });
  const onGraph = () => {
    const g = model.get('graph');
    if (g) {
      void view.setGraph(g);
    }
  };
  const onWarnings = () => view.setWarnings(model.get('warnings') ?? []);
  model.on('change:graph', onGraph);
  model.on('change:warnings', onWarnings);
  onWarnings();
  onGraph();
  return () => {
    model.off('change:graph', onGraph);
    model.off('change:warnings', onWarnings);
    transport.dispose();
    view.destroy();
  };
}

export default { render };
