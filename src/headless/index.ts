/**
 * The headless renderer (esbuild → forgeviz/static/headless.js, an IIFE for a bare V8: Python's
 * mini-racer, see forgeviz/headless). It draws a view with the very renderers the browser runs,
 * in a happy-dom document, and returns the view's own ``exportSVG()``: one source of truth for
 * drawing. Not an anywidget view (it is not in forgeviz/views.json).
 *
 *     await forgevizRender('graph', JSON.stringify({graph, state, expanded}), 'dark')  // '<?xml …<svg …'
 *
 * ``traitsJson`` is the JSON of the widget's synced traits (graph: ``graph``, ``state``,
 * ``expanded``; strides: ``layout``; broadcast: ``plan``; memory: ``timeline``; ranks: ``grid``; all: ``warnings``),
 * ``messagesJson`` the custom messages the view gets once mounted, as a saved output keeps them
 * (``[{content, buffers: [base64]}]``: the memory timeline's ``events``). Each view is mounted by
 * its own widget entry (src/widgets/<view>.ts) over a stand-in model with no ``send`` (no kernel,
 * no transport), found by ``mountedView``, and awaited until ``.fv-root[data-fv-state="ready"]``. Graphviz is the
 * same module the layout worker loads (src/graphviz-bundle.ts), laid out on this thread (no Worker).
 * The memory view's export is SVG written from its frame (src/render/memory/draw.ts frameToSvg):
 * no canvas is needed (happy-dom has none; the view paints nothing on screen here).
 *
 * Also for the broadcast view: ``forgevizSteps`` (one standalone SVG per step, as the view shows
 * each) and ``forgevizEncodeGif`` (the browser's GIF encoder over frames rasterised in Python).
 */
import { Window } from 'happy-dom';
import * as graphvizModule from '../graphviz-bundle';
import { forgevizGlobal } from '../graphviz-loader';
import { loadWithLayered } from '../layout-worker';
import type { BroadcastPlan } from '../model/wire';
import { GIF_DELAY_MS } from '../render/broadcast/export';
import { encodeGif, type RgbaFrame } from '../render/broadcast/gif';
import type { BroadcastView } from '../render/broadcast/view';
import broadcastEntry from '../widgets/broadcast';
import { mountedView, type EntryView } from '../widgets/entry';
import graphEntry from '../widgets/graph';
import memoryEntry from '../widgets/memory';
import ranksEntry from '../widgets/ranks';
import { mountSaved, setTheme, type EntryModule, type SavedPayload } from '../lab/saved';
import stridesEntry from '../widgets/strides';

/** The views drawn here, and the trait that holds each one's data. */
export const HEADLESS_VIEWS: Record<string, string> = { graph: 'graph', strides: 'layout', broadcast: 'plan', memory: 'timeline', ranks: 'grid' };

/** Each view's own widget entry (src/widgets/<view>.ts): it is mounted here as in a notebook. */
const ENTRIES: Record<string, EntryModule> = { graph: graphEntry, strides: stridesEntry, broadcast: broadcastEntry, memory: memoryEntry, ranks: ranksEntry };

/** How long a view may take to be ready (a big graph's layout included). */
const READY_TIMEOUT_MS = 120_000;

let win: Window | null = null;

/** The one happy-dom window; Graphviz for it is this module's, on this thread. */
function page(): Document {
  if (!win) {
    win = new Window({ width: 1200, height: 900 });
    // no screen, no frames: a frame is the next task (a big graph is attached frame by frame)
    const w = win as unknown as { requestAnimationFrame(cb: (t: number) => void): number; cancelAnimationFrame(id: number): void };
    w.requestAnimationFrame = cb => setTimeout(() => cb(Date.now()), 0) as unknown as number;
    w.cancelAnimationFrame = id => clearTimeout(id);
    // every getGraphviz() on this page answers with this module, laid out on this thread
    forgevizGlobal().graphviz = Promise.resolve(loadWithLayered(graphvizModule));
  }
  return win.document as unknown as Document;
}

interface Exportable extends EntryView {
  exportSVG(): string;
}

