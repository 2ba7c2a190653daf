/** The inspector panel: everything about one node or one module, fetched lazily. */
import type {
  ChainTerm,
  CompiledRegion,
  Edge,
  Graph,
  GradRecord,
  Histogram,
  ModuleDetail,
  NodeDetail,
  ParameterRow,
  RecordedGrads,
  TensorSummary
} from '../../model/wire';
import { h, r2, s } from '../common/dom';
import {
  bytesShort,
  formatCompact,
  formatMeta,
  formatNumber,
  formatShape,
  formatValues,
  histogramBounds,
  wireNumber
} from '../common/format';

/** The event the source button dispatches; the JupyterLab extension (src/lab/goto.ts) answers it. */
export const GOTO_CELL_EVENT = 'forgeviz:goto-cell';

/**
 * ``detail`` of a {@link GOTO_CELL_EVENT}: the cell's execution count, a 1-based line, and the
 * source line (which tells apart cells that show the same count after a kernel restart).
 */
export interface GotoCellDetail {
  cell: number;
  line: number | null;
  source: string | null;
}

/** Chain-rule terms with more elements than this show only the formula. */
export const CHAIN_TABLE_MAX = 64;

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

/**
 * A small SVG bar histogram of a Histogram, or of a TensorSummary's; null when there is none
 * (or it has no bins).
 */
export function histogramSvg(doc: Document, source: TensorSummary | Histogram | null): SVGElement | null {
  const hist = source === null ? null : 'counts' in source ? source : source.histogram;
  if (!hist || hist.counts.length === 0) {
    return null;
  }
  const W = 160;
  const H = 36;
  const max = Math.max(1, ...hist.counts);
  const bw = W / hist.counts.length;
  const [lo, hi] = histogramBounds(hist);
  const edges = hist.edges;
  const sampled = sampleNote(source, hist);
  const svg = s(doc, 'svg', {
    class: 'fv-hist',
    width: W,
    height: H + 12,
    viewBox: `0 0 ${W} ${H + 12}`,
    role: 'img',
    'aria-label':
      (edges
        ? `histogram of ${hist.counts.length} fixed bins, values from ${formatNumber(lo)} to ${formatNumber(hi)}`
        : `histogram of ${hist.counts.length} bins from ${formatNumber(lo)} to ${formatNumber(hi)}`) + sampled
  });
  const bins = edges ? fixedBins(edges, hist.counts) : `counts: ${hist.counts.join(', ')} over [${formatNumber(lo)}, ${formatNumber(hi)}]`;
  svg.appendChild(s(doc, 'title', {}, bins + sampled));
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
  // Fixed bins' outer ones reach the dtype's extremes: the axis names the edges inside them.
  const left = edges ? `< ${formatNumber(edges[1])}` : formatNumber(lo);
  const right = edges ? `≥ ${formatNumber(edges[edges.length - 2])}` : formatNumber(hi);
  svg.appendChild(s(doc, 'text', { x: 0, y: H + 10, class: 'fv-hist-axis' }, left));
  svg.appendChild(s(doc, 'text', { x: W, y: H + 10, class: 'fv-hist-axis', 'text-anchor': 'end' }, right));
  return svg;
}

/**
 * Where a tensor's histogram binned fewer values than it has finite ones (a large tensor's is binned from
 * a spread sample, on the CPU and on a GPU alike), says so: min, max and the rest take every value.
 */
function sampleNote(source: TensorSummary | Histogram | null, hist: Histogram): string {
  if (source === null || 'counts' in source) {
    return '';
  }
  const finite = source.numel - source.nan_count - source.inf_count;
  const binned = hist.counts.reduce((a, b) => a + b, 0);
  return binned < finite ? `; a sample: ${binned} of ${finite} finite values` : '';
}

