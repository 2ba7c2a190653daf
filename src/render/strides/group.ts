/**
 * One group of the view: a storage strip and the tensors that read it (or the tensors without
 * a strip). ``makeGroup`` builds its section (SVG stage, strip pager, cards); ``renderGroup``
 * draws its SVG afresh, keeping the focus and the hover mapping.
 */
import { h, s } from '../common/dom';
import { drawTensor } from './draw';
import { drawStrip } from './draw-strip';
import { applyHot } from './hot';
import { focusKey, keyOfEl } from './keys';
import { renderCard, renderPagers, renderStripPager } from './panel';
import { Group, SState, stripCount, StridesContext, TState } from './state';

const PAD = 8;
const MAX_ROW_W = 920;

/** The section of a group titled ``title``, with a card per tensor; nothing drawn yet. */
export function makeGroup(ctx: StridesContext, st: SState | null, list: TState[], title: string): Group {
  const { doc } = ctx;
  const svg = s(doc, 'svg', { class: 'fv-sd-canvas', role: 'group', 'aria-label': title }) as SVGSVGElement;
  const cards = h(doc, 'div', { class: 'fv-sd-cards' });
  const section = h(
    doc,
    'section',
    { class: 'fv-sd-group', 'data-strip': st ? st.s.id : -1, 'aria-label': title },
    h(doc, 'div', { class: 'fv-sd-stage' }, svg),
    h(doc, 'div', { class: 'fv-strip-pager' }),
    cards
  );
  for (const ts of list) {
    cards.appendChild(renderCard(ctx, ts));
  }
  return {
    strip: st,
    tensors: list,
    section,
    svg,
    content: null,
    overlay: null,
    cards,
    width: 0,
    height: 0,
    cellEls: new Map(),
    cellRects: new Map(),
    stripEls: new Map(),
    stripRects: new Map()
  };
}

/** One cell width for the whole group: wide enough for the longest value drawn. */
function cellWidth(ctx: StridesContext, g: Group): number {
  let longest = 1;
  for (const ts of g.tensors) {
    for (const v of ts.values ?? []) {
      longest = Math.max(longest, v.length);
    }
  }
  if (g.strip) {
    const count = stripCount(ctx, g.strip);
    for (let a = g.strip.start; a < g.strip.start + count; a++) {
      longest = Math.max(longest, g.strip.known.get(a)?.length ?? 0);
    }
  }
  return Math.max(24, Math.min(54, Math.ceil(longest * 5.8 + 8)));
}

/** The tensors side by side, wrapping at MAX_ROW_W; their size. */
function drawTensors(ctx: StridesContext, g: Group, layer: SVGGElement, cw: number): { w: number; h: number } {
  let x = 0;
  let y = 0;
  let rowH = 0;
  let width = 0;
  for (const ts of g.tensors) {
    // measure by drawing, then move to the next row when it does not fit
    const size = drawTensor(ctx, g, ts, layer, x, y, cw);
    if (x > 0 && x + size.w > MAX_ROW_W) {
      layer.lastChild?.remove();
      for (const k of [...g.cellEls.keys()]) {
        if (k.startsWith(`${ts.t.id}|`)) {
          g.cellEls.delete(k);
          g.cellRects.delete(k);
        }
      }
      x = 0;
      y += rowH + 22;
      rowH = 0;
      drawTensor(ctx, g, ts, layer, x, y, cw);
    }
    x += size.w + 32;
    rowH = Math.max(rowH, size.h);
    width = Math.max(width, x - 32);
  }
  return { w: width, h: y + rowH };
}

/** Draw ``g``'s SVG afresh (tensors, then the strip), its pagers and the hover marks. */
export function renderGroup(ctx: StridesContext, g: Group) {
  const { doc } = ctx;
  const active = doc.activeElement;
  let focusWanted = ctx.pendingFocus;
  ctx.pendingFocus = null;
  if (!focusWanted && active && g.svg.contains(active)) {
    focusWanted = keyOfEl(active);
  }
  g.cellEls.clear();
  g.cellRects.clear();
  g.stripEls.clear();
  g.stripRects.clear();
  const cw = cellWidth(ctx, g);
  const content = s(doc, 'g', { class: 'fv-sd-content', transform: `translate(${PAD},${PAD})` }) as SVGGElement;
  const tensorsLayer = s(doc, 'g', { class: 'fv-sd-tensors' }) as SVGGElement;
  content.appendChild(tensorsLayer);
  const tensors = drawTensors(ctx, g, tensorsLayer, cw);
  let width = tensors.w;
  let height = tensors.h;
  if (g.strip) {
    const size = drawStrip(ctx, g, g.strip, content, height + 22, cw);
    width = Math.max(width, size.w);
    height += 22 + size.h;
  }
  const overlay = s(doc, 'g', { class: 'fv-sd-overlay', 'pointer-events': 'none', 'aria-hidden': 'true' }) as SVGGElement;
  content.appendChild(overlay);
  g.width = Math.ceil(width);
  g.height = Math.ceil(height);
  g.svg.setAttribute('width', String(g.width + 2 * PAD));
  g.svg.setAttribute('height', String(g.height + 2 * PAD));
  g.svg.setAttribute('viewBox', `0 0 ${g.width + 2 * PAD} ${g.height + 2 * PAD}`);
  ctx.rendering = true;
  try {
    g.svg.replaceChildren(content);
  } finally {
    ctx.rendering = false;
  }
  g.content = content;
  g.overlay = overlay;
  for (const ts of g.tensors) {
    renderPagers(ctx, g, ts);
  }
  renderStripPager(ctx, g);
  applyHot(ctx);
  if (focusWanted) {
    focusKey(ctx, focusWanted);
  }
}
