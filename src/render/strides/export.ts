/** The stride view as one standalone SVG: every group's drawing, stacked (or the message, when none). */
import { s } from '../common/dom';
import { standaloneSvg } from '../common/export';
import { svgText } from './draw';
import { StridesContext } from './state';

/** The size of the exported SVG: the widest group, the groups' heights and their gaps. */
export function exportSize(ctx: StridesContext): { w: number; hgt: number } {
  let w = 240;
  let hgt = 0;
  for (const g of ctx.groups) {
    w = Math.max(w, g.width);
    hgt += g.height + 24;
  }
  return { w, hgt: Math.max(32, hgt) };
}

export function exportSVG(ctx: StridesContext): string {
  const { doc, el } = ctx;
  const host = ctx.groups[0]?.svg;
  const tmp = s(doc, 'g', { class: 'fv-sd-export' }) as SVGGElement;
  let y = 0;
  if (!host) {
    const text0 = ctx.layout?.message ?? 'no tensors';
    const svg0 = s(doc, 'svg', { class: 'fv-sd-canvas' }) as SVGSVGElement;
    ctx.ui.groupsEl.appendChild(svg0);
    tmp.appendChild(svgText(doc, 0, 14, text0, 'fv-strip-label'));
    svg0.appendChild(tmp);
    try {
      return standaloneSvg(tmp, el, 480, 20, `forgeviz: ${text0}`);
    } finally {
      svg0.remove();
    }
  }
  for (const g of ctx.groups) {
    if (!g.content) {
      continue;
    }
    const clone = g.content.cloneNode(true) as SVGGElement;
    clone.setAttribute('transform', `translate(0,${y})`);
    tmp.appendChild(clone);
    y += g.height + 24;
  }
  host.appendChild(tmp);
  try {
    const { w, hgt } = exportSize(ctx);
    return standaloneSvg(tmp, el, w, hgt, 'forgeviz stride diagram');
  } finally {
    tmp.remove();
  }
}
