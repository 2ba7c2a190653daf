// The side panel's place in the shell (src/lab/panel.ts): a view opened from the panel is readable
// where it lands, in Lab's main area or in Notebook 7's bottom area.
import { BoxLayout, SplitPanel, TabPanel, Widget } from '@lumino/widgets';
import { afterEach, describe, expect, it } from 'vitest';
import { asNotebook, DOWN_SHARE, makeRoom, OPEN_RUN_COMMAND, runBeside } from '../../src/lab/panel';
import { openRunCode, runTitle } from '../../src/lab/panel-output';

/** Notebook 7's layout: a vertical split of the main area and a bottom tab panel. */
function notebook7(downShare: number): { split: SplitPanel; down: TabPanel; view: Widget } {
  const split = new SplitPanel({ orientation: 'vertical' });
  const main = new Widget();
  const down = new TabPanel();
  split.addWidget(main);
  split.addWidget(down);
  Widget.attach(split, document.body);
  split.setRelativeSizes([1 - downShare, downShare]);
  const view = new Widget();
  down.addWidget(view);
  return { split, down, view };
}

afterEach(() => {
  document.body.innerHTML = '';
});

describe('makeRoom', () => {
  it("gives a view in Notebook 7's bottom area the share it needs when it had a sliver", () => {
    const { split, view } = notebook7(0.035);
    makeRoom(view);
    const sizes = split.relativeSizes();
    expect(sizes[1]).toBeCloseTo(DOWN_SHARE, 5);
    expect(sizes[0]).toBeCloseTo(1 - DOWN_SHARE, 5);
  });

  it('leaves a bottom area the user made tall enough as it is', () => {
    const { split, view } = notebook7(0.3);
    makeRoom(view);
    expect(split.relativeSizes()[1]).toBeCloseTo(0.3, 5);
  });

  it('changes nothing for a widget in the first (main) part of the split or outside any vertical split', () => {
    const { split } = notebook7(0.035);
    const inMain = new Widget();
    (split.widgets[0] as Widget).parent = null;
    const box = new Widget({ node: document.createElement('div') });
    box.layout = new BoxLayout();
    (box.layout as BoxLayout).addWidget(inMain);
    split.insertWidget(0, box);
    split.setRelativeSizes([0.9, 0.1]);
    makeRoom(inMain);
    expect(split.relativeSizes()[0]).toBeCloseTo(0.9, 5);
    const lone = new Widget();
    Widget.attach(lone, document.body);
    expect(() => makeRoom(lone)).not.toThrow();
  });
});

describe('asNotebook', () => {
  it('takes a widget with a session context and a rendermime, and nothing else', () => {
    const w = Object.assign(new Widget(), {
      sessionContext: { kernelChanged: {} },
      content: { rendermime: { createRenderer: () => null } }
    });
    expect(asNotebook(w)).toBe(w);
    expect(asNotebook(new Widget())).toBeNull();
    expect(asNotebook(null)).toBeNull();
  });
});

describe('Open run…', () => {
  it('writes the folder as a Python string literal', () => {
    expect(runTitle(' runs/exp1/ ')).toBe('forgeviz: exp1');
    expect(runTitle('C:\\runs\\exp2')).toBe('forgeviz: exp2');
    expect(runTitle('exp3')).toBe('forgeviz: exp3');
    expect(runTitle('/')).toBe('forgeviz: /');
    expect(openRunCode(' runs/exp1 ')).toBe('import forgeviz\nforgeviz.open("runs/exp1")');
    expect(openRunCode('C:\\runs\\"a"')).toBe('import forgeviz\nforgeviz.open("C:\\\\runs\\\\\\"a\\"")');
  });

  it('runs forgeviz.open in the notebook’s kernel into a new output beside it; nothing without a kernel', async () => {
    const executed: string[] = [];
    const added: { label: string; caption?: string; area: string; ref?: string }[] = [];
    const kernel = {
      requestExecute: (msg: { code: string }) => {
        executed.push(msg.code);
        return { onIOPub: null, done: Promise.resolve(), dispose() {} };
      }
    };
    const nb = Object.assign(new Widget(), {
      sessionContext: { session: { kernel } },
      content: Object.assign(new Widget(), { rendermime: { getFactory: () => null, createRenderer: () => null } })
    });
    nb.id = 'nb-1';
    class FakeMainArea extends Widget {
      constructor(readonly options: { content: Widget }) {
        super();
      }
    }
    const app = {
      shell: {
        add: (w: Widget, area: string, options: { ref?: string }) => {
          added.push({ label: w.title.label, caption: w.title.caption, area, ref: options?.ref });
          Widget.attach(w, document.body);
        },
        activateById: () => undefined
      }
    };
    const parts = { icon: undefined, MainAreaWidget: FakeMainArea } as unknown as Parameters<typeof runBeside>[1];
    const folder = '/home/me/projects/runs/exp1';
    expect(runBeside(app as never, parts, nb as never, runTitle(folder), openRunCode(folder), `forgeviz: ${folder}`)).toBe(true);
    expect(executed).toEqual(['import forgeviz\nforgeviz.open("/home/me/projects/runs/exp1")']);
    expect(added).toEqual([{ label: 'forgeviz: exp1', caption: 'forgeviz: /home/me/projects/runs/exp1', area: 'main', ref: 'nb-1' }]);
    const noKernel = Object.assign(new Widget(), { sessionContext: { session: null }, content: nb.content });
    expect(runBeside(app as never, parts, noKernel as never, 'x', 'y')).toBe(false);
    expect(runBeside(app as never, parts, null, 'x', 'y')).toBe(false);
    expect(executed).toHaveLength(1);
    expect(OPEN_RUN_COMMAND).toBe('forgeviz:open-run');
  });
});
