/**
 * Browser harness: mounts the BUILT anywidget ESM (forgeviz/static/widget.js)
 * with a fake model. Graphviz comes through the real kernel fallback path
 * (bytes of forgeviz/static/graphviz.js in buffers[0], imported from a Blob URL).
 * Served by scripts/harness.mjs.
 */
import { clusterGraph, s1Graph, xDetail, zDetail } from '../fixtures';
import { FakeModel } from '../fakemodel';

const params = new URLSearchParams(location.search);
if (params.get('theme') === 'dark') {
  document.body.classList.add('dark');
}

let graphvizBytes: Promise<ArrayBuffer> | null = null;
let graphvizRequests = 0;

function kernel(msg: any, model: FakeModel) {
  if (msg.type === 'graphviz') {
    graphvizRequests++;
    graphvizBytes ??= fetch('/forgeviz/static/graphviz.js').then(r => r.arrayBuffer());
    void graphvizBytes.then(b => model.reply({ type: 'graphviz', request_id: msg.request_id }, [new DataView(b)]));
  } else if (msg.type === 'inspect') {
    const detail = msg.node === 1 ? xDetail() : { ...zDetail(), id: msg.node };
    setTimeout(() => model.reply({ type: 'inspect', request_id: msg.request_id, detail }), 20);
  } else if (msg.type === 'dot') {
    model.reply({ type: 'dot', request_id: msg.request_id, dot: s1Graph().dot });
  }
}

const { default: widget } = await import(/* @vite-ignore */ '/forgeviz/static/widget.js' as string);

const g2 = clusterGraph();
g2.nodes[3].grad_brief = 'nan';
g2.nodes[3].nonfinite = true;
g2.nodes[3].first_nonfinite = true;
g2.nodes[2].nonfinite = true;
g2.nodes[2].grad_brief = '‖·‖ inf';
g2.nodes[1].grad_brief = '‖·‖ 3.2';

const mounts: [string, any, string[]][] = [
  ['w1', s1Graph(), []],
  ['w2', g2, ['hook on ReluBackward0 raised RuntimeError: example warning']],
  ['w3', { ...s1Graph(false), nodes: [], edges: [], dot: '', message: 'no autograd history (requires_grad=False)' }, []]
];
for (const [id, graph, warnings] of mounts) {
  const model = new FakeModel({ graph, warnings }, kernel);
  widget.render({ model, el: document.getElementById(id)! });
}

async function until(pred: () => boolean, ms = 15000) {
  const t0 = performance.now();
  while (!pred()) {
    if (performance.now() - t0 > ms) {
      throw new Error('harness timed out');
    }
    await new Promise(r => setTimeout(r, 25));
  }
}
const w1 = document.getElementById('w1')!;
await until(() => ['w1', 'w2', 'w3'].every(id => document.getElementById(id)!.getAttribute('data-fv-state') === 'ready'));
w1.querySelector('.fv-node[data-node-id="' + (params.get('select') ?? '3') + '"]')!.dispatchEvent(
  new MouseEvent('click', { bubbles: true })
);
await until(() => w1.querySelector('.fv-inspector')!.getAttribute('data-state') === 'ready');
document.body.setAttribute('data-harness', `done graphviz-requests=${graphvizRequests}`);
