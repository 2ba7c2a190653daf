/**
 * The stride view as one standalone SVG: every group's drawing, stacked (or the message, when none),
 * as shown: in its units, with the shown (pinned) cell's mapping marked and its readout written above.
 */
import { s } from '../common/dom';
import { standaloneSvg } from '../common/export';
import { svgText } from './draw';
import { StridesContext } from './state';

/** Height of the mapping line above the groups when a cell's mapping is shown. */
const READOUT_LINE = 22;

/** The mapping the view shows now (a pinned or focused cell's readout), exported above the groups. */
function mappingText(ctx: StridesContext): string | null {
  return ctx.hot && ctx.ui.readout.getAttribute('data-empty') === 'false' ? ctx.ui.readout.textContent : null;
}

/** The size of the exported SVG: the widest group (or mapping line), the groups' heights and their gaps. */
export function exportSize(ctx: StridesContext): { w: number; hgt: number } {
  const mapping = mappingText(ctx);
  // no text metrics in every host: about 6.5 px a character at the readout's 12 px
  let w = mapping ? Math.max(240, Math.ceil(mapping.length * 6.5)) : 240;
  let hgt = mapping ? READOUT_LINE : 0;
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
  const mapping = mappingText(ctx);
  if (mapping) {
    tmp.appendChild(svgText(doc, 0, 14, mapping, 'fv-sd-mapping'));
    y += READOUT_LINE;
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
