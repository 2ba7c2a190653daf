/** The stride anywidget adapter: traits, one stylesheet, requests over custom messages. */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import widget from '../../src/widgets/strides';
import { createTransport } from '../../src/transport';
import { expectWidgetBundle } from './bundle';
import { FakeModel } from './fakemodel';
import { drawsWhenItsDataComes, mounter } from './mount';
import { bigLayout, sharedLayout, windowOf } from './strides-fixtures';

const mount = mounter(widget);

describe('strides anywidget adapter', () => {
  it('waits for a layout, then draws it; one stylesheet per document', () => {
    const { model, el } = drawsWhenItsDataComes(mount, 'layout', sharedLayout(), 'strides');
    expect(el.querySelectorAll('.fv-cell')).toHaveLength(30);
    model.set('warnings', ['forgeviz could not draw this stride view: boom']);
    expect(el.querySelector('.fv-warning')!.textContent).toContain('boom');
  });

  it('pages with a values request matched by request_id', async () => {
    const model = new FakeModel({ layout: bigLayout(), warnings: [] });
    const { el } = mount(model);
    el.querySelector<HTMLButtonElement>('button.fv-page-next[data-dim="1"]')!.click();
    const req = model.sent.find(m => m.type === 'values');
    expect(req).toEqual({ type: 'values', request_id: expect.any(Number), tensor: 0, start: [0, 16], size: [16, 16] });
    model.reply({ type: 'values', request_id: req.request_id, tensor: 0, window: windowOf([0, 16], [16, 16], ([i, j]) => String(50 * i + j)) });
    await vi.waitFor(() => expect(el.querySelector('.fv-cell[data-index="0,16"]')).toBeTruthy());
  });

  it('storage and try requests; an ErrorReply is shown', async () => {
    const model = new FakeModel({ layout: bigLayout(), warnings: [] }, (msg, m) => {
      if (msg.type === 'storage') {
        m.reply({ type: 'storage', request_id: msg.request_id, strip: msg.strip, start: msg.start, values: Array.from({ length: msg.count }, (_, i) => `v${msg.start + i}`) });
      } else if (msg.type === 'try') {
        m.reply({ type: 'error', request_id: msg.request_id, message: 'expected op view or reshape' });
      }
    });
    const { el, cleanup } = mount(model);
    el.querySelector<HTMLButtonElement>('button.fv-strip-next')!.click();
    expect(model.sent.find(m => m.type === 'storage')).toEqual({ type: 'storage', request_id: expect.any(Number), strip: 0, start: 256, count: 256 });
    await vi.waitFor(() => expect(el.querySelector('.fv-storage-cell[data-addr="300"]')!.textContent).toContain('v300'));
    const form = el.querySelector('.fv-try')!;
    form.querySelector<HTMLInputElement>('input')!.value = '-1';
    form.querySelector<HTMLButtonElement>('button.fv-try-view')!.click();
    expect(model.sent.find(m => m.type === 'try')).toEqual({ type: 'try', request_id: expect.any(Number), tensor: 0, op: 'view', shape: [-1] });
    await vi.waitFor(() => expect(form.querySelector('.fv-try-error')!.textContent).toContain('expected op view or reshape'));
    cleanup();
    expect(model.listenerCount('change:layout')).toBe(0);
    expect(model.listenerCount('msg:custom')).toBe(0);
  });

  it('transport: a reply of the wrong type is refused', async () => {
    const model = new FakeModel({}, (msg, m) => m.reply({ type: 'storage', request_id: msg.request_id, strip: 0, start: 0, values: [] }));
    const t = createTransport(model as any);
    await expect(t.request('values', { tensor: 0, start: [], size: [] })).rejects.toThrow('unexpected reply type "storage" for a "values" request');
    t.dispose();
  });
});

const built = path.join(process.cwd(), 'forgeviz', 'static', 'strides.js');
describe.skipIf(!existsSync(built))('forgeviz/static/strides.js (after jlpm build:esm:prod)', () => {
  it('is a small, offline ESM with a default export and without Graphviz', () => {
    const src = expectWidgetBundle(built);
    expect(src).toContain('forgeviz-strides-style');
  });
});
