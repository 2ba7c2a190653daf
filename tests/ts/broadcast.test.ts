/** The broadcast animation through the real DOM (happy-dom): frames, stepping, play, conflict, matmul, export. */
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { BroadcastPlan } from '../../src/model/wire';
import { BroadcastView, BroadcastViewOptions, createBroadcastView } from '../../src/render/broadcast/view';
import { bigPlan, conflictPlan, countGifImages, matmulBatchFailPlan, matmulFailPlan, matmulPlan, matvecPlan, okPlan, threeConflictPlan } from './broadcast-fixtures';


let el: HTMLElement;
let view: BroadcastView | null = null;

afterEach(() => {
  view?.destroy();
  view = null;
  vi.useRealTimers();
  document.body.replaceChildren();
  delete document.body.dataset.jpThemeLight;
});

function make(plan?: BroadcastPlan, opts: Partial<BroadcastViewOptions> = {}) {
  el = document.createElement('div');
  document.body.appendChild(el);
  view = createBroadcastView(el, { requestHtml: null, ...opts });
  if (plan) {
    view.setPlan(plan);
  }
  return view;
}

const q = <T extends Element = Element>(sel: string) => el.querySelector<T>(sel);
const qa = (sel: string) => Array.from(el.querySelectorAll(sel));
const click = (sel: string) => q<HTMLButtonElement>(sel)!.click();
const caption = () => q('.fv-bc-caption')!.textContent!;
const stepAttr = () => el.getAttribute('data-step');

/** Capture downloads (anchor clicks) with their blobs. */
function captureDownloads() {
  const files: { name: string; blob: Blob }[] = [];
  const blobs = new Map<string, Blob>();
  const origCreate = URL.createObjectURL;
  const origClick = HTMLAnchorElement.prototype.click;
  let n = 0;
  URL.createObjectURL = ((b: Blob) => {
    const url = `blob:test/${n++}`;
    blobs.set(url, b);
    return url;
  }) as typeof URL.createObjectURL;
  HTMLAnchorElement.prototype.click = function (this: HTMLAnchorElement) {
    files.push({ name: this.download, blob: blobs.get(this.href) as Blob });
  };
  return {
    files,
    restore() {
      URL.createObjectURL = origCreate;
      HTMLAnchorElement.prototype.click = origClick;
    }
  };
}

