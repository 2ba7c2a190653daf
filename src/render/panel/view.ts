/**
 * The forgeviz side panel (issue 16): what went wrong and what the notebook's kernel holds, in four
 * sections (Doctor, Tensors, Graph, Memory), and where the panel's connection to the kernel is.
 * Pure DOM; imports nothing from Jupyter. The Lab host (src/lab/panel.ts) feeds it the kernel's
 * PanelState and PanelLive messages and draws kernel widgets into it (``mountWidget``).
 *
 * The parts: data.ts (grouping, filter, sort), rows.ts and tensors.ts, host.ts (a kernel widget's
 * host, pinnable), live.ts (live bytes by category), doctor.ts, screen.ts (statuses), section.ts.
 *
 * Hooks for automation: ``[data-fv-panel]`` and ``[data-fv-status]`` on the root,
 * ``[data-fv-section="tensors"|"graph"|"memory"|"doctor"]`` on the sections,
 * ``[data-fv-tensor="<name>"]`` on each tensor row, ``[data-fv-doctor="<kind>"]`` on each finding,
 * ``data-fv-updated`` (the last PanelLive's ``seq``) on the memory section, and
 * ``[data-fv-native="building"|"ready"|"partial"|"failed"]`` on the native-build line (native.ts).
 *
 * The Doctor comes first, and the sticky toolbar says how many incidents it holds (a click shows
 * them): a narrow sidebar must not hide them below a long tensor listing. 'connecting' and 'busy'
 * wait SETTLE_MS before they show over a state or over each other, so that a kernel's start or a
 * quick cell does not make the panel flicker; every other status shows at once.
 */
import type { NativeStatus, PanelLive, PanelState, TensorRow } from '../../model/wire';
import { button, toolbar } from '../common/chrome';
import { h } from '../common/dom';
import { createDoctorSection } from './doctor';
import { createWidgetHost, type MountWidget } from './host';
import { createLiveLine } from './live';
import { createNativeLine } from './native';
import { CLEARING, createStatusScreen, ON_SCREEN, TRANSIENT, type PanelStatus } from './screen';
import { createSection } from './section';
import { createTensorsSection } from './tensors';

export type { PanelStatus } from './screen';
export { NO_ANSWER_MS } from './screen';
export type { MountWidget } from './host';

/** How long a 'connecting' or 'busy' must last before it replaces a state shown, or the other one. */
export const SETTLE_MS = 300;

export interface PanelViewOptions {
  /** The "Load forgeviz" button (status 'not-loaded'). */
  onLoad(): void;
  /** A tensor row was clicked (or Enter or Space pressed on it). */
  onOpen(row: TensorRow): void;
  /** The refresh button, and the Retry button of 'no-answer': ask the kernel for a state now (opening the connection again when none came). */
  onRefresh(): void;
  /** Draw the kernel widget ``modelId`` (memory timeline, graph) into ``host``; returns its disposer. */
  mountWidget: MountWidget;
}

export interface PanelView {
  /** Show the kernel's state (a state from another kernel process clears the old one first). */
  setState(state: PanelState): void;
  /** A live update while a cell runs. */
  setLive(live: PanelLive): void;
  /** The kernel's background build of forgeviz's native libraries moved on. */
  setNative(status: NativeStatus): void;
  /** Where the connection is; ``text`` says more (e.g. why loading failed). A 'connecting' or 'busy' over a state shows after SETTLE_MS, unless another status came first. */
  setStatus(kind: PanelStatus, text?: string): void;
  /** Forget everything shown (another notebook, another kernel). */
  clear(): void;
  destroy(): void;
}

/**
 * Draw the panel into ``el`` (``.fv-root.fv-panel[data-fv-panel]``), in status 'connecting'.
 *
 * @example
 * const view = createPanelView(el, { onLoad, onOpen: row => show(row.name), onRefresh, mountWidget });
 * view.setStatus('ready');
 * view.setState(message);
 */
