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
  set(findings: Finding[], warnings: string[]): void;
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
 * Make the Doctor section.
 *
 * @example
 * const doctor = createDoctorSection(doc);
 * doctor.set(state.findings, state.warnings);
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
      warnings.set(warningList);
      list.replaceChildren(...findings.map(f => findingItem(doc, f)));
      list.hidden = !findings.length;
      empty.hidden = findings.length > 0;
      section.setCount(findings.length ? String(findings.length) : '');
    }
  };
}
