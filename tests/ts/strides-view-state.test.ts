/** The stride view's state beyond its data: a pinned cell and the units, reported, restored and exported. */
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { StrideLayout } from '../../src/model/wire';
import { createStridesView, type StridesView } from '../../src/render/strides/view';
import { mountSaved } from '../../src/lab/saved';
import widget from '../../src/widgets/strides';
import { FakeModel } from './fakemodel';
import { mounter } from './mount';
import { sharedLayout } from './strides-fixtures';

const views: StridesView[] = [];
afterEach(() => {
  views.splice(0).forEach(v => v.destroy());
  document.body.replaceChildren();
});

function make(layout: StrideLayout = sharedLayout()) {
  const el = document.createElement('div');
  document.body.appendChild(el);
  const onViewState = vi.fn();
  const never = () => new Promise<never>(() => {});
  const view = createStridesView(el, { requestValues: never, requestStorage: never, tryOp: never, onViewState });
  views.push(view);
  view.setLayout(layout);
  return { el, view, onViewState };
}

const cell = (el: HTMLElement, tensor: number, index: string) => el.querySelector<SVGGElement>(`.fv-cell[data-tensor="${tensor}"][data-index="${index}"]`)!;
const storageCell = (el: HTMLElement, addr: number) => el.querySelector<SVGGElement>(`.fv-storage-cell[data-strip="0"][data-addr="${addr}"]`)!;
const marked = (el: HTMLElement, cls: string) => Array.from(el.querySelectorAll(`.fv-cell.${cls}, .fv-storage-cell.${cls}`)).map(c => c.getAttribute('data-index') ?? `s${c.getAttribute('data-addr')}`);
const readout = (el: HTMLElement) => el.querySelector('.fv-readout')!.textContent!;
const click = (target: Element) => target.dispatchEvent(new MouseEvent('click', { bubbles: true }));

describe('pinning a cell', () => {
  it('a click pins the mapping: it stays when the pointer leaves, and is the reported state', () => {
    const { el, view, onViewState } = make();
    // t.T = t.transpose: stride (1, 4), so t.T[1, 2] reads element 0 + 1·1 + 2·4 = 9
    click(cell(el, 1, '1,2'));
    el.querySelector('.fv-sd-groups')!.dispatchEvent(new MouseEvent('mouseleave'));
    expect(marked(el, 'fv-pinned')).toEqual(['1,2']);
    expect(marked(el, 'fv-hot')).toContain('s9');
    expect(readout(el)).toMatch(/^Pinned · t\.T\[1, 2\] → storage\[9\]/);
    expect(view.viewState()).toEqual({ units: 'elements', pinned: { tensor: 't.T', index: [1, 2], element: null } });
    expect(onViewState).toHaveBeenCalledTimes(1);
    // hovering another cell shows it; leaving comes back to the pinned one
    cell(el, 0, '0,0').dispatchEvent(new MouseEvent('mouseover', { bubbles: true }));
    expect(readout(el)).toMatch(/^t\[0, 0\] → storage\[0\]/);
    el.querySelector('.fv-sd-groups')!.dispatchEvent(new MouseEvent('mouseleave'));
    expect(readout(el)).toMatch(/^Pinned · t\.T\[1, 2\]/);
  });

  it('a second click, or Escape, unpins', () => {
    const { el, view, onViewState } = make();
    click(cell(el, 1, '1,2'));
    click(cell(el, 1, '1,2'));
    expect(view.viewState().pinned).toBeNull();
    expect(marked(el, 'fv-pinned')).toEqual([]);
    click(storageCell(el, 5));
    expect(view.viewState().pinned).toEqual({ tensor: 't', index: null, element: 5 });
    el.dispatchEvent(new KeyboardEvent('keydown', { key: 'Escape', bubbles: true }));
    expect(view.viewState().pinned).toBeNull();
    expect(onViewState).toHaveBeenCalledTimes(4);
  });

  it('exports what is shown: the pinned cell marked and its mapping written above; the default has neither', () => {
    const { el, view } = make();
    const plain = view.exportSVG();
    click(cell(el, 2, '2,1'));
    const pinned = view.exportSVG();
    // t[:, 1:3][2, 1] = offset 1 + 2·4 + 1·1 = storage 10
    expect(pinned).toContain('t[:, 1:3][2, 1] → storage[10]');
    expect(pinned).toMatch(/class="[^"]*fv-hot/);
    expect(pinned).toContain('fv-sd-mapping');
    expect(plain).not.toContain('fv-sd-mapping');
    expect(plain).not.toMatch(/class="[^"]*fv-hot/);
    expect(Number(/height="(\d+)/.exec(pinned)![1])).toBeGreaterThan(Number(/height="(\d+)/.exec(plain)![1]));
  });

  it('keeps the pin across a new layout of the same tensors, and drops it (telling) when the tensor is gone', () => {
    const { el, view, onViewState } = make();
    click(cell(el, 1, '3,0'));
    view.setLayout(sharedLayout());
    expect(view.viewState().pinned).toEqual({ tensor: 't.T', index: [3, 0], element: null });
    expect(marked(el, 'fv-pinned')).toEqual(['3,0']);
    const calls = onViewState.mock.calls.length;
    const without = sharedLayout();
    without.tensors = without.tensors.filter(t => t.name !== 't.T');
    view.setLayout(without);
    expect(view.viewState().pinned).toBeNull();
    expect(onViewState.mock.calls.length).toBe(calls + 1);
  });
});

