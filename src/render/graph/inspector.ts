/** The inspector panel: everything about one node, fetched lazily. */
import type { Edge, Graph, GradRecord, NodeDetail, TensorSummary } from '../../model/wire';
import { h, r2, s } from '../common/dom';
import {
  formatCompact,
  formatMeta,
  formatNumber,
  formatShape,
  formatValues,
  histogramBounds
} from '../common/format';

/** Label of a model node by id, for naming producers and consumers. */
function labelOf(graph: Graph | null, id: number): string {
  const n = graph?.nodes.find(x => x.id === id);
  return n ? n.label : `node ${id}`;
}

function section(doc: Document, title: string, ...body: (Node | null)[]): HTMLElement {
  return h(doc, 'section', { class: 'fv-section' }, h(doc, 'h4', {}, title), ...body);
}

function row(doc: Document, key: string, value: Node | string, cls?: string): HTMLElement {
  return h(
    doc,
    'div',
    { class: `fv-row${cls ? ' ' + cls : ''}` },
    h(doc, 'span', { class: 'fv-key' }, key),
    h(doc, 'span', { class: 'fv-val' }, value)
  );
}

/** A small SVG bar histogram. */
export function histogramSvg(doc: Document, t: TensorSummary): SVGElement | null {
  const hist = t.histogram;
  if (!hist || hist.counts.length === 0) {
    return null;
  }
  const W = 160;
  const H = 36;
  const max = Math.max(1, ...hist.counts);
  const bw = W / hist.counts.length;
  const [lo, hi] = histogramBounds(hist);
  const svg = s(doc, 'svg', {
    class: 'fv-hist',
    width: W,
    height: H + 12,
    viewBox: `0 0 ${W} ${H + 12}`,
    role: 'img',
    'aria-label': `histogram of ${hist.counts.length} bins from ${formatNumber(lo)} to ${formatNumber(hi)}`
  });
  svg.appendChild(
    s(doc, 'title', {}, `counts: ${hist.counts.join(', ')} over [${formatNumber(lo)}, ${formatNumber(hi)}]`)
  );
  hist.counts.forEach((c, i) => {
    const bh = c === 0 ? 0 : Math.max(1, (c / max) * H);
    svg.appendChild(
      s(doc, 'rect', {
        class: 'fv-hist-bar',
        x: r2(i * bw + 0.5),
        y: r2(H - bh),
        width: r2(Math.max(1, bw - 1)),
        height: r2(bh)
      })
    );
  });
  svg.appendChild(s(doc, 'text', { x: 0, y: H + 10, class: 'fv-hist-axis' }, formatNumber(lo)));
  svg.appendChild(
    s(doc, 'text', { x: W, y: H + 10, class: 'fv-hist-axis', 'text-anchor': 'end' }, formatNumber(hi))
  );
  return svg;
}

/** One tensor summary: exact values when small, else stats plus a histogram. */
export function tensorView(doc: Document, t: TensorSummary | null): HTMLElement {
  if (!t) {
    return h(doc, 'span', { class: 'fv-none' }, 'None');
  }
  const box = h(doc, 'div', { class: 'fv-tensor' });
  const bad = t.nan_count > 0 || t.inf_count > 0;
  box.appendChild(
    h(doc, 'div', { class: 'fv-tensor-head' }, formatShape(t.shape, t.dtype), t.device && t.device !== 'cpu' ? ` @ ${t.device}` : '')
  );
  if (t.values) {
    box.appendChild(h(doc, 'code', { class: 'fv-values' }, formatValues(t.values, t.shape, t.dtype)));
  } else {
    box.appendChild(
      h(
        doc,
        'div',
        { class: 'fv-stats' },
        `norm ${formatNumber(t.norm)} · min ${formatNumber(t.min)} · max ${formatNumber(t.max)} · mean ${formatNumber(t.mean)}`
      )
    );
    const hist = histogramSvg(doc, t);
    if (hist) {
      box.appendChild(hist);
    }
  }
  if (bad) {
    box.classList.add('fv-bad');
    box.appendChild(
      h(doc, 'div', { class: 'fv-nonfinite-note' }, `⚠ ${t.nan_count} NaN, ${t.inf_count} Inf`)
    );
  }
  return box;
}

