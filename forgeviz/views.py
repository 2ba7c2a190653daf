"""The one list of forgeviz's views, read from ``views.json`` (which the frontend build reads too).

Each view has one name in every layer: ``forgeviz/widgets/<name>.py``, ``forgeviz/model/<name>.py``,
``src/widgets/<name>.ts``, ``src/render/<name>/``, ``style/<name>.css`` and the bundle
``forgeviz/static/<name>.js``; and the ``%fv`` line commands it answers, each with an example.

>>> [view.name for view in VIEWS]
['graph', 'strides', 'broadcast', 'memory', 'ranks']
>>> COMMANDS["matmul"]
'%fv matmul a b'
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

VIEWS_JSON = Path(__file__).with_name("views.json")


@dataclass(frozen=True)
class View:
    """One view: its name in every layer, and its ``%fv`` commands (command → example)."""

    name: str
    commands: dict[str, str]


def read_views(path: Path = VIEWS_JSON) -> tuple[View, ...]:
    """The views listed in ``path``, in its order.

    >>> [view.name for view in read_views()]
    ['graph', 'strides', 'broadcast', 'memory', 'ranks']
    """
    data = json.loads(path.read_text(encoding="utf-8"))
    return tuple(View(entry["name"], dict(entry.get("commands", {}))) for entry in data["views"])


VIEWS = read_views()
COMMANDS = {command: example for view in VIEWS for command, example in view.commands.items()}  # in views.json order
