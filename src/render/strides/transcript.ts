/** The stride view's text description: every tensor, every storage, every overlap, in words. */
import { h } from '../common/dom';
import { overlapText, stripTranscript, tensorTranscript } from './data';
import { nameOf, numelOf, stripOf, StridesContext } from './state';

export function renderTranscript(ctx: StridesContext) {
  const { doc, layout } = ctx;
  const transcript = ctx.ui.transcript;
  transcript.replaceChildren(h(doc, 'summary', {}, 'Text description'));
  if (!layout) {
    return;
  }
  if (layout.message) {
    transcript.appendChild(h(doc, 'p', {}, layout.message));
  }
  const tl = h(doc, 'ul', { class: 'fv-transcript-tensors' });
  for (const ts of ctx.tensors.values()) {
    const t = ts.t;
    const st = t.stride === null ? null : stripOf(ctx, ts);
    tl.appendChild(h(doc, 'li', { 'data-tensor': t.id }, tensorTranscript(t, st ? st.s.id : null)));
  }
  const sl = h(doc, 'ul', { class: 'fv-transcript-strips' });
  for (const st of ctx.strips.values()) {
    const sp = st.s;
    const names = sp.tensors.map(id => nameOf(ctx, id)).join(', ');
    sl.appendChild(h(doc, 'li', { 'data-strip': sp.id }, stripTranscript(sp, names)));
  }
  const ol = h(doc, 'ul', { class: 'fv-transcript-overlaps' });
  for (const o of layout.overlaps) {
    ol.appendChild(h(doc, 'li', {}, `${overlapText(o, id => nameOf(ctx, id), id => numelOf(ctx, id))}.`));
  }
  transcript.append(h(doc, 'h5', {}, 'Tensors'), tl, h(doc, 'h5', {}, 'Storages'), sl);
  if (layout.overlaps.length) {
    transcript.append(h(doc, 'h5', {}, 'Sharing'), ol);
  }
}
