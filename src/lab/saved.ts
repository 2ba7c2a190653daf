/**
 * Drawing a saved forgeviz output with no kernel: the ``application/vnd.forgeviz.v1+json`` value a
 * widget adds to its mime bundle (forgeviz/widgets/base.py ``saved_payload``) is mounted with the
 * view's own anywidget entry over a stand-in model: ``get(key)`` reads the saved traits, ``static``
 * is true (so the entry opens no kernel transport), ``details`` and ``details_cut`` are the saved
 * inspector replies, and the saved custom messages (the memory timeline's events) are delivered
 * once the view is drawn. What the view writes (the graph's ``expanded``) stays in the page.
 *
 *     const cleanup = mountSaved(el, payload, await import(url));
 */

/** The forgeviz JSON a saved output holds (``version`` 1). */
export interface SavedPayload {
  version: number;
  view: string;
  summary?: string;
  traits: Record<string, unknown>;
  details?: Record<string, unknown>;
  details_cut?: string;
  /** custom messages for the view after it renders: buffers in base64 */
  messages?: { content: unknown; buffers?: string[] }[];
}

/**
 * JupyterLab's dark theme colours the views read (through base.css's --fv-* tokens), for a page
 * outside Lab (the offline HTML page, the headless renderer); the light theme is base.css's own
 * fallbacks.
 */
const DARK_VARS: Record<string, string> = {
  '--jp-layout-color0': '#111',
  '--jp-layout-color1': '#1e1e1e',
  '--jp-layout-color2': '#2b2b2b',
  '--jp-ui-font-color1': 'rgba(255,255,255,.87)',
  '--jp-ui-font-color2': 'rgba(255,255,255,.54)',
  '--jp-ui-font-color3': 'rgba(255,255,255,.38)',
  '--jp-border-color1': '#616161',
  '--jp-border-color2': '#424242'
};

const THEME_STYLE_ID = 'forgeviz-page-theme';

/**
 * Give a page outside JupyterLab Lab's ``theme`` ('light' or 'dark'): its colour variables, and
 * ``data-jp-theme-light`` on the body, as the views read them.
 *
 *     setTheme(document, 'dark')
 */
export function setTheme(doc: Document, theme: string): void {
  const vars = theme === 'dark' ? DARK_VARS : {};
  let style = doc.getElementById(THEME_STYLE_ID);
  if (!style) {
    style = doc.createElement('style');
    style.id = THEME_STYLE_ID;
    doc.head.appendChild(style);
  }
  const decl = Object.entries(vars)
    .map(([k, v]) => `${k}:${v};`)
    .join('');
  // on the view root too: happy-dom does not hand inherited custom properties to getComputedStyle
  style.textContent = `:root,body,.fv-root{${decl}}`;
  doc.body.setAttribute('data-jp-theme-light', theme === 'dark' ? 'false' : 'true');
}

/** The mime type of a saved forgeviz output. */
export const SAVED_MIME = 'application/vnd.forgeviz.v1+json';

/** An anywidget ``render`` (its model is the entry's own model type: the stand-in fits it). */
type Render = (props: { model: any; el: HTMLElement }) => (() => void) | void;

/** An anywidget entry module (forgeviz/static/<view>.js). */
export interface EntryModule {
  render?: Render;
  default?: { render?: Render };
}

/** Whether ``v`` is a saved payload this version of forgeviz can draw. */
export function isSavedPayload(v: unknown): v is SavedPayload {
  const p = v as SavedPayload;
  return !!p && typeof p === 'object' && p.version === 1 && typeof p.view === 'string' && !!p.traits && typeof p.traits === 'object';
}

/** base64 → the bytes, as the DataView a custom message's buffer is. */
function bytesOf(b64: string): DataView {
  const text = atob(b64);
  const bytes = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) {
    bytes[i] = text.charCodeAt(i);
  }
  return new DataView(bytes.buffer);
}

type Listener = (...args: any[]) => void;

/** The stand-in model over a saved payload (``get``, ``set``, ``on``, ``off``; no ``send``). */
export function savedModel(payload: SavedPayload) {
  const { view_state: _later, ...traits } = payload.traits; // mountSaved sets it once the view has its data
  const values: Record<string, unknown> = {
    ...traits,
    static: true,
    details: payload.details ?? {},
    details_cut: payload.details_cut ?? null
  };
  const listeners = new Map<string, Set<Listener>>();
  const emit = (name: string, ...args: unknown[]) => [...(listeners.get(name) ?? [])].forEach(cb => cb(...args));
  return {
    get: (key: string): unknown => values[key],
    set(key: string, value: unknown) {
      values[key] = value;
      emit(`change:${key}`);
    },
    save_changes() {},
    on(name: string, cb: Listener) {
      if (!listeners.has(name)) {
        listeners.set(name, new Set());
      }
      listeners.get(name)!.add(cb);
    },
    off(name?: string | null, cb?: Listener | null) {
      if (!name) {
        listeners.clear();
      } else if (!cb) {
        listeners.delete(name);
      } else {
        listeners.get(name)?.delete(cb);
      }
    },
    /** Deliver the saved custom messages to the view. */
    replay() {
      for (const m of payload.messages ?? []) {
        emit('msg:custom', m.content, (m.buffers ?? []).map(bytesOf));
      }
    }
  };
}

/** Draw ``payload`` in ``el`` with its view's entry module; returns the cleanup. */
export function mountSaved(el: HTMLElement, payload: SavedPayload, entry: EntryModule): () => void {
  const render = entry.render ?? entry.default?.render;
  if (typeof render !== 'function') {
    throw new Error(`the forgeviz ${payload.view} bundle has no render function`);
  }
  const model = savedModel(payload);
  const cleanup = render({ model, el });
  const unmount = () => {
    if (typeof cleanup === 'function') {
      cleanup();
    }
    model.off();
  };
  model.replay();
  // the zoom or pinned cell saved with it (``save(state=...)``), once the data and messages are in:
  // the entry shows it (and throws, saying what is wrong with it) on ``change:view_state``
  const state = payload.traits.view_state;
  if (state && typeof state === 'object' && Object.keys(state).length) {
    try {
      model.set('view_state', state);
    } catch (err) {
      unmount();
      throw err;
    }
  }
  return unmount;
}
