/** Mounting a widget entry in a test: each mount on a fresh element, all undone after each test. */
import { afterEach, expect } from 'vitest';
import { FakeModel } from './fakemodel';

type Render = (props: { model: any; el: HTMLElement }) => () => void;

/**
 * A ``mount(model)`` for ``widget`` (an entry's default export). After each test of the file it
 * runs every cleanup, empties the body and removes the injected stylesheets.
 */
export function mounter(widget: { render: Render }) {
  let cleanups: (() => void)[] = [];
  afterEach(() => {
    cleanups.forEach(c => c());
    cleanups = [];
    document.body.replaceChildren();
    document.head.querySelectorAll('style').forEach(s => s.remove());
  });
  return function mount(model: unknown) {
    const el = document.createElement('div');
    document.body.appendChild(el);
    const cleanup = widget.render({ model, el });
    cleanups.push(cleanup);
    return { el, cleanup };
  };
}

/**
 * The first test of every view's adapter: a view whose ``trait`` holds no data yet waits
 * ('loading') beside a second view of the same kind (their stylesheet, ``style#<view's id>``
 * holding ``.fv-<view>``, is injected once), then draws ``data`` once it comes ('ready').
 *
 *     const { model, el } = drawsWhenItsDataComes(mount, 'plan', okPlan(), 'broadcast');
 */
export function drawsWhenItsDataComes(mount: (model: unknown) => { el: HTMLElement }, trait: string, data: unknown,
  view: string): { model: FakeModel; el: HTMLElement } {
  const model = new FakeModel({ [trait]: {}, warnings: [] });
  const { el } = mount(model);
  mount(new FakeModel({ [trait]: data, warnings: [] }));
  expect(el.getAttribute('data-fv-state')).toBe('loading');
  model.set(trait, data);
  expect(el.getAttribute('data-fv-state')).toBe('ready');
  expect(document.querySelectorAll(`style#forgeviz-${view}-style`)).toHaveLength(1);
  expect(document.getElementById(`forgeviz-${view}-style`)!.textContent).toContain(`.fv-${view}`);
  return { model, el };
}
