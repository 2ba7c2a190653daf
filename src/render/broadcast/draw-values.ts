/**
 * The value grids under a broadcast frame's table (elementwise plans with small tensors): each
 * operand's values, stretched over the result shape once the frame stretches (repeats marked:
 * stride 0, not a copy), then the result's values inside the result group.
 */
import type { Operand } from '../../model/wire';
import { r2, s } from '../common/dom';
import { Slot, VCH } from './frame-layout';
import { indexText, indicesOf, isRepeat, sourceIndex, stretchedDims } from './layout';
import { Attrs, colorOf, Pen, text, title } from './pen';

type CellFn = (cls: string, attrs: Attrs, x: number, yy: number, v: string, tip: string, color: string | undefined) => SVGElement;

/** A value cell; the tooltip sits on a wrapper, so a cell's own text is just its value. */
function cellMaker(pen: Pen): CellFn {
  const { doc } = pen;
  const VCW = pen.L.VCW;
  const maxChars2 = Math.max(1, Math.floor((VCW - 4) / 5.8));
  const clip = (v: string) => (v.length <= maxChars2 ? v : `${v.slice(0, Math.max(1, maxChars2 - 1))}…`);
  return (cls, attrs, x, yy, v, tip, color) => {
    const c = s(doc, 'g', { class: cls, ...attrs, role: 'img', 'aria-label': tip });
    c.append(
      s(doc, 'rect', { class: 'fv-bc-vbox', x: 0.5, y: 0.5, width: VCW - 1, height: VCH - 1, fill: color }),
      text(pen, VCW / 2, VCH / 2 + 4, clip(v), 'fv-bc-vtext', { 'text-anchor': 'middle' })
    );
    return s(doc, 'g', { class: 'fv-bc-vcell', transform: `translate(${r2(x)},${r2(yy)})` }, title(pen, tip), c);
  };
}

/** The result's grid: each value and the operand elements it comes from. */
function resultGrid(pen: Pen, slot: Slot, VT: number, cell: CellFn): SVGElement {
  const { doc, plan } = pen;
  const grid = s(doc, 'g', { class: 'fv-bc-grid fv-bc-result-grid', transform: `translate(${r2(slot.x)},${r2(VT)})` });
  grid.appendChild(text(pen, 0, 12, slot.label, 'fv-bc-grid-label'));
  const vals = plan.result_values!;
  for (const c of slot.geom.cells) {
    const v = vals[c.flat] ?? '';
    const from = plan.operands.map(o => indexText(o.name, sourceIndex(o, c.index))).join(', ');
    grid.appendChild(cell('fv-bc-value', { 'data-index': c.index.join(',') }, c.x, 18 + c.y, v, `${indexText('result', c.index)} = ${v} ← ${from}`, undefined));
  }
  return grid;
}

/** The cells of an operand stretched over the result shape: originals and their repeats. */
function stretchedCells(pen: Pen, slot: Slot, o: Operand, grid: SVGElement, cell: CellFn): void {
  const sdims = stretchedDims(pen.plan.checks, slot.i);
  const color = colorOf(slot.i);
  for (const c of slot.geom.cells) {
    const rep = isRepeat(c.index, sdims);
    const src = indexText(o.name, sourceIndex(o, c.index));
    const v = o.expanded_values![c.flat] ?? '';
    const cls = `fv-bc-ovalue ${rep ? 'fv-repeat' : 'fv-orig'}${rep && pen.animate && pen.st.step?.kind === 'stretch' ? ' fv-new' : ''}`;
    const tip = rep ? `${indexText(slot.stretchLabel ?? o.name, c.index)} = ${v}: the same element as ${src} (stride 0, not a copy)` : `${src} = ${v}`;
    grid.appendChild(cell(cls, { 'data-operand': slot.i, 'data-index': c.index.join(',') }, c.x, 18 + c.y, v, tip, color));
  }
}

/** An operand's grid: its own values, or stretched over the result shape once the frame stretches. */
function operandGrid(pen: Pen, slot: Slot, VT: number, cell: CellFn): SVGElement {
  const { doc, plan, st } = pen;
  const o = plan.operands[slot.i];
  const stretchedHere = slot.full && st.stretched;
  const grid = s(doc, 'g', { class: `fv-bc-grid fv-bc-values${stretchedHere ? ' fv-stretched' : ''}`, 'data-operand': slot.i, transform: `translate(${r2(slot.x)},${r2(VT)})` });
  grid.appendChild(text(pen, 0, 12, stretchedHere && slot.stretchLabel ? slot.stretchLabel : slot.label, 'fv-bc-grid-label'));
  if (stretchedHere && o.expanded_values) {
    stretchedCells(pen, slot, o, grid, cell);
  } else {
    const vals = o.values ?? [];
    const color = colorOf(slot.i);
    indicesOf(o.padded).forEach((idx, f) => {
      const pos = slot.geom.at(idx);
      const v = vals[f] ?? '';
      const own = idx.slice(o.ghost);
      grid.appendChild(cell('fv-bc-ovalue fv-orig', { 'data-operand': slot.i, 'data-index': idx.join(',') }, pos.x, 18 + pos.y, v, `${indexText(o.name, own)} = ${v}`, color));
    });
  }
  return grid;
}

/**
 * Draw the value grids from ``top`` down into ``root`` (the result's grid into
 * ``resultGroup``); returns the y below them.
 */
export function drawValueGrids(pen: Pen, root: SVGElement, resultGroup: SVGElement | null, top: number): number {
  const { doc, st } = pen;
  const { slots, opMarks, valuesH } = pen.L;
  const VT = top + 6;
  const gy = VT + 18;
  const vLayer = s(doc, 'g', { class: 'fv-bc-valuegrids' });
  root.appendChild(vLayer);
  for (const m of opMarks) {
    if (!m.result || st.result) {
      vLayer.appendChild(text(pen, m.x, gy + Math.min(valuesH, 3 * VCH) / 2 + 5, m.t, 'fv-bc-op', { 'text-anchor': 'middle' }));
    }
  }
  const cell = cellMaker(pen);
  for (const slot of slots) {
    if (slot.i < 0) {
      // the result grid lives inside g.fv-bc-result
      if (st.result && resultGroup) {
        resultGroup.appendChild(resultGrid(pen, slot, VT, cell));
      }
      continue;
    }
    vLayer.appendChild(operandGrid(pen, slot, VT, cell));
  }
  return VT + 18 + valuesH + 10;
}