describe('drawing', () => {
  it('starts on the last frame: the whole answer', () => {
    make(okPlan());
    expect(el.classList.contains('fv-root')).toBe(true);
    expect(el.classList.contains('fv-broadcast')).toBe(true);
    expect(el.getAttribute('data-fv-state')).toBe('ready');
    expect(el.getAttribute('data-steps')).toBe('6');
    expect(stepAttr()).toBe('5');
    expect(view!.step()).toBe(5);
    expect(caption()).toContain('The result: (3, 3)');
    const res = q('.fv-bc-result')!;
    expect(res.getAttribute('data-shape')).toBe('3,3');
    expect(res.textContent).toContain('result (3, 3)');
    expect(res.querySelectorAll('.fv-bc-value')).toHaveLength(9);
    expect(q('.fv-bc-value[data-index="2,1"]')!.querySelector('.fv-bc-vtext')!.textContent).toBe('22');
    expect(q('.fv-bc-value[data-index="2,1"]')!.getAttribute('aria-label')).toBe('result[2, 1] = 22 ← a[2, 0], b[0, 1]');
    expect(q('.fv-bc-value[data-index="2,1"]')!.parentElement!.querySelector('title')!.textContent).toBe('result[2, 1] = 22 ← a[2, 0], b[0, 1]');
    // a cell's text is its value alone (the tooltip lives on a wrapper)
    expect(qa('.fv-bc-result .fv-bc-value').map(c => c.textContent)).toEqual(['10', '20', '30', '11', '21', '31', '12', '22', '32']);
    expect(q('.fv-bc-bytes')!.textContent).toBe('result 72 B from inputs 24 B + 24 B');
    expect(q('.fv-bc-source')!.textContent).toBe('cell [3], line 1: c = a + b');
  });

  it('one row per operand, dim boxes right-aligned in one column per result dim', () => {
    make(okPlan());
    expect(qa('g.fv-bc-row')).toHaveLength(2);
    expect(qa('.fv-bc-col')).toHaveLength(2);
    expect(q('.fv-bc-col[data-dim="1"] .fv-bc-col-head')!.textContent).toBe('dim -1');
    expect(q('.fv-bc-col[data-dim="0"] .fv-bc-col-head')!.textContent).toBe('dim -2');
    const a1 = q('g.fv-bc-dim[data-operand="0"][data-dim="1"]')!;
    expect(a1.getAttribute('data-size')).toBe('1');
    expect(q('g.fv-bc-row[data-operand="0"]')!.textContent).toContain('a');
    expect(q('g.fv-bc-row[data-operand="0"] .fv-bc-meta')!.textContent).toBe('(3, 1) · int64 · 24 B');
    // columns line up: the same x for both operands in a column
    const x = (i: number, d: number) => q(`g.fv-bc-dim[data-operand="${i}"][data-dim="${d}"] text.fv-bc-size`)!.getAttribute('x');
    expect(x(0, 1)).toBe(x(1, 1));
    expect(x(0, 0)).toBe(x(1, 0));
    expect(Number(x(0, 1))).toBeGreaterThan(Number(x(0, 0)));
  });

  it('ghost dims appear from the pad step on, dashed and faded', () => {
    make(conflictPlan());
    click('button.fv-bc-first');
    expect(stepAttr()).toBe('0');
    // align: b is (3,) and has no dim 0 box yet
    expect(q('g.fv-bc-dim[data-operand="1"][data-dim="0"]')).toBeNull();
    expect(q('g.fv-bc-dim[data-operand="1"][data-dim="1"]')!.getAttribute('data-size')).toBe('3');
    click('button.fv-bc-next');
    const ghost = q('g.fv-bc-dim[data-operand="1"][data-dim="0"]')!;
    expect(ghost.classList.contains('fv-ghost')).toBe(true);
    expect(ghost.getAttribute('data-size')).toBe('1');
    expect(ghost.querySelector('rect')!.getAttribute('stroke-dasharray')).toBe('4 3');
    expect(qa('.fv-ghost')).toHaveLength(1);
  });

  it('a dtype-less operand (shape only) draws; bytes use binary units', () => {
    make(bigPlan());
    expect(q('.fv-bc-bytes')!.textContent).toBe('result 32 MiB from inputs 32 MiB + 4 KiB');
    expect(q('g.fv-bc-row[data-operand="1"] .fv-bc-meta')!.textContent).toBe('(1, 1, 1024) · float32 · 4 KiB');
    expect(q('.fv-bc-result')!.getAttribute('data-shape')).toBe('64,128,1024');
    expect(qa('.fv-bc-value')).toHaveLength(0);
    expect(qa('.fv-bc-valuegrids')).toHaveLength(0);
    const p = bigPlan();
    p.operands[1].dtype = null;
    p.operands[1].nbytes = null;
    p.operands[1].stride = null;
    p.operands[1].expanded_stride = null;
    view!.setPlan(p);
    expect(q('g.fv-bc-row[data-operand="1"] .fv-bc-meta')!.textContent).toBe('(1, 1, 1024) · shape only');
    expect(q('.fv-bc-bytes')!.textContent).toBe('result 32 MiB from input 32 MiB');
    expect(q('.fv-bc-stride-line')!.textContent).toBe('bias stretches along dim -3, dim -2 with stride 0');
  });

  it('a plan without steps shows everything at once; an empty plan shows its message', () => {
    const p = okPlan();
    p.steps = [];
    make(p);
    expect(el.getAttribute('data-steps')).toBe('0');
    expect(stepAttr()).toBe('0');
    expect(q('.fv-bc-result[data-shape="3,3"]')).toBeTruthy();
    expect(q('.fv-stretched')).toBeTruthy();
    expect(q<HTMLButtonElement>('button.fv-bc-play')!.disabled).toBe(true);
    const empty: BroadcastPlan = { ...conflictPlan(), operands: [], ndim: 0, checks: [], conflict: null, torch_message: '', steps: [], message: 'forgeviz.broadcast needs at least one shape' };
    view!.setPlan(empty);
    expect(el.getAttribute('data-fv-state')).toBe('ready');
    expect(q('.fv-message')!.textContent).toBe('forgeviz.broadcast needs at least one shape');
    expect(view!.exportSVG()).toContain('<svg');
  });

  it('warnings, message, and a transcript with every step', () => {
    const p = okPlan();
    p.message = 'a and b are on the meta device: shapes only';
    make(p);
    view!.setWarnings(['forgeviz could not draw this broadcast: boom']);
    expect(q<HTMLElement>('.fv-warning')!.hidden).toBe(false);
    expect(q('.fv-warning')!.textContent).toContain('boom');
    expect(q('.fv-message')!.textContent).toBe('a and b are on the meta device: shapes only');
    const items = qa('details.fv-transcript li');
    expect(items).toHaveLength(6);
    expect(items[2].textContent).toBe(`Compare dim -1: ${p.steps[2].text}`);
    view!.setWarnings([]);
    expect(q<HTMLElement>('.fv-warning')!.hidden).toBe(true);
  });

  it('accessible: titles on the svg and the dim boxes, aria on controls, focusable root', () => {
    make(okPlan());
    expect(el.getAttribute('tabindex')).toBe('0');
    expect(q('svg.fv-bc-canvas > title')!.textContent).toContain('a + b');
    expect(q('svg.fv-bc-canvas')!.getAttribute('aria-label')).toContain('step 6 of 6');
    expect(q('g.fv-bc-dim[data-operand="0"][data-dim="1"] > title')!.textContent).toBe('a, dim -1 (dim 1): size 1, stretched to 3 with stride 0');
    for (const sel of ['fv-bc-first', 'fv-bc-prev', 'fv-bc-play', 'fv-bc-next', 'fv-export-svg', 'fv-export-png', 'fv-export-gif']) {
      expect(q(`button.${sel}`)!.getAttribute('aria-label')).toBeTruthy();
    }
    expect(q('input.fv-bc-speed')!.getAttribute('aria-label')).toBeTruthy();
    expect(q('.fv-bc-caption')!.getAttribute('aria-live')).toBe('polite');
  });
});

