/**
 * The SVG of the stride diagram: a tensor block (header and logical grid) and the hover marks
 * (connectors, stride arcs); draw-strip.ts draws the storage strip. Each drawn cell is recorded
 * in its group (``cellEls``/``stripEls`` and their rects) for hover.
 */
import { r2, s } from '../common/dom';
import { axesText, cellLabel, clip, contiguityBadge, tensorHeadLines } from './data';
import { key } from './keys';
import { GridCell, gridGeometry, initialBox, Rect, toStripIndex, tupleText } from './layout';
import { addrOf, Group, SState, StridesContext, TState } from './state';

const CH = 20; // logical cell height

export type Size = { w: number; h: number };

export function svgText(doc: Document, x: number, y: number, content: string, cls: string, extra: Record<string, string | number> = {}) {
  return s(doc, 'text', { x: r2(x), y: r2(y), class: cls, ...extra }, content);
}

export function swatch(doc: Document, ts: TState, x: number, y: number, w = 18): SVGElement {
  return s(doc, 'line', {
    class: 'fv-swatch',
    x1: x,
    y1: y,
    x2: x + w,
    y2: y,
    stroke: ts.color,
    'stroke-dasharray': ts.dash,
    'stroke-width': 3
  });
}

// ---- a tensor -------------------------------------------------------------------------------------

/** Swatch, name, contiguity badge and the two lines of facts; its width. */
function tensorHead(doc: Document, ts: TState): { head: SVGElement; w: number } {
  const t = ts.t;
  const head = s(doc, 'g', { class: 'fv-t-head' });
  head.appendChild(swatch(doc, ts, 0, 8));
  head.appendChild(svgText(doc, 24, 12, t.name, 'fv-t-name'));
  const badge = contiguityBadge(t);
  const bx = 24 + t.name.length * 7.3 + 8;
  const bw = badge.length * 5.6 + 10;
  const bg = s(doc, 'g', { class: 'fv-badge-c', 'data-contiguous': String(t.is_contiguous), transform: `translate(${r2(bx)},1)` });
  bg.append(s(doc, 'rect', { class: 'fv-badge-box', width: r2(bw), height: 14, rx: 7 }), svgText(doc, bw / 2, 10.5, badge, 'fv-badge-text', { 'text-anchor': 'middle' }));
  head.appendChild(bg);
  const [line2, line3] = tensorHeadLines(t);
  head.append(svgText(doc, 0, 29, line2, 'fv-t-line'), svgText(doc, 0, 44, line3, 'fv-t-line fv-t-sub'));
  return { head, w: Math.max(bx + bw, line2.length * 6.5, line3.length * 6.5) };
}

/** One logical cell at ``c``, recorded in ``g`` at its place in the group (``ox``, ``oy``: the grid's origin). */
function tensorCell(ctx: StridesContext, g: Group, ts: TState, c: GridCell, cw: number, ox: number, oy: number): SVGGElement {
  const { doc } = ctx;
  const t = ts.t;
  const addr = addrOf(ctx, ts, c.index);
  const v = ts.values && c.flat < ts.values.length ? ts.values[c.flat] : null;
  const label = cellLabel(t.name, c.index, v, addr);
  const cell = s(doc, 'g', {
    class: 'fv-cell',
    'data-tensor': t.id,
    'data-index': c.index.join(','),
    'data-addr': addr,
    transform: `translate(${r2(c.x)},${r2(c.y)})`,
    tabindex: 0,
    role: 'img',
    'aria-label': label
  }) as SVGGElement;
  cell.append(s(doc, 'title', {}, label), s(doc, 'rect', { class: 'fv-cell-box', x: 0.5, y: 0.5, width: cw - 1, height: CH - 1, fill: ts.color }));
  if (v !== null) {
    const maxChars = Math.max(1, Math.floor((cw - 4) / 5.6));
    cell.appendChild(svgText(doc, cw / 2, CH / 2 + 3.3, clip(v, maxChars), 'fv-cell-text', { 'text-anchor': 'middle' }));
  }
  const k = key(t.id, c.index);
  g.cellEls.set(k, cell);
  g.cellRects.set(k, { x: ox + c.x, y: oy + c.y, w: cw, h: CH });
  return cell;
}