describe('applyViewState', () => {
  it('restores what viewState reported: units, pinned cell, readout', () => {
    const a = make();
    a.el.querySelector<HTMLButtonElement>('.fv-units')!.click();
    click(cell(a.el, 1, '1,2'));
    const state = a.view.viewState();
    expect(state.units).toBe('bytes');
    const b = make();
    b.view.applyViewState(JSON.parse(JSON.stringify(state)));
    expect(b.view.viewState()).toEqual(state);
    expect(b.el.getAttribute('data-fv-units')).toBe('bytes');
    expect(readout(b.el)).toBe(readout(a.el));
    expect(marked(b.el, 'fv-hot').sort()).toEqual(marked(a.el, 'fv-hot').sort());
  });

  it.each([
    [null, /view_state: expected an object with units and pinned, got null/],
    [{ zoom: 2 }, /view_state: unknown key "zoom"; expected units or pinned/],
    [{ units: 'bits' }, /view_state.units: expected 'elements' or 'bytes', got "bits"/],
    [{ pinned: { tensor: 'u', index: [0, 0] } }, /view_state.pinned.tensor: expected one of "t", "t.T", "t\[:, 1:3\]", got "u"/],
    [{ pinned: { tensor: 't', index: [3, 0] } }, /view_state.pinned.index: expected 2 integers within t's shape \[3,4\], got \[3,0\]/],
    [{ pinned: { tensor: 't', index: [0, 0], element: 1 } }, /expected either index .* or element/],
    [{ pinned: { tensor: 't', element: 12 } }, /view_state.pinned.element: expected an integer in \[0, 12\) \(t's storage, in (torch\.)?float32 elements\), got 12/]
  ])('refuses %j, saying what was expected, and changes nothing', (bad, message) => {
    const { el, view, onViewState } = make();
    click(cell(el, 0, '1,1'));
    const before = view.viewState();
    expect(() => view.applyViewState(bad)).toThrow(message);
    expect(view.viewState()).toEqual(before);
    expect(onViewState).toHaveBeenCalledTimes(1);
  });
});

describe('through the widget entry', () => {
  const mount = mounter(widget);

  it('a live view writes view_state once the pin settles; it never reads it back', async () => {
    vi.useFakeTimers();
    try {
      const model = new FakeModel({ layout: sharedLayout(), warnings: [], view_state: {} }) as FakeModel & { save_changes: () => void };
      model.save_changes = vi.fn();
      const { el } = mount(model);
      click(cell(el, 1, '0,2'));
      expect(model.get('view_state')).toEqual({});
      vi.advanceTimersByTime(300);
      expect(model.get('view_state')).toEqual({ units: 'elements', pinned: { tensor: 't.T', index: [0, 2], element: null } });
      expect(model.save_changes).toHaveBeenCalledTimes(1);
      // a write from elsewhere does not move this view's pin
      model.set('view_state', { units: 'elements', pinned: { tensor: 't', index: [0, 0], element: null } });
      expect(marked(el, 'fv-pinned')).toEqual(['0,2']);
    } finally {
      vi.useRealTimers();
    }
  });

  it('a saved output with a view state is drawn with it; a bad one says why', () => {
    const el = document.createElement('div');
    document.body.appendChild(el);
    const payload = { version: 1, view: 'strides', traits: { layout: sharedLayout(), warnings: [], view_state: { units: 'elements', pinned: { tensor: 't.T', index: [2, 1] } } } };
    const cleanup = mountSaved(el, payload, widget);
    expect(readout(el)).toMatch(/^Pinned · t\.T\[2, 1\] → storage\[6\]/);
    cleanup();
    const bad = { ...payload, traits: { ...payload.traits, view_state: { pinned: { tensor: 'nope', index: [0] } } } };
    expect(() => mountSaved(el, bad, widget)).toThrow(/view_state.pinned.tensor: expected one of/);
    expect(el.childElementCount).toBe(0);
  });
});
