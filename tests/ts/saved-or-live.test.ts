/**
 * The forgeviz output renderer (src/lab/mime.ts) in a trusted output hands the live widget to the
 * output area's own widget renderer, and draws the saved data when that one has no such model
 * (a notebook saved in Lab reopened with no kernel): "Error displaying widget: model not found".
 */
import { Panel, Widget } from '@lumino/widgets';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { LIVE_WAIT_MS, SavedRenderer, WIDGET_ERROR } from '../../src/lab/mime';
import { WIDGET_MIME } from '../../src/lab/refresh';
import { SAVED_MIME, type SavedPayload } from '../../src/lab/saved';

afterEach(() => document.body.replaceChildren());

const payload: SavedPayload = { version: 1, view: 'graph', summary: 's', traits: { graph: {} } };
const data = { [WIDGET_MIME]: { model_id: 'm1' }, [SAVED_MIME]: payload as any };

/** A stand-in of @jupyter-widgets' renderer: ``outcome`` says what it shows, now or later. */
class FakeWidgetRenderer extends Widget {
  /** the widget views it was asked to draw */
  readonly asked: unknown[] = [];
  constructor(private readonly outcome: (node: HTMLElement) => void) {
    super();
  }
  async renderModel(model: { data: Record<string, unknown> }): Promise<void> {
    this.asked.push(model.data[WIDGET_MIME]);
    this.node.textContent = 'Loading widget...';
    this.outcome(this.node);
  }
}

/** An output area (a Panel with a rendermime) holding ``renderer``, as OutputArea adds it. */
function inArea(renderer: Widget, widgetRenderer: (() => Widget) | null) {
  const area = new Panel() as Panel & { rendermime: unknown };
  area.rendermime = {
    getFactory: (mt: string) => (mt === WIDGET_MIME && widgetRenderer ? {} : undefined),
    createRenderer: () => widgetRenderer!()
  };
  Widget.attach(area, document.body);
  area.addWidget(renderer);
  return area;
}

function drawn() {
  const entry = { render: vi.fn(({ el }: { el: HTMLElement }) => void (el.textContent = 'saved drawing')) };
  return { entry, load: vi.fn(async () => entry) };
}

/** The output as Lab's save writes it (src/lab/refresh.ts): its widget view in the forgeviz metadata. */
const { [WIDGET_MIME]: view, ...asideData } = data;
const asideMetadata = { [SAVED_MIME]: { widget_view: view } };

describe('a trusted forgeviz output', () => {
  it('is the live widget while the widget manager has its model', async () => {
    const { load } = drawn();
    const r = new SavedRenderer(load);
    const p = r.renderModel({ data, metadata: {}, trusted: true, setData() {} } as any);
    inArea(r, () => new FakeWidgetRenderer(node => (node.textContent = 'the live view')));
    await p;
    expect(r.node.textContent).toBe('the live view');
    expect(r.hasClass('fv-live-output')).toBe(true);
    expect(load).not.toHaveBeenCalled();
  });

  it('is the saved data when the widget renderer finds no model, now or once the manager restores', async () => {
    for (const later of [false, true]) {
      const { load } = drawn();
      const r = new SavedRenderer(load);
      const p = r.renderModel({ data, metadata: {}, trusted: true, setData() {} } as any);
      const fail = (node: HTMLElement) => (node.textContent = `${WIDGET_ERROR}: model not found`);
      inArea(r, () => new FakeWidgetRenderer(node => (later ? setTimeout(() => fail(node), 5) : fail(node))));
      await p;
      await vi.waitFor(() => expect(r.node.textContent).toBe('saved drawing'));
      expect(r.hasClass('fv-saved-output')).toBe(true);
      expect(r.widgets).toHaveLength(0); // the widget renderer is gone
      expect(load).toHaveBeenCalledWith('graph');
    }
  });

  it('is the saved data where no widget renderer is registered; an untrusted one never asks', async () => {
    const { load } = drawn();
    const r = new SavedRenderer(load);
    const p = r.renderModel({ data, metadata: {}, trusted: true, setData() {} } as any);
    inArea(r, null);
    await p;
    expect(r.node.textContent).toBe('saved drawing');
    const make = vi.fn(() => new FakeWidgetRenderer(() => {}));
    const u = new SavedRenderer(drawn().load);
    const q = u.renderModel({ data, metadata: {}, trusted: false, setData() {} } as any);
    inArea(u, make);
    await q;
    expect(make).not.toHaveBeenCalled();
    expect(u.node.textContent).toBe('saved drawing');
  });

  it('shows the saved data while the widget manager waits (no kernel), and the live view if it comes', async () => {
    const { load } = drawn();
    const r = new SavedRenderer(load);
    let node!: HTMLElement;
    const p = r.renderModel({ data, metadata: {}, trusted: true, setData() {} } as any);
    inArea(r, () => new FakeWidgetRenderer(n => (node = n)));
    await p;
    expect(r.node.textContent).toBe('Loading widget...');
    await vi.waitFor(() => expect(r.node.textContent).toContain('saved drawing'), { timeout: LIVE_WAIT_MS + 2000 });
    expect(r.hasClass('fv-saved-output')).toBe(true);
    expect(r.widgets[0].isHidden).toBe(true); // "Loading widget..." is not shown
    node.textContent = '';
    node.appendChild(document.createElement('div')).textContent = 'the live view'; // a kernel brought the model
    await vi.waitFor(() => expect(r.node.textContent).toBe('the live view'));
    expect(r.hasClass('fv-saved-output')).toBe(false);
    expect(r.widgets[0].isHidden).toBe(false);
  });

  it('saved by Lab, widget view in its metadata: the live widget, given the view as its data', async () => {
    const { load } = drawn();
    const r = new SavedRenderer(load);
    const p = r.renderModel({ data: asideData, metadata: asideMetadata, trusted: true, setData() {} } as any);
    let made!: FakeWidgetRenderer;
    inArea(r, () => (made = new FakeWidgetRenderer(node => (node.textContent = 'the live view'))));
    await p;
    expect(r.node.textContent).toBe('the live view');
    expect(made.asked).toEqual([{ model_id: 'm1' }]);
    expect(made.asked[0]).not.toBe(view); // a copy: what the widget renderer writes into it stays there
    expect(load).not.toHaveBeenCalled();
  });

  it('saved by Lab: the saved data when no kernel holds the model, or untrusted, or with no widget view', async () => {
    const { load } = drawn();
    const r = new SavedRenderer(load);
    const p = r.renderModel({ data: asideData, metadata: asideMetadata, trusted: true, setData() {} } as any);
    inArea(r, () => new FakeWidgetRenderer(node => (node.textContent = `${WIDGET_ERROR}: model not found`)));
    await p;
    await vi.waitFor(() => expect(r.node.textContent).toBe('saved drawing'));
    expect(r.widgets).toHaveLength(0);
    for (const [metadata, trusted] of [
      [asideMetadata, false],
      [{}, true],
      [{ [SAVED_MIME]: { widget_view: { model_id: '' } } }, true]
    ] as const) {
      const make = vi.fn(() => new FakeWidgetRenderer(() => {}));
      const u = new SavedRenderer(drawn().load);
      const q = u.renderModel({ data: asideData, metadata, trusted, setData() {} } as any);
      inArea(u, make);
      await q;
      expect(make).not.toHaveBeenCalled();
      expect(u.node.textContent).toBe('saved drawing');
    }
  });
});
