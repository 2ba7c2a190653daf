/**
 * A storage strip as SVG: heading and readers, the overview of the whole storage, the cells
 * (elements or bytes), each reader's extent and read elements, and the overlaps.
 */
import { r2, s } from '../common/dom';
import { clip, overlapText, storageCellLabel, stripHeading } from './data';
import { Size, svgText, swatch } from './draw';
import { stripGeometry, StripGeom, stripSpan, toStripIndex } from './layout';
import { Group, nameOf, numelOf, SState, stripCount, StridesContext, TState } from './state';

const SCH = 24; // storage cell height
const STRIP_LEFT = 52;

/** Where the cells of a strip sit, for its cells and read lanes. */
interface StripFrame {
  st: SState;
  geom: StripGeom;
  count: number;
  /** y of the first row of cells in the strip's layer */
  top: number;
  rowPitch: number;
}

const cellX = (f: StripFrame, i: number) => STRIP_LEFT + (i % f.geom.perRow) * f.geom.ew;
const rowY = (f: StripFrame, i: number) => f.top + Math.floor(i / f.geom.perRow) * f.rowPitch;

/** The heading, the "read by" legend and the copy badge; their width. */
function stripHead(ctx: StridesContext, g: Group, st: SState, layer: SVGElement): number {
  const { doc } = ctx;
  const sp = st.s;
  const head = stripHeading(sp);
  layer.appendChild(svgText(doc, 0, 12, head, 'fv-strip-label'));
  const by = s(doc, 'g', { class: 'fv-strip-readers' });
  by.appendChild(svgText(doc, 0, 29, 'read by:', 'fv-strip-sub'));
  let x = 50;
  for (const ts of g.tensors) {
    by.append(swatch(doc, ts, x, 25, 16), svgText(doc, x + 20, 29, ts.t.name, 'fv-strip-reader', { 'data-tensor': ts.t.id }));
    x += 28 + ts.t.name.length * 6.6;
  }
  layer.appendChild(by);
  if (sp.copy) {
    const label = 'copy: own storage';
    const cx = x + 8;
    const cg = s(doc, 'g', { class: 'fv-copy', transform: `translate(${r2(cx)},17)` });
    cg.append(s(doc, 'rect', { class: 'fv-copy-box', width: label.length * 6 + 12, height: 16, rx: 3 }), svgText(doc, 6, 11.5, label, 'fv-copy-text'));
    layer.appendChild(cg);
    x = cx + label.length * 6 + 12;
  }
  return Math.max(head.length * 6.8, x);
}

/** The whole storage as a bar at ``y``, the window drawn and each reader's extent on it. */
function stripOverview(ctx: StridesContext, st: SState, readers: TState[], count: number, cellsW: number, y: number): SVGElement {
  const { doc } = ctx;
  const sp = st.s;
  const ow = Math.max(200, cellsW);
  const sx = (a: number) => STRIP_LEFT + (a / sp.length) * ow;
  const ov = s(doc, 'g', { class: 'fv-overview', 'data-strip': sp.id });
  ov.append(
    svgText(doc, 0, y + 8, 'all', 'fv-row-label'),
    s(doc, 'rect', { class: 'fv-ov-bar', x: STRIP_LEFT, y, width: r2(ow), height: 8, rx: 2 }),
    s(doc, 'rect', { class: 'fv-ov-win', x: r2(sx(st.start)), y: y - 2, width: r2(Math.max(2, (count / sp.length) * ow)), height: 12, rx: 2 })
  );
  readers.forEach((ts, i) => {
    const e = ts.t.extent;
    if (!e) {
      return;
    }
    const lo = toStripIndex(e[0], ts.t.element_size, sp.element_size);
    const hi = stripSpan(e[1], ts.t.element_size, sp.element_size)[1];
    ov.appendChild(
      s(doc, 'line', {
        class: 'fv-ov-extent',
        x1: r2(sx(lo)),
        x2: r2(Math.max(sx(lo) + 2, sx(hi + 1))),
        y1: y + 13 + i * 4,
        y2: y + 13 + i * 4,
        stroke: ts.color,
        'stroke-dasharray': ts.dash,
        'data-tensor': ts.t.id
      })
    );
  });
  const note = `showing elements ${st.start}–${st.start + count - 1} of ${sp.length}`;
  ov.appendChild(svgText(doc, STRIP_LEFT, y + 24 + readers.length * 4, note, 'fv-strip-sub'));
  return ov;
}

