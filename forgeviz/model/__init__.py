"""The wire models: plain dataclasses, one module per view, turned into TypeScript by tsgen."""

from __future__ import annotations

_PLAIN = (int, float, str, bool, type(None))


def as_wire(value: object) -> object:
    """A wire dataclass (and the lists and dataclasses inside it) as plain JSON-ready values.

    ``dataclasses.asdict`` does the same but deep-copies every leaf value: ten times slower on a
    graph of 500 Nodes, which a view sends after every backward.

    >>> from forgeviz.model.graph import TensorMeta
    >>> as_wire([TensorMeta([2, 3], "float32", "cpu")])
    [{'shape': [2, 3], 'dtype': 'float32', 'device': 'cpu'}]
    """
    if type(value) in _PLAIN:
        return value
    if type(value) is list or type(value) is tuple:
        return [as_wire(v) for v in value]
    fields = getattr(type(value), "__dataclass_fields__", None)
    if fields is not None:
        return {name: as_wire(getattr(value, name)) for name in fields}
    if isinstance(value, dict):
        return {k: as_wire(v) for k, v in value.items()}
    raise TypeError(f"as_wire: expected a wire dataclass, list or JSON value, got {type(value).__name__}")


def as_table(rows: list[dict]) -> dict:
    """Wire rows (dicts with the same keys) as columns, the form a big list is sent in.

    Each column is the list of its values, or, where values repeat (op names, module paths,
    shapes), ``{"values": [distinct...], "codes": [index per row]}``. Field names are written
    once rather than once per row: a 10,000-op chain's graph shrinks from 3.4 MB to about a
    seventh, and the page takes it in without a long task. ``src/model/table.ts`` reads it back.

    >>> as_table([{"id": i, "op": "mul"} for i in range(4)])
    {'rows': 4, 'columns': {'id': [0, 1, 2, 3], 'op': {'values': ['mul'], 'codes': [0, 0, 0, 0]}}}
    """
    columns: dict[str, object] = {}
    for key in rows[0] if rows else ():
        values = [row[key] for row in rows]
        columns[key] = _coded(values) or values
    return {"rows": len(rows), "columns": columns}


def rows_of(table: dict) -> list[dict]:
    """The rows ``as_table`` made into a table.

    >>> rows_of(as_table([{"id": 1, "shape": [2]}, {"id": 2, "shape": [2]}]))
    [{'id': 1, 'shape': [2]}, {'id': 2, 'shape': [2]}]
    """
    columns = {key: [col["values"][c] for c in col["codes"]] if isinstance(col, dict) else col
               for key, col in table["columns"].items()}
    return [{key: col[i] for key, col in columns.items()} for i in range(table["rows"])]


def _coded(values: list) -> dict | None:
    """``values`` as distinct values and codes, when that is at most half the rows' count of
    distinct entries (numbers and flags stay plain: coding them saves nothing)."""
    if len(values) < 4 or all(type(v) in (int, float, bool) for v in values):
        return None
    index: dict[object, int] = {}
    distinct: list = []
    codes: list[int] = []
    for v in values:
        # lists and dicts (shapes, meta) by their text, and their type so that "[2]" is not [2]
        key = v if type(v) is str else (type(v), repr(v))
        code = index.get(key)
        if code is None:
            code = index[key] = len(distinct)
            distinct.append(v)
        codes.append(code)
    return {"values": distinct, "codes": codes} if 2 * len(distinct) <= len(values) else None