/** Each fixed bin with its edges and count; a bin [0, next) holds exact zeros only. */
function fixedBins(edges: (number | string)[], counts: number[]): string {
  return counts
    .map((c, i) => {
      const last = i === counts.length - 1;
      const span = edges[i] === 0 ? 'zero' : `[${formatNumber(edges[i])}, ${formatNumber(edges[i + 1])}${last ? ']' : ')'}`;
      return `${span}: ${c}`;
    })
    .join('; ');
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

/** "summarised every 10 steps": which backward passes record gradients (NodeDetail.grad_cadence), in words. */
function cadenceWords(cadence: string): string {
  if (cadence === 'each') {
    return 'summarised every step';
  }
  if (cadence === 'shown') {
    return 'summarised only for Nodes a graph view draws';
  }
  if (cadence === 'off') {
    return 'summaries off: %fv grads each turns them on';
  }
  // "every 10" steps; "within 5%" of the loop's time
  return `summarised ${cadence} ${cadence[0] === 'w' ? "of the loop's time" : 'steps'}`;
}

/**
 * How fresh a Node's latest gradients are: "from backward #12 · 3 steps ago" (a step is one
 * backward pass), and, when the cadence (``%fv grads``) skips passes, why newer ones are missing.
 * Null before any backward pass.
 */
export function freshnessText(detail: NodeDetail): string | null {
  const passes = detail.backward_passes;
  const cadence = detail.grad_cadence;
  const why = cadence === 'each' ? '' : ` (${cadenceWords(cadence)})`;
  const rec: GradRecord | undefined = detail.grads[detail.grads.length - 1];
  if (rec) {
    const ago = passes - rec.backward_index;
    if (ago <= 0) {
      return `from backward #${rec.backward_index} · the latest`;
    }
    const steps = `${formatCount(ago)} step${ago === 1 ? '' : 's'} ago`;
    return `from backward #${rec.backward_index} · ${steps}${why ? ` · not summarised since${why}` : ''}`;
  }
  if (passes <= 0 || !why) {
    return null;
  }
  return `not summarised in ${formatCount(passes)} backward pass${passes === 1 ? '' : 'es'}${why}`;
}

/**
 * A button that asks the notebook to show ``detail.cell`` (an execution count) at its line: it
 * dispatches a bubbling {@link GOTO_CELL_EVENT} that reaches the document (from the button, so a
 * listener can tell which notebook it sits in).
 */
function gotoButton(doc: Document, detail: GotoCellDetail, loc: string): HTMLButtonElement {
  const btn = h(doc, 'button', {
    type: 'button',
    class: 'fv-goto',
    title: `Go to ${loc} in the notebook`,
    'aria-label': `Go to ${loc} in the notebook`
  });
  btn.addEventListener('click', () => {
    const event = new CustomEvent<GotoCellDetail>(GOTO_CELL_EVENT, {
      detail: { ...detail },
      bubbles: true,
      composed: true
    });
    // Detached (a closed output): the document still hears it.
    (btn.isConnected ? btn : doc).dispatchEvent(event);
  });
  return btn;
}

/** The ``i``-th value of a flat wire list as text; "—" past its end. */
function nth(values: (number | string)[], i: number): string {
  return i < values.length ? formatNumber(values[i]) : '—';
}

/** "16 × 3 = 48 → x" for one-element terms. */
export function chainText(term: ChainTerm): string {
  return `${nth(term.grad_output, 0)} × ${nth(term.local, 0)} = ${nth(term.grad_input, 0)} → ${term.input_label}`;
}

/**
 * A real table: ``columns`` head it (``th scope=col``), each row starts with its own ``th
 * scope=row``; ``attrs`` go on the row.
 */
function dataTable(
  doc: Document,
  cls: string,
  caption: string,
  columns: string[],
  rows: { head: string; cells: string[]; attrs?: Record<string, string | number | null> }[]
): HTMLTableElement {
  const body = h(doc, 'tbody', {});
  for (const r of rows) {
    body.appendChild(
      h(doc, 'tr', r.attrs, h(doc, 'th', { scope: 'row' }, r.head), ...r.cells.map(c => h(doc, 'td', {}, c)))
    );
  }
  return h(
    doc,
    'table',
    { class: `fv-table ${cls}` },
    h(doc, 'caption', {}, caption),
    h(doc, 'thead', {}, h(doc, 'tr', {}, ...columns.map(c => h(doc, 'th', { scope: 'col' }, c)))),
    body
  );
}

/** Elementwise grad_out, local and grad_in of one term, one row per element. */
function chainTable(doc: Document, term: ChainTerm, n: number): HTMLElement {
  const rows = Array.from({ length: n }, (_, i) => ({
    head: String(i),
    cells: [nth(term.grad_output, i), nth(term.local, i), nth(term.grad_input, i)]
  }));
  const caption = `towards ${term.input_label}, elementwise`;
  return dataTable(doc, 'fv-chain-table', caption, ['#', 'grad_out', 'local', 'grad_in'], rows);
}

/** "Chain rule": grad_out × local = grad_in at each input; null when the node has no terms. */
function chainSection(doc: Document, terms: ChainTerm[]): HTMLElement | null {
  if (terms.length === 0) {
    return null;
  }
  const list = h(doc, 'ul', { class: 'fv-chain' });
  for (const term of terms) {
    const n = Math.max(term.grad_output.length, term.local.length, term.grad_input.length);
    const item = h(doc, 'li', { class: 'fv-chain-term', 'data-input-nr': term.input_nr });
    item.appendChild(
      h(
        doc,
        'code',
        { class: 'fv-chain-eq' },
        n === 1 ? chainText(term) : `grad_out × local = grad_in → ${term.input_label}`
      )
    );
    item.appendChild(h(doc, 'code', { class: 'fv-chain-formula' }, term.formula));
    if (n > 1 && n <= CHAIN_TABLE_MAX) {
      item.appendChild(chainTable(doc, term, n));
    } else if (n > CHAIN_TABLE_MAX) {
      item.appendChild(h(doc, 'div', { class: 'fv-none' }, `${n} elements: too many to list`));
    }
    list.appendChild(item);
  }
  return section(doc, 'Chain rule', list);
}

/**
 * What a torch.compile region is (``about``: its module and backend, Dynamo's counts, a split call),
 * and in plain words what compile hides inside it and how to see that (``hidden``).
 */
export function compiledText(region: CompiledRegion): { about: string[]; hidden: string[] } {
  const dynamo =
    region.dynamo_graphs !== null
      ? `In this process Dynamo has compiled ${formatCount(region.dynamo_graphs)} graph${region.dynamo_graphs === 1 ? '' : 's'} ` +
        `and met ${formatCount(region.dynamo_breaks ?? 0)} graph break${region.dynamo_breaks === 1 ? '' : 's'} (torch._dynamo.utils.counters).`
      : null;
  const split =
    region.regions_at_line > 1
      ? `This call ran as ${region.regions_at_line} compiled regions (graph breaks split it); this is one of them.`
      : null;
  const name = region.name === 'compiled region' ? 'the compiled function' : region.name;
  return {
    about: [
      `One region of ${name}, compiled by torch.compile (backend ${region.backend ?? 'unknown'}).`,
      ...[dynamo, split].filter((t): t is string => t !== null)
    ],
    hidden: [
      'Compile hides what happens inside: autograd sees one Node, so the gradients shown are only those ' +
        'that crossed its edges, not the per-op gradients inside, and its ops belong to no module.',
      `To see them, run ${name} eagerly for one step: call it without torch.compile ` +
        `(for a compiled module, ${name === 'the compiled function' ? 'm = torch.compile(module): m' : name}._orig_mod(x)), then draw that graph.`
    ]
  };
}

function notes(doc: Document, cls: string, texts: string[]): HTMLElement {
  const body = h(doc, 'div', { class: cls });
  for (const text of texts) {
    body.appendChild(h(doc, 'p', { class: 'fv-note' }, text));
  }
  return body;
}

/**
 * A compiled region's two sections: what it is, near the top, and what compile hides, after its
 * gradients (long words would otherwise push the numbers out of sight).
 */
function compiledSections(doc: Document, region: CompiledRegion): [HTMLElement, HTMLElement] {
  const text = compiledText(region);
  const about = notes(doc, 'fv-compiled', text.about);
  about.prepend(row(doc, 'backend', region.backend ?? 'unknown'));
  return [
    section(doc, 'Compiled region', about),
    section(doc, 'What compile hides', notes(doc, 'fv-compiled-hidden', text.hidden))
  ];
}

/** After the Node's name: its op (a compiled region's is AOTAutograd's internal class: say what made it). */
function subtitle(detail: NodeDetail): string {
  if (detail.compiled) {
    return ` · torch.compile, ${detail.compiled.backend ?? 'unknown backend'}`;
  }
  return detail.op_qualname ? ` · ${detail.op_qualname}` : detail.op ? ` · ${detail.op}` : '';
}

/** The node inspector's content for one NodeDetail. */
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
      h(doc, 'div', { class: 'fv-sub' }, detail.name, subtitle(detail))
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

  // Where it came from. With an execution count, the source (or the location) is a button to its cell.
  const where: HTMLElement[] = [];
  const loc = [detail.cell !== null ? `cell [${detail.cell}]` : null, detail.line !== null ? `line ${detail.line}` : null]
    .filter(Boolean)
    .join(', ');
  const goto =
    detail.cell !== null ? gotoButton(doc, { cell: detail.cell, line: detail.line, source: detail.source }, loc) : null;
  if (loc) {
    // No source text: the location itself is the button.
    if (goto && !detail.source) {
      goto.textContent = loc;
    }
    where.push(row(doc, 'source', goto && !detail.source ? goto : loc, 'fv-loc'));
  }
  if (detail.source) {
    const code = h(doc, 'code', {}, detail.source);
    if (goto) {
      goto.appendChild(code);
    }
    where.push(h(doc, 'pre', { class: 'fv-source' }, goto ?? code));
  }
  // A compiled region's module is named as the user calls it ("mlp", "net.2"): its path alone is "" at a root.
  const modulePath = detail.compiled && detail.compiled.name !== 'compiled region' ? detail.compiled.name : detail.module_path;
  if (modulePath || detail.module_type) {
    where.push(row(doc, 'module', [modulePath, detail.module_type ? `(${detail.module_type})` : null].filter(Boolean).join(' ')));
  }
  if (where.length) {
    frag.appendChild(section(doc, 'Origin', ...where));
  }
  const compiled = detail.compiled ? compiledSections(doc, detail.compiled) : null;
  if (compiled) {
    frag.appendChild(compiled[0]);
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

  // Gradients of the latest backward pass (a recorded run's Node: of the step shown).
  const rec: GradRecord | undefined = detail.grads[detail.grads.length - 1];
  if (detail.recorded) {
    frag.appendChild(recordedSection(doc, detail.recorded));
  } else if (rec) {
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
    frag.appendChild(
      section(doc, title, freshNote(doc, detail), arriving, isLeaf && rec.grad_inputs.length === 0 ? null : leaving)
    );
  } else if (!isLeaf || freshnessText(detail)) {
    const none = freshNote(doc, detail) ?? h(doc, 'div', { class: 'fv-none' }, 'no backward pass seen yet');
    frag.appendChild(section(doc, 'Gradients', none));
  }

  const chain = chainSection(doc, detail.chain ?? []);
  if (chain) {
    frag.appendChild(chain);
  }
  if (compiled) {
    frag.appendChild(compiled[1]);
  }

  // Leaves: .grad, path sum, history. (The kernel sends any Node's contributions; an op's arriving
  // gradient already says what reached it, and it has no .grad to sum them into.)
  if (!detail.recorded && (isLeaf || detail.leaf_grad || detail.leaf_grad_history.length)) {
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
 * A recorded run's Node at one step: the gradient that reached it (the rank's own, from before any
 * all-reduce) and, for a parameter, the gradient the optimizer applied.
 */
function recordedSection(doc: Document, r: RecordedGrads): HTMLElement {
  const local = h(doc, 'div', { class: 'fv-recorded-local' });
  local.appendChild(row(doc, `arriving on rank ${r.rank}`, r.local ? tensorView(doc, r.local) : h(doc, 'span', { class: 'fv-none' }, r.missing ?? 'None')));
  local.appendChild(
    h(doc, 'div', { class: 'fv-note' }, `rank ${r.rank}'s local gradient, as it reached this Node during backward: before any all-reduce`)
  );
  const parts: HTMLElement[] = [local];
  if (r.parameter) {
    const applied = h(doc, 'div', { class: 'fv-recorded-applied' });
    applied.appendChild(row(doc, `${r.parameter} as applied`, tensorView(doc, r.applied)));
    applied.appendChild(
      h(doc, 'div', { class: 'fv-note' }, "the gradient the optimizer applied at this step: after DDP's all-reduce, clipping and the script")
    );
    parts.push(applied);
  }
  const sec = section(doc, `Gradients · step ${r.step}, rank ${r.rank} (recorded)`, ...parts);
  sec.setAttribute('data-fv-recorded-step', String(r.step));
  sec.setAttribute('data-fv-recorded-rank', String(r.rank));
  return sec;
}

/** The freshness line of a Node's gradients (see {@link freshnessText}), or null. */
function freshNote(doc: Document, detail: NodeDetail): HTMLElement | null {
  const text = freshnessText(detail);
  return text ? h(doc, 'div', { class: 'fv-note fv-grad-fresh' }, text) : null;
}

/** "12,345" */
function formatCount(n: number): string {
  return Math.round(n).toLocaleString('en-US');
}

/** True when a gradient summary counted NaN or Inf. */
function nonfinite(t: TensorSummary | null): boolean {
  return !!t && (t.nan_count > 0 || t.inf_count > 0);
}

/** The parameters as a real table: name, shape, ‖grad‖, mean, max ("—" before backward). */
function parameterTable(doc: Document, params: ParameterRow[]): HTMLElement {
  const rows = params.map(p => {
    const g = p.grad;
    const bad = nonfinite(g);
    return {
      head: bad ? `⚠ ${p.name}` : p.name,
      cells: [
        p.shape.length ? p.shape.join('×') : 'scalar',
        ...(g ? [g.norm, g.mean, g.max].map(v => formatNumber(v)) : ['—', '—', '—'])
      ],
      attrs: {
        class: bad ? 'fv-bad' : null,
        'data-node-id': p.node,
        title: g && bad ? `${g.nan_count} NaN, ${g.inf_count} Inf in the gradient` : formatShape(p.shape, p.dtype)
      }
    };
  });
  const caption = `${params.length} parameter${params.length === 1 ? '' : 's'}`;
  const table = dataTable(doc, 'fv-param-table', caption, ['name', 'shape', '‖grad‖', 'mean', 'max'], rows);
  // A scrolling region of its own (long modules), reachable by keyboard.
  return h(doc, 'div', { class: 'fv-table-scroll', tabindex: 0, role: 'region', 'aria-label': 'parameters' }, table);
}

/** The module inspector's content for one ModuleDetail. */
export function renderModule(doc: Document, detail: ModuleDetail): HTMLElement {
  const frag = h(doc, 'div', { class: 'fv-detail fv-module-detail' });
  frag.appendChild(
    h(
      doc,
      'header',
      { class: 'fv-detail-head' },
      h(doc, 'h3', {}, detail.path || detail.id),
      h(doc, 'div', { class: 'fv-sub' }, detail.type ?? 'module', detail.path ? ` · ${detail.id}` : '')
    )
  );
  if (!detail.alive) {
    frag.appendChild(
      h(doc, 'div', { class: 'fv-note fv-stale' }, 'ℹ module no longer in the kernel; showing what the graph recorded')
    );
  }
  const sizes = h(doc, 'div', { class: 'fv-module-sizes' });
  sizes.appendChild(row(doc, 'ops', formatCount(detail.op_count)));
  sizes.appendChild(
    row(doc, 'parameters', `${formatCount(detail.param_count)} elements · ${bytesShort(detail.param_bytes)}`)
  );
  frag.appendChild(section(doc, 'Module', sizes));

  const grads = h(doc, 'div', { class: 'fv-module-grads' });
  const norms = [detail.grad_norm, detail.param_grad_norm].map(wireNumber);
  if (norms.every(v => v === null)) {
    grads.appendChild(h(doc, 'div', { class: 'fv-none' }, 'no backward pass seen yet'));
  } else {
    grads.appendChild(row(doc, '‖grad → inputs‖', formatNumber(detail.grad_norm)));
    grads.appendChild(row(doc, '‖params .grad‖', formatNumber(detail.param_grad_norm)));
  }
  const hist = histogramSvg(doc, detail.grad_histogram);
  if (hist) {
    hist.setAttribute('aria-label', `gradients of all parameters: ${hist.getAttribute('aria-label')}`);
    grads.appendChild(hist);
  }
  frag.appendChild(section(doc, 'Gradients', grads));

  if (detail.parameters.length) {
    frag.appendChild(section(doc, 'Parameters', parameterTable(doc, detail.parameters)));
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
  /** One module: sizes, gradient norms, a histogram of its parameters' gradients, its parameters. */
  showModule(detail: ModuleDetail): void;
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
      el.removeAttribute('data-module-id');
      el.setAttribute('data-state', 'empty');
      el.replaceChildren(h(doc, 'div', { class: 'fv-hint' }, 'Select a node (click it, or Tab to it and press Enter) to see its tensors and gradients.'));
    },
    showLoading(nodeId: number, label: string) {
      el.removeAttribute('data-module-id');
      el.setAttribute('data-node-id', String(nodeId));
      el.setAttribute('data-state', 'loading');
      if (!el.querySelector('.fv-detail')) {
        el.replaceChildren(h(doc, 'div', { class: 'fv-loading' }, `Loading ${label}…`));
      } else {
        el.classList.add('fv-refreshing');
      }
    },
    showDetail(detail: NodeDetail, graph: Graph | null) {
      el.removeAttribute('data-module-id');
      el.replaceChildren(renderDetail(doc, detail, graph));
      el.setAttribute('data-state', 'ready');
    },
    showModule(detail: ModuleDetail) {
      el.removeAttribute('data-node-id');
      el.setAttribute('data-module-id', detail.id);
      el.replaceChildren(renderModule(doc, detail));
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
