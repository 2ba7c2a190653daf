/**
 * The panel's status: a screen in place of the sections while there is nothing to show (no kernel,
 * forgeviz not loaded, a restart, a kernel that does not answer, or connecting before the first
 * state), or a line above them (connecting or waiting on a cell, with a state already shown).
 */
import { createStatusLine } from '../common/chrome';
import { h } from '../common/dom';

/** Where the panel's connection to the kernel is (the root's ``data-fv-status``). */
export type PanelStatus = 'not-loaded' | 'connecting' | 'busy' | 'restarted' | 'ready' | 'no-kernel' | 'no-answer';

/** How long an idle kernel may leave the panel's comm unanswered before the panel says 'no-answer'. */
export const NO_ANSWER_MS = 10_000;

export const STATUS_TEXT: Record<PanelStatus, string> = {
  'not-loaded': 'forgeviz is not loaded in this kernel',
  connecting: 'Connecting to the kernel…',
  busy: 'Waiting for the running cell to finish…',
  restarted: 'The kernel restarted: reconnecting when it is ready…',
  ready: '',
  'no-kernel': 'No kernel to show',
  'no-answer': `The kernel has not answered the panel in ${NO_ANSWER_MS / 1000} s`
};

/** The statuses whose data is gone (the view clears what it showed). */
export const CLEARING: ReadonlySet<PanelStatus> = new Set<PanelStatus>(['not-loaded', 'restarted', 'no-kernel']);

/** The statuses that take the whole screen even over a state shown (each asks the user to act, or says why nothing comes). */
export const ON_SCREEN: ReadonlySet<PanelStatus> = new Set<PanelStatus>([...CLEARING, 'no-answer']);

/** The statuses on the way to a state: they may last a moment only, so the view waits before showing one. */
export const TRANSIENT: ReadonlySet<PanelStatus> = new Set<PanelStatus>(['connecting', 'busy']);

export interface StatusScreen {
  /** ``div.fv-panel-screen[role=status]`` */
  readonly screen: HTMLDivElement;
  /** the line above the sections */
  readonly line: HTMLDivElement;
  /** Show ``status``: on the screen when ``hasData`` is false or the status is ON_SCREEN, else on the line. */
  show(status: PanelStatus, text: string | undefined, hasData: boolean): void;
}

/**
 * Make the screen and the line. The screen's "Load forgeviz" button (``button.fv-panel-load``,
 * shown for 'not-loaded') calls ``onLoad``; its "Retry" button (``button.fv-panel-retry``, shown
 * for 'no-answer') calls ``onRetry``.
 *
 * @example
 * const st = createStatusScreen(doc, () => load(), () => reconnect());
 * st.show('not-loaded', undefined, false);
 */
export function createStatusScreen(doc: Document, onLoad: () => void, onRetry: () => void): StatusScreen {
  const message = h(doc, 'p', { class: 'fv-panel-screen-text' });
  const detail = h(doc, 'p', { class: 'fv-panel-screen-detail', hidden: true });
  const load = h(doc, 'button', { type: 'button', class: 'fv-btn fv-panel-load', title: 'Run %load_ext forgeviz in this kernel' }, 'Load forgeviz');
  const retry = h(doc, 'button', { type: 'button', class: 'fv-btn fv-panel-retry', title: 'Open the panel’s connection to the kernel again' }, 'Retry');
  const screen = h(doc, 'div', { class: 'fv-panel-screen', role: 'status' }, message, detail, load, retry);
  const line = createStatusLine(doc, 'info');
  // each button is disabled until the next status: one %load_ext, one reconnection per click
  load.addEventListener('click', () => {
    load.disabled = true;
    onLoad();
  });
  retry.addEventListener('click', () => {
    retry.disabled = true;
    onRetry();
  });
  return {
    screen,
    line: line.el,
    show(status: PanelStatus, text: string | undefined, hasData: boolean) {
      const onScreen = status !== 'ready' && (ON_SCREEN.has(status) || !hasData);
      screen.hidden = !onScreen;
      screen.setAttribute('data-kind', status);
      message.textContent = STATUS_TEXT[status];
      detail.textContent = text ?? '';
      detail.hidden = !text;
      load.hidden = status !== 'not-loaded';
      load.disabled = false;
      retry.hidden = status !== 'no-answer';
      retry.disabled = false;
      line.show(onScreen ? null : text || STATUS_TEXT[status] || null, 'info');
    }
  };
}
