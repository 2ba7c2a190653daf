/** The side panel through the real DOM (happy-dom): its sections, hooks and statuses, and its kernel connection. */
import { readFileSync } from 'node:fs';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { Finding, NativeStatus, PanelLive, PanelState, TensorRow } from '../../src/model/wire';
import { LOAD_CODE, NO_ANSWER_TEXT, PanelConnection, type PanelSink, type SessionContextLike } from '../../src/lab/panel-kernel';
import { showCode } from '../../src/lab/panel-output';
import { countedBytes, groupRows } from '../../src/render/panel/data';
import { findingPlace } from '../../src/render/panel/doctor';
import { createPanelView, NO_ANSWER_MS, SETTLE_MS, type PanelStatus, type PanelView, type PanelViewOptions } from '../../src/render/panel/view';
import { takeDown } from './host';

function row(name: string, over: Partial<TensorRow> = {}): TensorRow {
  return {
    name,
    module: null,
    kind: 'tensor',
    shape: [2, 3],
    dtype: 'torch.float32',
    device: 'cpu',
    storage_bytes: 24,
    counted: true,
    shared: false,
    requires_grad: false,
    leaf: true,
    grad_fn: null,
    grad_norm: null,
    ...over
  };
}

const ROWS: TensorRow[] = [
  row('x', { shape: [4, 1024], storage_bytes: 16384 }),
  row('x_view', { shape: [1024, 4], storage_bytes: 16384, counted: false, shared: true }),
  row('loss', { shape: [], storage_bytes: 4, requires_grad: true, leaf: false, grad_fn: 'MeanBackward0' }),
  row('model.fc1.weight', { module: 'model', kind: 'parameter', shape: [8, 4], storage_bytes: 128, requires_grad: true, grad_norm: 0.123456 }),
  row('model.fc1.bias', { module: 'model', kind: 'parameter', shape: [8], storage_bytes: 32, requires_grad: true }),
  row('model.bn.running_mean', { module: 'model', kind: 'buffer', shape: [8], storage_bytes: 32 }),
  row('head.weight', { module: 'head', kind: 'parameter', shape: [2, 8], storage_bytes: 64, requires_grad: true })
];
const TOTAL = countedBytes(ROWS);

const FINDINGS: Finding[] = [
  { kind: 'missing-zero-grad', cell: 4, line: 7, source: 'loss.backward()', explanation: 'the grads add up across steps', fix: 'call opt.zero_grad() before backward', count: 3 },
  { kind: 'nonfinite-grad', cell: null, line: null, source: '', explanation: 'a grad holds inf', fix: 'lower the learning rate', count: 1 }
];

function state(over: Partial<PanelState> = {}): PanelState {
  return {
    type: 'state',
    version: 1,
    kernel: 'k1',
    cell: 5,
    tensors: { rows: ROWS, more: 0, total_bytes: TOTAL },
    findings: FINDINGS,
    warnings: [],
    memory_model: 'mem-1',
    graph_model: 'graph-1',
    native: null,
    ...over
  };
}

const live = (seq: number, bytes = [128, 32, 0, 0, 4096, 0, 0, 0]): PanelLive => ({ type: 'live', seq, time: seq / 4, live_bytes: bytes, events: seq * 10 });

let el: HTMLElement;
let view: PanelView | null = null;

afterEach(() => {
  view = takeDown(view);
  vi.useRealTimers();
});

function make() {
  el = document.createElement('div');
  document.body.appendChild(el);
  const mounted: string[] = [];
  const unmounted: string[] = [];
  const opts: PanelViewOptions = {
    onLoad: vi.fn(),
    onOpen: vi.fn(),
    onRefresh: vi.fn(),
    mountWidget: vi.fn((host: HTMLElement, id: string) => {
      mounted.push(id);
      host.textContent = `widget ${id}`;
      return () => unmounted.push(id);
    })
  };
  view = createPanelView(el, opts);
  return { opts, mounted, unmounted };
}

const q = <T extends Element = HTMLElement>(sel: string) => el.querySelector<T>(sel)!;
/** Set the panel's sort (a 'change') or filter (an 'input') as a person would. */
const sortBy = (value: string) => enter('.fv-panel-sort', value, 'change');
const filterBy = (value: string) => enter('.fv-panel-filter', value, 'input');
function enter(sel: string, value: string, event: string): void {
  const control = q<HTMLInputElement | HTMLSelectElement>(sel);
  control.value = value;
  control.dispatchEvent(new Event(event));
}
const section = (name: string) => q(`[data-fv-section="${name}"]`);
const tensor = (name: string) => q(`[data-fv-tensor="${name}"]`);
const rowNames = () => [...el.querySelectorAll('[data-fv-tensor]')].map(r => r.getAttribute('data-fv-tensor'));
const visible = (e: Element) => !e.closest('[hidden]');

function ready(s: PanelState = state()) {
  view!.setStatus('ready');
  view!.setState(s);
}

describe('hooks', () => {
  it('marks the root, its status and its four sections, the Doctor first', () => {
    make();
    ready();
    expect(el.hasAttribute('data-fv-panel')).toBe(true);
    expect(el.classList.contains('fv-root')).toBe(true);
    expect(el.getAttribute('data-fv-status')).toBe('ready');
    expect([...el.querySelectorAll('[data-fv-section]')].map(s => s.getAttribute('data-fv-section'))).toEqual(['doctor', 'tensors', 'graph', 'memory']);
    expect(q('.fv-panel-cell').textContent).toBe('after cell [5]');
  });
});

