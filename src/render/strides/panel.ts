/**
 * The HTML beside each diagram: a card per tensor (facts, verdicts, the "try an op" form, the
 * panel of a tensor without strides) and the pagers that move a tensor's or a strip's window.
 */
import type { TensorLayout, ViewVerdict } from '../../model/wire';
import { errorMessage } from '../common/chrome';
import { h } from '../common/dom';
import { dtypeName, TENSOR_DASHES, verdictCall, verdictSummary } from './data';
import { parseShape, tupleText } from './layout';
import { Group, setPending, stripCount, StridesContext, TState } from './state';

/** A verdict as DOM: call, summary, reason and torch's own message. */
export function renderVerdict(doc: Document, v: ViewVerdict, tag: 'li' | 'div' = 'li', cls = 'fv-verdict'): HTMLElement {
  const kind = !v.works ? 'fails' : v.copies ? 'copies' : 'view';
  return h(
    doc,
    tag,
    { class: cls, 'data-op': v.op, 'data-works': String(v.works), 'data-copies': String(v.copies), 'data-kind': kind },
    h(doc, 'code', { class: 'fv-verdict-call' }, verdictCall(v)),
    ' ',
    h(doc, 'span', { class: 'fv-verdict-summary' }, verdictSummary(v)),
    v.works && v.result_stride ? h(doc, 'span', { class: 'fv-verdict-stride' }, ` → stride ${tupleText(v.result_stride)}`) : null,
    v.reason ? h(doc, 'div', { class: 'fv-verdict-reason' }, v.reason) : null,
    v.torch_message ? h(doc, 'pre', { class: 'fv-torch-msg' }, v.torch_message) : null
  );
}

// ---- pagers -----------------------------------------------------------------------------------------

/** ‹ › per dim of ``ts`` its window does not cover whole, in its card. */
export function renderPagers(ctx: StridesContext, g: Group, ts: TState) {
  const { doc } = ctx;
  const holder = g.cards.querySelector(`.fv-sd-card[data-tensor="${ts.t.id}"] .fv-pagers`);
  if (!holder) {
    return;
  }
  holder.replaceChildren();
  holder.toggleAttribute('data-loading', ts.loading);
  const box = ts.box;
  if (!box || ts.t.stride === null) {
    return;
  }
  ts.t.shape.forEach((n, k) => {
    if (box.size[k] >= n) {
      return;
    }
    const lo = box.start[k];
    const hi = lo + box.size[k] - 1;
    const prev = h(doc, 'button', { type: 'button', class: 'fv-btn fv-page-prev', 'data-tensor': ts.t.id, 'data-dim': k, 'aria-label': `${ts.t.name}: previous indices of dim ${k}`, disabled: lo === 0 }, '‹');
    const next = h(doc, 'button', { type: 'button', class: 'fv-btn fv-page-next', 'data-tensor': ts.t.id, 'data-dim': k, 'aria-label': `${ts.t.name}: next indices of dim ${k}`, disabled: hi >= n - 1 }, '›');
    holder.appendChild(
      h(doc, 'div', { class: 'fv-pager', 'data-dim': k }, h(doc, 'span', { class: 'fv-btn-group' }, prev, next), h(doc, 'span', { class: 'fv-page-range' }, ` dim ${k}: ${lo}–${hi} of ${n}`))
    );
  });
}

/** ‹ › under the strip when it is not drawn whole. */
export function renderStripPager(ctx: StridesContext, g: Group) {
  const { doc } = ctx;
  const holder = g.section.querySelector('.fv-strip-pager');
  const st = g.strip;
  if (!holder) {
    return;
  }
  holder.replaceChildren();
  if (!st || st.s.length <= stripCount(ctx, st)) {
    return;
  }
  const count = stripCount(ctx, st);
  const id = st.s.id;
  holder.append(
    h(
      doc,
      'span',
      { class: 'fv-btn-group' },
      h(doc, 'button', { type: 'button', class: 'fv-btn fv-strip-prev', 'data-strip': id, 'aria-label': `storage ${id}: previous elements`, disabled: st.start === 0 }, '‹'),
      h(doc, 'button', { type: 'button', class: 'fv-btn fv-strip-next', 'data-strip': id, 'aria-label': `storage ${id}: next elements`, disabled: st.start + count >= st.s.length }, '›')
    ),
    h(doc, 'span', { class: 'fv-page-range' }, ` storage ${id}: elements ${st.start}–${st.start + count - 1} of ${st.s.length}`)
  );
}

// ---- a tensor's card --------------------------------------------------------------------------------

function factsList(doc: Document, t: TensorLayout): HTMLElement {
  return h(
    doc,
    'ul',
    { class: 'fv-facts' },
    ...t.facts.map(f =>
      h(
        doc,
        'li',
        { class: 'fv-fact', 'data-key': f.key, title: f.reason },
        h(doc, 'span', { class: 'fv-fact-label' }, `${f.label}: `),
        h(doc, 'span', { class: 'fv-fact-value' }, f.value),
        f.reason ? h(doc, 'div', { class: 'fv-fact-reason' }, f.reason) : null
      )
    )
  );
}