describe('stepping', () => {
  it('the buttons change data-step and the caption; the stretch frame shows the stretched class', () => {
    const p = okPlan();
    make(p);
    click('button.fv-bc-first');
    expect(stepAttr()).toBe('0');
    expect(caption()).toContain(p.steps[0].title);
    expect(caption()).toContain(p.steps[0].text);
    expect(q<HTMLButtonElement>('button.fv-bc-prev')!.disabled).toBe(true);
    expect(q('.fv-bc-result')).toBeNull();
    expect(qa('.fv-bc-col.fv-current')).toHaveLength(0);
    click('button.fv-bc-next'); // pad
    click('button.fv-bc-next'); // compare dim -1
    expect(stepAttr()).toBe('2');
    expect(caption()).toContain('Compare dim -1');
    expect(qa('.fv-bc-col.fv-current').map(c => c.getAttribute('data-dim'))).toEqual(['1']);
    const col1 = q('.fv-bc-col[data-dim="1"]')!;
    expect(col1.classList.contains('fv-stretch')).toBe(true);
    expect(col1.querySelector('.fv-bc-verdict-sym')!.textContent).toBe('↔');
    expect(col1.querySelector('.fv-bc-verdict-word')!.textContent).toBe('stretch');
    expect(q('.fv-bc-col[data-dim="0"]')!.classList.contains('fv-stretch')).toBe(false);
    expect(qa('li.fv-bc-check').map(li => li.getAttribute('data-dim'))).toEqual(['1']);
    expect(q('li.fv-bc-check')!.textContent).toContain('↔');
    // not stretched yet: the size-1 box is narrow, no arrow
    expect(qa('.fv-stretched')).toHaveLength(0);
    expect(q('g.fv-bc-dim[data-operand="0"][data-dim="1"]')!.classList.contains('fv-one')).toBe(true);
    click('button.fv-bc-next'); // compare dim -2
    expect(qa('.fv-bc-col.fv-current').map(c => c.getAttribute('data-dim'))).toEqual(['0']);
    expect(qa('li.fv-bc-check').map(li => li.getAttribute('data-dim'))).toEqual(['1', '0']);
    click('button.fv-bc-next'); // stretch
    expect(stepAttr()).toBe('4');
    expect(el.getAttribute('data-step-kind')).toBe('stretch');
    const a1 = q('g.fv-bc-dim[data-operand="0"][data-dim="1"]')!;
    expect(a1.classList.contains('fv-stretched')).toBe(true);
    expect(a1.querySelector('.fv-bc-size')!.textContent).toBe('1→3');
    expect(a1.querySelector('path.fv-bc-arrow')).toBeTruthy();
    expect(q('g.fv-bc-dim[data-operand="1"][data-dim="0"]')!.classList.contains('fv-stretched')).toBe(true);
    expect(q('g.fv-bc-dim[data-operand="0"][data-dim="0"]')!.classList.contains('fv-stretched')).toBe(false);
    // the values repeat along the stretched dim, lighter where they repeat
    const grid = q('.fv-bc-values[data-operand="0"]')!;
    expect(grid.querySelector('.fv-bc-grid-label')!.textContent).toBe('a.expand(3, 3)');
    expect(grid.querySelectorAll('.fv-bc-ovalue')).toHaveLength(9);
    expect(grid.querySelectorAll('.fv-bc-ovalue.fv-repeat')).toHaveLength(6);
    expect(grid.querySelector('.fv-bc-ovalue[data-index="1,2"]')!.classList.contains('fv-repeat')).toBe(true);
    expect(grid.querySelector('.fv-bc-ovalue[data-index="1,0"]')!.classList.contains('fv-orig')).toBe(true);
    expect(grid.querySelector('.fv-bc-ovalue[data-index="1,2"] .fv-bc-vtext')!.textContent).toBe('1');
    expect(grid.querySelector('.fv-bc-ovalue[data-index="1,2"]')!.getAttribute('aria-label')).toContain('the same element as a[1, 0]');
    expect(q('.fv-bc-stride0')!.textContent).toBe('stride 0: the same values repeat, no memory is copied');
    expect(qa('.fv-bc-stride-line').map(e => e.textContent)).toEqual(['a: stride (1, 1) → a.expand(3, 3): stride (1, 0)', 'b: stride (3, 1) → b.expand(3, 3): stride (0, 1)']);
    expect(qa('.fv-bc-link').map(e => e.textContent)).toContain('see it in the stride view: forgeviz.strides(a.expand(3, 3))');
    expect(q('.fv-bc-result')).toBeNull();
    click('button.fv-bc-next'); // result
    expect(stepAttr()).toBe('5');
    expect(q('.fv-bc-result[data-shape="3,3"]')).toBeTruthy();
    expect(q<HTMLButtonElement>('button.fv-bc-next')!.disabled).toBe(true);
    click('button.fv-bc-next');
    expect(stepAttr()).toBe('5');
    click('button.fv-bc-prev');
    expect(stepAttr()).toBe('4');
  });

  it('before the stretch, the operands show their own values', () => {
    make(okPlan());
    view!.setStep(1);
    const grid = q('.fv-bc-values[data-operand="1"]')!;
    expect(grid.querySelector('.fv-bc-grid-label')!.textContent).toBe('b');
    expect(grid.querySelectorAll('.fv-bc-ovalue')).toHaveLength(3);
    expect(qa('.fv-bc-ovalue.fv-repeat')).toHaveLength(0);
  });

  it('keyboard: Left/Right step, Home/End, Space plays when the root has focus', () => {
    vi.useFakeTimers();
    make(okPlan());
    el.focus();
    const key = (k: string, target: Element = el) => target.dispatchEvent(new KeyboardEvent('keydown', { key: k, bubbles: true }));
    key('Home');
    expect(stepAttr()).toBe('0');
    key('ArrowRight');
    key('ArrowRight');
    expect(stepAttr()).toBe('2');
    key('ArrowLeft');
    expect(stepAttr()).toBe('1');
    key(' ');
    expect(q('button.fv-bc-play')!.getAttribute('aria-pressed')).toBe('true');
    key(' ');
    expect(q('button.fv-bc-play')!.getAttribute('aria-pressed')).toBe('false');
    // Space on a button is the button's business; arrows in the speed slider are the slider's
    key(' ', q('button.fv-bc-next')!);
    expect(q('button.fv-bc-play')!.getAttribute('aria-pressed')).toBe('false');
    key('ArrowRight', q('input.fv-bc-speed')!);
    expect(stepAttr()).toBe('1');
    key('End');
    expect(stepAttr()).toBe('5');
  });

  it('setStep clamps', () => {
    make(okPlan());
    view!.setStep(-3);
    expect(view!.step()).toBe(0);
    view!.setStep(99);
    expect(view!.step()).toBe(5);
    expect(stepAttr()).toBe('5');
  });
});

