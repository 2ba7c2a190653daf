/**
 * What every anywidget entry does, written once: inject the stylesheets (style/base.css and the
 * view's own, once per page), make the kernel transport, show the view's trait and the
 * ``warnings`` trait as they change, optionally tell the kernel the view is drawn, and undo all
 * of it when the view is removed. Each entry in this folder keeps only what is its own:
 *
 *     const render = defineEntry({
 *       trait: 'plan',                                        // the trait with the view's data
 *       is: (v): v is BroadcastPlan => hasArrays(v, 'operands', 'steps'),
 *       styleId: 'forgeviz-broadcast-style', css,             // its sheet (base.css comes too)
 *       create: ({ el, transport }) => createBroadcastView(el, { ... }),
 *       show: (view, plan) => view.setPlan(plan)
 *     });
 *     export default { render };   // only the default: anywidget warns of a named `render` export
 *
 * (``create`` comes before ``show`` so that TypeScript infers the view's type from it.)
 *
 * The model may be a real anywidget model or a bare stand-in (the offline HTML page passes one
 * with ``get`` and maybe ``on``/``off``/``send``): with no ``send`` (or ``static: true``) there
 * is no transport, no announcement, and listeners are only added where ``on`` exists.
 */
import type { AnyModel } from '@anywidget/types';
import baseCss from '../../style/base.css?raw';
import { createRequests, type Requests } from '../transport';
import { VERSION } from '../version';

/** The one style element that holds style/base.css on a page, whichever views it shows. */
export const BASE_STYLE_ID = 'forgeviz-base-style';

/** Inject ``css`` once per document as ``<style id=id>`` (updated when the version changes). */
export function ensureStyle(doc: Document, id: string, css: string): void {
  const existing = doc.getElementById(id);
  if (existing && existing.getAttribute('data-version') === VERSION) {
    return;
  }
  const style = existing ?? doc.createElement('style');
  style.id = id;
  style.setAttribute('data-version', VERSION);
  style.textContent = css;
  if (!existing) {
    (doc.head ?? doc.documentElement).appendChild(style);
  }
}

/** The part of the model an entry uses; the static page's stand-in has just ``get``. */
export interface EntryModel {
  get(key: string): unknown;
  set?(key: string, value: unknown): void;
  save_changes?(): void;
  on?(name: string, cb: (...args: any[]) => void): void;
  off?(name?: string | null, cb?: ((...args: any[]) => void) | null): void;
  send?(msg: unknown, callbacks?: unknown, buffers?: unknown): void;
}

/** What the entry base needs of a view. */
export interface EntryView {
  setWarnings(warnings: string[]): void;
  destroy(): void;
  /** What the view shows beyond its data (zoom, pinned cell): its wire ``*ViewState``; views with none leave it out. */
  viewState?(): unknown;
  /** Show a saved or exported view state; throws saying what was wrong with it. */
  applyViewState?(state: unknown): void;
}

/** What a view's ``create`` (and ``onMessage``) get from the base. */
export interface EntryContext<R extends Requests = Requests> {
  readonly model: EntryModel;
  readonly el: HTMLElement;
  /** Requests to the kernel; null without one (no ``send``, or ``static: true``). */
  readonly transport: R | null;
  /** Tell the kernel again that this view is drawn (see ``announce``); nothing without a kernel. */
  announce(): void;
  /** The request_id of the last announcement (-1 before the first). */
  readonly announcementId: number;
  /** Show these warnings of the view's own after the ``warnings`` trait's. */
  setOwnWarnings(warnings: string[]): void;
  /**
   * The view's ``viewState()`` changed (a cell pinned, a zoom): written to the ``view_state`` trait
   * after a quiet moment, so the kernel's ``save(state='shown')`` draws what the user sees.
   */
  stateChanged(): void;
}

/** How long the view state must stay put before the kernel is told (a zoom is many wheel events). */
const STATE_QUIET_MS = 250;

