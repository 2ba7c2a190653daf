/**
 * anywidget entry (esbuild → forgeviz/static/ranks.js): a thin adapter from the widget model to the
 * pure ranks renderer.
 *
 * Traits: ``grid`` (wire RanksGrid JSON, ``{}`` until ready), ``warnings`` (list of strings),
 * optional ``static`` (true on the offline HTML page). No requests: the grid holds every number.
 */
import css from '../../style/ranks.css?raw';
import type { RanksGrid } from '../model/wire';
import { createRanksView } from '../render/ranks/view';
import { defineEntry, hasArrays } from './entry';

export { createRanksView };

const render = defineEntry({
  trait: 'grid',
  is: (v): v is RanksGrid => hasArrays(v, 'ranks', 'steps', 'modules') && typeof (v as RanksGrid).norms === 'string',
  styleId: 'forgeviz-ranks-style',
  css,
  create: ({ el }) => createRanksView(el),
  show: (view, g) => view.setGrid(g)
});

export default { render };
