/**
 * The Doctor section: each incident the kernel's doctor saw (a Finding) with where it happened, the
 * line, what it means and the one-line fix; forgeviz's own warnings above them.
 */
import type { Finding } from '../../model/wire';
import { createWarningStrip } from '../common/chrome';
import { h } from '../common/dom';
import { createSection } from './section';

export interface DoctorSection {
  readonly el: HTMLElement;
  /** Show ``findings`` and forgeviz's ``warnings``; returns how many findings there are. */
  set(findings: Finding[], warnings: string[]): number;
  /** Unfold the section (the toolbar's incident count was clicked). */
  open(): void;
}

/**
 * Where a finding happened: "cell [3], line 2", "cell [3]", "line 2" or "" when unknown.
 *
 * @example
 * findingPlace({ cell: 3, line: 2 }) // "cell [3], line 2"
 */
export function findingPlace(f: Pick<Finding, 'cell' | 'line'>): string {
  return [f.cell !== null && `cell [${f.cell}]`, f.line !== null && `line ${f.line}`].filter(Boolean).join(', ');
}

/**
 * One finding: ``li.fv-panel-finding[data-fv-doctor=<kind>]``.
 *
 * @example
 * findingItem(doc, finding) // "missing zero grad ×3 · cell [4], line 7 · opt.step() · …"
 */
export function findingItem(doc: Document, f: Finding): HTMLLIElement {
  const place = findingPlace(f);
  return h(
    doc,
    'li',
    { class: 'fv-panel-finding', 'data-fv-doctor': f.kind },
    h(
      doc,
      'div',
      { class: 'fv-panel-finding-head' },
      h(doc, 'span', { class: 'fv-panel-kind' }, f.kind.replace(/-/g, ' ')),
      f.count > 1 && h(doc, 'span', { class: 'fv-panel-chip fv-panel-times', title: `seen ${f.count} times` }, `×${f.count}`),
      place && h(doc, 'span', { class: 'fv-panel-place' }, place)
    ),
    f.source.trim() && h(doc, 'code', { class: 'fv-panel-source fv-code-line' }, f.source.trim()),
    h(doc, 'div', { class: 'fv-panel-explain' }, f.explanation),
    f.fix && h(doc, 'div', { class: 'fv-panel-fix' }, h(doc, 'span', { class: 'fv-panel-fix-label' }, 'Fix: '), f.fix)
  );
}

/**
 * Make the Doctor section. With findings the section is marked ``data-fv-alert`` and its header's
 * count drawn loud, so that a folded Doctor still says it needs a look.
 *
 * @example
 * const doctor = createDoctorSection(doc);
 * doctor.set(state.findings, state.warnings); // 2: the header shows a loud "2"
 */
export function createDoctorSection(doc: Document): DoctorSection {
  const section = createSection(doc, 'doctor', 'Doctor');
  const warnings = createWarningStrip(doc);
  const list = h(doc, 'ul', { class: 'fv-panel-findings' });
  const empty = h(doc, 'div', { class: 'fv-panel-empty' }, 'No incidents seen');
  section.body.append(warnings.el, list, empty);
  return {
    el: section.el,
    set(findings: Finding[], warningList: string[]) {
      const n = findings.length;
      warnings.set(warningList);
      list.replaceChildren(...findings.map(f => findingItem(doc, f)));
      list.hidden = !n;
      empty.hidden = n > 0;
      section.setCount(n ? String(n) : '', `${n} incident${n === 1 ? '' : 's'}`);
      section.el.toggleAttribute('data-fv-alert', n > 0);
      return n;
    },
    open: section.open
  };
}