describe('native build', () => {
  const building: NativeStatus = { type: 'native', state: 'building', seconds: 9, message: "Building forgeviz's native helpers in the background (memory tracker, 9 s…)." };
  const failed: NativeStatus = {
    type: 'native',
    state: 'failed',
    seconds: 0.2,
    message: "forgeviz could not build its native helpers (the memory tracker: needs a C++ compiler (g++)). forgeviz works without them: memory tracking uses the dispatch-mode tracker and gradients are recorded by Python hooks."
  };
  const line = () => el.querySelector<HTMLElement>('.fv-panel-native')!;

  it('has no line when the kernel built nothing (the libraries were there)', () => {
    make();
    ready();
    expect(line().hidden).toBe(true);
    expect(line().hasAttribute('data-fv-native')).toBe(false);
  });

  it('shows the build in the state, then each update the kernel pushes, then what it became', () => {
    make();
    ready(state({ native: building }));
    expect(visible(line())).toBe(true);
    expect(line().getAttribute('data-fv-native')).toBe('building');
    expect(line().textContent).toContain('memory tracker, 9 s…');
    expect(line().getAttribute('data-kind')).toBe('info');
    view!.setNative({ ...building, seconds: 12, message: building.message.replace('9 s', '12 s') });
    expect(line().textContent).toContain('12 s…');
    const done: NativeStatus = { type: 'native', state: 'ready', seconds: 31, message: "forgeviz's native helpers are ready (built in 31 s)" };
    view!.setNative(done);
    expect(line().getAttribute('data-fv-native')).toBe('ready');
    expect(line().textContent).toBe(done.message);
    view!.setState(state({ cell: 6, native: done })); // the next cell's state says the same
    expect(line().textContent).toBe(done.message);
  });

  it('shows a failure as an error, with what the user gets without the libraries', () => {
    make();
    ready(state({ native: failed }));
    expect(line().getAttribute('data-fv-native')).toBe('failed');
    expect(line().getAttribute('data-kind')).toBe('error');
    expect(line().textContent).toContain('needs a C++ compiler');
    expect(line().textContent).toContain('dispatch-mode tracker');
  });

  it('forgets the build of a kernel that is gone', () => {
    make();
    ready(state({ native: building }));
    view!.setStatus('restarted');
    expect(line().hidden).toBe(true);
  });

  it('is passed on by the connection whenever it comes, before the first state too', () => {
    const { conn, kernel, sink } = connection();
    conn.setActive(true);
    kernel.comm.says(building);
    expect(sink.setNative).toHaveBeenCalledWith(building);
    expect(sink.setState).not.toHaveBeenCalled();
  });
});

