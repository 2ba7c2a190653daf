/**
 * anywidget entry (esbuild → forgeviz/static/broadcast.js): a thin adapter from the
 * widget model to the pure broadcast-animation renderer.
 *
 * Traits: ``plan`` (wire BroadcastPlan JSON, ``{}`` until ready), ``warnings`` (list of strings),
 * optional ``static`` (true on the offline HTML page).
 * Custom messages: the ``html`` request (HtmlRequest → HtmlReply or an ErrorReply).
 *
 * The offline HTML page calls ``render({model, el})`` with a minimal model: ``get`` for
 * ``plan``/``warnings``/``static``, ``on``/``off`` that may do nothing, and no working
 * ``send``. Everything but the HTML export works without a kernel.
 */
import css from '../../style/broadcast.css?raw';
import type { BroadcastPlan } from '../model/wire';
import { createBroadcastView } from '../render/broadcast/view';
import { defineEntry, hasArrays } from './entry';

/** Building the page can take the kernel a moment (it embeds broadcast.js). */
const HTML_TIMEOUT_MS = 120_000;

const render = defineEntry({
  trait: 'plan',
  is: (v): v is BroadcastPlan => hasArrays(v, 'operands', 'steps'),
  styleId: 'forgeviz-broadcast-style',
  css,
  timeoutMs: HTML_TIMEOUT_MS,
  create({ el, transport }) {
    return createBroadcastView(el, {
      requestHtml: transport
        ? async theme => {
            const { msg } = await transport.request('html', { theme }, HTML_TIMEOUT_MS);
            return msg.html;
          }
        : null
    });
  },
  show: (view, p) => view.setPlan(p)
});

export default { render };
