/** The inspector panel on its own: the module view, the chain rule and the source button. */
import { afterEach, describe, expect, it } from 'vitest';
import type { ChainTerm, ModuleDetail, NodeDetail, ParameterRow, TensorSummary } from '../../src/model/wire';
import { bytesShort } from '../../src/render/common/format';
import {
  chainText,
  createInspectorPanel,
  freshnessText,
  GOTO_CELL_EVENT,
  histogramSvg
} from '../../src/render/graph/inspector';
import { zDetail } from './fixtures';

afterEach(() => document.body.replaceChildren());

function grad(over: Partial<TensorSummary> = {}): TensorSummary {
  return {
    shape: [4],
    dtype: 'torch.float32',
    device: 'cpu',
    numel: 4,
    norm: 0.5,
    min: -0.25,
    max: 0.25,
    mean: 0.0125,
    nan_count: 0,
    inf_count: 0,
    values: null,
    histogram: null,
    ...over
  };
}

/** S1's Mul (fixtures.zDetail) before its tensors and gradients are known. */
function nodeDetail(over: Partial<NodeDetail> = {}): NodeDetail {
  return { ...zDetail(), inputs: [], outputs: [], freed: false, grads: [], ...over };
}

function param(name: string, g: TensorSummary | null, shape = [768, 768]): ParameterRow {
  return { name, node: 7, shape, dtype: 'torch.float32', grad: g };
}

function moduleDetail(over: Partial<ModuleDetail> = {}): ModuleDetail {
  return {
    id: 'model.h.0',
    path: 'h.0',
    type: 'Block',
    op_count: 42,
    param_count: 7087872,
    param_bytes: 28351488,
    parameters: [param('ln_1.weight', grad(), [768]), param('attn.c_attn.weight', null)],
    grad_histogram: { lo: -0.5, hi: '0.5', counts: [1, 3, 9, 3, 1], edges: null },
    grad_norm: 1.5,
    param_grad_norm: 'Infinity',
    alive: true,
    ...over
  };
}

function mount() {
  const panel = createInspectorPanel(document);
  document.body.appendChild(panel.el);
  return panel;
}

describe('module inspector', () => {
  it('shows path, class, sizes, norms, a histogram and a parameter table', () => {
    const panel = mount();
    panel.showModule(moduleDetail());
    const el = panel.el;
    expect(el.getAttribute('data-state')).toBe('ready');
    expect(el.getAttribute('data-module-id')).toBe('model.h.0');
    expect(el.querySelector('h3')!.textContent).toBe('h.0');
    expect(el.querySelector('.fv-sub')!.textContent).toContain('Block');
    const text = el.textContent!;
    expect(text).toContain('42');
    expect(text).toContain('7,087,872 elements · 27 MiB');
    expect(text).toContain('1.5');
    expect(text).toContain('inf');
    expect(el.querySelectorAll('.fv-hist .fv-hist-bar')).toHaveLength(5);

    const table = el.querySelector('table.fv-param-table')!;
    const cols = Array.from(table.querySelectorAll('thead th')).map(th => [th.textContent, th.getAttribute('scope')]);
    expect(cols).toEqual([
      ['name', 'col'],
      ['shape', 'col'],
      ['‖grad‖', 'col'],
      ['mean', 'col'],
      ['max', 'col']
    ]);
    const rows = Array.from(table.querySelectorAll('tbody tr')).map(tr =>
      Array.from(tr.children).map(c => c.textContent)
    );
    expect(rows).toEqual([
      ['ln_1.weight', '768', '0.5', '0.0125', '0.25'],
      ['attn.c_attn.weight', '768×768', '—', '—', '—']
    ]);
    expect(table.querySelector('tbody th')!.getAttribute('scope')).toBe('row');
    // the table scrolls inside its own keyboard-reachable region
    const region = table.parentElement!;
    expect(region.classList.contains('fv-table-scroll')).toBe(true);
    expect(region.getAttribute('tabindex')).toBe('0');
  });

  it('handles many parameters, a module before backward, and non-finite gradients', () => {
    const panel = mount();
    const many = Array.from({ length: 160 }, (_, i) => param(`p${i}`, null));
    panel.showModule(
      moduleDetail({ parameters: many, grad_histogram: null, grad_norm: null, param_grad_norm: null, alive: false })
    );
    expect(panel.el.querySelectorAll('tbody tr')).toHaveLength(160);
    expect(panel.el.textContent).toContain('no backward pass seen yet');
    expect(panel.el.textContent).toContain('no longer in the kernel');
    expect(panel.el.querySelector('.fv-hist')).toBeNull();

    panel.showModule(moduleDetail({ parameters: [param('w', grad({ nan_count: 2, norm: 'NaN' }))] }));
    const tr = panel.el.querySelector('tbody tr')!;
    expect(tr.classList.contains('fv-bad')).toBe(true);
    expect(tr.textContent).toContain('⚠ w');
    expect(tr.textContent).toContain('nan');
  });

  it('switching to a node drops the module id', () => {
    const panel = mount();
    panel.showModule(moduleDetail());
    panel.showDetail(nodeDetail(), null);
    expect(panel.el.hasAttribute('data-module-id')).toBe(false);
    panel.showModule(moduleDetail());
    panel.showEmpty();
    expect(panel.el.hasAttribute('data-module-id')).toBe(false);
  });

  it('formats bytes like the memory view', () => {
    expect(bytesShort(512)).toBe('512 B');
    expect(bytesShort(1536)).toBe('1.5 KiB');
    expect(bytesShort(124439808 * 4)).toBe('475 MiB');
  });

  it('draws a histogram from a Histogram or a TensorSummary', () => {
    const hist = { lo: 0, hi: 1, counts: [1, 2], edges: null };
    expect(histogramSvg(document, hist)!.querySelectorAll('.fv-hist-bar')).toHaveLength(2);
    expect(histogramSvg(document, grad({ histogram: hist }))!.querySelectorAll('.fv-hist-bar')).toHaveLength(2);
    expect(histogramSvg(document, grad())).toBeNull();
    // Fixed bins (gradients summarised on their device): each bin says its edges, the axis the inner ones.
    const logBins = { lo: -3, hi: 0.5, counts: [1, 0, 2, 4], edges: [-65504, -1, 0, 2 ** -24, 65504] };
    const svg = histogramSvg(document, logBins)!;
    expect(svg.querySelectorAll('.fv-hist-bar')).toHaveLength(4);
    expect(svg.getAttribute('aria-label')).toBe('histogram of 4 fixed bins, values from -3 to 0.5');
    expect(svg.querySelector('title')!.textContent).toBe('[-65504, -1): 1; [-1, 0): 0; zero: 2; [5.96e-8, 65504]: 4');
    expect([...svg.querySelectorAll('.fv-hist-axis')].map(t => t.textContent)).toEqual(['< -1', '≥ 5.96e-8']);
    expect(histogramSvg(document, null)).toBeNull();
    // A large tensor's histogram bins a sample: it says how many of its finite values
    const big = histogramSvg(document, grad({ numel: 100000, nan_count: 1, inf_count: 2, histogram: logBins }))!;
    expect(big.querySelector('title')!.textContent).toMatch(/; a sample: 7 of 99997 finite values$/);
    expect(big.getAttribute('aria-label')).toContain('a sample: 7 of 99997 finite values');
    expect(histogramSvg(document, grad({ numel: 7, histogram: logBins }))!.querySelector('title')!.textContent).not.toContain('sample');
  });
});