/** The ``i``-th drawn storage cell, recorded in ``g`` (``oy``: the strip's y in the group). */
function storageCell(ctx: StridesContext, g: Group, f: StripFrame, i: number, oy: number): SVGGElement {
  const { doc, bytesMode } = ctx;
  const { st, geom } = f;
  const sp = st.s;
  const a = st.start + i;
  const cx = cellX(f, i);
  const cy = rowY(f, i);
  const v = sp.has_data ? st.known.get(a) : undefined;
  const readBy = g.tensors.filter(ts => ts.readers.has(a)).map(ts => ts.t.name);
  const label = storageCellLabel(a, v, sp.element_size, bytesMode, readBy);
  const cell = s(doc, 'g', {
    class: 'fv-storage-cell',
    'data-strip': sp.id,
    'data-addr': a,
    transform: `translate(${r2(cx)},${r2(cy)})`,
    tabindex: 0,
    role: 'img',
    'aria-label': label
  }) as SVGGElement;
  cell.append(s(doc, 'title', {}, label), s(doc, 'rect', { class: 'fv-sc-box', x: 0.5, y: 0.5, width: geom.ew - 1, height: SCH - 1 }));
  if (bytesMode) {
    const bw = geom.ew / sp.element_size;
    for (let b = 1; b < sp.element_size; b++) {
      cell.appendChild(s(doc, 'line', { class: 'fv-byte-div', x1: r2(b * bw), x2: r2(b * bw), y1: 9, y2: SCH - 1 }));
    }
    cell.appendChild(svgText(doc, 2, 8, String(a * sp.element_size), 'fv-addr-num'));
  } else {
    cell.appendChild(svgText(doc, 2, 8, String(a), 'fv-addr-num'));
  }
  if (v) {
    const maxChars = Math.max(1, Math.floor((geom.ew - 4) / 5.6));
    cell.appendChild(svgText(doc, geom.ew / 2, SCH - 5, clip(v, maxChars), 'fv-cell-text', { 'text-anchor': 'middle' }));
  }
  g.stripEls.set(a, cell);
  g.stripRects.set(a, { x: cx, y: oy + cy, w: geom.ew, h: SCH });
  return cell;
}

/** The ``li``-th reader's lane under the cells: its extent (faint, dashed) and the elements its window reads (solid ticks). */
function readerLane(doc: Document, f: StripFrame, ts: TState, li: number): SVGElement {
  const { st, geom, count } = f;
  const sp = st.s;
  const e = ts.t.extent;
  const lane = s(doc, 'g', { class: 'fv-extent', 'data-tensor': ts.t.id });
  const ly = SCH + 5 + li * 4;
  if (e) {
    const lo = Math.max(st.start, toStripIndex(e[0], ts.t.element_size, sp.element_size));
    const hi = Math.min(st.start + count - 1, stripSpan(e[1], ts.t.element_size, sp.element_size)[1]);
    for (let a = lo; a <= hi; ) {
      const i = a - st.start;
      const r = Math.floor(i / geom.perRow);
      const rowEnd = Math.min(hi, st.start + (r + 1) * geom.perRow - 1);
      const x1 = cellX(f, i) + 1;
      const x2 = cellX(f, rowEnd - st.start) + geom.ew - 1;
      const yy = r2(rowY(f, i) + ly);
      lane.appendChild(s(doc, 'line', { class: 'fv-extent-bar', x1: r2(x1), x2: r2(x2), y1: yy, y2: yy, stroke: ts.color, 'stroke-dasharray': ts.dash }));
      a = rowEnd + 1;
    }
  }
  for (const a of ts.readers.keys()) {
    const i = a - st.start;
    if (i < 0 || i >= count) {
      continue;
    }
    lane.appendChild(
      s(doc, 'rect', {
        class: 'fv-read-tick',
        x: r2(cellX(f, i) + 2),
        y: r2(rowY(f, i) + ly - 1.5),
        width: r2(Math.max(1, geom.ew - 4)),
        height: 3,
        fill: ts.color
      })
    );
  }
  return lane;
}

