/** The broadcast anywidget adapter: traits, one stylesheet, the html request, and the static page's minimal model. */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import widget from '../../src/widgets/broadcast';
import { conflictPlan, okPlan } from './broadcast-fixtures';
import { expectWidgetBundle } from './bundle';
import { FakeModel } from './fakemodel';
import { drawsWhenItsDataComes, mounter } from './mount';

const mount = mounter(widget);

describe('broadcast anywidget adapter', () => {
  it('waits for a plan, then draws it; one stylesheet per document', () => {
    const { model, el } = drawsWhenItsDataComes(mount, 'plan', conflictPlan(), 'broadcast');
    expect(el.getAttribute('data-step')).toBe('3');
    expect(el.querySelector('pre.fv-torch-msg')).toBeTruthy();
    model.set('warnings', ['forgeviz could not draw this broadcast: boom']);
    expect(el.querySelector('.fv-warning')!.textContent).toContain('boom');
    model.set('plan', okPlan());
    expect(el.getAttribute('data-step')).toBe('5');
    expect(el.querySelector('.fv-bc-result[data-shape="3,3"]')).toBeTruthy();
  });

  it('HTML export: an html request matched by request_id, in the page theme', async () => {
    const model = new FakeModel({ plan: okPlan(), warnings: [] }, (msg, m) => {
      if (msg.type === 'html') {
        m.reply({ type: 'html', request_id: msg.request_id, html: '<!doctype html><p>page</p>' });
      }
    });
    const { el, cleanup } = mount(model);
    const names: string[] = [];
    const orig = HTMLAnchorElement.prototype.click;
    HTMLAnchorElement.prototype.click = function (this: HTMLAnchorElement) {
      names.push(this.download);
    };
    try {
      const b = el.querySelector<HTMLButtonElement>('button.fv-export-html')!;
      expect(b.hidden).toBe(false);
      b.click();
      expect(model.sent).toEqual([{ type: 'html', request_id: expect.any(Number), theme: 'light' }]);
      await vi.waitFor(() => expect(names).toEqual(['forgeviz-broadcast.html']));
    } finally {
      HTMLAnchorElement.prototype.click = orig;
    }
    cleanup();
    expect(model.listenerCount('change:plan')).toBe(0);
    expect(model.listenerCount('msg:custom')).toBe(0);
  });

  it('an ErrorReply to the html request is shown', async () => {
    const model = new FakeModel({ plan: okPlan(), warnings: [] }, (msg, m) => m.reply({ type: 'error', request_id: msg.request_id, message: 'could not build the page' }));
    const { el } = mount(model);
    el.querySelector<HTMLButtonElement>('button.fv-export-html')!.click();
    await vi.waitFor(() => expect(el.querySelector('.fv-status')!.textContent).toBe('HTML export failed: could not build the page'));
  });

  it('works with the static page’s minimal model: no kernel, no html export', () => {
    vi.useFakeTimers();
    try {
      const plan = okPlan();
      // what the offline page passes: get, on/off that do nothing, a send that rejects
      const staticModel = {
        get: (k: string) => ({ plan, warnings: [], static: true } as Record<string, unknown>)[k],
        on() {},
        off() {},
        send: () => Promise.reject(new Error('no kernel'))
      };
      const { el, cleanup } = mount(staticModel);
      expect(el.getAttribute('data-fv-state')).toBe('ready');
      expect(el.getAttribute('data-step')).toBe('5');
      expect(el.querySelector<HTMLButtonElement>('button.fv-export-html')!.hidden).toBe(true);
      el.querySelector<HTMLButtonElement>('button.fv-bc-first')!.click();
      el.querySelector<HTMLButtonElement>('button.fv-bc-play')!.click();
      vi.advanceTimersByTime(5000);
      expect(el.getAttribute('data-step')).toBe('5');
      expect(el.querySelector('.fv-bc-result[data-shape="3,3"]')).toBeTruthy();
      cleanup();
      expect(el.children).toHaveLength(0);

      // even barer: only get() (no on/off/send, no static flag)
      const bare = mount({ get: (k: string) => (k === 'plan' ? conflictPlan() : undefined) });
      expect(bare.el.getAttribute('data-fv-state')).toBe('ready');
      expect(bare.el.querySelector<HTMLButtonElement>('button.fv-export-html')!.hidden).toBe(true);
      expect(bare.el.querySelector('.fv-bc-conflict')).toBeTruthy();
    } finally {
      vi.useRealTimers();
    }
  });
});

const built = path.join(process.cwd(), 'forgeviz', 'static', 'broadcast.js');
describe.skipIf(!existsSync(built))('forgeviz/static/broadcast.js (after jlpm build:esm:prod)', () => {
  it('is a small, offline ESM with a default export and without Graphviz', () => {
    const src = expectWidgetBundle(built);
    expect(src).toContain('forgeviz-broadcast-style');
  });

  it('renders a plan with a minimal static model', async () => {
    const mod = await import(/* @vite-ignore */ built);
    const el = document.createElement('div');
    document.body.appendChild(el);
    const plan = okPlan();
    const cleanup = mod.default.render({ model: { get: (k: string) => ({ plan, warnings: [], static: true } as Record<string, unknown>)[k], on() {}, off() {} }, el });
    expect(el.getAttribute('data-fv-state')).toBe('ready');
    expect(el.querySelector('.fv-bc-result[data-shape="3,3"]')).toBeTruthy();
    cleanup();
  });
});
