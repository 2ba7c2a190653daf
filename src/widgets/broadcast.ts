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
import type { AnyModel, RenderProps } from '@anywidget/types';
import css from '../../style/broadcast.css?raw';
import type { BroadcastPlan } from '../model/wire';
import { createBroadcastView } from '../render/broadcast/view';
import { createTransport } from '../transport';
import { VERSION } from '../version';

const STYLE_ID = 'forgeviz-broadcast-style';
/** Building the page can take the kernel a moment (it embeds broadcast.js). */
const HTML_TIMEOUT_MS = 120_000;

/** Inject the stylesheet once per document (updated when the version changes). */
export function ensureBroadcastStyle(doc: Document): void {
  const existing = doc.getElementById(STYLE_ID);
  if (existing && existing.getAttribute('data-version') === VERSION) {
    return;
  }
  const style = existing ?? doc.createElement('style');
  style.id = STYLE_ID;
  style.setAttribute('data-version', VERSION);
  style.textContent = css;
  if (!existing) {
    (doc.head ?? doc.documentElement).appendChild(style);
  }
}

interface Traits {
  plan: BroadcastPlan | Record<string, never> | null;
  warnings: string[];
  static: boolean;
}

/** The part of the model the entry uses; the static page's fake model has just this much. */
export interface MinimalModel {
  get(key: string): unknown;
  on?(name: string, cb: (...args: unknown[]) => void): void;
  off?(name?: string | null, cb?: ((...args: unknown[]) => void) | null): void;
  send?(msg: unknown): void;
}

export function isPlan(v: unknown): v is BroadcastPlan {
  return !!v && typeof v === 'object' && Array.isArray((v as BroadcastPlan).operands) && Array.isArray((v as BroadcastPlan).steps);
}

export function render({ model, el }: Pick<RenderProps<Traits>, 'model' | 'el'> | { model: MinimalModel; el: HTMLElement }): () => void {
  const m = model as unknown as MinimalModel;
  ensureBroadcastStyle(el.ownerDocument);
  const isStatic = m.get('static') === true || typeof m.send !== 'function';
  const transport = isStatic ? null : createTransport(model as unknown as AnyModel, HTML_TIMEOUT_MS);
  const view = createBroadcastView(el, {
    requestHtml: transport
      ? async theme => {
          const { msg } = await transport.request('html', { theme }, HTML_TIMEOUT_MS);
          return msg.html;
        }
      : null
  });
  const onPlan = () => {
    const p = m.get('plan');
    if (isPlan(p)) {
      view.setPlan(p);
    }
  };
  const onWarnings = () => {
    const w = m.get('warnings');
    view.setWarnings(Array.isArray(w) ? (w as string[]) : []);
  };
  m.on?.('change:plan', onPlan);
  m.on?.('change:warnings', onWarnings);
  onWarnings();
  onPlan();
  return () => {
    m.off?.('change:plan', onPlan);
    m.off?.('change:warnings', onWarnings);
    transport?.dispose();
    view.destroy();
  };
}

export default { render };
