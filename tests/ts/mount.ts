/** Mounting a widget entry in a test: each mount on a fresh element, all undone after each test. */
import { afterEach } from 'vitest';

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