export function createPanelView(el: HTMLElement, opts: PanelViewOptions): PanelView {
  const doc = el.ownerDocument;
  el.classList.add('fv-root', 'fv-panel');
  el.setAttribute('data-fv-panel', '');

  const status = createStatusScreen(doc, () => opts.onLoad(), () => opts.onRefresh());
  const refresh = button(doc, 'fv-panel-refresh', '↻ Refresh', 'Ask the kernel for what it holds now');
  const cell = h(doc, 'span', { class: 'fv-panel-cell' });
  const alert = h(doc, 'button', { type: 'button', class: 'fv-btn fv-panel-alert', hidden: true });
  const bar = toolbar(doc, 'forgeviz panel', cell, alert, refresh);
  refresh.addEventListener('click', () => opts.onRefresh());

  const tensors = createTensorsSection(doc, row => opts.onOpen(row));
  const graphHost = createWidgetHost(doc, opts.mountWidget, 'No backward pass yet', true);
  const graph = createSection(doc, 'graph', 'Graph', ...(graphHost.pin ? [graphHost.pin] : []));
  graph.body.append(graphHost.el);
  const memoryHost = createWidgetHost(doc, opts.mountWidget, 'No memory timeline', false);
  const live = createLiveLine(doc);
  const memory = createSection(doc, 'memory', 'Memory');
  memory.body.append(live.el, memoryHost.el);
  const doctor = createDoctorSection(doc);
  const native = createNativeLine(doc);
  const sections = h(doc, 'div', { class: 'fv-panel-sections' }, doctor.el, tensors.el, graph.el, memory.el);
  alert.addEventListener('click', () => {
    doctor.open();
    doctor.el.scrollIntoView?.({ block: 'start' });
  });
  const setFindings = (state: Pick<PanelState, 'findings' | 'warnings'> | null) => {
    const n = doctor.set(state?.findings ?? [], state?.warnings ?? []);
    alert.hidden = n === 0;
    alert.textContent = `⚠ ${n}`;
    alert.title = `${n} incident${n === 1 ? '' : 's'} in the Doctor: show ${n === 1 ? 'it' : 'them'}`;
    alert.setAttribute('aria-label', alert.title);
  };

  el.replaceChildren(status.screen, bar, status.line, native.el, sections);

  let kernel: string | null = null;
  let current: PanelStatus = 'connecting';
  let text: string | undefined;
  let settling: ReturnType<typeof setTimeout> | null = null;

  const clear = () => {
    kernel = null;
    tensors.set(null);
    graphHost.clear();
    memoryHost.clear();
    live.set(null);
    native.set(null);
    setFindings(null);
    cell.textContent = '';
    memory.el.removeAttribute('data-fv-updated');
  };
  const show = () => {
    const hasData = kernel !== null;
    el.setAttribute('data-fv-status', current);
    status.show(current, text, hasData);
    const visible = current === 'ready' || (hasData && !ON_SCREEN.has(current));
    bar.hidden = !visible;
    sections.hidden = !visible;
    refresh.disabled = current !== 'ready';
  };
  const apply = (kind: PanelStatus, detail: string | undefined) => {
    current = kind;
    text = detail;
    if (CLEARING.has(kind)) {
      clear();
    }
    show();
  };
  const unsettle = () => {
    if (settling !== null) {
      clearTimeout(settling);
      settling = null;
    }
  };
  clear();
  show();

  return {
    setState(state: PanelState) {
      if (kernel !== null && state.kernel !== kernel) {
        clear(); // a restarted kernel: nothing of the old one stays
      }
      kernel = state.kernel;
      cell.textContent = state.cell !== null ? `after cell [${state.cell}]` : '';
      if (state.tensors) {
        tensors.set(state.tensors); // null: unchanged since the last state
      }
      graphHost.set(state.graph_model);
      memoryHost.set(state.memory_model);
      native.set(state.native);
      setFindings(state);
      show();
    },
    setLive(l: PanelLive) {
      live.set(l);
      memory.el.setAttribute('data-fv-updated', String(l.seq));
    },
    setNative(s: NativeStatus) {
      native.set(s);
    },
    setStatus(kind: PanelStatus, detail?: string) {
      unsettle();
      // a state shown, or one on its way: a passing 'connecting' or 'busy' need not replace it yet
      const wait = TRANSIENT.has(kind) && (TRANSIENT.has(current) || (current === 'ready' && kernel !== null));
      if (!wait) {
        apply(kind, detail);
      } else if (kind !== current || detail !== text) {
        settling = setTimeout(() => {
          settling = null;
          apply(kind, detail);
        }, SETTLE_MS);
      }
    },
    clear() {
      clear();
      show();
    },
    destroy() {
      unsettle();
      clear();
      el.replaceChildren();
      el.classList.remove('fv-root', 'fv-panel');
      el.removeAttribute('data-fv-panel');
      el.removeAttribute('data-fv-status');
    }
  };
}