describe('playing', () => {
  it('advances one step a second with fake timers and stops at the end', () => {
    vi.useFakeTimers();
    make(okPlan());
    click('button.fv-bc-first');
    const play = q<HTMLButtonElement>('button.fv-bc-play')!;
    play.click();
    expect(play.getAttribute('aria-pressed')).toBe('true');
    expect(el.hasAttribute('data-playing')).toBe(true);
    expect(stepAttr()).toBe('0');
    vi.advanceTimersByTime(999);
    expect(stepAttr()).toBe('0');
    vi.advanceTimersByTime(1);
    expect(stepAttr()).toBe('1');
    expect(caption()).toContain('Pad with 1s');
    vi.advanceTimersByTime(3000);
    expect(stepAttr()).toBe('4');
    vi.advanceTimersByTime(1000);
    expect(stepAttr()).toBe('5');
    expect(play.getAttribute('aria-pressed')).toBe('false');
    expect(el.hasAttribute('data-playing')).toBe(false);
    vi.advanceTimersByTime(10_000);
    expect(stepAttr()).toBe('5');
    expect(vi.getTimerCount()).toBe(0);
  });

  it('play on the last frame starts over; speed changes the pace; a manual step pauses', () => {
    vi.useFakeTimers();
    make(okPlan());
    const play = q<HTMLButtonElement>('button.fv-bc-play')!;
    play.click();
    expect(stepAttr()).toBe('0');
    const speed = q<HTMLInputElement>('input.fv-bc-speed')!;
    expect(speed.min).toBe('0.25');
    expect(speed.max).toBe('4');
    expect(speed.value).toBe('1');
    speed.value = '4';
    speed.dispatchEvent(new Event('input', { bubbles: true }));
    expect(q('.fv-bc-speed-out')!.textContent).toBe('4×');
    vi.advanceTimersByTime(250);
    expect(stepAttr()).toBe('1');
    vi.advanceTimersByTime(500);
    expect(stepAttr()).toBe('3');
    click('button.fv-bc-prev');
    expect(stepAttr()).toBe('2');
    expect(play.getAttribute('aria-pressed')).toBe('false');
    vi.advanceTimersByTime(5000);
    expect(stepAttr()).toBe('2');
  });

  it('tweens only while playing, and never with prefers-reduced-motion', () => {
    vi.useFakeTimers();
    make(okPlan());
    view!.setStep(3);
    click('button.fv-bc-play');
    vi.advanceTimersByTime(1000); // the stretch frame
    expect(el.classList.contains('fv-bc-animate')).toBe(true);
    expect(qa('.fv-stretched.fv-new').length).toBeGreaterThan(0);
    expect(qa('.fv-bc-ovalue.fv-repeat.fv-new').length).toBe(12);
    click('button.fv-bc-first');
    expect(el.classList.contains('fv-bc-animate')).toBe(false);
    expect(qa('.fv-new')).toHaveLength(0);

    const orig = window.matchMedia;
    window.matchMedia = ((query: string) => ({ matches: query.includes('reduce'), media: query, addEventListener() {}, removeEventListener() {} })) as unknown as typeof window.matchMedia;
    try {
      view!.setStep(3);
      click('button.fv-bc-play');
      vi.advanceTimersByTime(1000);
      expect(stepAttr()).toBe('4');
      expect(el.classList.contains('fv-bc-animate')).toBe(false);
      expect(qa('.fv-new')).toHaveLength(0);
    } finally {
      window.matchMedia = orig;
    }
  });
});