describe('tensors', () => {
  it('lists plain tensors first, then each module as a folded group of its parameters and buffers', () => {
    make();
    ready();
    const body = section('tensors');
    const plain = body.querySelector('.fv-panel-plain')!;
    expect([...plain.querySelectorAll('[data-fv-tensor]')].map(r => r.getAttribute('data-fv-tensor'))).toEqual(['loss', 'x', 'x_view']);
    const groups = [...body.querySelectorAll<HTMLDetailsElement>('details.fv-panel-group')];
    expect(groups.map(g => g.getAttribute('data-fv-module'))).toEqual(['head', 'model']);
    expect(groups.every(g => !g.open)).toBe(true);
    const model = groups[1];
    expect([...model.querySelectorAll('[data-fv-tensor]')].map(r => r.getAttribute('data-fv-tensor'))).toEqual([
      'model.bn.running_mean',
      'model.fc1.bias',
      'model.fc1.weight'
    ]);
    expect(model.querySelector('summary')!.textContent).toContain('3 tensors');
    expect(model.querySelector('summary .fv-panel-bytes')!.textContent).toBe('192 B');
    // inside its group a row shows its name without the module's prefix
    expect(tensor('model.fc1.weight').querySelector('.fv-panel-name')!.textContent).toBe('fc1.weight');
    expect(section('tensors').querySelector('.fv-panel-count')!.textContent).toBe('7');
  });

  it('shows shape, dtype, device, requires_grad, leaf or grad_fn and the grad norm', () => {
    make();
    ready();
    const w = tensor('model.fc1.weight').textContent!;
    expect(w).toContain('8×4 float32');
    expect(w).toContain('cpu');
    expect(w).toContain('requires_grad');
    expect(w).toContain('leaf');
    expect(w).toContain('‖grad‖ 0.1235');
    const loss = tensor('loss').textContent!;
    expect(loss).toContain('scalar float32');
    expect(loss).toContain('MeanBackward0');
    expect(loss).not.toContain('leaf');
    expect(tensor('x').textContent).not.toContain('requires_grad');
    expect(tensor('model.bn.running_mean').querySelector('.fv-panel-buffer')).not.toBeNull();
  });

  it('counts a shared storage once: the later row shows its bytes as shared, and the total leaves them out', () => {
    make();
    ready();
    expect(tensor('x').querySelector('.fv-panel-bytes')!.textContent).toBe('16 KiB');
    const shared = tensor('x_view').querySelector('.fv-panel-bytes')!;
    expect(shared.classList.contains('fv-panel-bytes-shared')).toBe(true);
    expect(shared.textContent).toBe('(16 KiB)');
    expect(tensor('x_view').querySelector('.fv-panel-shared')).not.toBeNull();
    expect(TOTAL).toBe(16384 + 4 + 128 + 32 + 32 + 64);
    expect(q('.fv-panel-total').textContent).toBe('total 16.3 KiB');
    expect(groupRows(ROWS, 'name', '')[0].bytes).toBe(16384 + 4);
  });

  it('sorts by name, bytes or size', () => {
    make();
    ready();
    sortBy('bytes');
    expect(rowNames()).toEqual(['x', 'x_view', 'loss', 'model.fc1.weight', 'model.bn.running_mean', 'model.fc1.bias', 'head.weight']);
    sortBy('size');
    // by elements: x and x_view (4096 each, then by name), loss (1); model (48) before head (16)
    expect(rowNames()).toEqual(['x', 'x_view', 'loss', 'model.fc1.weight', 'model.bn.running_mean', 'model.fc1.bias', 'head.weight']);
    expect([...el.querySelectorAll('details.fv-panel-group')].map(g => g.getAttribute('data-fv-module'))).toEqual(['model', 'head']);
    sortBy('name');
    expect(rowNames()[0]).toBe('loss');
  });

  it('filters by name, opening the groups that match, and says how many are shown', () => {
    make();
    ready();
    filterBy('FC1');
    expect(rowNames()).toEqual(['model.fc1.bias', 'model.fc1.weight']);
    expect(q<HTMLDetailsElement>('details[data-fv-module="model"]').open).toBe(true);
    expect(q('.fv-panel-total').textContent).toBe('2 of 7 shown · total 16.3 KiB');
    filterBy('nothing');
    expect(rowNames()).toEqual([]);
    expect(section('tensors').querySelector('.fv-panel-empty')!.textContent).toBe('No tensor matches the filter');
    filterBy('');
    expect(rowNames()).toHaveLength(7);
    expect(q<HTMLDetailsElement>('details[data-fv-module="model"]').open).toBe(false);
  });

  it('keeps a group the user opened open in the next state', () => {
    make();
    ready();
    const model = q<HTMLDetailsElement>('details[data-fv-module="model"]');
    model.open = true;
    model.dispatchEvent(new Event('toggle'));
    view!.setState(state({ cell: 6 }));
    expect(q<HTMLDetailsElement>('details[data-fv-module="model"]').open).toBe(true);
    expect(q<HTMLDetailsElement>('details[data-fv-module="head"]').open).toBe(false);
  });

  it('adds a "+N more" row past the listing limit', () => {
    make();
    ready(state({ tensors: { rows: ROWS, more: 12, total_bytes: TOTAL } }));
    expect(q('.fv-panel-more').textContent).toBe('+12 more');
    expect(section('tensors').querySelector('.fv-panel-count')!.textContent).toBe('19');
    view!.setState(state());
    expect(el.querySelector('.fv-panel-more')).toBeNull();
  });

  it('says so when the notebook holds no tensor', () => {
    make();
    ready(state({ tensors: { rows: [], more: 0, total_bytes: 0 } }));
    expect(section('tensors').querySelector('.fv-panel-empty')!.textContent).toBe('No tensors in the notebook yet');
  });

  it('opens a row on click, and on Enter or Space', () => {
    const { opts } = make();
    ready();
    tensor('model.fc1.weight').querySelector('.fv-panel-shape')!.dispatchEvent(new MouseEvent('click', { bubbles: true }));
    expect(opts.onOpen).toHaveBeenLastCalledWith(ROWS[3]);
    tensor('loss').dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter', bubbles: true }));
    expect(opts.onOpen).toHaveBeenLastCalledWith(ROWS[2]);
    tensor('x').dispatchEvent(new KeyboardEvent('keydown', { key: ' ', bubbles: true }));
    expect(opts.onOpen).toHaveBeenLastCalledWith(ROWS[0]);
    tensor('x').dispatchEvent(new KeyboardEvent('keydown', { key: 'a', bubbles: true }));
    expect(opts.onOpen).toHaveBeenCalledTimes(3);
    expect(tensor('x').getAttribute('tabindex')).toBe('0');
    expect(tensor('x').getAttribute('role')).toBe('button');
  });

  it('runs forgeviz.show with the row name quoted as Python reads it', () => {
    expect(showCode({ name: 'model.fc1.weight' })).toBe('import forgeviz\nforgeviz.show("model.fc1.weight")');
    expect(showCode({ name: 'a"b' })).toBe('import forgeviz\nforgeviz.show("a\\"b")');
  });
});

