/**
 * One foldable section of the panel: a header (fold button, title, count, tools) over a body. The
 * count sits in the fold button, so a folded section still says how much it holds.
 */
import { h } from '../common/dom';

export type SectionName = 'tensors' | 'graph' | 'memory' | 'doctor';

export interface Section {
  /** ``section.fv-panel-section[data-fv-section=<name>]`` */
  readonly el: HTMLElement;
  readonly body: HTMLDivElement;
  /** The count beside the title ("12"), with ``title`` its tooltip; empty hides it. */
  setCount(text: string, title?: string): void;
  /** Unfold the body. */
  open(): void;
}

/**
 * Make a section whose header holds ``tools`` after the title; the title button folds the body.
 *
 * @example
 * const s = createSection(doc, 'doctor', 'Doctor');
 * s.body.append(list);
 * s.setCount('2', '2 incidents');
 */
export function createSection(doc: Document, name: SectionName, title: string, ...tools: Node[]): Section {
  const bodyId = `fv-panel-${name}-${Math.random().toString(36).slice(2, 8)}`;
  const count = h(doc, 'span', { class: 'fv-panel-count', hidden: true });
  const fold = h(doc, 'button', { type: 'button', class: 'fv-panel-fold', 'aria-expanded': 'true', 'aria-controls': bodyId }, title, count);
  const body = h(doc, 'div', { class: 'fv-panel-body', id: bodyId });
  const head = h(doc, 'div', { class: 'fv-panel-head' }, fold, ...tools);
  const el = h(doc, 'section', { class: 'fv-panel-section', 'data-fv-section': name, 'aria-label': title }, head, body);
  const setOpen = (open: boolean) => {
    fold.setAttribute('aria-expanded', String(open));
    body.hidden = !open;
  };
  fold.addEventListener('click', () => setOpen(fold.getAttribute('aria-expanded') !== 'true'));
  return {
    el,
    body,
    setCount(text: string, tip?: string) {
      count.hidden = !text;
      count.textContent = text;
      tip ? count.setAttribute('title', tip) : count.removeAttribute('title');
    },
    open: () => setOpen(true)
  };
}