describe('conflict', () => {
  it('stops at the conflicting dim: column, sizes, text, fixes and torch message', () => {
    vi.useFakeTimers();
    const p = conflictPlan();
    make(p);
    expect(el.getAttribute('data-steps')).toBe('4');
    expect(stepAttr()).toBe('3');
    expect(el.getAttribute('data-step-kind')).toBe('conflict');
    expect(el.getAttribute('data-ok')).toBe('false');
    const col = q('.fv-bc-col[data-dim="1"]')!;
    expect(col.classList.contains('fv-conflict')).toBe(true);
    expect(col.classList.contains('fv-current')).toBe(true);
    expect(col.querySelector('.fv-bc-verdict-sym')!.textContent).toBe('✗');
    // dim 0 was never compared: the animation stopped at dim -1
    expect(q('.fv-bc-col[data-dim="0"]')!.classList.contains('fv-stretch')).toBe(false);
    const clashing = qa('g.fv-bc-dim.fv-clash').map(e => `${e.getAttribute('data-operand')}:${e.getAttribute('data-dim')}:${e.getAttribute('data-size')}`);
    expect(clashing).toEqual(['0:1:4', '1:1:3']);
    expect(q('g.fv-bc-dim.fv-clash .fv-bc-clash-mark')!.textContent).toBe('✗');
    expect(q('.fv-bc-conflict')!.textContent).toBe(p.conflict!.text);
    expect(qa('.fv-bc-fix').map(e => e.textContent)).toEqual(['b.unsqueeze(-1)  # (3, 1): result (3, 4)', 'a.T  # (4, 3): result (4, 3)']);
    expect(q('pre.fv-torch-msg')!.textContent).toBe('The size of tensor a (4) must match the size of tensor b (3) at non-singleton dimension 1');
    expect(q('.fv-bc-result')).toBeNull();
    expect(q('.fv-bc-conflict-mark')!.textContent).toBe('✗ conflict at dim -1: a has 4, b has 3, and neither is 1');
    // values of the inputs, no expansion
    expect(qa('.fv-bc-values[data-operand="0"] .fv-bc-ovalue')).toHaveLength(12);
    expect(qa('.fv-bc-values[data-operand="1"] .fv-bc-ovalue')).toHaveLength(3);
    expect(qa('.fv-bc-value')).toHaveLength(0);
    // playing from the start stops on the conflict
    click('button.fv-bc-first');
    expect(q<HTMLElement>('.fv-bc-conflict-box')!.hidden).toBe(true);
    expect(q('pre.fv-torch-msg')).toBeNull();
    click('button.fv-bc-play');
    vi.advanceTimersByTime(2000);
    // the compare step already shows the clash; the words come with the conflict step
    expect(stepAttr()).toBe('2');
    expect(qa('g.fv-bc-dim.fv-clash')).toHaveLength(2);
    expect(q('pre.fv-torch-msg')).toBeNull();
    vi.advanceTimersByTime(10_000);
    expect(stepAttr()).toBe('3');
    expect(q('button.fv-bc-play')!.getAttribute('aria-pressed')).toBe('false');
    expect(q('pre.fv-torch-msg')).toBeTruthy();
  });

  it('torch reports the first clash of its left fold; other clashing columns are marked too', () => {
    make(threeConflictPlan());
    expect(el.getAttribute('data-step-kind')).toBe('conflict');
    expect(qa('.fv-bc-col.fv-current').map(c => c.getAttribute('data-dim'))).toEqual(['0']);
    expect(qa('.fv-bc-col.fv-conflict').map(c => c.getAttribute('data-dim'))).toEqual(['0', '1']);
    const clashing = qa('g.fv-bc-dim.fv-clash').map(e => `${e.getAttribute('data-operand')}:${e.getAttribute('data-dim')}:${e.getAttribute('data-size')}`);
    expect(clashing.sort()).toEqual(['0:0:2', '0:1:3', '1:0:4', '2:1:5']);
    expect(q('.fv-bc-conflict-mark')!.textContent).toBe('✗ conflict at dim -2: a has 2, b has 4, and neither is 1');
    expect(qa('.fv-bc-fix')).toHaveLength(0);
  });
});

