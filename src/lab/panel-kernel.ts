/**
 * The side panel's connection to one notebook's kernel: a comm to ``PANEL_TARGET`` (see
 * forgeviz/panel.py), open while the panel is shown.
 *
 * How each status is known:
 * - 'not-loaded': the kernel closes the comm before any state came (ipykernel closes a comm whose
 *   target is not registered; ``%load_ext forgeviz`` registers it), or closes it later (unloaded);
 * - 'busy': the kernel is busy while the comm waits for its first state (the kernel handles the
 *   comm_open only after the running cell), 'connecting' when it is not;
 * - 'no-answer': the kernel stayed idle NO_ANSWER_MS with the comm open and no state (it would have
 *   answered or closed it by then); a busy kernel never times out, and each 'idle' starts the wait
 *   again. It stays until Retry (``refresh``) reconnects, a late state comes or the comm closes, not
 *   undone by the busy/idle blips of completions and tooltips;
 * - 'restarted': the session's status says 'restarting', 'autorestarting' or 'dead'; the comm is
 *   gone with the old process, and the next 'idle' opens a new one;
 * - 'no-kernel': the notebook's session has no kernel.
 */
import type { ISessionContext } from '@jupyterlab/apputils';
import { PANEL_TARGET, PANEL_VERSION, type NativeStatus, type PanelLive, type PanelState } from '../model/wire';
import { errorMessage } from '../render/common/chrome';
import { NO_ANSWER_MS, type PanelStatus } from '../render/panel/view';

/** What the connection needs of a notebook's session context. */
export type SessionContextLike = Pick<ISessionContext, 'session' | 'isReady' | 'ready' | 'kernelChanged' | 'statusChanged'>;
type Kernel = NonNullable<NonNullable<ISessionContext['session']>['kernel']>;
type Comm = ReturnType<Kernel['createComm']>;

/** Where the connection says what it hears (the panel view). */
export interface PanelSink {
  setState(state: PanelState): void;
  setLive(live: PanelLive): void;
  setNative(status: NativeStatus): void;
  setStatus(kind: PanelStatus, text?: string): void;
  clear(): void;
}

/** Kernel statuses after which the kernel process is gone. */
const GONE = new Set(['restarting', 'autorestarting', 'dead']);

/** What the 'no-answer' screen says under its title. */
export const NO_ANSWER_TEXT =
  'It is idle, so it should have: the message may have been lost, or this kernel may not support Jupyter comms. Retry; if it still does not answer, restart the kernel.';

/** The code the "Load forgeviz" button runs. */
export const LOAD_CODE = '%load_ext forgeviz';

/**
 * Is ``data`` a PanelState (or a PanelLive, or a NativeStatus) message?
 *
 * @example
 * messageKind({ type: 'live', seq: 1 }) // 'live'
 */
export function messageKind(data: unknown): 'state' | 'live' | 'native' | null {
  const type = data && typeof data === 'object' ? (data as { type?: unknown }).type : null;
  return type === 'state' || type === 'live' || type === 'native' ? type : null;
}

/**
 * One notebook's connection. ``setActive(true)`` opens the comm (the panel is shown),
 * ``setActive(false)`` closes it, so that the kernel does no per-cell work for a hidden panel.
 *
 * @example
 * const conn = new PanelConnection(notebook.sessionContext, view);
 * conn.setActive(true);   // view gets 'connecting' / 'busy', then 'ready' and a state, 'not-loaded' or 'no-answer'
 * conn.refresh();         // a new state
 * conn.dispose();         // another notebook: close the comm, forget the signals
 */
export class PanelConnection {
  private comm: Comm | null = null;
  private kernel: Kernel | null = null;
  private gotState = false;
  private active = false;
  private gone = false;
  private disposed = false;
  private waitingReady = false;
  /** a cell that mentions forgeviz ran while it was not loaded: try again when the kernel is idle */
  private retryOnIdle = false;
  private status: PanelStatus | null = null;
  private requestId = 0;
  /** runs out NO_ANSWER_MS after the kernel went idle with the comm unanswered */
  private answerTimer: ReturnType<typeof setTimeout> | null = null;

  constructor(
    private readonly ctx: SessionContextLike,
    private readonly sink: PanelSink
  ) {
    ctx.kernelChanged.connect(this.onKernelChanged, this);
    ctx.statusChanged.connect(this.onStatus, this);
    this.watch(ctx.session?.kernel ?? null);
    this.gone = GONE.has(this.kernel?.status ?? '');
  }

  /** Open the comm (shown) or close it (hidden). */
  setActive(active: boolean): void {
    if (active === this.active || this.disposed) {
      return;
    }
    this.active = active;
    if (active) {
      this.connect();
    } else {
      this.drop(true);
    }
  }

  /** Ask for a state now (open the comm again when there is none). */
  refresh(): void {
    if (this.comm && this.gotState) {
      this.comm.send({ type: 'refresh', request_id: ++this.requestId });
    } else {
      this.connect();
    }
  }

  /** Run ``%load_ext forgeviz`` in the kernel, then connect; a failure is said on the 'not-loaded' screen. */
  async load(): Promise<void> {
    const kernel = this.ctx.session?.kernel;
    if (!kernel || this.disposed) {
      return;
    }
    this.set('connecting', 'Loading forgeviz…');
    try {
      const reply = await kernel.requestExecute({ code: LOAD_CODE, silent: true, store_history: false }).done;
      const content = reply.content as { status: string; ename?: string; evalue?: string };
      if (content.status !== 'ok') {
        this.set('not-loaded', `${LOAD_CODE} failed: ${content.ename ?? content.status}: ${content.evalue ?? ''}`);
        return;
      }
    } catch (err) {
      this.set('not-loaded', `${LOAD_CODE} failed: ${errorMessage(err)}`);
      return;
    }
    this.connect();
  }

