/** "Go to cell" without JupyterLab: the finding on plain data, and the steps on a fake notebook. */
import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  FLASH_CLASS,
  findCodeCell,
  GOTO_CELL_EVENT,
  gotoCell,
  gotoRequest,
  installGoto,
  type NotebookPanelLike,
  notebooksFor,
  type ShellLike
} from '../../src/lab/goto';
import { GOTO_CELL_EVENT as INSPECTOR_EVENT } from '../../src/render/graph/inspector';

afterEach(() => {
  vi.useRealTimers();
  document.body.replaceChildren();
});

describe('findCodeCell', () => {
  const cells = [
    { type: 'markdown', executionCount: null },
    { type: 'code', executionCount: 1, text: 'x = 1' },
    { type: 'code', executionCount: 3, text: 'z = x * y\nw = z + x' },
    { type: 'raw', executionCount: 3 }
  ];

  it('finds the code cell by execution count', () => {
    expect(findCodeCell(cells, 3)).toBe(2);
    expect(findCodeCell(cells, 1)).toBe(1);
  });

  it('says -1 when no code cell has it', () => {
    expect(findCodeCell(cells, 7)).toBe(-1);
    expect(findCodeCell([], 1)).toBe(-1);
  });

  it('prefers the cell holding the source line when a count repeats', () => {
    const restarted = [...cells, { type: 'code', executionCount: 1, text: 'loss = (x * y + x) ** 2' }];
    expect(findCodeCell(restarted, 1)).toBe(1);
    expect(findCodeCell(restarted, 1, '  loss = (x * y + x) ** 2 ')).toBe(4);
    expect(findCodeCell(restarted, 1, 'nowhere')).toBe(1);
  });
});

describe('gotoRequest', () => {
  it('reads the event detail, and rejects what is not one', () => {
    expect(gotoRequest({ cell: 3, line: 2 })).toEqual({ cell: 3, line: 2, source: null });
    expect(gotoRequest({ cell: 3, line: null, source: 'z = x * y' })).toEqual({ cell: 3, line: null, source: 'z = x * y' });
    expect(gotoRequest({ cell: '3' })).toBeNull();
    expect(gotoRequest(null)).toBeNull();
  });

  it('is the event the inspector dispatches', () => {
    expect(GOTO_CELL_EVENT).toBe(INSPECTOR_EVENT);
  });
});

/** A notebook panel shaped like Lab's, with code cells of the given execution counts. */
function fakePanel(counts: (number | null)[], id = 'nb1') {
  const node = document.createElement('div');
  document.body.appendChild(node);
  const widgets = counts.map(count => {
    const cellNode = document.createElement('div');
    cellNode.className = 'jp-Cell';
    node.appendChild(cellNode);
    return {
      node: cellNode,
      model: { type: 'code', executionCount: count, sharedModel: { getSource: () => 'a\nb\nc' } },
      editor: { setCursorPosition: vi.fn(), focus: vi.fn(), lineCount: 3 },
      ready: Promise.resolve()
    };
  });
  const content = {
    widgets,
    activeCellIndex: 0,
    mode: 'command',
    scrollToCell: vi.fn(async () => undefined)
  };
  const panel: NotebookPanelLike = { id, node, content };
  return { panel, widgets, content };
}

function fakeShell(panels: NotebookPanelLike[], current: NotebookPanelLike | null = panels[0] ?? null) {
  const shell: ShellLike = {
    currentWidget: current,
    *widgets() {
      yield* panels;
    },
    activateById: vi.fn()
  };
  return shell;
}