describe('matmul', () => {
  it('(2, 3, 4) @ (2, 4, 5): the k’s connect, batch dims compared, result (2, 3, 5)', () => {
    make(matmulPlan());
    expect(el.getAttribute('data-kind')).toBe('matmul');
    expect(q('.fv-bc-result')!.getAttribute('data-shape')).toBe('2,3,5');
    expect(q('.fv-bc-result')!.textContent).toContain('result (2, 3, 5)');
    const inner = q('.fv-bc-inner')!;
    expect(inner.classList.contains('fv-equal')).toBe(true);
    expect(inner.getAttribute('data-k')).toBe('4,4');
    // a's k sits in the last column, b's in the one before
    expect(q('g.fv-bc-dim.fv-bc-k[data-operand="0"]')!.getAttribute('data-dim')).toBe('2');
    expect(q('g.fv-bc-dim.fv-bc-k[data-operand="1"]')!.getAttribute('data-dim')).toBe('1');
    expect(q('.fv-bc-col[data-dim="0"]')!.classList.contains('fv-equal')).toBe(true);
    expect(qa('g.fv-bc-rdim').map(e => e.getAttribute('data-size'))).toEqual(['2', '3', '5']);
    click('button.fv-bc-first');
    expect(q('.fv-bc-inner')).toBeNull();
    click('button.fv-bc-next');
    expect(el.getAttribute('data-step-kind')).toBe('inner');
    expect(q('.fv-bc-inner.fv-current')).toBeTruthy();
    expect(qa('g.fv-bc-dim.fv-bc-k.fv-current')).toHaveLength(2);
    expect(q('.fv-bc-col[data-dim="0"]')!.classList.contains('fv-equal')).toBe(false);
    click('button.fv-bc-next');
    expect(q('.fv-bc-col[data-dim="0"]')!.classList.contains('fv-equal')).toBe(true);
    expect(q('.fv-bc-result')).toBeNull();
  });

  it('(3, 4) @ (5, 6) fails on the inner dims', () => {
    const p = matmulFailPlan();
    make(p);
    expect(stepAttr()).toBe('2');
    const inner = q('.fv-bc-inner')!;
    expect(inner.classList.contains('fv-conflict')).toBe(true);
    expect(inner.textContent).toContain('4 ≠ 5');
    expect(qa('g.fv-bc-dim.fv-clash').map(e => `${e.getAttribute('data-operand')}:${e.getAttribute('data-size')}`)).toEqual(['0:4', '1:5']);
    expect(q('.fv-bc-conflict')!.textContent).toBe(p.conflict!.text);
    expect(q('pre.fv-torch-msg')!.textContent).toBe('mat1 and mat2 shapes cannot be multiplied (3x4 and 5x6)');
    expect(q('.fv-bc-result')).toBeNull();
    expect(q('.fv-bc-inner-line')!.textContent).toContain('✗ inner dims: a has 4 columns but b has 5 rows');
    expect(q('.fv-bc-conflict-mark')).toBeNull();
  });

  it('(2, 3, 4) @ (3, 4, 5) fails on the batch dims', () => {
    const p = matmulBatchFailPlan();
    make(p);
    expect(el.getAttribute('data-step-kind')).toBe('conflict');
    expect(q('.fv-bc-inner')!.classList.contains('fv-equal')).toBe(true);
    const col = q('.fv-bc-col[data-dim="0"]')!;
    expect(col.classList.contains('fv-conflict')).toBe(true);
    expect(col.classList.contains('fv-current')).toBe(true);
    expect(qa('g.fv-bc-dim.fv-clash').map(e => `${e.getAttribute('data-operand')}:${e.getAttribute('data-dim')}:${e.getAttribute('data-size')}`)).toEqual(['0:0:2', '1:0:3']);
    expect(q('.fv-bc-conflict-mark')!.textContent).toBe('✗ conflict at batch dim -1: a has 2, b has 3, and neither is 1');
    expect(q('pre.fv-torch-msg')!.textContent).toBe(p.torch_message);
    expect(q('.fv-bc-result')).toBeNull();
  });

  it('a 1-D operand is promoted, and its 1 is dropped from the result', () => {
    make(matvecPlan());
    expect(q('.fv-bc-result')!.getAttribute('data-shape')).toBe('2,3');
    expect(q('g.fv-bc-dim.fv-promoted[data-operand="1"]')!.getAttribute('data-dim')).toBe('2');
    expect(q('g.fv-bc-rdim.fv-dropped')!.getAttribute('data-dim')).toBe('2');
    expect(q('.fv-bc-promoted-line')!.textContent).toBe('v is 1-D: treated as a column (4, 1), and that 1 is dropped from the result');
    // v has no batch dim: a ghost that stretches
    const ghost = q('g.fv-bc-dim.fv-ghost[data-operand="1"][data-dim="0"]')!;
    expect(ghost.classList.contains('fv-stretched')).toBe(true);
  });
});