/** base64 → bytes (no string per byte: a GIF frame's pixels are megabytes). */
function bytesOf(b64: string): Uint8Array {
  const codes = new Uint8Array(128);
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
  for (let i = 0; i < 64; i++) {
    codes[alphabet.charCodeAt(i)] = i;
  }
  let len = b64.length;
  while (len > 0 && b64[len - 1] === '=') {
    len--;
  }
  const out = new Uint8Array(Math.floor((len * 3) / 4));
  let o = 0;
  for (let i = 0; i < len; i += 4) {
    const a = codes[b64.charCodeAt(i)];
    const b = codes[b64.charCodeAt(i + 1)];
    const c = i + 2 < len ? codes[b64.charCodeAt(i + 2)] : 0;
    const d = i + 3 < len ? codes[b64.charCodeAt(i + 3)] : 0;
    const n = (a << 18) | (b << 12) | (c << 6) | d;
    if (o < out.length) out[o++] = (n >> 16) & 255;
    if (o < out.length) out[o++] = (n >> 8) & 255;
    if (o < out.length) out[o++] = n & 255;
  }
  return out;
}

/** bytes → base64. */
function base64Of(bytes: Uint8Array): string {
  let bin = '';
  for (let i = 0; i < bytes.length; i += 0x8000) {
    bin += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return btoa(bin);
}

/** Settle when ``el`` is ready; reject with the view's own status text when it says error. */
function whenReady(el: HTMLElement): Promise<void> {
  const t0 = Date.now();
  return new Promise((resolve, reject) => {
    const poll = () => {
      const state = el.getAttribute('data-fv-state');
      if (state === 'ready') {
        resolve();
      } else if (state === 'error') {
        const status = el.querySelector('.fv-status')?.textContent?.trim();
        reject(new Error(status || 'the view could not be drawn'));
      } else if (Date.now() - t0 > READY_TIMEOUT_MS) {
        reject(new Error(`the view was not ready after ${READY_TIMEOUT_MS / 1000} s (state: ${state})`));
      } else {
        setTimeout(poll, 2);
      }
    };
    poll();
  });
}

/**
 * Mount ``view`` over its traits in ``theme``, deliver ``messages``, wait until it is ready, run
 * ``use`` on it, and unmount. Rejects with a message saying what was wrong.
 */
async function withView<R>(view: string, traitsJson: string, theme: string, messagesJson: string | undefined, use: (v: Exportable) => R): Promise<R> {
  const trait = HEADLESS_VIEWS[view];
  if (!trait) {
    throw new Error(`the ${view} view cannot be drawn headless (only ${Object.keys(HEADLESS_VIEWS).join(', ')})`);
  }
  if (theme !== 'light' && theme !== 'dark') {
    throw new Error(`theme must be 'light' or 'dark', got '${theme}'`);
  }
  const traits = JSON.parse(traitsJson) as Record<string, unknown>;
  const messages = (messagesJson ? JSON.parse(messagesJson) : []) as NonNullable<SavedPayload['messages']>;
  const doc = page();
  setTheme(doc, theme);
  const el = doc.createElement('div');
  doc.body.appendChild(el);
  // as a saved output is drawn: the view's own entry over the saved traits, no kernel, then its messages
  const cleanup = mountSaved(el, { version: 1, view, traits, messages }, ENTRIES[view]);
  try {
    const drawn = mountedView(el);
    if (!drawn?.shown) {
      throw new Error(`the '${trait}' trait holds no ${view} to draw`);
    }
    await whenReady(el);
    return use(drawn.view as Exportable);
  } finally {
    cleanup();
    el.remove();
  }
}

/**
 * Draw ``view`` from its widget's traits (JSON) in ``theme`` ('light' or 'dark'), after the saved
 * custom messages (JSON, optional), and return the standalone SVG its export button would save.
 */
export function forgevizRender(view: string, traitsJson: string, theme: string, messagesJson?: string): Promise<string> {
  return withView(view, traitsJson, theme, messagesJson, v => v.exportSVG());
}

/**
 * The broadcast view's every step as the view shows it, each the standalone SVG its export button
 * saves at that step: a JSON list (one SVG for a plan without steps, as the GIF has one frame).
 */
export function forgevizSteps(traitsJson: string, theme: string): Promise<string> {
  return withView('broadcast', traitsJson, theme, undefined, v => {
    const b = v as unknown as BroadcastView;
    const plan = (JSON.parse(traitsJson) as { plan: BroadcastPlan }).plan;
    const n = Math.max(1, plan.steps.length);
    const out: string[] = [];
    for (let i = 0; i < n; i++) {
      b.setStep(i);
      out.push(b.exportSVG());
    }
    return JSON.stringify(out);
  });
}

/**
 * Undo PNG's per-row filters and return RGBA over white (``raw``: the inflated IDAT of an 8-bit,
 * non-interlaced image with ``channels`` 4 (RGBA) or 3 (RGB)).
 */
function unfilter(raw: Uint8Array, width: number, height: number, channels: number): Uint8Array {
  if (channels !== 3 && channels !== 4) {
    throw new Error(`expected an RGB or RGBA frame, got ${channels} channels`);
  }
  const bpp = channels;
  const stride = width * bpp;
  if (raw.length < height * (stride + 1)) {
    throw new Error(`a ${width}×${height} frame needs ${height * (stride + 1)} bytes, got ${raw.length}`);
  }
  const px = new Uint8Array(height * stride);
  for (let y = 0; y < height; y++) {
    const type = raw[y * (stride + 1)];
    const src = y * (stride + 1) + 1;
    const row = y * stride;
    const up = row - stride;
    for (let x = 0; x < stride; x++) {
      const a = x >= bpp ? px[row + x - bpp] : 0;
      const b = y > 0 ? px[up + x] : 0;
      const c = x >= bpp && y > 0 ? px[up + x - bpp] : 0;
      let p: number;
      if (type === 0) {
        p = 0;
      } else if (type === 1) {
        p = a;
      } else if (type === 2) {
        p = b;
      } else if (type === 3) {
        p = (a + b) >> 1;
      } else if (type === 4) {
        const e = a + b - c;
        const pa = Math.abs(e - a);
        const pb = Math.abs(e - b);
        const pc = Math.abs(e - c);
        p = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
      } else {
        throw new Error(`unknown PNG filter ${type} in row ${y}`);
      }
      px[row + x] = (raw[src + x] + p) & 255;
    }
  }
  // RGBA over white, as the browser's export draws each frame on a white canvas
  const out = new Uint8Array(width * height * 4);
  for (let i = 0, j = 0; i < px.length; i += bpp, j += 4) {
    const al = bpp === 4 ? px[i + 3] : 255;
    for (let k = 0; k < 3; k++) {
      out[j + k] = al === 255 ? px[i + k] : Math.round((px[i + k] * al + 255 * (255 - al)) / 255);
    }
    out[j + 3] = 255;
  }
  return out;
}

/**
 * The broadcast view's GIF from frames rasterised in Python (resvg): ``framesJson`` is a JSON list
 * of ``{width, height, channels, rows}`` with ``rows`` the base64 of each PNG's inflated, still
 * filtered scanlines (RGBA: 4 channels, RGB: 3). The same encoder, delays and loop as the browser's GIF button; base64 out.
 */
export function forgevizEncodeGif(framesJson: string): string {
  const frames: RgbaFrame[] = (JSON.parse(framesJson) as { width: number; height: number; channels: number; rows: string }[]).map(f => ({
    width: f.width,
    height: f.height,
    data: unfilter(bytesOf(f.rows), f.width, f.height, f.channels)
  }));
  return base64Of(encodeGif(frames, { delayMs: GIF_DELAY_MS, lastDelayMs: 3 * GIF_DELAY_MS }));
}

(globalThis as { forgevizRender?: typeof forgevizRender }).forgevizRender = forgevizRender;
(globalThis as { forgevizSteps?: typeof forgevizSteps }).forgevizSteps = forgevizSteps;
(globalThis as { forgevizEncodeGif?: typeof forgevizEncodeGif }).forgevizEncodeGif = forgevizEncodeGif;
(globalThis as { forgevizHeadlessViews?: string[] }).forgevizHeadlessViews = Object.keys(HEADLESS_VIEWS);
