/**
 * Browser harness: mounts the BUILT anywidget ESM (forgeviz/static/widget.js)
 * with a fake model. Graphviz comes through the real kernel fallback path
 * (bytes of forgeviz/static/graphviz.js in buffers[0], imported from a Blob URL).
 * Served by scripts/harness.mjs.
 */
import { clusterGraph, S1_DOT, s1Graph, traitOf, xDetail, zDetail } from '../fixtures';
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
    model.reply({ type: 'dot', request_id: msg.request_id, dot: S1_DOT });
  }
}

const { default: widget } = await import(/* @vite-ignore */ '/forgeviz/static/graph.js' as string);

const g2 = clusterGraph();
g2.nodes[3].grad_brief = 'nan';
g2.nodes[3].nonfinite = true;
g2.nodes[3].first_nonfinite = true;
g2.nodes[2].nonfinite = true;
g2.nodes[2].grad_brief = '‖g‖=inf';
g2.nodes[1].grad_brief = '‖g‖=3.2';

const mounts: [string, any, string[]][] = [
  ['w1', s1Graph(), []],
  ['w2', g2, ['forgeviz: hook on ReluBackward0 raised RuntimeError: example warning']],
  ['w3', { ...s1Graph(false), nodes: [], edges: [], message: 'no autograd history (requires_grad=False)' }, []]
];
for (const [id, graph, warnings] of mounts) {
  const model = new FakeModel({ graph: traitOf(graph), warnings }, kernel);
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

// Capture the SVG and PNG downloads and show them as images: the exports must stand alone.
const captured: Blob[] = [];
const origCreate = URL.createObjectURL.bind(URL);
URL.createObjectURL = (b: Blob | MediaSource) => {
  if (b instanceof Blob && (b.type === 'image/svg+xml' || b.type === 'image/png')) {
    captured.push(b);
  }
  return origCreate(b);
};
HTMLAnchorElement.prototype.click = function () {};
(w1.querySelector('button.fv-export-svg') as HTMLButtonElement).click();
(w1.querySelector('button.fv-export-png') as HTMLButtonElement).click();
await until(() => captured.some(b => b.type === 'image/png'));
URL.createObjectURL = origCreate;
const svgBlob = captured.find(b => b.type === 'image/svg+xml' && captured.indexOf(b) === 0)!;
const pngBlob = captured.find(b => b.type === 'image/png')!;
const svgText = await svgBlob.text();
const exportsEl = document.getElementById('exports')!;
for (const blob of [new Blob([svgText], { type: 'image/svg+xml' }), pngBlob]) {
  const img = document.createElement('img');
  img.src = URL.createObjectURL(blob);
  exportsEl.appendChild(img);
  await new Promise(r => (img.onload = r));
}
document.body.setAttribute('data-svg-bytes', String(svgText.length));
document.body.setAttribute('data-harness', `done graphviz-requests=${graphvizRequests} svg=${svgText.length}B png=${pngBlob.size}B`);