describe('graph and memory', () => {
  it('mounts the kernel widgets by model id and replaces the graph when a new one comes', () => {
    const { mounted, unmounted } = make();
    ready();
    expect(mounted).toEqual(['graph-1', 'mem-1']);
    expect(section('graph').querySelector('[data-fv-model="graph-1"]')!.textContent).toBe('widget graph-1');
    view!.setState(state({ graph_model: 'graph-2' }));
    expect(unmounted).toEqual(['graph-1']);
    expect(mounted).toEqual(['graph-1', 'mem-1', 'graph-2']);
    view!.setState(state({ graph_model: 'graph-2' }));
    expect(mounted).toHaveLength(3); // the same model: left as it is
  });

  it('keeps a pinned graph and says a newer one is ready; unpinning shows it', () => {
    const { mounted } = make();
    ready();
    const pin = section('graph').querySelector<HTMLButtonElement>('.fv-panel-pin')!;
    pin.click();
    expect(pin.getAttribute('aria-pressed')).toBe('true');
    view!.setState(state({ graph_model: 'graph-2' }));
    expect(section('graph').querySelector('[data-fv-model]')!.getAttribute('data-fv-model')).toBe('graph-1');
    expect(visible(section('graph').querySelector('.fv-panel-note')!)).toBe(true);
    pin.click();
    expect(section('graph').querySelector('[data-fv-model]')!.getAttribute('data-fv-model')).toBe('graph-2');
    expect(visible(section('graph').querySelector('.fv-panel-note')!)).toBe(false);
    expect(mounted).toEqual(['graph-1', 'mem-1', 'graph-2']);
  });

  it('says there is no graph before a backward', () => {
    make();
    ready(state({ graph_model: null }));
    expect(section('graph').querySelector('.fv-panel-empty')!.textContent).toBe('No backward pass yet');
  });

  it('shows the live bytes by category and sets data-fv-updated to each update’s seq', () => {
    make();
    ready();
    const memory = section('memory');
    expect(memory.hasAttribute('data-fv-updated')).toBe(false);
    view!.setLive(live(1));
    expect(memory.getAttribute('data-fv-updated')).toBe('1');
    const cats = [...memory.querySelectorAll('.fv-panel-live-cat')];
    expect(cats.map(c => c.getAttribute('data-category'))).toEqual(['parameter', 'buffer', 'activation']);
    expect(cats.map(c => c.textContent)).toEqual(['parameter 128 B', 'buffer 32 B', 'activation 4 KiB']);
    expect((cats[0].querySelector('.fv-panel-swatch') as HTMLElement).getAttribute('style')).toContain('#0072B2');
    expect(memory.querySelector('.fv-panel-live-total')!.textContent).toBe('live 4.16 KiB');
    view!.setLive(live(2, [0, 0, 0, 0, 2 * 1024 * 1024, 0, 0, 0]));
    expect(memory.getAttribute('data-fv-updated')).toBe('2');
    expect(memory.querySelector('.fv-panel-live-total')!.textContent).toBe('live 2 MiB');
  });
});

describe('doctor', () => {
  it('lists each finding with its kind, place, line, explanation, fix and count', () => {
    make();
    ready();
    const item = q('[data-fv-doctor="missing-zero-grad"]');
    expect(item.querySelector('.fv-panel-kind')!.textContent).toBe('missing zero grad');
    expect(item.querySelector('.fv-panel-place')!.textContent).toBe('cell [4], line 7');
    expect(item.querySelector('code.fv-panel-source')!.textContent).toBe('loss.backward()');
    expect(item.querySelector('.fv-panel-explain')!.textContent).toBe('the grads add up across steps');
    expect(item.querySelector('.fv-panel-fix')!.textContent).toBe('Fix: call opt.zero_grad() before backward');
    expect(item.querySelector('.fv-panel-times')!.textContent).toBe('×3');
    const once = q('[data-fv-doctor="nonfinite-grad"]');
    expect(once.querySelector('.fv-panel-times')).toBeNull();
    expect(once.querySelector('.fv-panel-place')).toBeNull();
    expect(once.querySelector('.fv-panel-source')).toBeNull();
    expect(visible(section('doctor').querySelector('.fv-panel-empty')!)).toBe(false);
    expect(findingPlace({ cell: 2, line: null })).toBe('cell [2]');
  });

  it('says "No incidents seen" without findings, and shows forgeviz’s warnings as warnings', () => {
    make();
    ready(state({ findings: [], warnings: ['forgeviz could not list the tensors: KeyError()'] }));
    const doctor = section('doctor');
    expect(doctor.querySelector('.fv-panel-empty')!.textContent).toBe('No incidents seen');
    expect(visible(doctor.querySelector('.fv-panel-empty')!)).toBe(true);
    const warning = doctor.querySelector('.fv-warning')!;
    expect(visible(warning)).toBe(true);
    expect(warning.getAttribute('role')).toBe('alert');
    expect(warning.textContent).toContain('forgeviz could not list the tensors: KeyError()');
  });
});

