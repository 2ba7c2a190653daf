/**
 * The forgeviz side panel in JupyterLab and Notebook 7 (issue 16): a right-sidebar widget, added the
 * first time the command ``forgeviz:toggle-panel`` runs (command palette, View menu), that follows
 * the current notebook and draws what its kernel sends (src/render/panel/view.ts) over a comm
 * (panel-kernel.ts), open only while the panel is shown.
 *
 * @jupyterlab/notebook and @jupyterlab/mainmenu are not dependencies (nor installable offline here):
 * the current notebook is the shell's current widget with a session context and a rendermime (as
 * goto.ts reads notebooks), kept while another kind of widget is current, as Lab's notebook tracker
 * does; the View menu is found in the shell's menu area.
 *
 * @jupyterlab/apputils and ui-components are imported when the plugin activates, not with this
 * module: mime.ts imports index.ts (installGlobal), so what index.ts imports comes with the saved
 * output renderer, in the tests too, where those packages cannot load (and need not).
 */
import type { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import type { MainAreaWidget } from '@jupyterlab/apputils';
import type { LabIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';
import type { TensorRow } from '../model/wire';
import { createPanelView, type PanelView } from '../render/panel/view';
import { PanelConnection, type SessionContextLike } from './panel-kernel';
import { KernelOutput, mountKernelWidget, openRunCode, runTitle, showCode, type RendermimeLike } from './panel-output';

export const PANEL_ID = 'forgeviz-panel';
/** How long the panel may be hidden before its kernel connection closes. */
export const HIDDEN_GRACE_MS = 1500;
export const TOGGLE_COMMAND = 'forgeviz:toggle-panel';
/** Asks for a run's folder and opens it (``forgeviz.open``) beside the current notebook. */
export const OPEN_RUN_COMMAND = 'forgeviz:open-run';

const ICON_SVG =
  '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">' +
  '<path class="jp-icon3" fill="none" stroke="#616161" stroke-width="2" d="M6 6l6 12M18 6l-6 12"/>' +
  '<g class="jp-icon3" fill="#616161"><circle cx="6" cy="5" r="3"/><circle cx="18" cy="5" r="3"/><circle cx="12" cy="19" r="3"/></g></svg>';

/** What the panel takes from Lab's packages (imported on activation, see above). */
export interface LabParts {
  icon: LabIcon;
  MainAreaWidget: typeof MainAreaWidget;
}

/**
 * Run ``code`` in ``nb``'s kernel into a new output in the main area beside it, titled ``label`` (its
 * tooltip ``caption``, the label when not given):
 * how the panel opens a tensor's view and the "Open run…" command a run. False when ``nb`` has no kernel.
 *
 * @example
 * runBeside(app, parts, nb, 'forgeviz: runs/exp1', openRunCode('runs/exp1'))
 */
export function runBeside(app: JupyterFrontEnd, parts: LabParts, nb: NotebookLike | null, label: string, code: string, caption = label): boolean {
  const kernel = nb?.sessionContext.session?.kernel;
  if (!nb || !kernel) {
    return false;
  }
  const output = new KernelOutput(nb.content.rendermime);
  const widget = new parts.MainAreaWidget({ content: output });
  widget.id = `forgeviz-show-${Math.random().toString(36).slice(2, 10)}`;
  widget.title.label = label;
  widget.title.caption = caption;
  widget.title.icon = parts.icon;
  widget.title.closable = true;
  addBeside(app, widget, nb.id);
  void output.run(kernel, code);
  return true;
}

/** A notebook panel as the side panel reads it. */
export interface NotebookLike extends Widget {
  sessionContext: SessionContextLike;
  content: Widget & { rendermime: RendermimeLike };
}

/**
 * ``w`` when it is a notebook-like document (a session context and a rendermime), else null.
 *
 * @example
 * asNotebook(app.shell.currentWidget) // the NotebookPanel, or null for a text editor
 */
export function asNotebook(w: Widget | null): NotebookLike | null {
  const nb = w as Partial<NotebookLike> | null;
  const ok = !!nb?.sessionContext?.kernelChanged && typeof nb.content?.rendermime?.createRenderer === 'function';
  return ok ? (nb as NotebookLike) : null;
}

/** The panel: a Lumino widget around the view, following one notebook at a time. */
export class ForgevizPanel extends Widget {
  readonly view: PanelView;
  private notebook: NotebookLike | null = null;
  private conn: PanelConnection | null = null;
  private hiding = 0;

  constructor(
    private readonly app: JupyterFrontEnd,
    private readonly parts: LabParts
  ) {
    super();
    this.id = PANEL_ID;
    this.addClass('fv-side-panel');
    this.title.icon = parts.icon;
    this.title.caption = 'forgeviz';
    this.title.label = 'forgeviz';
    const el = this.node.appendChild(document.createElement('div'));
    this.view = createPanelView(el, {
      onLoad: () => void this.conn?.load(),
      onOpen: row => this.open(row),
      onRefresh: () => this.conn?.refresh(),
      mountWidget: (host, modelId) => (this.notebook ? mountKernelWidget(this.notebook.content.rendermime, host, modelId) : () => undefined)
    });
    this.view.setStatus('no-kernel', 'Open a notebook: the panel follows the active one.');
  }

  /** Show ``nb``'s kernel (null: none); nothing of the notebook before stays. */
  follow(nb: NotebookLike | null): void {
    if (nb === this.notebook) {
      return;
    }
    this.conn?.dispose();
    this.conn = null;
    this.view.clear();
    this.notebook = nb;
    if (!nb) {
      this.view.setStatus('no-kernel', 'Open a notebook: the panel follows the active one.');
      return;
    }
    this.conn = new PanelConnection(nb.sessionContext, this.view);
    this.conn.setActive(this.isVisible);
  }

  /** Open ``row``'s view (forgeviz.show) in the main area, next to the notebook. */
  private open(row: TensorRow): void {
    runBeside(this.app, this.parts, this.notebook, `forgeviz: ${row.name}`, showCode(row));
  }

  private changed(): void {
    window.clearTimeout(this.hiding);
    if (this.isVisible) {
      this.conn?.setActive(true);
    } else {
      // Lab hides the sidebar for a moment when the theme changes: the kernel stops its work for the
      // panel (and the doctor) only once it stays hidden
      this.hiding = window.setTimeout(() => this.conn?.setActive(this.isVisible), HIDDEN_GRACE_MS);
    }
    this.app.commands.notifyCommandChanged(TOGGLE_COMMAND);
  }

  protected onAfterShow(): void {
    this.changed();
  }

  protected onAfterHide(): void {
    this.changed();
  }

  protected onAfterAttach(): void {
    this.changed();
  }

  protected onAfterDetach(): void {
    this.changed();
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    window.clearTimeout(this.hiding);
    this.conn?.dispose();
    this.conn = null;
    this.view.destroy();
    super.dispose();
  }
}

/** Add ``widget`` to the main area split beside ``ref``; Notebook 7 keeps one main widget, so there the bottom or right area. */
function addBeside(app: JupyterFrontEnd, widget: Widget, ref: string): void {
  for (const [area, options] of [
    ['main', { mode: 'split-right' as const, ref, activate: true }],
    ['down', {}],
    ['right', { rank: 601 }]
  ] as const) {
    if (!widget.isAttached) {
      app.shell.add(widget, area, options);
    }
  }
  app.shell.activateById(widget.id);
  makeRoom(widget);
}

/** A split panel as ``makeRoom`` reads it (Lumino's SplitPanel). */
interface SplitLike {
  orientation: string;
  widgets: readonly Widget[];
  relativeSizes(): number[];
  setRelativeSizes(sizes: number[]): void;
}

/** The share of a vertical split that a view opened in Notebook 7's bottom area gets when it had less. */
export const DOWN_SHARE = 0.45;

/**
 * Give ``widget`` a readable height when it sits in a vertical split that left it a sliver: Notebook 7
 * opens its bottom area at a tab bar's height, so a view opened there would show nothing until dragged.
 *
 * @example
 * makeRoom(view) // Notebook 7: the bottom area now takes 45% of the height; Lab's main area: unchanged
 */
export function makeRoom(widget: Widget): void {
  let child: Widget = widget;
  for (let p = widget.parent; p; child = p, p = p.parent) {
    const split = p as unknown as Partial<SplitLike>;
    if (split.orientation === 'vertical' && typeof split.setRelativeSizes === 'function' && split.widgets && split.relativeSizes) {
      const at = split.widgets.indexOf(child);
      const sizes = split.relativeSizes();
      if (at >= 0 && sizes.length === 2 && sizes[at] < DOWN_SHARE / 2) {
        split.setRelativeSizes(at === 1 ? [1 - DOWN_SHARE, DOWN_SHARE] : [DOWN_SHARE, 1 - DOWN_SHARE]);
      }
      return;
    }
  }
}

/**
 * Follow the shell's current notebook: call ``onChange`` with it when another becomes current, keep
 * it while a widget that is no notebook is current, and with the current one (or null) when it closes.
 * Returns what stops following.
 *
 * @example
 * const stop = followNotebooks(app, nb => panel.follow(nb));
 */
export function followNotebooks(app: JupyterFrontEnd, onChange: (nb: NotebookLike | null) => void): () => void {
  let current: NotebookLike | null = null;
  const set = (nb: NotebookLike | null) => {
    if (nb === current) {
      return;
    }
    current?.disposed.disconnect(closed);
    current = nb;
    nb?.disposed.connect(closed);
    onChange(nb);
  };
  const closed = () => {
    current = null;
    set(asNotebook(app.shell.currentWidget));
  };
  const update = () => {
    const nb = asNotebook(app.shell.currentWidget);
    if (nb) {
      set(nb);
    }
  };
  app.shell.currentChanged?.connect(update);
  update();
  return () => {
    app.shell.currentChanged?.disconnect(update);
    current?.disposed.disconnect(closed);
    current = null;
  };
}

/** Add ``command`` to the View menu (the main menu in the shell's menu area, Lab's and Notebook 7's). */
function addToViewMenu(app: JupyterFrontEnd, command: string): void {
  for (const w of app.shell.widgets('menu')) {
    const view = (w as { viewMenu?: { addItem(options: { command: string; rank?: number }): unknown } }).viewMenu;
    if (view && typeof view.addItem === 'function') {
      view.addItem({ command, rank: 1000 });
      return;
    }
  }
}

/** The side panel's plugin: the command, its palette and View menu items; the panel on first use. */
export const panelPlugin: JupyterFrontEndPlugin<void> = {
  id: 'forgeviz:panel',
  description: 'The forgeviz side panel: the notebook kernel’s tensors, latest graph, memory and incidents.',
  autoStart: true,
  activate: async (app: JupyterFrontEnd) => {
    const [{ ICommandPalette, InputDialog, MainAreaWidget, showErrorMessage }, { LabIcon }] = await Promise.all([
      import('@jupyterlab/apputils'),
      import('@jupyterlab/ui-components')
    ]);
    const icon = new LabIcon({ name: 'forgeviz:panel', svgstr: ICON_SVG });
    let panel: ForgevizPanel | null = null;
    app.commands.addCommand(TOGGLE_COMMAND, {
      label: 'forgeviz panel',
      caption: 'Show or hide the forgeviz side panel',
      icon,
      isToggled: () => !!panel?.isVisible,
      execute: () => {
        if (!panel || panel.isDisposed) {
          const created = new ForgevizPanel(app, { icon, MainAreaWidget });
          panel = created;
          const stop = followNotebooks(app, nb => created.follow(nb));
          created.disposed.connect(stop);
        }
        if (!panel.isAttached) {
          app.shell.add(panel, 'right', { rank: 600 });
          app.shell.activateById(panel.id);
        } else if (panel.isVisible) {
          const shell = app.shell as { collapseRight?(): void };
          shell.collapseRight ? shell.collapseRight() : panel.close();
        } else {
          app.shell.activateById(panel.id);
        }
      }
    });
    // "Open run…": the folder from the command's ``folder`` argument, else asked for
    let notebook: NotebookLike | null = null;
    followNotebooks(app, nb => (notebook = nb));
    app.commands.addCommand(OPEN_RUN_COMMAND, {
      label: 'Open run…',
      caption: 'Open a run recorded by `python -m forgeviz record` (forgeviz.open) beside the current notebook',
      icon,
      execute: async args => {
        let folder = typeof args.folder === 'string' ? args.folder : null;
        if (folder === null) {
          const answer = await InputDialog.getText({ title: 'Open a forgeviz run', label: 'The run’s folder, as the notebook’s kernel sees it', placeholder: 'runs/exp1' });
          folder = answer.button.accept ? answer.value : null;
        }
        if (!folder?.trim()) {
          return;
        }
        if (!runBeside(app, { icon, MainAreaWidget }, notebook, runTitle(folder), openRunCode(folder), `forgeviz: ${folder.trim()}`)) {
          void showErrorMessage('Open run…', 'Open a notebook with a running kernel first: the run opens in its kernel.');
        }
      }
    });
    const palette = await app.resolveOptionalService(ICommandPalette);
    palette?.addItem({ command: TOGGLE_COMMAND, category: 'forgeviz' });
    palette?.addItem({ command: OPEN_RUN_COMMAND, category: 'forgeviz' });
    void app.restored.then(() => addToViewMenu(app, TOGGLE_COMMAND));
  }
};
