/**
 * The breadcrumb: the module path of the selected Module (or of the selected Node's module), one
 * button per Module that centres it; hidden when nothing in a Module is selected.
 */
import { h } from '../common/dom';
import { ancestors, type FoldIndex } from './fold';

/** The Module the breadcrumb leads to: the selected one, else the selected Node's. */
export function focusModule(ix: FoldIndex | null, selected: number | null, selMod: string | null): string | null {
  if (selMod !== null) {
    return selMod;
  }
  if (selected !== null) {
    return ix?.nodeModule.get(selected) ?? null;
  }
  return null;
}

/** Show the path to Module ``id`` in ``crumbs``; a click on a Module calls ``centre`` with its id. */
export function showCrumbs(doc: Document, crumbs: HTMLElement, ix: FoldIndex | null, id: string | null, centre: (moduleId: string) => void): void {
  if (!ix || id === null || !ix.moduleById.has(id)) {
    crumbs.hidden = true;
    crumbs.replaceChildren();
    return;
  }
  const path = [...ancestors(ix, id), id];
  crumbs.hidden = false;
  crumbs.replaceChildren(
    ...path.flatMap((mid, i) => {
      const m = ix.moduleById.get(mid)!;
      const name = m.path ? m.path.split('.').pop()! : m.id;
      const b = h(doc, 'button', { type: 'button', class: 'fv-crumb', 'data-module-id': mid, title: `Centre ${m.label}` }, name);
      b.addEventListener('click', () => centre(mid));
      return i ? [h(doc, 'span', { class: 'fv-crumb-sep', 'aria-hidden': 'true' }, '›'), b] : [b];
    })
  );
}