function gradList(
  doc: Document,
  items: (TensorSummary | null)[],
  name: (i: number) => string
): HTMLElement {
  const list = h(doc, 'ul', { class: 'fv-grad-list' });
  items.forEach((t, i) => {
    list.appendChild(h(doc, 'li', {}, h(doc, 'span', { class: 'fv-key' }, name(i)), tensorView(doc, t)));
  });
  if (items.length === 0) {
    list.appendChild(h(doc, 'li', { class: 'fv-none' }, 'none'));
  }
  return list;
}

/** Producer of input ``i`` of node ``id``: the edge with dst=id and input_nr=i. */
function producerLabel(graph: Graph | null, id: number, i: number): string | null {
  const e: Edge | undefined = graph?.edges.find(x => x.dst === id && x.input_nr === i);
  return e ? labelOf(graph, e.src) : null;
}

/** Consumer(s) of output ``j`` of node ``id``. */
function consumerLabels(graph: Graph | null, id: number, j: number): string[] {
  return (graph?.edges ?? [])
    .filter(x => x.src === id && x.output_nr === j)
    .map(x => labelOf(graph, x.dst));
}

/** "16 (via w/Add) + 48 (via z/Mul) = 64" */
export function pathSumText(detail: NodeDetail): string {
  const parts = detail.contributions.map(c => `${formatCompact(c.grad)} (via ${c.consumer_label})`);
  const total = detail.leaf_grad ? formatCompact(detail.leaf_grad) : '?';
  return `${parts.join(' + ')} = ${total}`;
}

/** "4 → 8", with ∅ for a zero_grad reset. */
export function historyText(detail: NodeDetail): string {
  return detail.leaf_grad_history.map(t => (t ? formatCompact(t) : '∅ (zero_grad)')).join(' → ');
}

export function renderDetail(doc: Document, detail: NodeDetail, graph: Graph | null): HTMLElement {
  const frag = h(doc, 'div', { class: 'fv-detail' });
  const node = graph?.nodes.find(n => n.id === detail.id);
  const isLeaf = node ? node.kind === 'leaf' : detail.name === 'AccumulateGrad';

  frag.appendChild(
    h(
      doc,
      'header',
      { class: 'fv-detail-head' },
      h(doc, 'h3', {}, detail.label),
      h(doc, 'div', { class: 'fv-sub' }, detail.name, detail.op_qualname ? ` · ${detail.op_qualname}` : detail.op ? ` · ${detail.op}` : '')
    )
  );
  if (!detail.alive) {
    frag.appendChild(
      h(doc, 'div', { class: 'fv-note fv-stale' }, 'ℹ graph no longer in the kernel; showing the last snapshot')
    );
  }
  if (detail.var_names.length > 1) {
    frag.appendChild(row(doc, 'names', detail.var_names.join(', ')));
  }

  // Where it came from.
  const where: HTMLElement[] = [];
  if (detail.cell !== null || detail.line !== null) {
    const loc = [
      detail.cell !== null ? `cell [${detail.cell}]` : null,
      detail.line !== null ? `line ${detail.line}` : null
    ]
      .filter(Boolean)
      .join(', ');
    where.push(row(doc, 'source', loc, 'fv-loc'));
  }
  if (detail.source) {
    where.push(h(doc, 'pre', { class: 'fv-source' }, h(doc, 'code', {}, detail.source)));
  }
  if (detail.module_path || detail.module_type) {
    where.push(
      row(doc, 'module', [detail.module_path, detail.module_type ? `(${detail.module_type})` : null].filter(Boolean).join(' '))
    );
  }
  if (where.length) {
    frag.appendChild(section(doc, 'Origin', ...where));
  }

  // Forward.
  if (detail.inputs.length || detail.outputs.length) {
    const fw = h(doc, 'div', { class: 'fv-forward' });
    detail.inputs.forEach((m, i) => {
      const from = producerLabel(graph, detail.id, i);
      fw.appendChild(row(doc, `in ${i}${from ? ` ← ${from}` : ''}`, formatMeta(m)));
    });
    detail.outputs.forEach((m, j) => fw.appendChild(row(doc, `out ${j}`, formatMeta(m))));
    frag.appendChild(section(doc, 'Forward', fw));
  }

  // Saved tensors.
  if (detail.freed || detail.saved.length) {
    const sv = h(doc, 'div', { class: 'fv-saved' });
    if (detail.freed) {
      sv.appendChild(h(doc, 'div', { class: 'fv-note fv-freed-note' }, '⌀ freed after backward'));
    } else {
      for (const v of detail.saved) {
        sv.appendChild(row(doc, v.name, v.tensor ? tensorView(doc, v.tensor) : v.text ?? '—'));
      }
    }
    frag.appendChild(section(doc, 'Saved for backward', sv));
  }

  // Gradients of the latest backward pass.
  const rec: GradRecord | undefined = detail.grads[detail.grads.length - 1];
  if (rec) {
    const title = `Gradients · backward #${rec.backward_index}${detail.grads.length > 1 ? ` (${detail.grads.length} passes seen)` : ''}`;
    const multiOut = rec.grad_outputs.length > 1;
    const arriving = gradList(doc, rec.grad_outputs, j => {
      const to = consumerLabels(graph, detail.id, j);
      return `${multiOut ? `out ${j} ` : ''}arriving${to.length ? ` from ${to.join(', ')}` : ''}`;
    });
    const leaving = gradList(doc, rec.grad_inputs, i => {
      const to = producerLabel(graph, detail.id, i);
      return `leaving → ${to ?? `input ${i}`}`;
    });
    leaving.classList.add('fv-grad-inputs');
    arriving.classList.add('fv-grad-outputs');
    frag.appendChild(section(doc, title, arriving, isLeaf && rec.grad_inputs.length === 0 ? null : leaving));
  } else if (!isLeaf) {
    frag.appendChild(section(doc, 'Gradients', h(doc, 'div', { class: 'fv-none' }, 'no backward pass seen yet')));
  }

  // Leaves: .grad, path sum, history.
  if (isLeaf || detail.leaf_grad || detail.contributions.length || detail.leaf_grad_history.length) {
    const lg = h(doc, 'div', { class: 'fv-leaf-grad' });
    lg.appendChild(row(doc, '.grad', tensorView(doc, detail.leaf_grad)));
    if (detail.contributions.length) {
      lg.appendChild(row(doc, 'sum of paths', h(doc, 'code', { class: 'fv-path-sum' }, pathSumText(detail))));
    }
    if (detail.leaf_grad_history.length) {
      lg.appendChild(row(doc, 'history', h(doc, 'code', { class: 'fv-history' }, historyText(detail))));
    }
    frag.appendChild(section(doc, 'Leaf gradient', lg));
  }
  return frag;
}

