/**
 * The HTML around the broadcast frame: the dims checked so far, the conflict with its fixes
 * and torch's own words, and the text transcript of every step.
 */
import type { BroadcastPlan } from '../../model/wire';
import { h } from '../common/dom';
import { checksOf, dimLabel, exprText, FrameState, tupleText, VERDICT_SYMBOL } from './layout';

/** The dims checked so far, as words, right to left; hidden while none is. */
export function renderChecks(doc: Document, list: HTMLElement, plan: BroadcastPlan, st: FrameState): void {
  const checks = checksOf(plan);
  const nd = plan.kind === 'matmul' ? checks.length : plan.ndim;
  list.replaceChildren(
    ...checks
      .filter(c => st.compared.has(c.dim))
      .map(c =>
        h(
          doc,
          'li',
          { class: `fv-bc-check fv-${c.verdict}`, 'data-dim': c.dim },
          h(doc, 'span', { class: 'fv-bc-sym', 'aria-hidden': 'true' }, VERDICT_SYMBOL[c.verdict]),
          ' ',
          h(doc, 'strong', {}, `${plan.kind === 'matmul' ? 'batch ' : ''}${dimLabel(c.dim - nd)}`),
          ` ${c.verdict}: ${c.text}`
        )
      )
  );
  list.hidden = list.children.length === 0;
}

/** The conflict, its fixes and torch's own words, once the frame shows the conflict; else hidden. */
export function renderConflict(doc: Document, box: HTMLElement, plan: BroadcastPlan, st: FrameState): void {
  if (!st.conflict || plan.ok) {
    box.replaceChildren();
    box.hidden = true;
    return;
  }
  const conflictStep = (plan.steps ?? []).find(x => x.kind === 'conflict');
  const why = plan.conflict?.text ?? conflictStep?.text ?? plan.message ?? 'the shapes do not broadcast';
  const fixes = plan.conflict?.fixes ?? [];
  box.replaceChildren(h(doc, 'div', { class: 'fv-bc-conflict', role: 'alert', 'data-dim': plan.conflict ? plan.conflict.dim : null }, why));
  box.append(
    fixes.length
      ? h(
          doc,
          'div',
          { class: 'fv-bc-fixes' },
          h(doc, 'div', { class: 'fv-bc-fixes-title' }, 'Fixes torch accepts:'),
          h(doc, 'ul', {}, ...fixes.map(f => h(doc, 'li', {}, h(doc, 'code', { class: 'fv-bc-fix' }, f))))
        )
      : '',
    plan.torch_message
      ? h(doc, 'div', { class: 'fv-bc-torch' }, h(doc, 'div', { class: 'fv-bc-torch-title' }, 'torch says:'), h(doc, 'pre', { class: 'fv-torch-msg' }, plan.torch_message))
      : ''
  );
  box.hidden = false;
}

/** Fill ``transcript`` (a ``details.fv-transcript``) with the plan in words: verdict, then each step. */
export function renderTranscript(doc: Document, transcript: HTMLElement, plan: BroadcastPlan | null): void {
  transcript.replaceChildren(h(doc, 'summary', {}, 'Text description'));
  if (!plan) {
    return;
  }
  const shapes = plan.operands.map(o => `${o.name} ${tupleText(o.shape)}`).join(', ');
  const verdict = plan.ok
    ? `${exprText(plan)} broadcasts: ${shapes} give ${plan.result_shape ? tupleText(plan.result_shape) : 'a result'}.`
    : `${exprText(plan)} fails: ${shapes}. ${plan.conflict?.text ?? ''}`;
  transcript.appendChild(h(doc, 'p', { class: 'fv-transcript-summary' }, verdict));
  if (plan.message) {
    transcript.appendChild(h(doc, 'p', {}, plan.message));
  }
  const ol = h(doc, 'ol', { class: 'fv-transcript-steps' });
  (plan.steps ?? []).forEach((st, i) => ol.appendChild(h(doc, 'li', { 'data-step': i, 'data-kind': st.kind }, h(doc, 'strong', {}, st.title), `: ${st.text}`)));
  transcript.appendChild(ol);
  if (plan.conflict?.fixes.length) {
    transcript.appendChild(h(doc, 'p', {}, `Fixes: ${plan.conflict.fixes.join('; ')}`));
  }
  if (plan.torch_message) {
    transcript.appendChild(h(doc, 'p', {}, `torch: ${plan.torch_message}`));
  }
}