export interface EntrySpec<T, V extends EntryView, R extends Requests = Requests> {
  /** The trait holding the view's data (``{}`` or null until the kernel has it). */
  trait: string;
  /** Whether a value of ``trait`` is data to show. */
  is(value: unknown): value is T;
  show(view: V, value: T): void;
  /** The view's own stylesheet and the id of its style element. */
  styleId: string;
  css: string;
  /** The kernel connection: ``createRequests`` unless given (the graph view's adds named requests). */
  connect?: (model: AnyModel, timeoutMs?: number) => R;
  /** Its default request timeout. */
  timeoutMs?: number;
  /**
   * Tell the kernel which views draw the model: ``{type, request_id, view}`` once the view's
   * element is first on the page (and on ``ctx.announce()`` after that), ``{type: 'gone',
   * request_id, view}`` on cleanup, with the last announcement's request_id. A ``'view'``
   * announcement's request_id is the view's id; each ``'replay'`` is a new request (the kernel
   * answers it with the same request_id). See ``whenOnPage`` for why it waits for the page.
   */
  announce?: 'view' | 'replay';
  create(ctx: EntryContext<R>): V;
  /** Custom messages from the kernel (replies to requests are the transport's too). */
  onMessage?(view: V, msg: unknown, buffers: DataView[] | undefined, ctx: EntryContext<R>): void;
}

/** ``transport`` for a view's request callbacks: a getter that throws without a kernel. */
export function kernel<R>(transport: R | null): () => R {
  return () => {
    if (!transport) {
      throw new Error('no kernel connection');
    }
    return transport;
  };
}

/** Whether ``v`` is an object whose ``keys`` are arrays (how a view tells data from ``{}``). */
export function hasArrays(v: unknown, ...keys: string[]): boolean {
  return !!v && typeof v === 'object' && keys.every(k => Array.isArray((v as Record<string, unknown>)[k]));
}

/**
 * A live view (one with a kernel) while it is drawn: listed in ``globalThis.__forgeviz__.views``
 * when the page's host made that Set (the JupyterLab extension: src/lab/refresh.ts reads each one's
 * model and export when a notebook is saved).
 */
export interface LiveView {
  el: HTMLElement;
  model: EntryModel;
  view: EntryView;
}

const randomId = () => 1 + Math.floor(Math.random() * 2 ** 31);

/** A view drawn on an element, and whether its trait has held data for it yet. */
export interface MountedView {
  view: EntryView;
  shown: boolean;
}

const mounted = new WeakMap<Element, MountedView>();

/**
 * The view an entry's ``render`` drew on ``el`` (live or saved), until its cleanup: how a host
 * that mounted a view by its entry reaches the view itself (the headless renderer's export).
 *
 *     render({ model, el }); mountedView(el)?.view  // the view, with its exportSVG
 */
export function mountedView(el: Element): MountedView | undefined {
  return mounted.get(el);
}

type Listener = (...args: any[]) => void;

/** The longest wait between two looks at whether a view's element is on the page yet. */
export const ON_PAGE_POLL_MAX_MS = 1000;

/**
 * Run ``then`` once ``el`` is in its document, at once if it already is; returns a cancel.
 *
 * A view is rendered on an element that its host attaches only after ``render`` returns
 * (ipywidgets adds the view once ``create_view`` resolves). When the output is replaced while that
 * view is still being created (the kernel updating a display just after showing it, on a busy
 * machine), the renderer waiting for it is disposed first: the view still renders, on an element
 * that never reaches the page, and no one ever removes it, so it would never say ``gone``. Only a
 * view that reached the page is told to the kernel, so its count is the views on the page. The
 * look is cheap (``isConnected``) and backs off to once a second.
 *
 *     const cancel = whenOnPage(el, () => announce());  // cancel() in the view's cleanup
 */
export function whenOnPage(el: Element, then: () => void): () => void {
  let timer: ReturnType<typeof setTimeout> | undefined;
  let wait = 8;
  const look = () => {
    if (el.isConnected) {
      then();
    } else {
      wait = Math.min(ON_PAGE_POLL_MAX_MS, wait * 2);
      timer = setTimeout(look, wait);
    }
  };
  look();
  return () => clearTimeout(timer);
}