describe('statuses', () => {
  it('starts connecting, with a screen and no sections', () => {
    make();
    expect(el.getAttribute('data-fv-status')).toBe('connecting');
    expect(visible(q('.fv-panel-screen'))).toBe(true);
    expect(q('.fv-panel-screen-text').textContent).toBe('Connecting to the kernel…');
    expect(visible(section('tensors'))).toBe(false);
  });

  it('offers to load forgeviz when it is not loaded', () => {
    const { opts } = make();
    view!.setStatus('not-loaded', '%load_ext forgeviz failed: ModuleNotFoundError: No module named forgeviz');
    expect(el.getAttribute('data-fv-status')).toBe('not-loaded');
    expect(q('.fv-panel-screen-text').textContent).toBe('forgeviz is not loaded in this kernel');
    expect(q('.fv-panel-screen-detail').textContent).toContain('ModuleNotFoundError');
    const load = q<HTMLButtonElement>('.fv-panel-load');
    expect(visible(load)).toBe(true);
    load.click();
    expect(opts.onLoad).toHaveBeenCalledTimes(1);
    expect(load.disabled).toBe(true);
    view!.setStatus('connecting');
    expect(visible(load)).toBe(false);
  });

  it('says the kernel restarted and forgets what it showed', () => {
    const { unmounted } = make();
    ready();
    view!.setLive(live(3));
    view!.setStatus('restarted');
    expect(el.getAttribute('data-fv-status')).toBe('restarted');
    expect(q('.fv-panel-screen-text').textContent).toContain('kernel restarted');
    expect(visible(section('tensors'))).toBe(false);
    expect(rowNames()).toEqual([]);
    expect(el.querySelectorAll('[data-fv-doctor]')).toHaveLength(0);
    expect(section('memory').hasAttribute('data-fv-updated')).toBe(false);
    expect(unmounted.sort()).toEqual(['graph-1', 'mem-1']);
  });

  it('says when the notebook has no kernel', () => {
    make();
    ready();
    view!.setStatus('no-kernel', 'The active notebook has no kernel: start one to see it here.');
    expect(el.getAttribute('data-fv-status')).toBe('no-kernel');
    expect(q('.fv-panel-screen-text').textContent).toBe('No kernel to show');
    expect(q('.fv-panel-screen-detail').textContent).toBe('The active notebook has no kernel: start one to see it here.');
    expect(rowNames()).toEqual([]);
  });

  it('waits for the running cell on the screen, or on a line over what it shows', () => {
    vi.useFakeTimers();
    make();
    view!.setStatus('busy');
    vi.advanceTimersByTime(SETTLE_MS);
    expect(q('.fv-panel-screen-text').textContent).toBe('Waiting for the running cell to finish…');
    expect(visible(q('.fv-panel-screen'))).toBe(true);
    ready();
    view!.setStatus('busy');
    vi.advanceTimersByTime(SETTLE_MS);
    expect(visible(q('.fv-panel-screen'))).toBe(false);
    expect(visible(section('tensors'))).toBe(true);
    const line = q('.fv-status');
    expect(visible(line)).toBe(true);
    expect(line.textContent).toBe('Waiting for the running cell to finish…');
    expect(q<HTMLButtonElement>('.fv-panel-refresh').disabled).toBe(true);
  });

  it('clears the rows of another kernel process, and on clear()', () => {
    make();
    ready();
    view!.setState(state({ kernel: 'k2', tensors: { rows: [row('y')], more: 0, total_bytes: 24 } }));
    expect(rowNames()).toEqual(['y']);
    view!.clear();
    expect(rowNames()).toEqual([]);
  });

  it('calls onRefresh from the refresh button', () => {
    const { opts } = make();
    ready();
    q<HTMLButtonElement>('.fv-panel-refresh').click();
    expect(opts.onRefresh).toHaveBeenCalledTimes(1);
  });

  it('folds a section from its title', () => {
    make();
    ready();
    const fold = section('doctor').querySelector<HTMLButtonElement>('.fv-panel-fold')!;
    fold.click();
    expect(fold.getAttribute('aria-expanded')).toBe('false');
    expect(section('doctor').querySelector<HTMLElement>('.fv-panel-body')!.hidden).toBe(true);
  });
});

describe('doctor first', () => {
  it('marks a Doctor with findings, folded or not, with a loud count', () => {
    make();
    ready();
    const doctor = section('doctor');
    expect(doctor.hasAttribute('data-fv-alert')).toBe(true);
    const count = doctor.querySelector('.fv-panel-fold .fv-panel-count')!;
    expect(count.textContent).toBe('2');
    expect(count.getAttribute('title')).toBe('2 incidents');
    doctor.querySelector<HTMLButtonElement>('.fv-panel-fold')!.click();
    expect(visible(count)).toBe(true); // the count sits in the header, not in the folded body
    view!.setState(state({ findings: [] }));
    expect(doctor.hasAttribute('data-fv-alert')).toBe(false);
    expect(visible(count)).toBe(false);
  });

  it('says how many incidents there are in the sticky toolbar; a click unfolds the Doctor', () => {
    make();
    ready(state({ findings: [FINDINGS[0]] }));
    const alert = q<HTMLButtonElement>('.fv-toolbar .fv-panel-alert');
    expect(visible(alert)).toBe(true);
    expect(alert.textContent).toBe('⚠ 1');
    expect(alert.getAttribute('aria-label')).toBe('1 incident in the Doctor: show it');
    const fold = section('doctor').querySelector<HTMLButtonElement>('.fv-panel-fold')!;
    fold.click();
    expect(fold.getAttribute('aria-expanded')).toBe('false');
    alert.click();
    expect(fold.getAttribute('aria-expanded')).toBe('true');
    expect(visible(section('doctor').querySelector('[data-fv-doctor="missing-zero-grad"]')!)).toBe(true);
    view!.setState(state({ findings: [] }));
    expect(visible(alert)).toBe(false);
    view!.setState(state());
    view!.setStatus('restarted');
    expect(visible(alert)).toBe(false);
  });
});

describe('no answer', () => {
  it('says the kernel has not answered, with a Retry button that asks again (onRefresh)', () => {
    const { opts } = make();
    view!.setStatus('no-answer', NO_ANSWER_TEXT);
    expect(el.getAttribute('data-fv-status')).toBe('no-answer');
    expect(q('.fv-panel-screen-text').textContent).toBe('The kernel has not answered the panel in 10 s');
    expect(q('.fv-panel-screen-detail').textContent).toBe(NO_ANSWER_TEXT);
    expect(visible(q('.fv-panel-load'))).toBe(false);
    const retry = q<HTMLButtonElement>('button.fv-panel-retry');
    expect(visible(retry)).toBe(true);
    retry.click();
    expect(opts.onRefresh).toHaveBeenCalledTimes(1);
    expect(retry.disabled).toBe(true); // one reconnection per click
    view!.setStatus('connecting');
    expect(el.getAttribute('data-fv-status')).toBe('connecting'); // at once: the click's answer
    expect(visible(retry)).toBe(false);
  });

  it('takes the screen over a state shown, and keeps the state for when the kernel answers', () => {
    make();
    ready();
    view!.setStatus('no-answer', NO_ANSWER_TEXT);
    expect(visible(q('.fv-panel-screen'))).toBe(true);
    expect(visible(section('tensors'))).toBe(false);
    view!.setStatus('ready');
    expect(rowNames()).toHaveLength(7);
    expect(visible(section('tensors'))).toBe(true);
  });
});

