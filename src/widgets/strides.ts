/**
 * anywidget entry (esbuild → forgeviz/static/strides.js): a thin adapter from
 * the widget model to the pure stride-diagram renderer.
 *
 * Traits: ``layout`` (wire StrideLayout JSON, ``{}`` until ready), ``warnings`` (list of strings).
 * Custom messages: values / storage / try requests, answered by the kernel or an ErrorReply
 * (see src/model/wire.ts). Each view also says ``{type: 'view', request_id, view}`` when it renders
 * and ``{type: 'gone', request_id, view}`` when it is removed: the kernel re-reads a stride view
 * after each cell only while a view draws it. The view writes ``view_state`` (its units and pinned
 * cell, a StridesViewState) when they change, for ``save(state='shown')``.
 */
import css from '../../style/strides.css?raw';
import type { StrideLayout } from '../model/wire';
import { createStridesView } from '../render/strides/view';
import { defineEntry, hasArrays, kernel } from './entry';

const render = defineEntry({
  trait: 'layout',
  is: (v): v is StrideLayout => hasArrays(v, 'tensors', 'strips'),
  styleId: 'forgeviz-strides-style',
  css,
  announce: 'view',
  create({ el, transport, stateChanged }) {
    const t = kernel(transport);
    return createStridesView(el, {
      onViewState: stateChanged,
      async requestValues(tensor, start, size) {
        const { msg } = await t().request('values', { tensor, start, size });
        return msg.window;
      },
      async requestStorage(strip, start, count) {
        const { msg } = await t().request('storage', { strip, start, count });
        return { start: msg.start, values: msg.values };
      },
      async tryOp(tensor, op, shape) {
        const { msg } = await t().request('try', { tensor, op, shape });
        return msg.verdict;
      }
    });
  },
  show: (view, l) => view.setLayout(l)
});

export default { render };
