/**
 * Where a kernel widget (the memory timeline, the latest graph) is drawn: the Lab host mounts it by
 * model id (``mount``) and its disposer unmounts it. A pinnable host keeps the widget it shows when a
 * new model id comes, and says that a newer one is ready.
 */
import { h } from '../common/dom';

/** Draws the kernel widget ``modelId`` into ``host``; returns what removes it. */
export type MountWidget = (host: HTMLElement, modelId: string) => () => void;

export interface WidgetHost {
  /** ``div.fv-panel-hostbox``: the "newer one" note over ``div.fv-panel-host`` (the widget or the empty text). */
  readonly el: HTMLDivElement;
  /** The pin toggle (``button.fv-panel-pin[aria-pressed]``), null when not pinnable. */
  readonly pin: HTMLButtonElement | null;
  /** Show ``modelId`` (null: none), unless pinned. */
  set(modelId: string | null): void;
  /** The model id drawn now. */
  shown(): string | null;
  /** Unmount and unpin (a new kernel). */
  clear(): void;
}

/**
 * Make a host showing ``empty`` until a model comes.
 *
 * @example
 * const graph = createWidgetHost(doc, mountWidget, 'No backward pass yet', true);
 * section.body.append(graph.el);
 * graph.set(state.graph_model);
 */
export function createWidgetHost(doc: Document, mount: MountWidget, empty: string, pinnable: boolean): WidgetHost {
  const host = h(doc, 'div', { class: 'fv-panel-host' });
  const emptyEl = h(doc, 'div', { class: 'fv-panel-empty' }, empty);
  const note = h(doc, 'div', { class: 'fv-panel-note', hidden: true }, 'A newer one is ready: unpin to show it');
  const pin = pinnable ? h(doc, 'button', { type: 'button', class: 'fv-btn fv-panel-pin', 'aria-pressed': 'false', title: 'Keep this one when a new one comes' }, 'Pin') : null;
  let shown: string | null = null;
  let latest: string | null = null;
  let unmount: (() => void) | null = null;
  let pinned = false;

  const draw = (modelId: string | null) => {
    if (modelId === shown) {
      return;
    }
    unmount?.();
    unmount = null;
    shown = modelId;
    host.replaceChildren();
    if (modelId === null) {
      host.append(emptyEl);
      return;
    }
    const box = host.appendChild(h(doc, 'div', { class: 'fv-panel-widget', 'data-fv-model': modelId }));
    try {
      unmount = mount(box, modelId);
    } catch (err) {
      box.textContent = `could not draw the widget: ${err instanceof Error ? err.message : String(err)}`;
    }
  };
  const setPinned = (value: boolean) => {
    pinned = value;
    pin?.setAttribute('aria-pressed', String(value));
    if (pin) {
      pin.textContent = value ? 'Pinned' : 'Pin';
    }
    if (!value) {
      draw(latest);
    }
    note.hidden = !pinned || latest === shown;
  };
  pin?.addEventListener('click', () => setPinned(!pinned));
  host.append(emptyEl);

  return {
    el: h(doc, 'div', { class: 'fv-panel-hostbox' }, note, host),
    pin,
    set(modelId: string | null) {
      latest = modelId;
      if (!pinned || shown === null) {
        draw(modelId);
      }
      note.hidden = !pinned || latest === shown;
    },
    shown: () => shown,
    clear() {
      latest = null;
      setPinned(false);
    }
  };
}
