/** Where a view under test lives: an element in the document, and the view taken down after the test. */
import { afterEach, beforeEach } from 'vitest';

/** A fresh element, in the document, for a view under test. */
export function hostElement(): HTMLElement {
  const el = document.createElement('div');
  document.body.appendChild(el);
  return el;
}

/** Destroy ``view`` (if a test made one) and empty the document; returns null, for ``view = takeDown(view)``. */
export function takeDown(view: { destroy(): void } | null): null {
  view?.destroy();
  document.body.replaceChildren();
  return null;
}

/** The element of the running test (after ``hostEachTest()``): a live binding, a new element each test. */
export let el: HTMLElement;
let kept: { destroy(): void } | null = null;

/** Give each test of this file a fresh ``el``, and take down what it passed to ``keep`` after it. */
export function hostEachTest(): void {
  beforeEach(() => {
    el = hostElement();
  });
  afterEach(() => {
    kept = takeDown(kept);
  });
}

/** ``view``, taken down after the test: ``const view = keep(createGraphView(el, ...))``. */
export function keep<V extends { destroy(): void }>(view: V): V {
  kept = view;
  return view;
}
