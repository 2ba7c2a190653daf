/** Where a view under test lives: an element in the document, and the view taken down after the test. */

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