/** The logical grid of the window ``ts.box`` (or the first one), framed in the tensor's colour. */
function tensorGrid(ctx: StridesContext, g: Group, ts: TState, y: number, ox: number, oy: number, cw: number): { grid: SVGElement; size: Size } {
  const { doc } = ctx;
  const t = ts.t;
  const box = ts.box ?? initialBox(t.shape, ctx.maxWindow);
  const geom = gridGeometry(t.shape, box.start, box.size, cw, CH);
  const grid = s(doc, 'g', { class: 'fv-grid', 'data-tensor': t.id, transform: `translate(0,${y})` });
  for (const b of geom.blocks) {
    grid.appendChild(s(doc, 'rect', { class: 'fv-block', x: r2(b.x), y: r2(b.y), width: r2(b.w), height: r2(b.h), rx: 4, 'data-dim': b.dim }));
  }
  for (const tile of geom.tiles) {
    grid.appendChild(s(doc, 'rect', { class: 'fv-tile', x: r2(tile.x), y: r2(tile.y), width: r2(tile.w), height: r2(tile.h), rx: 3, 'data-lead': tile.lead.join(',') }));
  }
  for (const m of geom.marks) {
    grid.appendChild(svgText(doc, m.x, m.y, m.text, m.cls, m.anchor ? { 'text-anchor': m.anchor } : {}));
  }
  for (const c of geom.cells) {
    grid.appendChild(tensorCell(ctx, g, ts, c, cw, ox, oy + y));
  }
  // frame in the tensor's colour and dash pattern: the non-colour cue
  grid.appendChild(
    s(doc, 'rect', {
      class: 'fv-t-frame',
      x: -3,
      y: -3,
      width: r2(geom.width + 6),
      height: r2(geom.height + 6),
      rx: 4,
      stroke: ts.color,
      'stroke-dasharray': ts.dash
    })
  );
  return { grid, size: { w: geom.width, h: geom.height } };
}

/** A one-line note in place of the grid (no strides, no elements). */
function tensorNote(doc: Document, blk: SVGElement, note: string, cls: string, w: number, y: number): Size {
  blk.appendChild(svgText(doc, 0, y + 10, note, cls));
  return { w: Math.max(w, note.length * 6), h: y + 16 };
}

/** One tensor block at (``ox``, ``oy``) in ``root``: header + logical grid. Returns its size. */
export function drawTensor(ctx: StridesContext, g: Group, ts: TState, root: SVGGElement, ox: number, oy: number, cw: number): Size {
  const { doc } = ctx;
  const t = ts.t;
  const blk = s(doc, 'g', {
    class: 'fv-sd-tensor',
    'data-tensor': t.id,
    transform: `translate(${r2(ox)},${r2(oy)})`
  }) as SVGGElement;
  root.appendChild(blk);
  const { head, w: headW } = tensorHead(doc, ts);
  blk.appendChild(head);
  let w = headW;
  let y = 56;

  if (t.stride === null) {
    return tensorNote(doc, blk, `layout ${t.layout}: ${t.panel ? t.panel.title : 'no strides'} (see the panel below)`, 'fv-t-note', w, y);
  }
  if (t.numel === 0 || t.shape.some(n => n === 0)) {
    return tensorNote(doc, blk, `no elements (shape ${tupleText(t.shape)})`, 'fv-t-note fv-empty', w, y);
  }
  const axes = axesText(t.shape);
  blk.appendChild(svgText(doc, 0, y + 9, axes, 'fv-axis-label'));
  w = Math.max(w, axes.length * 5.5);
  y += 16;
  const { grid, size } = tensorGrid(ctx, g, ts, y, ox, oy, cw);
  blk.appendChild(grid);
  if (!t.has_data) {
    blk.appendChild(svgText(doc, 0, y + size.h + 16, 'meta: no data (the layout is real, the values do not exist)', 'fv-t-note'));
    y += 16;
  }
  return { w: Math.max(w, size.w + 6), h: y + size.h + 6 };
}

