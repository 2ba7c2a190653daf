/**
 * Rows sent as columns (``forgeviz.model.as_table``): a big list's field names once, and values
 * that repeat (op names, module paths, shapes) as codes into their distinct values. The graph
 * trait sends its Nodes, Edges, Modules and Repeats so; ``graphOfTrait`` makes them rows again.
 */
import type { Edge, Graph, Module, Node, Repeat } from './wire';

/** A column: its values, or the distinct values and one code per row. */
export type Column = unknown[] | { values: unknown[]; codes: number[] };

export interface Table {
  rows: number;
  columns: Record<string, Column>;
}

/** The graph trait: a Graph whose lists are tables (and whose state fields come in the ``state`` trait). */
export type GraphTrait = Omit<Graph, 'nodes' | 'edges' | 'modules' | 'repeats'> & {
  nodes: Table;
  edges: Table;
  modules: Table;
  repeats: Table;
};

export function isTable(v: unknown): v is Table {
  return !!v && typeof v === 'object' && typeof (v as Table).rows === 'number' && !!(v as Table).columns && typeof (v as Table).columns === 'object';
}

/**
 * The rows of ``table``, each an object with one key per column.
 *
 *     rowsOf({rows: 2, columns: {id: [1, 2], op: {values: ['mul'], codes: [0, 0]}}})
 *     // [{id: 1, op: 'mul'}, {id: 2, op: 'mul'}]
 */
export function rowsOf<T>(table: Table): T[] {
  const n = table.rows;
  const keys = Object.keys(table.columns);
  const columns = keys.map(key => {
    const col = table.columns[key];
    if (Array.isArray(col)) {
      return col;
    }
    const out = new Array<unknown>(n);
    for (let i = 0; i < n; i++) {
      out[i] = col.values[col.codes[i]];
    }
    return out;
  });
  for (const col of columns) {
    if (col.length !== n) {
      throw new Error(`a table of ${n} rows has a column of ${col.length} values`);
    }
  }
  const rows = new Array<T>(n);
  for (let i = 0; i < n; i++) {
    const row: Record<string, unknown> = {};
    for (let k = 0; k < keys.length; k++) {
      row[keys[k]] = columns[k][i];
    }
    rows[i] = row as T;
  }
  return rows;
}

export function isGraphTrait(v: unknown): v is GraphTrait {
  const g = v as GraphTrait;
  return !!g && typeof g === 'object' && isTable(g.nodes) && isTable(g.edges) && isTable(g.modules) && isTable(g.repeats);
}

/** The Graph a graph trait carries (its Nodes without state fields until a GraphState is applied). */
export function graphOfTrait(g: GraphTrait): Graph {
  return {
    ...g,
    nodes: rowsOf<Node>(g.nodes),
    edges: rowsOf<Edge>(g.edges),
    modules: rowsOf<Module>(g.modules),
    repeats: rowsOf<Repeat>(g.repeats)
  };
}
