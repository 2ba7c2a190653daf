/**
 * The graph as text: a ``<details>`` transcript of what is drawn for screen readers. A fully
 * expanded graph lists its Nodes and edges; a folded one lists its visible items (Nodes, module
 * boxes, stacks, each with the module it sits in) and the edges between them. A big one is
 * written when it is opened, not at every expand.
 */
import type { Graph, Node as GraphNode } from '../../model/wire';
import { h } from '../common/dom';
import { formatNumber } from '../common/format';
import { moduleStats, stackTitle } from './dotgen';
import { briefValue } from './draw';
import type { VisibleEntry, VisibleGraph, VisibleItem } from './fold';

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

/** "module h.0 (Block): 44 ops · 7.09M params · 27 MiB, gradient norm 0.5, collapsed." */
function itemText(item: VisibleItem): string {
  if (item.kind === 'node') {
    return nodeText(item.node);
  }
  if (item.kind === 'module') {
    const m = item.module;
    const grad = m.grad_norm !== null ? `, gradient norm ${formatNumber(m.grad_norm)}` : '';
    return `module ${m.path || m.id} (${m.type ?? 'Module'}): ${moduleStats(m)}${grad}, collapsed.`;
  }
  const norms = item.members.map(m => m.param_grad_norm);
  const grads = norms.some(v => v !== null) ? `, parameter gradient norms ${norms.map(v => formatNumber(v)).join(', ')}` : '';
  return `${item.members.length} repeated modules ${stackTitle(item.members)}, each ${moduleStats(item.members[0])}${grads}, stacked.`;
}

/** The text of a folded view: its items, nested in the expanded modules, then its edges. */
function renderFolded(doc: Document, transcript: HTMLElement, g: Graph, vis: VisibleGraph): void {
  const name = (key: string) => {
    const item = vis.items.get(key);
    return !item ? key : item.kind === 'node' ? item.node.label : item.kind === 'module' ? `module ${item.module.path || item.module.id}` : stackTitle(item.members);
  };
  transcript.appendChild(
    h(
      doc,
      'p',
      {},
      `Folded by module: ${vis.itemCount} items shown (${vis.nodeCount} of ${g.nodes.length} nodes, the rest inside collapsed modules), ${vis.edges.length} edges, ${g.backward_passes} backward pass${g.backward_passes === 1 ? '' : 'es'} seen.`
    )
  );
  const list = (entries: readonly VisibleEntry[]): HTMLElement => {
    const ol = h(doc, 'ol', { class: 'fv-transcript-nodes' });
    for (const e of entries) {
      if (e.kind === 'cluster') {
        ol.appendChild(h(doc, 'li', {}, `module ${e.module.label}, expanded:`, list(e.children)));
      } else {
        ol.appendChild(h(doc, 'li', {}, itemText(e)));
      }
    }
    return ol;
  };
  const el = h(doc, 'ul', { class: 'fv-transcript-edges' });
  for (const e of vis.edges) {
    el.appendChild(h(doc, 'li', {}, `${name(e.src)} feeds ${name(e.dst)}${e.label ? ` (${e.label})` : ''}${e.count > 1 ? `, ${e.count} tensors` : ''}.`));
  }
  transcript.append(h(doc, 'h5', {}, 'Items'), list(vis.children), h(doc, 'h5', {}, 'Edges (forward direction)'), el);
}

/**
 * Fill ``transcript`` (a ``details.fv-transcript``) with the text description of ``g`` as drawn
 * (``vis``: what is visible; a view with nothing collapsed is described Node by Node).
 */
export function renderTranscript(doc: Document, transcript: HTMLElement, g: Graph | null, vis: VisibleGraph | null = null): void {
  transcript.replaceChildren(h(doc, 'summary', {}, 'Text description'));
  if (!g) {
    return;
  }
  if (g.message) {
    transcript.appendChild(h(doc, 'p', {}, g.message));
    return;
  }
  if (vis && vis.nodeCount < g.nodes.length) {
    renderFolded(doc, transcript, g, vis);
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

/** A transcript of more items than this is written when it is opened, not at every expand. */
const EAGER_TRANSCRIPT_ITEMS = 200;

/**
 * A writer for ``transcript``: it describes a graph as drawn at once when the transcript is open
 * or small, else when it is opened (a big one is not written at every expand).
 */
export function lazyTranscript(doc: Document, transcript: HTMLDetailsElement): (g: Graph | null, vis: VisibleGraph | null) => void {
  /** What the closed transcript will say when opened. */
  let unwritten: (() => void) | null = null;
  transcript.addEventListener('toggle', () => {
    if (transcript.open && unwritten) {
      const write = unwritten;
      unwritten = null;
      write();
    }
  });
  return (g, vis) => {
    const write = () => renderTranscript(doc, transcript, g, vis);
    if (transcript.open || (vis?.itemCount ?? 0) <= EAGER_TRANSCRIPT_ITEMS) {
      unwritten = null;
      write();
    } else {
      unwritten = write;
      transcript.replaceChildren(h(doc, 'summary', {}, 'Text description'));
    }
  };
}
