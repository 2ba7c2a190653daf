/**
 * anywidget entry (esbuild → forgeviz/static/strides.js): a thin adapter from
 * the widget model to the pure stride-diagram renderer.
 *
 * Traits: ``layout`` (wire StrideLayout JSON, ``{}`` until ready), ``warnings`` (list of strings).
 * Custom messages: values / storage / try requests, answered by the kernel or an ErrorReply
 * (see src/model/wire.ts). Each view also says ``{type: 'view', request_id, view}`` when it renders
 * and ``{type: 'gone', request_id, view}`` when it is removed: the kernel re-reads a stride view
 * after each cell only while a view draws it.
 */
import type { AnyModel, RenderProps } from '@anywidget/types';
import css from '../../style/strides.css?raw';
import type { StrideLayout } from '../model/wire';
import { createStridesView } from '../render/strides/view';
import { createTransport } from '../transport';
import { VERSION } from '../version';

const STYLE_ID = 'forgeviz-strides-style';

/** Inject the stylesheet once per document (updated when the version changes). */
export function ensureStridesStyle(doc: Document): void {
  const existing = doc.getElementById(STYLE_ID);
  if (existing && existing.getAttribute('data-version') === VERSION) {
    return;
  }
  const style = existing ?? doc.createElement('style');
  style.id = STYLE_ID;
  style.setAttribute('data-version', VERSION);
  style.textContent = css;
  if (!existing) {
    doc.head.appendChild(style);
  }
}

interface Traits {
  layout: StrideLayout | Record<string, never> | null;
  warnings: string[];
}

function isLayout(v: unknown): v is StrideLayout {
  return !!v && typeof v === 'object' && Array.isArray((v as StrideLayout).tensors) && Array.isArray((v as StrideLayout).strips);
}

export function render({ model, el }: Pick<RenderProps<Traits>, 'model' | 'el'>): () => void {
  ensureStridesStyle(el.ownerDocument);
  const transport = createTransport(model as AnyModel);
  const view = createStridesView(el, {
    async requestValues(tensor, start, size) {
      const { msg } = await transport.request('values', { tensor, start, size });
      return msg.window;
    },
    async requestStorage(strip, start, count) {
      const { msg } = await transport.request('storage', { strip, start, count });
      return { start: msg.start, values: msg.values };
    },
    async tryOp(tensor, op, shape) {
      const { msg } = await transport.request('try', { tensor, op, shape });
      return msg.verdict;
    }
  });
  const onLayout = () => {
    const l = model.get('layout');
    if (isLayout(l)) {
      view.setLayout(l);
    }
  };
  const onWarnings = () => view.setWarnings(model.get('warnings') ?? []);
  model.on('change:layout', onLayout);
  model.on('change:warnings', onWarnings);
  onWarnings();
  onLayout();
  // Which of the model's views this is; the kernel answers (the reply is not awaited).
  const viewId = 1 + Math.floor(Math.random() * 2 ** 31);
  const announce = (type: 'view' | 'gone') => {
    try {
      model.send({ type, request_id: viewId, view: viewId });
    } catch {
      // the kernel is gone already
    }
  };
  announce('view');
  return () => {
    model.off('change:layout', onLayout);
    model.off('change:warnings', onWarnings);
    transport.dispose();
    view.destroy();
    announce('gone');
  };
}

export default { render };
