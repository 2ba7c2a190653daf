/** SVG and PNG export of what the view shows, at one column per CSS pixel. */
import { bindExportButtons, type ExportFrame } from '../common/chrome';
import { standaloneSvg } from '../common/export';
import { computeFrame, frameToSvg, type SvgPin } from './draw';
import { bytesLabel } from './geom';
import { CANVAS_HEIGHT, type MemoryContext } from './context';
import { hitContent } from './details';
import { currentRange, size, theme } from './painter';

/** The pinned storage, if any, as the export draws it: its slot, and the panel's lines less the kernel's progress. */
function exportPin(ctx: MemoryContext): SvgPin | undefined {
  const hit = ctx.pinnedHit;
  if (!hit) {
    return undefined;
  }
  // "asking the kernel…" and "details unavailable" say how the page is doing, not what it shows;
  // the band's bytes are the pointer's, not the storage's
  const lines = hitContent(ctx, hit, true)
    .filter(n => !/loading|error|band/.test((n as Element).className))
    .flatMap(n => n.textContent!.split('\n'));
  lines[0] = `Pinned · ${lines[0]}`;
  return { slot: hit.slot, lines };
}

function exportFrame(ctx: MemoryContext): ExportFrame {
  const { el, store, timeline: t } = ctx;
  const th = theme(el);
  const title = `forgeviz memory timeline${t?.device ? ` (${t.device})` : ''}: peak ${bytesLabel(store.peakBytes)}, ${store.n.toLocaleString('en-US')} events`;
  // export at one column per CSS pixel: the paths are bounded by the width, not the events
  const { W } = size(ctx);
  const [x0, x1] = currentRange(ctx);
  const ef = computeFrame({ store, timeline: t, mode: ctx.mode, x0, x1, W, H: CANVAS_HEIGHT, density: 1, zoomed: ctx.range !== null });
  // every colour and font is an attribute already: serialised detached, no computed style is
  // inlined, which keeps a blocks view of 2,000 rectangles small
  const pin = exportPin(ctx);
  const g = frameToSvg(ctx.doc, ef, th, `${ctx.uid}-x`, title, pin);
  // the legend, then the pinned storage's caption (frameToSvg: 14 px a line)
  const h2 = ef.H + 24 + (pin?.lines.length ? pin.lines.length * 14 + 4 : 0);
  return { text: standaloneSvg(g, el, ef.W, h2, title), w: ef.W + 28, h: h2 + 28 };
}

/** What the view shows (its zoom range, x mode and pinned storage too) as a standalone SVG. */
export function exportSVG(ctx: MemoryContext): string {
  return exportFrame(ctx).text;
}

export function bindExports(ctx: MemoryContext): void {
  const { ui } = ctx;
  bindExportButtons(ctx.doc, ui.svgBtn, ui.pngBtn, ui.status, {
    fileName: 'forgeviz-memory',
    svg: () => exportSVG(ctx),
    png: () => exportFrame(ctx)
  });
}
