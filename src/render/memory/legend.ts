/** The legend: one swatch per category (its fill pattern) with its live bytes at the end. */
import { CATEGORIES } from '../../model/wire';
import { h, s } from '../common/dom';
import { svgFill, svgPatterns } from './draw';
import { bytesShort } from './geom';
import type { MemoryContext } from './context';
import { theme } from './painter';

export function renderLegend(ctx: MemoryContext): void {
  const { doc, store, uid } = ctx;
  const n = store.n;
  const th = theme(ctx.el);
  ctx.ui.legend.replaceChildren(
    ...CATEGORIES.map((name, c) => {
      const sw = s(doc, 'svg', { class: 'fv-mem-swatch', width: 14, height: 14, viewBox: '0 0 14 14', 'aria-hidden': 'true' });
      sw.appendChild(svgPatterns(doc, `${uid}-lg${c}`, th, c));
      sw.appendChild(s(doc, 'rect', { x: 0.5, y: 0.5, width: 13, height: 13, fill: svgFill(c, `${uid}-lg${c}`) }));
      const present = !!store.stack[c];
      return h(
        doc,
        'li',
        { class: 'fv-mem-legend-item', 'data-category': name, 'data-present': String(present) },
        sw,
        h(doc, 'span', { class: 'fv-mem-legend-name' }, name),
        h(doc, 'span', { class: 'fv-mem-legend-bytes' }, present ? bytesShort(store.liveAt(n - 1, c)) : '—')
      );
    })
  );
}