// ---- hover marks ------------------------------------------------------------------------------------

/** A curve from the bottom of ``a`` to the top of ``b``. */
export function connector(doc: Document, a: Rect, b: Rect, color: string): SVGElement {
  const x1 = a.x + a.w / 2;
  const y1 = a.y + a.h;
  const x2 = b.x + b.w / 2;
  const y2 = b.y;
  const my = (y1 + y2) / 2;
  return s(doc, 'path', { class: 'fv-connector', d: `M${r2(x1)},${r2(y1)} C${r2(x1)},${r2(my)} ${r2(x2)},${r2(my)} ${r2(x2)},${r2(y2)}`, stroke: color });
}

/**
 * The stride arcs above ``target``, the storage cell that ``index`` of ``ts`` reads (``raw``:
 * its storage element in tensor units): one step along each dim, a loop for stride 0.
 */
export function strideArcs(doc: Document, g: Group, ts: TState, st: SState, index: readonly number[], raw: number, target: Rect): SVGElement[] {
  const t = ts.t;
  const out: SVGElement[] = [];
  (t.stride ?? []).forEach((stride, d) => {
    if (index[d] + 1 >= t.shape[d]) {
      return;
    }
    const lift = 12 + 9 * (d % 4);
    const cx = target.x + target.w / 2;
    const top = target.y;
    if (stride === 0) {
      const loop = s(doc, 'g', { class: 'fv-arc fv-arc-self', 'data-dim': d });
      loop.append(
        s(doc, 'path', { class: 'fv-arc-path', d: `M${r2(cx - 4)},${r2(top)} C${r2(cx - 14)},${r2(top - lift)} ${r2(cx + 14)},${r2(top - lift)} ${r2(cx + 4)},${r2(top)}`, stroke: ts.color }),
        svgText(doc, cx + 12, top - lift + 2, `dim ${d} +0 (expand: same element)`, 'fv-arc-label')
      );
      out.push(loop);
      return;
    }
    const next = toStripIndex(raw + stride, t.element_size, st.s.element_size);
    const to = g.stripRects.get(next);
    const arc = s(doc, 'g', { class: 'fv-arc', 'data-dim': d, 'data-to': next });
    const label = `dim ${d} +${stride}`;
    if (to) {
      const tx = to.x + to.w / 2;
      const ty = to.y;
      const peak = Math.min(top, ty) - lift;
      arc.append(
        s(doc, 'path', { class: 'fv-arc-path', d: `M${r2(cx)},${r2(top)} C${r2(cx)},${r2(peak)} ${r2(tx)},${r2(peak)} ${r2(tx)},${r2(ty)}`, stroke: ts.color }),
        s(doc, 'circle', { class: 'fv-arc-end', cx: r2(tx), cy: r2(ty), r: 2.5, fill: ts.color }),
        svgText(doc, (cx + tx) / 2, peak + 3, label, 'fv-arc-label', { 'text-anchor': 'middle' })
      );
    } else {
      const dir = stride > 0 ? 1 : -1;
      arc.append(
        s(doc, 'path', { class: 'fv-arc-path', d: `M${r2(cx)},${r2(top)} q${r2(dir * 14)},${-lift} ${r2(dir * 28)},${-lift}`, stroke: ts.color }),
        svgText(doc, cx + dir * 30, top - lift + 3, `${label} → storage[${next}] (not shown)`, 'fv-arc-label', { 'text-anchor': dir > 0 ? 'start' : 'end' })
      );
    }
    out.push(arc);
  });
  return out;
}
