/** The graph as text: a ``<details>`` transcript of its nodes and edges for screen readers. */
import type { Graph, Node as GraphNode } from '../../model/wire';
import { h } from '../common/dom';
import { briefValue } from './draw';

/** "operation MulBackward0, in module fc, from cell [3] line 2, gradient 64". */
function nodeText(n: GraphNode): string {
  const bits = [n.kind === 'leaf' ? 'leaf tensor' : `operation ${n.name}`];
  if (n.module_path) {
    bits.push(`in module ${n.module_path}`);
  }
  if (n.cell !== null) {
    bits.push(`from cell [${n.cell}]${n.line !== null ? ` line ${n.line}` : ''}`);
  }
  if (n.grad_brief) {
    bits.push(`gradient ${briefValue(n.grad_brief)}`);
  }
  if (n.freed) {
    bits.push('saved tensors freed');
  }
  if (n.nonfinite) {
    bits.push(n.first_nonfinite ? 'FIRST non-finite gradient' : 'non-finite gradient');
  }
  return `${n.label}: ${bits.join(', ')}.`;
}

/** Fill ``transcript`` (a ``details.fv-transcript``) with the text description of ``g``. */
export function renderTranscript(doc: Document, transcript: HTMLElement, g: Graph | null): void {
  transcript.replaceChildren(h(doc, 'summary', {}, 'Text description'));
  if (!g) {
    return;
  }
  if (g.message) {
    transcript.appendChild(h(doc, 'p', {}, g.message));
    return;
  }
  const byId = new Map(g.nodes.map(n => [n.id, n]));
  const name = (id: number) => byId.get(id)?.label ?? `node ${id}`;
  transcript.appendChild(
    h(doc, 'p', {}, `${g.nodes.length} nodes, ${g.edges.length} edges, ${g.backward_passes} backward pass${g.backward_passes === 1 ? '' : 'es'} seen.`)
  );
  const nl = h(doc, 'ol', { class: 'fv-transcript-nodes' });
  for (const n of g.nodes) {
    nl.appendChild(h(doc, 'li', {}, nodeText(n)));
  }
  const el = h(doc, 'ul', { class: 'fv-transcript-edges' });
  for (const e of g.edges) {
    const meta = e.meta ? ` (${e.meta.shape.length ? e.meta.shape.join('×') : 'scalar'} ${e.meta.dtype.replace(/^torch\./, '')})` : '';
    el.appendChild(h(doc, 'li', {}, `${name(e.src)} feeds ${name(e.dst)} as input ${e.input_nr}${meta}.`));
  }
  transcript.append(h(doc, 'h5', {}, 'Nodes'), nl, h(doc, 'h5', {}, 'Edges (forward direction)'), el);
}