/** "try t.[2, 6] view | reshape": asks torch through the kernel and shows its verdict. */
function tryForm(ctx: StridesContext, t: TensorLayout): HTMLElement {
  const { doc } = ctx;
  const input = h(doc, 'input', { type: 'text', class: 'fv-try-shape', placeholder: 'e.g. 2, 6', 'aria-label': `new shape for ${t.name}`, spellcheck: 'false' });
  const out = h(doc, 'div', { class: 'fv-try-out', 'aria-live': 'polite' });
  const go = (op: 'view' | 'reshape') => {
    const parsed = parseShape(input.value);
    if ('error' in parsed) {
      out.replaceChildren(h(doc, 'div', { class: 'fv-try-error', role: 'alert' }, parsed.error));
      return;
    }
    out.replaceChildren(h(doc, 'div', { class: 'fv-loading' }, `asking torch: ${t.name}.${op}(${parsed.shape.join(', ')})…`));
    setPending(ctx, 1);
    ctx.opts
      .tryOp(t.id, op, parsed.shape)
      .then(v => {
        if (!ctx.destroyed) {
          out.replaceChildren(renderVerdict(doc, v, 'div', 'fv-verdict fv-try-result'));
        }
      })
      .catch(err => {
        if (!ctx.destroyed) {
          out.replaceChildren(h(doc, 'div', { class: 'fv-try-error', role: 'alert' }, `${t.name}.${op}: ${errorMessage(err)}`));
        }
      })
      .finally(() => setPending(ctx, -1));
  };
  const viewBtn = h(doc, 'button', { type: 'submit', class: 'fv-btn fv-try-view' }, 'view');
  const reshapeBtn = h(doc, 'button', { type: 'button', class: 'fv-btn fv-try-reshape' }, 'reshape');
  const form = h(doc, 'form', { class: 'fv-try', 'data-tensor': t.id }, h(doc, 'label', {}, `try ${t.name}.`), input, h(doc, 'span', { class: 'fv-btn-group' }, viewBtn, reshapeBtn), out);
  form.addEventListener('submit', e => {
    e.preventDefault();
    go('view');
  });
  reshapeBtn.addEventListener('click', () => go('reshape'));
  return form;
}

/** What a tensor without strides (sparse, ...) is made of, in place of a grid. */
function renderPanel(doc: Document, t: TensorLayout): HTMLElement {
  const p = t.panel;
  if (!p) {
    return h(doc, 'div', { class: 'fv-panel' }, h(doc, 'p', {}, `layout ${t.layout}: no strides, nothing to draw`));
  }
  const rows = p.parts.map(part =>
    h(
      doc,
      'tr',
      { 'data-part': part.name },
      h(doc, 'td', {}, h(doc, 'code', {}, part.name)),
      h(doc, 'td', {}, tupleText(part.shape)),
      h(doc, 'td', {}, dtypeName(part.dtype)),
      h(doc, 'td', {}, part.note),
      h(doc, 'td', { class: 'fv-part-values' }, part.values ? part.values.join(', ') : '')
    )
  );
  return h(
    doc,
    'div',
    { class: 'fv-panel', 'data-layout': p.layout },
    h(doc, 'h5', { class: 'fv-panel-title' }, p.title),
    h(doc, 'p', { class: 'fv-panel-explanation' }, p.explanation),
    p.parts.length
      ? h(
          doc,
          'table',
          { class: 'fv-panel-parts' },
          h(doc, 'thead', {}, h(doc, 'tr', {}, ...['name', 'shape', 'dtype', 'note', 'values'].map(c => h(doc, 'th', { scope: 'col' }, c)))),
          h(doc, 'tbody', {}, ...rows)
        )
      : null
  );
}

/** The card under the diagram for ``ts``: title, pagers, panel, facts, verdicts, the try form. */
export function renderCard(ctx: StridesContext, ts: TState): HTMLElement {
  const { doc } = ctx;
  const t = ts.t;
  const card = h(doc, 'div', { class: 'fv-sd-card', 'data-tensor': t.id, style: `--fv-c:${ts.color}` });
  card.appendChild(
    h(doc, 'h4', { class: 'fv-card-title' }, h(doc, 'span', { class: 'fv-card-swatch', 'aria-hidden': 'true', 'data-dash': ts.order % TENSOR_DASHES.length }), h(doc, 'code', {}, t.name), ` ${tupleText(t.shape)} ${dtypeName(t.dtype)}`)
  );
  card.appendChild(h(doc, 'div', { class: 'fv-pagers' }));
  if (t.stride === null) {
    card.appendChild(renderPanel(doc, t));
  }
  if (t.facts.length) {
    card.appendChild(factsList(doc, t));
  }
  if (t.verdicts.length) {
    card.appendChild(h(doc, 'ul', { class: 'fv-verdicts' }, ...t.verdicts.map(v => renderVerdict(doc, v))));
  }
  if (t.stride !== null) {
    card.appendChild(tryForm(ctx, t));
  }
  return card;
}