/**
 * The ``aside.fv-inspector`` beside the graph and its states (``data-state``): empty (a hint),
 * loading (a placeholder, or the last detail marked ``.fv-refreshing``), ready, error.
 */
export interface InspectorPanel {
  readonly el: HTMLElement;
  showEmpty(): void;
  showLoading(nodeId: number, label: string): void;
  showDetail(detail: NodeDetail, graph: Graph | null): void;
  showError(text: string): void;
  /** The request is over (answered or not): drop the refreshing mark. */
  settle(): void;
}

export function createInspectorPanel(doc: Document): InspectorPanel {
  const el = h(doc, 'aside', {
    class: 'fv-inspector',
    'aria-live': 'polite',
    'aria-label': 'node inspector',
    'data-state': 'empty'
  });
  return {
    el,
    showEmpty() {
      el.removeAttribute('data-node-id');
      el.setAttribute('data-state', 'empty');
      el.replaceChildren(h(doc, 'div', { class: 'fv-hint' }, 'Select a node (click it, or Tab to it and press Enter) to see its tensors and gradients.'));
    },
    showLoading(nodeId: number, label: string) {
      el.setAttribute('data-node-id', String(nodeId));
      el.setAttribute('data-state', 'loading');
      if (!el.querySelector('.fv-detail')) {
        el.replaceChildren(h(doc, 'div', { class: 'fv-loading' }, `Loading ${label}…`));
      } else {
        el.classList.add('fv-refreshing');
      }
    },
    showDetail(detail: NodeDetail, graph: Graph | null) {
      el.replaceChildren(renderDetail(doc, detail, graph));
      el.setAttribute('data-state', 'ready');
    },
    showError(text: string) {
      el.replaceChildren(h(doc, 'div', { class: 'fv-error', role: 'alert' }, text));
      el.setAttribute('data-state', 'error');
    },
    settle() {
      el.classList.remove('fv-refreshing');
    }
  };
}
