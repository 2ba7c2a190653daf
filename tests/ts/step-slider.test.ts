/** The step slider (common/chrome.ts) and a recorded run's graph view around it (setSteps, requestStep). */
import { describe, expect, it, vi } from 'vitest';
import type { NodeDetail, RunSteps } from '../../src/model/wire';
import { stepSlider } from '../../src/render/common/chrome';
import { createGraphView } from '../../src/render/graph/view';
import { s1Graph, xDetail } from './fixtures';
import { realLayout } from './graphviz';
import { el, hostEachTest, keep } from './host';

hostEachTest();

/** Move a range input to position ``i`` as a user does: input events while dragging, change on release. */
function drag(range: HTMLInputElement, i: number): void {
  range.value = String(i);
  range.dispatchEvent(new Event('input'));
  range.dispatchEvent(new Event('change'));
}

describe('stepSlider', () => {
  it('moves by position over steps that need not be consecutive, and picks on release only', () => {
    const picked: number[] = [];
    const slider = stepSlider(document, 'step', v => picked.push(v));
    el.appendChild(slider.el);
    expect(slider.el.hidden).toBe(true); // no values yet
    slider.set([1, 3, 5, 9], 5);
    const range = slider.el.querySelector<HTMLInputElement>('.fv-step-range')!;
    const text = slider.el.querySelector('.fv-step-value')!;
    expect(slider.el.hidden).toBe(false);
    expect([range.min, range.max, range.value]).toEqual(['0', '3', '2']);
    expect(text.textContent).toBe('step 5 (3 of 4)');
    expect(slider.el.getAttribute('data-fv-step')).toBe('5');
    range.value = '3';
    range.dispatchEvent(new Event('input')); // dragging: the words follow, nothing is asked yet
    expect(text.textContent).toBe('step 9 (4 of 4)');
    expect(picked).toEqual([]);
    range.dispatchEvent(new Event('change'));
    expect(picked).toEqual([9]);
    slider.el.querySelector<HTMLButtonElement>('.fv-step-prev')!.click();
    slider.el.querySelector<HTMLButtonElement>('.fv-step-next')!.click();
    expect(picked).toEqual([9, 3, 9]); // from 5, the value still shown until the caller sets another
    drag(range, 2); // the value shown: no pick
    expect(picked).toEqual([9, 3, 9]);
  });

  it('ends disable their button, a disabled slider picks nothing and says why, no values hide it', () => {
    const picked: number[] = [];
    const slider = stepSlider(document, 'step', v => picked.push(v));
    slider.set([2, 4], 2);
    const prev = slider.el.querySelector<HTMLButtonElement>('.fv-step-prev')!;
    const next = slider.el.querySelector<HTMLButtonElement>('.fv-step-next')!;
    expect([prev.disabled, next.disabled]).toEqual([true, false]);
    slider.set([2, 4], 4, false, 'a saved output');
    const range = slider.el.querySelector<HTMLInputElement>('.fv-step-range')!;
    expect([range.disabled, prev.disabled, next.disabled, slider.el.title]).toEqual([true, true, true, 'a saved output']);
    drag(range, 0);
    expect(picked).toEqual([]);
    slider.set([], NaN);
    expect(slider.el.hidden).toBe(true);
  });
});