/** S1: x=2, y=3, loss=(x*y+x)^2, so Mul's grad_output is 16. */
const S1_CHAIN: ChainTerm[] = [
  { input_nr: 0, input_label: 'x', formula: '∂(x·y)/∂x = y', grad_output: [16], local: [3], grad_input: [48] },
  { input_nr: 1, input_label: 'y', formula: '∂(x·y)/∂y = x', grad_output: [16], local: [2], grad_input: [32] }
];

describe('chain rule', () => {
  it('writes one-element terms inline', () => {
    expect(chainText(S1_CHAIN[0])).toBe('16 × 3 = 48 → x');
    const panel = mount();
    panel.showDetail(nodeDetail({ chain: S1_CHAIN }), null);
    const section = Array.from(panel.el.querySelectorAll('section')).find(
      s => s.querySelector('h4')!.textContent === 'Chain rule'
    )!;
    expect(Array.from(section.querySelectorAll('.fv-chain-eq')).map(e => e.textContent)).toEqual([
      '16 × 3 = 48 → x',
      '16 × 2 = 32 → y'
    ]);
    expect(Array.from(section.querySelectorAll('.fv-chain-formula')).map(e => e.textContent)).toEqual([
      '∂(x·y)/∂x = y',
      '∂(x·y)/∂y = x'
    ]);
    expect(section.querySelector('table')).toBeNull();
  });

  it('tabulates small tensors elementwise and only names large ones', () => {
    const term: ChainTerm = {
      input_nr: 0,
      input_label: 'a',
      formula: '∂tanh(a)/∂a = 1 − tanh²(a)',
      grad_output: [1, 1, 'NaN'],
      local: [0.5, 0.25, 0.125],
      grad_input: [0.5, 0.25, 'NaN']
    };
    const big: ChainTerm = { ...term, input_label: 'b', grad_output: Array(65).fill(1), local: Array(65).fill(2), grad_input: Array(65).fill(2) };
    const panel = mount();
    panel.showDetail(nodeDetail({ chain: [term, big] }), null);
    const items = panel.el.querySelectorAll('.fv-chain-term');
    expect(items[0].querySelector('.fv-chain-eq')!.textContent).toBe('grad_out × local = grad_in → a');
    const rows = Array.from(items[0].querySelectorAll('tbody tr')).map(tr =>
      Array.from(tr.children).map(c => c.textContent)
    );
    expect(rows).toEqual([
      ['0', '1', '0.5', '0.5'],
      ['1', '1', '0.25', '0.25'],
      ['2', 'nan', '0.125', 'nan']
    ]);
    expect(items[0].querySelectorAll('thead th[scope="col"]')).toHaveLength(4);
    expect(items[1].querySelector('table')).toBeNull();
    expect(items[1].textContent).toContain('65 elements');
  });

  it('shows no section without terms', () => {
    const panel = mount();
    panel.showDetail(nodeDetail(), null);
    expect(panel.el.textContent).not.toContain('Chain rule');
  });
});

