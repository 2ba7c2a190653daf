"""torch.compile's regions in the autograd graph: which compiled module made each, with which backend."""

from __future__ import annotations

import sys
from typing import Optional

import torch

from ..model.graph import CompiledRegion
from .modules import class_name
from .names import NameIndex, user_path
from .session import CaptureSession


def is_compiled_region(node) -> bool:
    """Whether ``node`` is a ``CompiledFunctionBackward``: AOTAutograd's Function for one compiled graph.

    >>> is_compiled_region((torch.ones(1, requires_grad=True) * 2).grad_fn)
    False
    """
    cls = getattr(node, "_forward_cls", None)
    return cls is not None and cls.__name__ == "CompiledFunction" and cls.__module__.startswith("torch._functorch")


def dynamo_counts() -> Optional[tuple[int, int]]:
    """(graphs compiled, graph breaks) by Dynamo in this process since its counters were last cleared
    (``torch._dynamo.utils.counters``: ``stats.unique_graphs`` and the sum of ``graph_break``), or None
    before anything imported Dynamo.

    >>> counts = dynamo_counts(); counts is None or len(counts) == 2
    True
    """
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return None
    counters = utils.counters
    return counters["stats"]["unique_graphs"], sum(counters["graph_break"].values())


def backend_name(compiled: torch.nn.Module) -> Optional[str]:
    """The backend ``torch.compile`` was given for an ``OptimizedModule`` ("inductor", "aot_eager"), or None.

    Read from the Dynamo context the module runs under; torch keeps no public field for it.

    >>> backend_name(torch.compile(torch.nn.Linear(1, 1), backend="aot_eager"))
    'aot_eager'
    """
    try:
        backend = compiled.dynamo_ctx.callback._torchdynamo_orig_backend
        while hasattr(backend, "_torchdynamo_orig_backend"):  # ConvertFrame wrappers around the compiler
            backend = backend._torchdynamo_orig_backend
    except AttributeError:
        return None
    name = getattr(backend, "compiler_name", None) or getattr(backend, "__name__", None)
    return name if isinstance(name, str) else type(backend).__name__


def _compiled_module(session: CaptureSession, module: tuple) -> tuple[tuple, Optional[torch.nn.Module]]:
    """The module a compiled region belongs to, from the module running when it ran: the nearest
    ``OptimizedModule`` at or above it (its ``_orig_mod``, or a GraphModule the backend runs under it,
    may be the one running), and that OptimizedModule; else the nearest module its root owns."""
    root_id, root_type, path, module_type = module
    path = path.split(".<", 1)[0] if not path.startswith("<") else ""  # "<GraphModule>": not the root's own
    root = session.modules.root(root_id)
    if root is None:
        return (root_id, root_type, path, module_type), None
    root_type = class_name(root)  # the module hooks saw the wrapper: OptimizedModule
    owned = None
    while True:
        try:
            candidate = root.get_submodule(path)
        except AttributeError:
            candidate = None
        if candidate is not None:
            if owned is None:
                owned = (root_id, root_type, path, class_name(candidate))
            if isinstance(candidate, torch._dynamo.eval_frame.OptimizedModule):
                return (root_id, root_type, path, class_name(candidate)), candidate
        if not path:
            return owned or (root_id, root_type, "", root_type), None
        path = path.rpartition(".")[0]


def compiled_region(nid: int, node, tag: Optional[tuple], session: CaptureSession,
                    names: NameIndex) -> tuple[CompiledRegion, Optional[tuple]]:
    """The region of a ``CompiledFunctionBackward`` Node (``regions_at_line`` is counted by the caller),
    and its tag with the module set to the compiled module (kept in the Node's metadata).

    Module hooks do not run inside compiled code, so no op inside gets a module: the region belongs to
    the module that was compiled, never to one the backend ran inside it.
    """
    module = tag[4] if tag else None
    name, backend = "compiled region", None
    if module:
        module, compiled = _compiled_module(session, module)
        path = user_path(module[2])
        root_name = names.module_name(module[0]) or module[1]
        name = f"{root_name}.{path}" if path else root_name
        backend = backend_name(compiled) if compiled is not None else None
        tag = tag[:4] + (module,)
        node.metadata["fv_op"] = tag
    counts = dynamo_counts()
    region = CompiledRegion(nid, name, backend, counts[0] if counts else None, counts[1] if counts else None, 1)
    return region, tag


def count_at_line(regions: list[CompiledRegion], tags: dict[int, tuple]) -> None:
    """Set each region's ``regions_at_line``: the regions of the same module and line (a graph break
    splits one call into several)."""
    def key(region: CompiledRegion) -> tuple:
        tag = tags.get(region.node)
        return region.name, tag[2:4] if tag else None
    counts: dict[tuple, int] = {}
    for region in regions:
        counts[key(region)] = counts.get(key(region), 0) + 1
    for region in regions:
        region.regions_at_line = counts[key(region)]