describe('a recorded run in the graph view', () => {
  const steps = (step: number, rank = 0): RunSteps => ({ steps: [1, 2, 4], step, ranks: [0, 1], rank });

  async function make(requestStep?: (step: number, rank: number) => Promise<void>) {
    const view = keep(
      createGraphView(el, {
        layout: realLayout,
        requestDetail: async (): Promise<NodeDetail> => xDetail(),
        requestDot: async () => 'digraph {}',
        requestStep
      })
    );
    await view.setGraph(s1Graph());
    return view;
  }

  it('hides the slider for a live graph (no steps)', async () => {
    const v = await make();
    v.setSteps(null);
    expect(el.querySelector<HTMLElement>('.fv-step')!.hidden).toBe(true);
    expect(el.hasAttribute('data-fv-step')).toBe(false);
  });

  it('asks for the step and rank picked, and keeps the layout; the kernel answers with new steps', async () => {
    const asked: [number, number][] = [];
    const v = await make(async (step, rank) => {
      asked.push([step, rank]);
      v.setSteps(steps(step, rank)); // as the kernel's steps trait comes back
    });
    v.setSteps(steps(4));
    const rank = el.querySelector<HTMLSelectElement>('.fv-rank')!;
    expect(rank.hidden).toBe(false);
    expect(Array.from(rank.options).map(o => o.textContent)).toEqual(['rank 0', 'rank 1']);
    expect(el.getAttribute('data-fv-step')).toBe('4');
    const layout = el.querySelector('.fv-node')!.getAttribute('transform');
    drag(el.querySelector<HTMLInputElement>('.fv-step-range')!, 0);
    await vi.waitFor(() => expect(el.getAttribute('data-fv-step')).toBe('1'));
    rank.value = '1';
    rank.dispatchEvent(new Event('change'));
    await vi.waitFor(() => expect(el.getAttribute('data-fv-rank')).toBe('1'));
    expect(asked).toEqual([
      [1, 0],
      [1, 1]
    ]);
    expect(el.querySelector('.fv-node')!.getAttribute('transform')).toBe(layout);
    expect(el.querySelector<HTMLInputElement>('.fv-step-range')!.disabled).toBe(false);
  });

  it("shows the kernel's refusal and puts the slider back", async () => {
    const v = await make(async step => {
      throw new Error(`step ${step} was not recorded`);
    });
    v.setSteps(steps(2));
    el.querySelector<HTMLButtonElement>('.fv-step-next')!.click();
    const status = el.querySelector<HTMLElement>('.fv-status')!;
    await vi.waitFor(() => expect(status.hidden).toBe(false));
    expect(status.textContent).toBe('Could not show step 4 of rank 0: step 4 was not recorded');
    expect(el.querySelector<HTMLInputElement>('.fv-step-range')!.disabled).toBe(false);
    expect(el.getAttribute('data-fv-step')).toBe('2');
  });

  it('a saved output (no kernel) shows its step, disabled', async () => {
    const v = await make();
    v.setSteps({ ...steps(2), ranks: [0] });
    const range = el.querySelector<HTMLInputElement>('.fv-step-range')!;
    expect(range.disabled).toBe(true);
    expect(el.querySelector<HTMLElement>('.fv-step-value')!.textContent).toBe('step 2 (2 of 3)');
    expect(el.querySelector<HTMLSelectElement>('.fv-rank')!.hidden).toBe(true); // one rank
  });
});

describe('the recorded inspector section', () => {
  it('says whose gradient it is, and shows the applied one for a parameter', async () => {
    const view = keep(createGraphView(el, {
      layout: realLayout,
      requestDetail: async (): Promise<NodeDetail> => ({
        ...xDetail(),
        grads: [],
        recorded: {
          step: 3,
          rank: 1,
          local: { ...xDetail().leaf_grad!, values: null, norm: 2.5 },
          parameter: 'fc.weight',
          applied: { ...xDetail().leaf_grad!, values: null, norm: 1.25 },
          missing: null
        }
      }),
      requestDot: async () => 'digraph {}'
    }));
    await view.setGraph(s1Graph());
    await view.select(1);
    const sec = await vi.waitFor(() => el.querySelector<HTMLElement>('[data-fv-recorded-step="3"]')!);
    expect(sec.getAttribute('data-fv-recorded-rank')).toBe('1');
    expect(sec.querySelector('h4')!.textContent).toBe('Gradients · step 3, rank 1 (recorded)');
    expect(sec.querySelector('.fv-recorded-local .fv-stats')!.textContent).toContain('norm 2.5');
    expect(sec.textContent).toContain('before any all-reduce');
    expect(sec.querySelector('.fv-recorded-applied .fv-stats')!.textContent).toContain('norm 1.25');
    expect(sec.querySelector('.fv-recorded-applied .fv-key')!.textContent).toBe('fc.weight as applied');
    expect(el.querySelector('.fv-leaf-grad')).toBeNull(); // the live leaf section is not shown
  });
});