describe('status debounce', () => {
  /** every data-fv-status the root took, in order */
  function watchStatus(): PanelStatus[] {
    const seen: PanelStatus[] = [];
    const record = () => seen.push(el.getAttribute('data-fv-status') as PanelStatus);
    const setAttribute = el.setAttribute.bind(el);
    el.setAttribute = (name: string, value: string) => {
      setAttribute(name, value);
      if (name === 'data-fv-status' && seen.at(-1) !== value) {
        record();
      }
    };
    return seen;
  }

  beforeEach(() => {
    vi.useFakeTimers();
  });

  it('does not show a connecting or busy shorter than SETTLE_MS over a state shown', () => {
    make();
    ready();
    const seen = watchStatus();
    view!.setStatus('connecting'); // the panel shown again: a state comes at once
    vi.advanceTimersByTime(SETTLE_MS - 1);
    view!.setStatus('ready');
    vi.advanceTimersByTime(SETTLE_MS * 2);
    expect(seen).toEqual(['ready']);
    expect(visible(q('.fv-status'))).toBe(false);
    view!.setStatus('busy');
    vi.advanceTimersByTime(SETTLE_MS);
    expect(seen).toEqual(['ready', 'busy']);
    expect(q('.fv-status').textContent).toBe('Waiting for the running cell to finish…');
  });

  it('does not flicker between connecting and busy while a kernel starts', () => {
    make(); // 'connecting'
    const seen = watchStatus();
    for (const s of ['busy', 'connecting', 'busy', 'connecting'] as const) {
      view!.setStatus(s);
      vi.advanceTimersByTime(100);
    }
    vi.advanceTimersByTime(SETTLE_MS);
    expect(seen).toEqual([]);
    expect(el.getAttribute('data-fv-status')).toBe('connecting');
    view!.setStatus('busy'); // a long cell: said once it has lasted
    vi.advanceTimersByTime(SETTLE_MS);
    expect(el.getAttribute('data-fv-status')).toBe('busy');
    view!.setStatus('ready');
    view!.setState(state());
    expect(seen).toEqual(['busy', 'ready']);
  });

  it('never delays ready, not-loaded, restarted, no-kernel or no-answer, and they drop a waiting one', () => {
    make();
    for (const s of ['not-loaded', 'restarted', 'no-kernel', 'no-answer', 'ready'] as const) {
      view!.setStatus('connecting');
      view!.setStatus('busy');
      view!.setStatus(s);
      expect(el.getAttribute('data-fv-status')).toBe(s);
      vi.advanceTimersByTime(SETTLE_MS * 2);
      expect(el.getAttribute('data-fv-status')).toBe(s);
    }
  });

  it('shows a connecting at once after a screen that asked the user to act, or with nothing shown', () => {
    make();
    view!.setStatus('not-loaded');
    view!.setStatus('connecting', 'Loading forgeviz…'); // the Load button's answer
    expect(el.getAttribute('data-fv-status')).toBe('connecting');
    expect(q('.fv-panel-screen-detail').textContent).toBe('Loading forgeviz…');
    ready();
    view!.clear(); // another kernel: nothing of the old one to keep showing
    view!.setStatus('connecting');
    expect(el.getAttribute('data-fv-status')).toBe('connecting');
  });

  it('drops a waiting status when destroyed', () => {
    make();
    ready();
    view!.setStatus('busy');
    view!.destroy();
    view = null;
    vi.advanceTimersByTime(SETTLE_MS);
    expect(el.hasAttribute('data-fv-status')).toBe(false);
  });
});

