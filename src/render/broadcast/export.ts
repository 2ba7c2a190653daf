/**
 * Exports of the broadcast animation: one frame as SVG or PNG, every frame as an animated GIF,
 * and the kernel's offline HTML page. A frame is drawn fresh (no tweening) next to the live one,
 * so its computed styles can be inlined.
 */
import type { ExportFrame, StatusLine } from '../common/chrome';
import { errorMessage } from '../common/chrome';
import { s } from '../common/dom';
import { download, standaloneSvg, svgToRgba } from '../common/export';
import { drawFrame } from './draw';
import { encodeGif, RgbaFrame } from './gif';
import { exprText, frameState } from './layout';
import { BroadcastState, stepCount } from './state';

export type Theme = 'light' | 'dark';

/** GIF frames hold ~1 s each; the last one 3 s. */
export const GIF_DELAY_MS = 1000;
const GIF_MAX_WIDTH = 1000;
const EXPORT_PAD = 14; // standaloneSvg pads each side

export type Rasterize = (doc: Document, svgText: string, width: number, height: number) => Promise<RgbaFrame>;

export function currentTheme(doc: Document): Theme {
  return doc.body?.dataset.jpThemeLight === 'false' ? 'dark' : 'light';
}

/** Where frames are drawn for export: the view's root (for styles) and its live SVG. */
export interface ExportHost {
  doc: Document;
  el: HTMLElement;
  svg: SVGSVGElement;
  st: BroadcastState;
}

/** A standalone SVG of frame ``i`` and its size, padding included. Needs a plan. */
export function frameSvg(host: ExportHost, i: number): ExportFrame {
  const { doc, el, svg } = host;
  const p = host.st.plan!;
  const frame = drawFrame(doc, p, i, { animate: false, heading: true });
  frame.g.setAttribute('class', `${frame.g.getAttribute('class')} fv-bc-export`);
  svg.appendChild(frame.g);
  try {
    const st = frameState(p, i);
    const t = st.step ? `${exprText(p)}: step ${i + 1} of ${stepCount(host.st)}, ${st.step.title}` : exprText(p);
    return { text: standaloneSvg(frame.g, el, frame.width, frame.height, `forgeviz broadcasting: ${t}`), w: frame.width + 2 * EXPORT_PAD, h: frame.height + 2 * EXPORT_PAD };
  } finally {
    frame.g.remove();
  }
}

/** The frame shown, as a standalone SVG (a note while there is no plan). */
export function exportSvg(host: ExportHost): string {
  const { doc, el, svg } = host;
  if (!host.st.plan) {
    const g = s(doc, 'g', { class: 'fv-bc-export' }) as SVGGElement;
    g.appendChild(s(doc, 'text', { x: 0, y: 14, class: 'fv-bc-note' }, 'no broadcast to show yet'));
    svg.appendChild(g);
    try {
      return standaloneSvg(g, el, 320, 20, 'forgeviz broadcasting');
    } finally {
      g.remove();
    }
  }
  return frameSvg(host, host.st.k).text;
}

/** What the PNG button rasterises: the frame shown, or the note. */
export function exportPng(host: ExportHost): ExportFrame {
  return host.st.plan ? frameSvg(host, host.st.k) : { text: exportSvg(host), w: 348, h: 48 };
}

/** The GIF button: every frame rasterised (``rasterize``, default an <img> on a canvas) and encoded. */
export function bindGifExport(host: ExportHost, gifBtn: HTMLButtonElement, status: StatusLine, rasterize: Rasterize = svgToRgba): void {
  const { doc, el, st } = host;
  gifBtn.addEventListener('click', async () => {
    if (!st.plan) {
      return;
    }
    const p = st.plan;
    gifBtn.disabled = true;
    el.setAttribute('data-fv-exporting', 'gif');
    status.show(`Encoding ${Math.max(1, stepCount(st))} frames as a GIF…`, 'info');
    try {
      // serialise every frame first (synchronously, with the live styles), then rasterise
      const texts = Array.from({ length: Math.max(1, stepCount(st)) }, (_, i) => frameSvg(host, i));
      const frames: RgbaFrame[] = [];
      for (const f of texts) {
        const scale = Math.min(1, GIF_MAX_WIDTH / f.w);
        frames.push(await rasterize(doc, f.text, Math.round(f.w * scale), Math.round(f.h * scale)));
        if (st.destroyed || st.plan !== p) {
          return;
        }
      }
      const bytes = encodeGif(frames, { delayMs: GIF_DELAY_MS, lastDelayMs: 3 * GIF_DELAY_MS });
      download(doc, 'forgeviz-broadcast.gif', new Blob([bytes as BlobPart], { type: 'image/gif' }));
      status.show(null);
    } catch (err) {
      status.show(`GIF export failed: ${errorMessage(err)}`);
    } finally {
      el.removeAttribute('data-fv-exporting');
      if (!st.destroyed) {
        gifBtn.disabled = stepCount(st) < 1;
      }
    }
  });
}

/** The HTML button: the kernel's self-contained page in the page's theme. */
export function bindHtmlExport(host: ExportHost, htmlBtn: HTMLButtonElement, status: StatusLine, requestHtml: ((theme: Theme) => Promise<string>) | null): void {
  const { doc, el, st } = host;
  htmlBtn.addEventListener('click', async () => {
    if (!requestHtml) {
      return;
    }
    htmlBtn.disabled = true;
    el.setAttribute('data-fv-exporting', 'html');
    status.show('Asking the kernel for the HTML page…', 'info');
    try {
      const html = await requestHtml(currentTheme(doc));
      if (st.destroyed) {
        return;
      }
      download(doc, 'forgeviz-broadcast.html', new Blob([html], { type: 'text/html' }));
      status.show(null);
    } catch (err) {
      if (!st.destroyed) {
        status.show(`HTML export failed: ${errorMessage(err)}`);
      }
    } finally {
      el.removeAttribute('data-fv-exporting');
      htmlBtn.disabled = false;
    }
  });
}
