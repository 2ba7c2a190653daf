/**
 * The panel's status: a screen in place of the sections while there is nothing to show (no kernel,
 * forgeviz not loaded, a restart, or connecting before the first state), or a line above them
 * (connecting or waiting on a cell, with a state already shown).
 */
import { createStatusLine } from '../common/chrome';
import { h } from '../common/dom';

/** Where the panel's connection to the kernel is (the root's ``data-fv-status``). */
export type PanelStatus = 'not-loaded' | 'connecting' | 'busy' | 'restarted' | 'ready' | 'no-kernel';

export const STATUS_TEXT: Record<PanelStatus, string> = {
  'not-loaded': 'forgeviz is not loaded in this kernel',
  connecting: 'Connecting to the kernel…',
  busy: 'Waiting for the running cell to finish…',
  restarted: 'The kernel restarted: reconnecting when it is ready…',
  ready: '',
  'no-kernel': 'No kernel to show'
};

/** The statuses whose data is gone (the view clears what it showed). */
export const CLEARING: ReadonlySet<PanelStatus> = new Set<PanelStatus>(['not-loaded', 'restarted', 'no-kernel']);

export interface StatusScreen {
  /** ``div.fv-panel-screen[role=status]`` */
  readonly screen: HTMLDivElement;
  /** the line above the sections */
  readonly line: HTMLDivElement;
  /** Show ``status``: on the screen when ``hasData`` is false or the status clears the data, else on the line. */
  show(status: PanelStatus, text: string | undefined, hasData: boolean): void;
}

/**
 * Make the screen and the line; the screen's "Load forgeviz" button (``button.fv-panel-load``,
 * shown for 'not-loaded') calls ``onLoad``.
 *
 * @example
 * const st = createStatusScreen(doc, () => load());
 * st.show('not-loaded', undefined, false);
 */
export function createStatusScreen(doc: Document, onLoad: () => void): StatusScreen {
  const message = h(doc, 'p', { class: 'fv-panel-screen-text' });
  const detail = h(doc, 'p', { class: 'fv-panel-screen-detail', hidden: true });
  const load = h(doc, 'button', { type: 'button', class: 'fv-btn fv-panel-load', title: 'Run %load_ext forgeviz in this kernel' }, 'Load forgeviz');
  const screen = h(doc, 'div', { class: 'fv-panel-screen', role: 'status' }, message, detail, load);
  const line = createStatusLine(doc, 'info');
  load.addEventListener('click', () => {
    load.disabled = true; // until the next status: one %load_ext per click
    onLoad();
  });
  return {
    screen,
    line: line.el,
    show(status: PanelStatus, text: string | undefined, hasData: boolean) {
      const onScreen = status !== 'ready' && (CLEARING.has(status) || !hasData);
      screen.hidden = !onScreen;
      screen.setAttribute('data-kind', status);
      message.textContent = STATUS_TEXT[status];
      detail.textContent = text ?? '';
      detail.hidden = !text;
      load.hidden = status !== 'not-loaded';
      load.disabled = false;
      line.show(onScreen ? null : text || STATUS_TEXT[status] || null, 'info');
    }
  };
}
