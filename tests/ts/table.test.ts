import { describe, expect, it } from 'vitest';
import { graphOfTrait, isGraphTrait, rowsOf } from '../../src/model/table';
import { clusterGraph, traitOf } from './fixtures';

describe('tables (the graph trait lists, as forgeviz.model.as_table sends them)', () => {
  it('reads plain and coded columns back as rows', () => {
    // the as_table docstring's example, as the kernel writes it
    const table = { rows: 4, columns: { id: [0, 1, 2, 3], op: { values: ['mul'], codes: [0, 0, 0, 0] } } };
    expect(rowsOf(table)).toEqual([0, 1, 2, 3].map(id => ({ id, op: 'mul' })));
    const meta = { shape: [3], dtype: 'float32', device: 'cpu' };
    const rows = rowsOf<{ meta: unknown }>({ rows: 3, columns: { meta: { values: [meta, null], codes: [0, 1, 0] } } });
    expect(rows.map(r => r.meta)).toEqual([meta, null, meta]);
    expect(rowsOf({ rows: 0, columns: {} })).toEqual([]);
  });

  it('refuses a column whose length is not the row count', () => {
    expect(() => rowsOf({ rows: 3, columns: { id: [1, 2] } })).toThrow('a table of 3 rows has a column of 2 values');
  });

  it('gives back the graph it was made of', () => {
    const g = clusterGraph();
    const trait = traitOf(g);
    expect(isGraphTrait(trait)).toBe(true);
    expect(isGraphTrait(g)).toBe(false);
    expect(isGraphTrait({})).toBe(false);
    expect(graphOfTrait(trait)).toEqual(g);
  });
});