describe('panel.css', () => {
  it('scopes every rule to the panel (the graph view in a cell looks as it did)', () => {
    const css = readFileSync('style/panel.css', 'utf8').replace(/\/\*[\s\S]*?\*\//g, '');
    const selectors = [...css.replace(/@container[^{]*\{/g, '').matchAll(/([^{}]+)\{[^{}]*\}/g)].flatMap(m => m[1].split(',').map(x => x.trim()));
    expect(selectors.length).toBeGreaterThan(50);
    expect(selectors.filter(x => !/\.fv-(side-)?panel\b/.test(x))).toEqual([]);
    expect(css).not.toMatch(/--fv-[\w-]+\s*:/); // only base.css declares tokens
  });
});

// ---- the connection, against a fake session and kernel --------------------------------------

class FakeSignal<A> {
  private slots: { fn: (s: unknown, a: A) => void; that: unknown }[] = [];
  connect(fn: (s: unknown, a: A) => void, that?: unknown) {
    this.slots.push({ fn, that });
    return true;
  }
  disconnect(fn: (s: unknown, a: A) => void, that?: unknown) {
    this.slots = this.slots.filter(s => s.fn !== fn || s.that !== that);
    return true;
  }
  emit(a: A) {
    this.slots.slice().forEach(s => s.fn.call(s.that, null, a));
  }
}

class FakeComm {
  onMsg: (msg: { content: { data: unknown } }) => void = () => undefined;
  onClose: (msg: unknown) => void = () => undefined;
  opened: unknown[] = [];
  sent: unknown[] = [];
  closed = false;
  isDisposed = false;
  constructor(readonly target: string) {}
  open(data: unknown) {
    this.opened.push(data);
  }
  send(data: unknown) {
    this.sent.push(data);
  }
  close() {
    this.closed = true;
    this.isDisposed = true;
  }
  dispose() {
    this.isDisposed = true;
  }
  /** the kernel says something */
  says(data: unknown) {
    this.onMsg({ content: { data } });
  }
}

class FakeKernel {
  status = 'idle';
  comms: FakeComm[] = [];
  executed: { code: string }[] = [];
  reply: { status: string; ename?: string; evalue?: string } = { status: 'ok' };
  iopubMessage = new FakeSignal<{ header: { msg_type: string }; content: unknown }>();
  createComm(target: string) {
    const c = new FakeComm(target);
    this.comms.push(c);
    return c;
  }
  requestExecute(content: { code: string }) {
    this.executed.push(content);
    return { done: Promise.resolve({ content: this.reply }) };
  }
  get comm() {
    return this.comms[this.comms.length - 1];
  }
}

function connection(kernel: FakeKernel | null = new FakeKernel()) {
  const ctx = {
    session: kernel ? { kernel } : null,
    isReady: true,
    ready: Promise.resolve(),
    kernelChanged: new FakeSignal<{ newValue: FakeKernel | null }>(),
    statusChanged: new FakeSignal<string>()
  };
  const sink = { setState: vi.fn(), setLive: vi.fn(), setNative: vi.fn(), setStatus: vi.fn(), clear: vi.fn() } satisfies PanelSink;
  const conn = new PanelConnection(ctx as unknown as SessionContextLike, sink);
  const statuses = () => sink.setStatus.mock.calls.map(c => c[0]);
  const status = (s: string) => {
    if (kernel) {
      kernel.status = s;
    }
    ctx.statusChanged.emit(s);
  };
  return { ctx, sink, conn, kernel: kernel!, statuses, status };
}

describe('connection', () => {
  beforeEach(() => {
    vi.useFakeTimers(); // the no-answer clock
  });

  it('opens a comm to forgeviz.panel when shown, and is ready with the first state', () => {
    const { conn, kernel, sink, statuses } = connection();
    expect(kernel.comms).toHaveLength(0); // nothing while hidden
    conn.setActive(true);
    expect(kernel.comm.target).toBe('forgeviz.panel');
    expect(kernel.comm.opened).toEqual([{ version: 1 }]);
    expect(statuses()).toEqual(['connecting']);
    kernel.comm.says(state());
    expect(statuses()).toEqual(['connecting', 'ready']);
    expect(sink.setState).toHaveBeenCalledWith(state());
    kernel.comm.says(live(1));
    expect(sink.setLive).toHaveBeenCalledWith(live(1));
  });

  it('says not-loaded when the kernel closes the comm before any state (no such target)', () => {
    const { conn, kernel, statuses, sink } = connection();
    conn.setActive(true);
    kernel.comm.onClose({});
    expect(statuses()).toEqual(['connecting', 'not-loaded']);
    expect(sink.setState).not.toHaveBeenCalled();
  });

  it('waits for a busy kernel, then says connecting when it is idle', () => {
    const { conn, kernel, statuses, status } = connection();
    kernel.status = 'busy';
    conn.setActive(true);
    expect(statuses()).toEqual(['busy']);
    status('idle');
    expect(statuses()).toEqual(['busy', 'connecting']);
    kernel.comm.says(state());
    status('busy'); // a cell runs after the panel is ready: nothing to say
    expect(statuses()).toEqual(['busy', 'connecting', 'ready']);
  });

  it('says restarted on a restart, and opens a new comm when the kernel is idle again', () => {
    const { conn, kernel, statuses, status } = connection();
    conn.setActive(true);
    kernel.comm.says(state());
    const first = kernel.comm;
    status('restarting');
    expect(statuses().at(-1)).toBe('restarted');
    expect(first.isDisposed).toBe(true);
    status('starting');
    expect(kernel.comms).toHaveLength(1);
    status('idle');
    expect(kernel.comms).toHaveLength(2);
    expect(statuses().at(-1)).toBe('connecting');
    first.onClose({}); // the old comm's close says nothing now
    expect(statuses().at(-1)).toBe('connecting');
  });

  it('closes the comm when hidden (the kernel stops its per-cell work) and opens one when shown again', () => {
    const { conn, kernel } = connection();
    conn.setActive(true);
    kernel.comm.says(state());
    conn.setActive(false);
    expect(kernel.comm.closed).toBe(true);
    conn.setActive(true);
    expect(kernel.comms).toHaveLength(2);
    expect(kernel.comm.closed).toBe(false);
  });

  it('asks for a state on refresh', () => {
    const { conn, kernel } = connection();
    conn.setActive(true);
    kernel.comm.says(state());
    conn.refresh();
    conn.refresh();
    expect(kernel.comm.sent).toEqual([
      { type: 'refresh', request_id: 1 },
      { type: 'refresh', request_id: 2 }
    ]);
  });

  it('loads forgeviz with %load_ext, then connects; a failure is said', async () => {
    const { conn, kernel, statuses, sink } = connection();
    conn.setActive(true);
    kernel.comm.onClose({});
    await conn.load();
    expect(kernel.executed).toEqual([{ code: LOAD_CODE, silent: true, store_history: false }]);
    expect(kernel.comms).toHaveLength(2);
    kernel.reply = { status: 'error', ename: 'ModuleNotFoundError', evalue: "No module named 'forgeviz'" };
    await conn.load();
    expect(statuses().at(-1)).toBe('not-loaded');
    expect(sink.setStatus.mock.calls.at(-1)![1]).toBe("%load_ext forgeviz failed: ModuleNotFoundError: No module named 'forgeviz'");
    expect(kernel.comms).toHaveLength(2); // no comm opened after a failed load
  });

  it('tries again after a cell that loads forgeviz, while it says not-loaded', () => {
    const { conn, kernel, status } = connection();
    conn.setActive(true);
    kernel.comm.onClose({});
    kernel.iopubMessage.emit({ header: { msg_type: 'execute_input' }, content: { code: 'x = 1' } });
    status('idle');
    expect(kernel.comms).toHaveLength(1);
    kernel.iopubMessage.emit({ header: { msg_type: 'execute_input' }, content: { code: '%load_ext forgeviz' } });
    status('busy');
    status('idle');
    expect(kernel.comms).toHaveLength(2);
  });

  it('clears the panel and reconnects when the notebook gets another kernel', () => {
    const { conn, kernel, ctx, sink } = connection();
    conn.setActive(true);
    kernel.comm.says(state());
    const other = new FakeKernel();
    ctx.session = { kernel: other };
    ctx.kernelChanged.emit({ newValue: other });
    expect(sink.clear).toHaveBeenCalled();
    expect(kernel.comm.closed).toBe(true);
    expect(other.comms).toHaveLength(1);
    kernel.comm.says(state({ kernel: 'old' })); // a late message of the old comm is dropped
    expect(sink.setState).toHaveBeenCalledTimes(1);
  });

  it('says no-kernel for a notebook without one', () => {
    const { conn, statuses } = connection(null);
    conn.setActive(true);
    expect(statuses()).toEqual(['no-kernel']);
  });

  it('stops listening when disposed', () => {
    const { conn, kernel, status, statuses } = connection();
    conn.setActive(true);
    conn.dispose();
    expect(kernel.comm.closed).toBe(true);
    status('restarting');
    vi.advanceTimersByTime(NO_ANSWER_MS * 2);
    expect(statuses()).toEqual(['connecting']);
  });
});

describe('connection: a kernel that does not answer', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });

  it('says no-answer after NO_ANSWER_MS of an idle kernel without a state; Retry opens a new comm', () => {
    const { conn, kernel, sink, statuses, status } = connection();
    conn.setActive(true);
    vi.advanceTimersByTime(NO_ANSWER_MS - 1);
    expect(statuses()).toEqual(['connecting']);
    vi.advanceTimersByTime(1);
    expect(statuses()).toEqual(['connecting', 'no-answer']);
    expect(sink.setStatus.mock.calls.at(-1)![1]).toBe(NO_ANSWER_TEXT);
    // a completion or a tooltip makes the kernel blip busy and idle: the panel still says no-answer
    status('busy');
    status('idle');
    vi.advanceTimersByTime(NO_ANSWER_MS);
    expect(statuses()).toEqual(['connecting', 'no-answer']);
    conn.refresh(); // the Retry button
    expect(kernel.comms).toHaveLength(2);
    expect(kernel.comms[0].closed).toBe(true);
    expect(statuses().at(-1)).toBe('connecting');
    kernel.comm.says(state());
    expect(statuses().at(-1)).toBe('ready');
    vi.advanceTimersByTime(NO_ANSWER_MS * 2);
    expect(statuses().at(-1)).toBe('ready');
  });

  it('becomes ready when the state comes late', () => {
    const { conn, kernel, sink, statuses } = connection();
    conn.setActive(true);
    vi.advanceTimersByTime(NO_ANSWER_MS);
    kernel.comm.says(state());
    expect(statuses()).toEqual(['connecting', 'no-answer', 'ready']);
    expect(sink.setState).toHaveBeenCalledTimes(1);
  });

  it('never times out while the kernel is busy (a long cell); each idle starts the wait again', () => {
    const { conn, kernel, statuses, status } = connection();
    kernel.status = 'busy';
    conn.setActive(true);
    vi.advanceTimersByTime(NO_ANSWER_MS * 60);
    expect(statuses()).toEqual(['busy']);
    status('idle');
    vi.advanceTimersByTime(NO_ANSWER_MS - 1000);
    status('busy');
    vi.advanceTimersByTime(NO_ANSWER_MS * 6);
    status('idle');
    vi.advanceTimersByTime(NO_ANSWER_MS - 1);
    expect(statuses()).toEqual(['busy', 'connecting', 'busy', 'connecting']);
    vi.advanceTimersByTime(1);
    expect(statuses().at(-1)).toBe('no-answer');
  });

  it('does not time out a kernel that is still starting', () => {
    const { conn, kernel, statuses } = connection();
    kernel.status = 'starting';
    conn.setActive(true);
    vi.advanceTimersByTime(NO_ANSWER_MS * 6);
    expect(statuses()).toEqual(['connecting']);
  });

  it('stops the clock when the comm closes, the panel is hidden, or the kernel restarts', () => {
    const closed = connection();
    closed.conn.setActive(true);
    closed.kernel.comm.onClose({});
    const hidden = connection();
    hidden.conn.setActive(true);
    hidden.conn.setActive(false);
    const restarted = connection();
    restarted.conn.setActive(true);
    restarted.status('restarting');
    vi.advanceTimersByTime(NO_ANSWER_MS * 2);
    expect(closed.statuses()).toEqual(['connecting', 'not-loaded']);
    expect(hidden.statuses()).toEqual(['connecting']);
    expect(restarted.statuses()).toEqual(['connecting', 'restarted']);
  });

  it('closes the comm of another panel version and keeps saying why', () => {
    const { conn, kernel, statuses, status, sink } = connection();
    conn.setActive(true);
    kernel.comm.says(state({ version: 2 }));
    expect(statuses()).toEqual(['connecting', 'not-loaded']);
    expect(kernel.comm.closed).toBe(true);
    status('busy');
    status('idle');
    vi.advanceTimersByTime(NO_ANSWER_MS * 2);
    expect(statuses()).toEqual(['connecting', 'not-loaded']);
    expect(sink.setStatus.mock.calls.at(-1)![1]).toContain('panel version 2');
    expect(sink.setState).not.toHaveBeenCalled();
  });
});