/** Row labels, the storage cells and the readers' lanes. */
function stripCells(ctx: StridesContext, g: Group, f: StripFrame, readers: TState[], oy: number): SVGElement {
  const { doc, bytesMode } = ctx;
  const { st, geom } = f;
  const cells = s(doc, 'g', { class: 'fv-strip-cells' });
  for (let r = 0; r < geom.rows; r++) {
    const first = st.start + r * geom.perRow;
    const ry = f.top + r * f.rowPitch;
    cells.appendChild(svgText(doc, STRIP_LEFT - 5, ry + SCH / 2 + 3.5, bytesMode ? `byte ${first * st.s.element_size}` : `[${first}]`, 'fv-row-label', { 'text-anchor': 'end' }));
  }
  for (let i = 0; i < f.count; i++) {
    cells.appendChild(storageCell(ctx, g, f, i, oy));
  }
  readers.forEach((ts, li) => cells.appendChild(readerLane(doc, f, ts, li)));
  return cells;
}

/** One line per overlap that involves the group's tensors, from ``y``; the width and the new y. */
function overlapLines(ctx: StridesContext, g: Group, layer: SVGElement, w: number, y: number): Size {
  const ids = new Set(g.tensors.map(ts => ts.t.id));
  for (const o of ctx.layout?.overlaps ?? []) {
    if (!ids.has(o.a) && !ids.has(o.b)) {
      continue;
    }
    const line = overlapText(o, id => nameOf(ctx, id), id => numelOf(ctx, id));
    layer.appendChild(svgText(ctx.doc, 0, y + 12, line, 'fv-overlap', { 'data-a': o.a, 'data-b': o.b, 'data-elements': o.elements }));
    w = Math.max(w, line.length * 6.2);
    y += 16;
  }
  return { w, h: y };
}

/** The group's storage strip at ``oy`` in ``root``. Returns its size. */
export function drawStrip(ctx: StridesContext, g: Group, st: SState, root: SVGGElement, oy: number, cw: number): Size {
  const { doc } = ctx;
  const sp = st.s;
  const layer = s(doc, 'g', { class: 'fv-strip', 'data-strip': sp.id, transform: `translate(0,${r2(oy)})` }) as SVGGElement;
  root.appendChild(layer);
  const count = stripCount(ctx, st);
  const geom = stripGeometry(st.start, count, cw, sp.element_size, ctx.bytesMode);
  st.geom = geom;
  const readers = g.tensors.filter(ts => ts.t.stride !== null);
  const lanes = readers.length;
  const cellsW = geom.perRow * geom.ew;
  const w = Math.max(STRIP_LEFT + cellsW, stripHead(ctx, g, st, layer));
  let y = 40;
  // overview of the whole storage when only part of it is drawn
  if (sp.length > count) {
    layer.appendChild(stripOverview(ctx, st, readers, count, cellsW, y));
    y += 32 + lanes * 4;
  }
  // room above the cells for the stride arcs
  y += 10 + 9 * Math.min(4, Math.max(1, ...readers.map(ts => ts.t.shape.length)));
  const f: StripFrame = { st, geom, count, top: y, rowPitch: SCH + 4 + lanes * 4 + 6 };
  layer.appendChild(stripCells(ctx, g, f, readers, oy));
  y += geom.rows * f.rowPitch;
  const end = overlapLines(ctx, g, layer, w, y);
  return { w: end.w, h: end.h + 4 };
}
