/**
 * "Go to cell": the graph inspector's source button dispatches ``forgeviz:goto-cell`` with an
 * execution count and a line; here JupyterLab finds that code cell in the notebook, activates it,
 * scrolls to it, puts the cursor on the line and flashes it.
 *
 * @jupyterlab/notebook is not a dependency: the notebook is reached through the shell and read
 * structurally (NotebookPanel.content.widgets, Cell.model.executionCount, Cell.editor), so the
 * finding itself (``findCodeCell``) is plain data and testable without Lab.
 */

/** Name of the event (see src/render/graph/inspector.ts, which dispatches it). */
export const GOTO_CELL_EVENT = 'forgeviz:goto-cell';

/** The class that flashes the found cell (style/lab.css). */
export const FLASH_CLASS = 'fv-goto-flash';
export const FLASH_MS = 1500;

/** What the event carries: ``cell`` is the execution count, ``line`` 1-based. */
export interface GotoCellRequest {
  cell: number;
  line: number | null;
  /** The source line, when known: tells apart cells that show the same execution count. */
  source?: string | null;
}

/** A cell as plain data. */
export interface CellFacts {
  type: string;
  executionCount: number | null;
  /** The cell's text, to prefer the cell that still holds ``source``. */
  text?: string;
}

/**
 * Index of the code cell whose execution count is ``executionCount``; -1 when none is. Counts
 * repeat after a kernel restart (old outputs keep theirs): then the first one holding ``source``
 * wins, else the first.
 */
export function findCodeCell(cells: readonly CellFacts[], executionCount: number, source?: string | null): number {
  const matches: number[] = [];
  cells.forEach((c, i) => {
    if (c.type === 'code' && c.executionCount === executionCount) {
      matches.push(i);
    }
  });
  if (matches.length > 1 && source) {
    const needle = source.trim();
    const holding = matches.find(i => (cells[i].text ?? '').includes(needle));
    if (holding !== undefined) {
      return holding;
    }
  }
  return matches.length ? matches[0] : -1;
}

/** Read a ``GOTO_CELL_EVENT``'s detail; null when it is not one we understand. */
export function gotoRequest(detail: unknown): GotoCellRequest | null {
  if (!detail || typeof detail !== 'object') {
    return null;
  }
  const d = detail as Record<string, unknown>;
  if (typeof d.cell !== 'number' || !Number.isFinite(d.cell)) {
    return null;
  }
  const line = typeof d.line === 'number' && Number.isFinite(d.line) ? d.line : null;
  const source = typeof d.source === 'string' ? d.source : null;
  return { cell: d.cell, line, source };
}

// --- the parts of JupyterLab's notebook we touch, structurally ------------------------------

interface EditorLike {
  setCursorPosition(position: { line: number; column: number }): void;
  focus(): void;
  lineCount?: number;
}

interface CellWidgetLike {
  node: HTMLElement;
  model: { type: string; executionCount?: number | null; sharedModel?: { getSource?(): string } };
  editor: EditorLike | null;
  ready?: Promise<void>;
}

interface NotebookLike {
  widgets: readonly CellWidgetLike[];
  activeCellIndex: number;
  mode?: string;
  scrollToCell?(cell: CellWidgetLike, align?: string): Promise<void>;
}

/** A main-area widget that looks like a NotebookPanel. */
export interface NotebookPanelLike {
  id: string;
  node: HTMLElement;
  content: NotebookLike;
}

/** The slice of JupyterFrontEnd.IShell used here. */
export interface ShellLike {
  readonly currentWidget: unknown;
  widgets(area?: string): IterableIterator<unknown>;
  activateById(id: string): void;
}

function isNotebookPanel(w: unknown): w is NotebookPanelLike {
  const content = (w as { content?: { widgets?: unknown } } | null)?.content;
  return !!content && Array.isArray(content.widgets);
}

/**
 * The notebooks to look in, best first: the one the event came from (its target inside it), the
 * shell's current one, then every other notebook in the main area (an output opened in its own tab).
 */
export function notebooksFor(shell: ShellLike, target: EventTarget | null): NotebookPanelLike[] {
  const all = [...shell.widgets('main')].filter(isNotebookPanel);
  const current = isNotebookPanel(shell.currentWidget) ? shell.currentWidget : null;
  const holder = target instanceof Node ? all.find(w => w.node.contains(target)) : undefined;
  const first = [holder, current].filter((w): w is NotebookPanelLike => !!w);
  return [...new Set([...first, ...all])];
}

function cellFacts(cell: CellWidgetLike): CellFacts {
  let text: string | undefined;
  try {
    text = cell.model.sharedModel?.getSource?.();
  } catch {
    text = undefined;
  }
  return { type: cell.model.type, executionCount: cell.model.executionCount ?? null, text };
}

/** Add the flash class for ``ms`` (restarting it if it is already there). */
export function flash(node: HTMLElement, ms = FLASH_MS): void {
  node.classList.remove(FLASH_CLASS);
  // Force a style flush so a repeated flash restarts its animation.
  void node.offsetWidth;
  node.classList.add(FLASH_CLASS);
  setTimeout(() => node.classList.remove(FLASH_CLASS), ms);
}

/**
 * Show ``request``'s cell in ``panel``: activate it, scroll to it, cursor on the line, flash.
 * Returns false (and does nothing) when the notebook has no such code cell.
 */
export async function gotoCell(shell: ShellLike, panel: NotebookPanelLike, request: GotoCellRequest): Promise<boolean> {
  const notebook = panel.content;
  const index = findCodeCell(notebook.widgets.map(cellFacts), request.cell, request.source);
  if (index < 0) {
    return false;
  }
  const cell = notebook.widgets[index];
  shell.activateById(panel.id);
  notebook.activeCellIndex = index;
  if (notebook.scrollToCell) {
    await notebook.scrollToCell(cell, 'center');
  } else {
    cell.node.scrollIntoView({ block: 'center' });
  }
  // A windowed notebook makes the editor once the cell is rendered.
  await cell.ready;
  const editor = cell.editor;
  if (editor) {
    const last = editor.lineCount !== undefined ? Math.max(0, editor.lineCount - 1) : Infinity;
    editor.setCursorPosition({ line: Math.min(Math.max(0, (request.line ?? 1) - 1), last), column: 0 });
    notebook.mode = 'edit';
    editor.focus();
  }
  flash(cell.node);
  return true;
}

/**
 * Listen on ``doc`` for ``GOTO_CELL_EVENT`` and answer it in the first notebook (see
 * ``notebooksFor``) that has the cell. No such cell, or no notebook, is no error: nothing happens.
 * Returns the undo.
 */
export function installGoto(shell: ShellLike, doc: Document = document): () => void {
  const onGoto = async (event: Event): Promise<void> => {
    const request = gotoRequest((event as CustomEvent).detail);
    if (!request) {
      return;
    }
    try {
      for (const panel of notebooksFor(shell, event.target)) {
        if (await gotoCell(shell, panel, request)) {
          return;
        }
      }
    } catch (err) {
      console.debug('forgeviz: go to cell', err);
    }
  };
  const listener = (event: Event): void => void onGoto(event);
  doc.addEventListener(GOTO_CELL_EVENT, listener);
  return () => doc.removeEventListener(GOTO_CELL_EVENT, listener);
}