describe('source button', () => {
  it('dispatches forgeviz:goto-cell with the execution count and line, reaching the document', () => {
    const panel = mount();
    panel.showDetail(nodeDetail(), null);
    const seen: unknown[] = [];
    const listener = (e: Event) => seen.push((e as CustomEvent).detail);
    document.addEventListener(GOTO_CELL_EVENT, listener);
    try {
      const btn = panel.el.querySelector<HTMLButtonElement>('.fv-source button.fv-goto')!;
      expect(panel.el.querySelector('.fv-source')!.textContent).toBe('z = x * y');
      expect(btn.getAttribute('aria-label')).toBe('Go to cell [3], line 2 in the notebook');
      btn.click();
      expect(seen).toEqual([{ cell: 3, line: 2, source: 'z = x * y' }]);
    } finally {
      document.removeEventListener(GOTO_CELL_EVENT, listener);
    }
  });

  it('makes the location the button when there is no source text, and nothing without a cell', () => {
    const panel = mount();
    panel.showDetail(nodeDetail({ source: null, line: null }), null);
    expect(panel.el.querySelector('.fv-loc button.fv-goto')!.textContent).toBe('cell [3]');
    panel.showDetail(nodeDetail({ cell: null }), null);
    expect(panel.el.querySelector('.fv-goto')).toBeNull();
    expect(panel.el.querySelector('.fv-source')!.textContent).toBe('z = x * y');
  });
});

describe('how fresh a Node\'s gradients are (%fv grads)', () => {
  const rec = (i: number) => ({ backward_index: i, grad_outputs: [grad()], grad_inputs: [grad()] });

  it('says which backward pass the figures come from and how many steps ago', () => {
    expect(freshnessText(nodeDetail({ grads: [rec(12)], backward_passes: 12 }))).toBe('from backward #12 · the latest');
    expect(freshnessText(nodeDetail({ grads: [rec(11), rec(12)], backward_passes: 15 }))).toBe(
      'from backward #12 · 3 steps ago'
    );
    expect(freshnessText(nodeDetail({ grads: [rec(12)], backward_passes: 13 }))).toBe('from backward #12 · 1 step ago');
  });

  it('says why newer passes are missing when the cadence skips them', () => {
    expect(freshnessText(nodeDetail({ grads: [rec(11)], backward_passes: 14, grad_cadence: 'every 10' }))).toBe(
      'from backward #11 · 3 steps ago · not summarised since (summarised every 10 steps)'
    );
    expect(freshnessText(nodeDetail({ grads: [rec(4)], backward_passes: 6, grad_cadence: 'shown' }))).toBe(
      'from backward #4 · 2 steps ago · not summarised since (summarised only for Nodes a graph view draws)'
    );
    expect(freshnessText(nodeDetail({ grads: [rec(4)], backward_passes: 5, grad_cadence: 'off' }))).toBe(
      'from backward #4 · 1 step ago · not summarised since (summaries off: %fv grads each turns them on)'
    );
    expect(freshnessText(nodeDetail({ grads: [rec(9)], backward_passes: 12, grad_cadence: 'within 5%' }))).toBe(
      "from backward #9 · 3 steps ago · not summarised since (summarised within 5% of the loop's time)"
    );
    // none yet (a graph that ran only on skipped passes)
    expect(freshnessText(nodeDetail({ backward_passes: 13, grad_cadence: 'every 10' }))).toBe(
      'not summarised in 13 backward passes (summarised every 10 steps)'
    );
    expect(freshnessText(nodeDetail({ backward_passes: 1, grad_cadence: 'shown' }))).toBe(
      'not summarised in 1 backward pass (summarised only for Nodes a graph view draws)'
    );
    // nothing to say before any backward, or when every pass records
    expect(freshnessText(nodeDetail({ backward_passes: 0, grad_cadence: 'every 10' }))).toBeNull();
    expect(freshnessText(nodeDetail({ backward_passes: 3 }))).toBeNull();
  });

  it('draws the line in the Gradients section, under its title', () => {
    const panel = mount();
    panel.showDetail(nodeDetail({ grads: [rec(7)], backward_passes: 9, grad_cadence: 'every 3' }), null);
    const section = panel.el.querySelector('.fv-grad-fresh')!.closest('section')!;
    expect(section.querySelector('h4')!.textContent).toBe('Gradients · backward #7');
    expect(section.querySelector('.fv-grad-fresh')!.textContent).toBe(
      'from backward #7 · 2 steps ago · not summarised since (summarised every 3 steps)'
    );
    panel.showDetail(nodeDetail({ backward_passes: 2, grad_cadence: 'off' }), null);
    expect(panel.el.querySelector('.fv-grad-fresh')!.textContent).toBe(
      'not summarised in 2 backward passes (summaries off: %fv grads each turns them on)'
    );
    expect(panel.el.textContent).not.toContain('no backward pass seen yet');
  });
});