describe('gotoCell', () => {
  it('activates, scrolls, puts the cursor on the line and flashes for a while', async () => {
    vi.useFakeTimers();
    const { panel, widgets, content } = fakePanel([1, 2, 3]);
    const shell = fakeShell([panel]);
    expect(await gotoCell(shell, panel, { cell: 2, line: 2 })).toBe(true);
    expect(shell.activateById).toHaveBeenCalledWith('nb1');
    expect(content.activeCellIndex).toBe(1);
    expect(content.scrollToCell).toHaveBeenCalledWith(widgets[1], 'center');
    expect(widgets[1].editor.setCursorPosition).toHaveBeenCalledWith({ line: 1, column: 0 });
    expect(widgets[1].editor.focus).toHaveBeenCalled();
    expect(content.mode).toBe('edit');
    expect(widgets[1].node.classList.contains(FLASH_CLASS)).toBe(true);
    vi.advanceTimersByTime(1600);
    expect(widgets[1].node.classList.contains(FLASH_CLASS)).toBe(false);
  });

  it('clamps the line to the cell and takes line 1 when none is known', async () => {
    const { panel, widgets } = fakePanel([5]);
    const shell = fakeShell([panel]);
    await gotoCell(shell, panel, { cell: 5, line: 40 });
    expect(widgets[0].editor.setCursorPosition).toHaveBeenLastCalledWith({ line: 2, column: 0 });
    await gotoCell(shell, panel, { cell: 5, line: null });
    expect(widgets[0].editor.setCursorPosition).toHaveBeenLastCalledWith({ line: 0, column: 0 });
  });

  it('does nothing when the cell is not there', async () => {
    const { panel, content } = fakePanel([1, 2]);
    const shell = fakeShell([panel]);
    expect(await gotoCell(shell, panel, { cell: 9, line: 1 })).toBe(false);
    expect(shell.activateById).not.toHaveBeenCalled();
    expect(content.scrollToCell).not.toHaveBeenCalled();
  });
});

describe('installGoto', () => {
  it('answers the event in the notebook it came from', async () => {
    const a = fakePanel([1], 'a');
    const b = fakePanel([1], 'b');
    const shell = fakeShell([a.panel, b.panel], a.panel);
    const undo = installGoto(shell, document);
    try {
      const button = document.createElement('button');
      b.panel.node.appendChild(button);
      button.dispatchEvent(new CustomEvent(GOTO_CELL_EVENT, { detail: { cell: 1, line: 1 }, bubbles: true }));
      await vi.waitFor(() => expect(shell.activateById).toHaveBeenCalledWith('b'));
      expect(shell.activateById).toHaveBeenCalledTimes(1);
      expect(notebooksFor(shell, button)).toEqual([b.panel, a.panel]);
      expect(notebooksFor(shell, document)).toEqual([a.panel, b.panel]);
    } finally {
      undo();
    }
  });

  it('looks in the other notebooks when the current one lacks the cell', async () => {
    const a = fakePanel([1], 'a');
    const b = fakePanel([1, 2], 'b');
    const shell = fakeShell([a.panel, b.panel], a.panel);
    const undo = installGoto(shell, document);
    try {
      document.dispatchEvent(new CustomEvent(GOTO_CELL_EVENT, { detail: { cell: 2, line: 1 } }));
      await vi.waitFor(() => expect(shell.activateById).toHaveBeenCalledWith('b'));
      expect(b.content.activeCellIndex).toBe(1);
    } finally {
      undo();
    }
  });

  it('falls back to the current notebook, and ignores the event without one', async () => {
    const a = fakePanel([4], 'a');
    const shell = fakeShell([a.panel], a.panel);
    const undo = installGoto(shell, document);
    try {
      document.dispatchEvent(new CustomEvent(GOTO_CELL_EVENT, { detail: { cell: 4, line: 1 } }));
      await vi.waitFor(() => expect(shell.activateById).toHaveBeenCalledWith('a'));
    } finally {
      undo();
    }
    const none = fakeShell([], null);
    const undo2 = installGoto(none, document);
    try {
      expect(() =>
        document.dispatchEvent(new CustomEvent(GOTO_CELL_EVENT, { detail: { cell: 4, line: 1 } }))
      ).not.toThrow();
      expect(none.activateById).not.toHaveBeenCalled();
    } finally {
      undo2();
    }
  });
});