/** The anywidget ``render`` for one view. */
export function defineEntry<T, V extends EntryView, R extends Requests = Requests>(spec: EntrySpec<T, V, R>): (props: { model: EntryModel; el: HTMLElement }) => () => void {
  return ({ model, el }) => {
    const doc = el.ownerDocument;
    ensureStyle(doc, BASE_STYLE_ID, baseCss);
    ensureStyle(doc, spec.styleId, spec.css);
    const live = typeof model.send === 'function' && model.get('static') !== true;
    /** which of the model's views this is, so the kernel can tell when none is left */
    const viewId = randomId();
    /** warnings of the view's own */
    let own: string[] = [];
    /** whether the view's element has reached the page (see whenOnPage) */
    let onPage = false;
    const tell = (type: string) => {
      try {
        model.send!({ type, request_id: ctx.announcementId, view: viewId });
      } catch {
        // the kernel is gone already
      }
    };
    const ctx = {
      model,
      el,
      transport: live ? ((spec.connect ?? createRequests)(model as unknown as AnyModel, spec.timeoutMs) as R) : null,
      announcementId: -1,
      announce() {
        // a view not on the page yet asks nothing (a gap in a stream it gets meanwhile included)
        if (spec.announce && live && onPage) {
          ctx.announcementId = spec.announce === 'view' ? viewId : randomId();
          tell(spec.announce);
        }
      },
      setOwnWarnings(warnings: string[]) {
        own = warnings;
        onWarnings();
      },
      stateChanged() {
        if (!live || typeof model.set !== 'function') {
          return;
        }
        if (stateTimer !== null) {
          clearTimeout(stateTimer);
        }
        stateTimer = setTimeout(() => {
          stateTimer = null;
          try {
            model.set!('view_state', view.viewState?.() ?? {});
            model.save_changes?.();
          } catch {
            // the kernel is gone: nothing to tell
          }
        }, STATE_QUIET_MS);
      }
    };
    let stateTimer: ReturnType<typeof setTimeout> | null = null;
    const view = spec.create(ctx);
    const here: MountedView = { view, shown: false };
    mounted.set(el, here);
    const onData = () => {
      const value = model.get(spec.trait);
      if (spec.is(value)) {
        here.shown = true;
        spec.show(view, value);
      }
    };
    const onWarnings = () => {
      const w = model.get('warnings');
      view.setWarnings([...(Array.isArray(w) ? (w as string[]) : []), ...own]);
    };
    const listeners: [string, Listener][] = [
      [`change:${spec.trait}`, onData],
      ['change:warnings', onWarnings]
    ];
    if (!live) {
      // a saved or exported view state (src/lab/saved.ts sets it after the data): a live view only
      // writes its own, and never reads it back
      listeners.push(['change:view_state', () => view.applyViewState?.(model.get('view_state'))]);
    }
    if (spec.onMessage) {
      listeners.unshift(['msg:custom', (msg: unknown, buffers?: DataView[]) => spec.onMessage!(view, msg, buffers, ctx)]);
    }
    listeners.forEach(([name, cb]) => model.on?.(name, cb));
    onWarnings();
    onData();
    const registry = live ? (globalThis as { __forgeviz__?: { views?: Set<LiveView> } }).__forgeviz__?.views : undefined;
    const listed: LiveView = { el, model, view };
    // told to the kernel, and listed for saving, once on the page (see whenOnPage)
    const stopWaiting = live
      ? whenOnPage(el, () => {
          onPage = true;
          registry?.add(listed);
          ctx.announce();
        })
      : () => {};
    return () => {
      stopWaiting();
      registry?.delete(listed);
      if (mounted.get(el) === here) {
        mounted.delete(el);
      }
      listeners.forEach(([name, cb]) => model.off?.(name, cb));
      ctx.transport?.dispose();
      if (stateTimer !== null) {
        clearTimeout(stateTimer);
      }
      view.destroy();
      if (spec.announce && live && ctx.announcementId !== -1) {
        tell('gone');
      }
    };
  };
}
