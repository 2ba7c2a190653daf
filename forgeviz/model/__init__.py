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
