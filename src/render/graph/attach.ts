/**
 * Putting a drawn graph on the page: at once when small; a big one (an "Expand all") a few
 * hundred groups per frame, so that styling thousands of SVG elements never holds the page for
 * one long task.
 */

/** Groups (Nodes, boxes, edges, clusters) attached per frame when a big drawing goes on the page. */
const ATTACH_PER_FRAME = 250;

/**
 * Put the drawing ``g`` in ``viewport``, waiting for ``frame()`` between batches. False when
 * ``overtaken()`` says, after a frame, that a newer layout or destroy() came first.
 */
export async function attach(viewport: SVGGElement, g: SVGGElement, frame: () => Promise<void>, overtaken: () => boolean): Promise<boolean> {
  const parts = Array.from(g.children).map(part => [part, Array.from(part.children)] as const);
  if (parts.reduce((n, [, kids]) => n + kids.length, 0) <= ATTACH_PER_FRAME) {
    viewport.replaceChildren(g);
    return true;
  }
  for (const [part] of parts) {
    part.replaceChildren();
  }
  viewport.replaceChildren(g);
  let room = ATTACH_PER_FRAME;
  for (const [part, kids] of parts) {
    for (const kid of kids) {
      if (room-- === 0) {
        await frame();
        if (overtaken()) {
          return false;
        }
        room = ATTACH_PER_FRAME - 1;
      }
      part.appendChild(kid);
    }
  }
  return true;
}

/** The next frame (a hidden page has none: then the next task). */
export function nextFrame(doc: Document, win: Window | null): Promise<void> {
  return new Promise(resolve => {
    if (win && doc.visibilityState !== 'hidden' && typeof win.requestAnimationFrame === 'function') {
      win.requestAnimationFrame(() => resolve());
    } else {
      setTimeout(resolve, 0);
    }
  });
}