describe('export', () => {
  it('exportSVG is a standalone SVG of the current step', () => {
    make(okPlan());
    view!.setStep(2);
    const svg = view!.exportSVG();
    expect(svg.startsWith('<?xml')).toBe(true);
    expect(svg).toContain('xmlns="http://www.w3.org/2000/svg"');
    const doc = new DOMParser().parseFromString(svg, 'image/svg+xml');
    expect(doc.documentElement.getAttribute('viewBox')).toMatch(/^0 0 \d+ \d+$/);
    expect(doc.querySelector('title')!.textContent).toBe('forgeviz broadcasting: a + b: step 3 of 6, Compare dim -1');
    // the export carries the expression and the step's words; the live view has them as HTML
    expect(doc.querySelector('.fv-bc-expr')!.textContent).toBe('a + b');
    expect(doc.querySelector('.fv-bc-step-title')!.textContent).toBe('step 3/6 · Compare dim -1');
    expect(doc.querySelector('.fv-bc-src-line')!.textContent).toBe('cell [3], line 1: c = a + b');
    expect(q('.fv-bc-heading')).toBeNull();
    expect(q('.fv-bc-title')!.textContent).toBe('a + b');
    expect(doc.querySelectorAll('.fv-bc-dim')).toHaveLength(4);
    expect(doc.querySelector('.fv-bc-col.fv-current')!.getAttribute('data-dim')).toBe('1');
    expect(doc.querySelector('.fv-bc-result')).toBeNull();
    expect(svg).not.toContain('fv-new');
    // the live diagram is untouched
    expect(qa('.fv-bc-export')).toHaveLength(0);
    expect(qa('.fv-bc-canvas > g')).toHaveLength(1);
  });

  it('every frame has the same size (so they make a GIF)', () => {
    make(okPlan());
    const sizes = new Set<string>();
    for (let i = 0; i < 6; i++) {
      view!.setStep(i);
      sizes.add(q('svg.fv-bc-canvas')!.getAttribute('viewBox')!);
    }
    expect(sizes.size).toBe(1);
  });

  it('the SVG button downloads forgeviz-broadcast-step{k}.svg', async () => {
    make(conflictPlan());
    view!.setStep(1);
    const dl = captureDownloads();
    try {
      click('button.fv-export-svg');
      expect(dl.files.map(f => f.name)).toEqual(['forgeviz-broadcast-step1.svg']);
      expect(await dl.files[0].blob.text()).toContain('<svg');
    } finally {
      dl.restore();
    }
  });

  it('the GIF button encodes one frame per step', async () => {
    const rasterize = vi.fn(async (_doc: Document, svgText: string, w: number, hgt: number) => {
      expect(svgText).toContain('<svg');
      const data = new Uint8ClampedArray(w * hgt * 4).fill(255);
      data[0] = rasterize.mock.calls.length * 40; // frames differ
      return { data, width: w, height: hgt };
    });
    make(okPlan(), { rasterize });
    const dl = captureDownloads();
    try {
      click('button.fv-export-gif');
      await vi.waitFor(() => expect(dl.files).toHaveLength(1));
      expect(dl.files[0].name).toBe('forgeviz-broadcast.gif');
      const bytes = new Uint8Array(await dl.files[0].blob.arrayBuffer());
      expect(new TextDecoder().decode(bytes.slice(0, 6))).toBe('GIF89a');
      expect(countGifImages(bytes)).toBe(6);
      expect(rasterize).toHaveBeenCalledTimes(6);
      expect(stepAttr()).toBe('5'); // the view did not move
      expect(q<HTMLButtonElement>('button.fv-export-gif')!.disabled).toBe(false);
    } finally {
      dl.restore();
    }
  });

  it('HTML export asks for the page in the current theme; hidden without a kernel', async () => {
    const requestHtml = vi.fn(async (theme: 'light' | 'dark') => `<!doctype html><title>${theme}</title>`);
    make(okPlan(), { requestHtml });
    document.body.dataset.jpThemeLight = 'false';
    const dl = captureDownloads();
    try {
      const b = q<HTMLButtonElement>('button.fv-export-html')!;
      expect(b.hidden).toBe(false);
      b.click();
      await vi.waitFor(() => expect(dl.files).toHaveLength(1));
      expect(requestHtml).toHaveBeenCalledWith('dark');
      expect(dl.files[0].name).toBe('forgeviz-broadcast.html');
      expect(await dl.files[0].blob.text()).toBe('<!doctype html><title>dark</title>');
    } finally {
      dl.restore();
    }
    view!.destroy();
    make(okPlan());
    expect(q<HTMLButtonElement>('button.fv-export-html')!.hidden).toBe(true);
  });

  it('a failed HTML request is shown', async () => {
    make(okPlan(), { requestHtml: () => Promise.reject(new Error('no reply from the kernel')) });
    click('button.fv-export-html');
    await vi.waitFor(() => expect(q('.fv-status')!.textContent).toBe('HTML export failed: no reply from the kernel'));
  });

  it('destroy removes everything and stops the timer', () => {
    vi.useFakeTimers();
    make(okPlan());
    click('button.fv-bc-play');
    view!.destroy();
    view = null;
    expect(el.children).toHaveLength(0);
    expect(el.classList.contains('fv-broadcast')).toBe(false);
    expect(vi.getTimerCount()).toBe(0);
  });
});