  dispose(): void {
    if (this.disposed) {
      return;
    }
    this.drop(true);
    this.watch(null);
    this.ctx.kernelChanged.disconnect(this.onKernelChanged, this);
    this.ctx.statusChanged.disconnect(this.onStatus, this);
    this.disposed = true;
  }

  private set(kind: PanelStatus, text?: string): void {
    this.status = kind;
    this.sink.setStatus(kind, text);
  }

  /** Open a comm to the current kernel (when shown and it has one). */
  private connect(): void {
    this.drop(true);
    if (!this.active || this.disposed) {
      return;
    }
    const kernel = this.ctx.session?.kernel ?? null;
    if (!kernel) {
      if (this.ctx.isReady) {
        this.set('no-kernel', 'The active notebook has no kernel: start one to see it here.');
      } else if (!this.waitingReady) {
        this.waitingReady = true;
        this.set('connecting');
        this.ctx.ready.then(
          () => {
            this.waitingReady = false;
            if (!this.comm) {
              this.connect();
            }
          },
          () => (this.waitingReady = false)
        );
      }
      return;
    }
    if (this.gone) {
      this.set('restarted');
      return;
    }
    let comm: Comm;
    try {
      comm = kernel.createComm(PANEL_TARGET);
      comm.onMsg = msg => this.onMessage(comm, msg.content.data);
      comm.onClose = () => this.onClosed(comm);
      this.comm = comm;
      this.gotState = false;
      comm.open({ version: PANEL_VERSION });
    } catch (err) {
      this.comm = null;
      this.set('not-loaded', `could not open the panel's connection: ${errorMessage(err)}`);
      return;
    }
    this.set(kernel.status === 'busy' ? 'busy' : 'connecting');
    this.awaitAnswer(kernel.status);
  }

  /** Time the comm's first answer while the kernel is idle; any other status stops the clock. */
  private awaitAnswer(kernelStatus: string): void {
    this.stopAwaiting();
    if (this.comm && !this.gotState && kernelStatus === 'idle') {
      this.answerTimer = setTimeout(() => {
        this.answerTimer = null;
        this.set('no-answer', NO_ANSWER_TEXT);
      }, NO_ANSWER_MS);
    }
  }

  private stopAwaiting(): void {
    if (this.answerTimer !== null) {
      clearTimeout(this.answerTimer);
      this.answerTimer = null;
    }
  }

  /** Forget the comm; ``close`` tells the kernel (it stops its per-cell work for the panel). */
  private drop(close: boolean): void {
    const comm = this.comm;
    this.comm = null;
    this.gotState = false;
    this.stopAwaiting();
    if (!comm || comm.isDisposed) {
      return;
    }
    try {
      close ? comm.close() : comm.dispose();
    } catch {
      comm.dispose(); // the kernel is gone: nothing to tell
    }
  }

  private onMessage(comm: Comm, data: unknown): void {
    if (comm !== this.comm) {
      return;
    }
    const kind = messageKind(data);
    if (kind === 'state') {
      const state = data as PanelState;
      if (state.version !== PANEL_VERSION) {
        this.drop(true); // of no use, and an open one would go back to 'connecting' at the next idle
        this.set('not-loaded', `the kernel's forgeviz speaks panel version ${state.version}, this page ${PANEL_VERSION}: restart the kernel after upgrading`);
        return;
      }
      this.gotState = true;
      this.stopAwaiting();
      if (this.status !== 'ready') {
        this.set('ready');
      }
      this.sink.setState(state);
    } else if (kind === 'live' && this.gotState) {
      this.sink.setLive(data as PanelLive);
    } else if (kind === 'native') {
      this.sink.setNative(data as NativeStatus); // from the build's thread: it may come before the state
    }
  }

  private onClosed(comm: Comm): void {
    if (comm !== this.comm) {
      return;
    }
    this.comm = null;
    this.gotState = false;
    this.stopAwaiting();
    // before a state: no such target (forgeviz not loaded); after: forgeviz was unloaded
    this.set('not-loaded');
  }

  private onStatus(_: unknown, status: string): void {
    if (GONE.has(status)) {
      if (!this.gone) {
        this.gone = true;
        this.drop(false);
        this.set('restarted');
      }
      return;
    }
    if (this.gone) {
      if (status === 'idle') {
        this.gone = false;
        this.connect();
      }
      return;
    }
    if (this.comm && !this.gotState && this.status !== 'no-answer' && (status === 'busy' || status === 'idle')) {
      this.set(status === 'busy' ? 'busy' : 'connecting');
      this.awaitAnswer(status); // messages wait behind a running cell: only an idle kernel is late
    } else if (status === 'idle' && this.retryOnIdle) {
      this.retryOnIdle = false;
      this.connect();
    }
  }

  private onKernelChanged(_: unknown, args: { newValue: Kernel | null }): void {
    this.drop(true);
    this.watch(args.newValue);
    this.gone = false;
    this.sink.clear(); // never a row of the old kernel
    this.connect();
  }

  /** Listen to ``kernel``'s iopub for a cell that loads forgeviz while the panel says it is not loaded. */
  private watch(kernel: Kernel | null): void {
    this.kernel?.iopubMessage.disconnect(this.onIOPub, this);
    this.kernel = kernel;
    kernel?.iopubMessage.connect(this.onIOPub, this);
  }

  private onIOPub(_: unknown, msg: { header: { msg_type: string }; content: unknown }): void {
    if (this.status === 'not-loaded' && msg.header.msg_type === 'execute_input') {
      const code = (msg.content as { code?: unknown }).code;
      this.retryOnIdle ||= typeof code === 'string' && code.includes('forgeviz');
    }
  }
}
