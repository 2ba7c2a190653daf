"""Fold a graph by module: one Module per module whose forward ran ops of the graph, each with its
sizes, a structural signature and gradient norms, and the Repeats (stacks of identical blocks)."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Optional

import torch

from ..model.graph import Edge, Module, Node, Repeat
from .session import CaptureSession


@dataclass
class _Draft:
    """A Module while it is being built."""

    key: tuple[int, str]  # (id(root module), path)
    id: str
    type: Optional[str]
    parent: Optional[tuple[int, str]]
    nodes: list[int] = field(default_factory=list)
    children: list[tuple[int, str]] = field(default_factory=list)
    order: tuple = ()


def _finite(value) -> Optional[float]:
    return value if isinstance(value, float) and math.isfinite(value) else None


class ModuleTree:
    """Collects Nodes by the module that ran them while a graph is walked, then builds the Modules.

    >>> tree = ModuleTree(CaptureSession(), lambda root_id: "model")
    >>> tree.add(1, (7, "Net", "", "Net"))
    >>> tree.add(2, (7, "Net", "fc", "Linear"))
    >>> tree.module_of(1), tree.module_of(2)
    ('model', 'model.fc')
    """

    def __init__(self, session: CaptureSession, root_name) -> None:
        self._session = session
        self._root_name = root_name  # id(root module) -> the name to show for it
        self._drafts: dict[tuple[int, str], _Draft] = {}
        self._of_node: dict[int, tuple[int, str]] = {}
        self._first_seen: dict[tuple[int, str], int] = {}

    def add(self, nid: int, module: tuple) -> None:
        """Node ``nid`` ran inside ``module``: (id(root), root type, path, module type)."""
        root_id, root_type, path, mod_type = module
        key = (root_id, path)
        draft = self._drafts.get(key)
        if draft is None:
            draft = self._draft(root_id, root_type, path, mod_type)
        draft.nodes.append(nid)
        self._of_node[nid] = key

    def module_of(self, nid: int) -> Optional[str]:
        key = self._of_node.get(nid)
        return self._drafts[key].id if key else None

    def _draft(self, root_id: int, root_type: str, path: str, mod_type: Optional[str]) -> _Draft:
        """The draft for ``path`` and every enclosing module up to the root."""
        parts = path.split(".") if path else []
        parent = None
        draft = None
        for depth in range(len(parts) + 1):
            sub = ".".join(parts[:depth])
            key = (root_id, sub)
            draft = self._drafts.get(key)
            if draft is None:
                root = self._root_name(root_id) or root_type
                known = self._session.modules.module_type(root_id, sub)
                kind = known or (mod_type if sub == path else None) or (root_type if not sub else None)
                draft = self._drafts[key] = _Draft(key, f"{root}.{sub}" if sub else root, kind, parent)
                self._first_seen[key] = len(self._first_seen)
                if parent is not None:
                    self._drafts[parent].children.append(key)
            parent = key
        assert draft is not None
        return draft

    def modules(self, nodes: list[Node], edges_by_dst: dict[int, list[Edge]], seq: dict[int, int],
                leaf_info: dict[int, tuple[str, list[int], int, Optional[float]]],
                in_grad_norms: Optional[dict[tuple[int, int], float]] = None,
                out_grad_norms: Optional[dict[tuple[int, int], float]] = None) -> list[Module]:
        """The Modules in ``named_modules()`` order (modules of a root that is gone: in order seen).

        ``leaf_info``: per parameter leaf, (name under its root, shape, bytes, ‖.grad‖ or None);
        ``in_grad_norms``: per edge (dst, input_nr), the norm of the gradient backward sent along it;
        ``out_grad_norms``: per tensor (producer, output_nr), the norm of the gradient it received.
        """
        index = self._named_order()
        drafts = sorted(self._drafts.values(), key=lambda d: (index.get(d.key, (1, self._first_seen[d.key]))))
        by_id = {n.id: n for n in nodes}
        ops_in: dict[tuple[int, str], int] = {}
        params_in: dict[tuple[int, str], list[int]] = {}
        for draft in reversed(drafts):  # children before parents
            ops = sum(1 for nid in draft.nodes if by_id[nid].kind == "op")
            params = [nid for nid in draft.nodes if nid in leaf_info]
            for child in draft.children:
                ops += ops_in[child]
                params += params_in[child]
            ops_in[draft.key], params_in[draft.key] = ops, params
        signatures = self._signatures(drafts, by_id, edges_by_dst, seq, leaf_info)
        left = self._grad_left(edges_by_dst, in_grad_norms or {}, out_grad_norms or {})
        out = []
        for draft in drafts:
            sizes = self._live_sizes(draft.key)
            params = params_in[draft.key]
            if sizes is None:
                sizes = (sum(math.prod(leaf_info[p][1]) for p in params), sum(leaf_info[p][2] for p in params))
            grads = [leaf_info[p][3] for p in params if leaf_info[p][3] is not None]
            path = draft.key[1]
            shown = path or draft.id
            out.append(Module(
                id=draft.id, path=path, label=f"{shown} · {draft.type}" if draft.type else shown, type=draft.type,
                parent=self._drafts[draft.parent].id if draft.parent else None, nodes=draft.nodes,
                op_count=ops_in[draft.key], param_count=sizes[0], param_bytes=sizes[1],
                signature=signatures[draft.key],
                grad_norm=_finite(math.sqrt(left[draft.key])) if draft.key in left else None,
                param_grad_norm=_finite(math.sqrt(sum(g * g for g in grads))) if grads else None,
            ))
        return out

    def _named_order(self) -> dict[tuple[int, str], tuple[int, int]]:
        order: dict[tuple[int, str], tuple[int, int]] = {}
        roots = {key[0] for key in self._drafts}
        for root_id in sorted(roots, key=lambda r: self._first_seen[(r, "")]):
            root = self._session.modules.root(root_id)
            if root is None:
                continue
            for name, _ in root.named_modules(remove_duplicate=False):
                order.setdefault((root_id, name), (0, len(order)))
        return order

    def _live_sizes(self, key: tuple[int, str]) -> Optional[tuple[int, int]]:
        """(parameter elements, bytes) of the live module, children included; None once it is gone."""
        root = self._session.modules.root(key[0])
        if root is None:
            return None
        try:
            module = root.get_submodule(key[1])
        except AttributeError:
            return None
        params = list(module.parameters())
        return sum(p.numel() for p in params), sum(p.numel() * p.element_size() for p in params)

    def _signatures(self, drafts: list[_Draft], by_id: dict[int, Node], edges_by_dst: dict[int, list[Edge]],
                    seq: dict[int, int], leaf_info) -> dict[tuple[int, str], str]:
        """Equal for two modules that ran the same ops, in the same order, wired the same way, on the
        same shapes, with parameters of the same shapes (recursively)."""
        signatures: dict[tuple[int, str], str] = {}
        for draft in reversed(drafts):
            members = sorted(draft.nodes, key=lambda n: seq.get(n, 0))
            local = {nid: i for i, nid in enumerate(members)}
            parts: list = [draft.type]
            for nid in members:
                node = by_id[nid]
                if nid in leaf_info:
                    name = leaf_info[nid][0].rpartition(".")[2]
                    parts.append(("param", name, tuple(leaf_info[nid][1])))
                    continue
                ins = tuple((local.get(e.src, -1), e.output_nr, tuple(e.meta.shape) if e.meta else None)
                            for e in sorted(edges_by_dst.get(nid, ()), key=lambda e: e.input_nr))
                parts.append((node.name, node.op, ins))
            parts.extend(signatures[child] for child in draft.children)
            signatures[draft.key] = hashlib.blake2b(repr(parts).encode(), digest_size=8).hexdigest()
        return signatures

    def _grad_left(self, edges_by_dst: dict[int, list[Edge]], in_grad_norms: dict[tuple[int, int], float],
                   out_grad_norms: dict[tuple[int, int], float]) -> dict[tuple[int, str], float]:
        """Per module, the squared norm of the gradient backward sent out of it towards its inputs:
        over each tensor made outside and used inside, the gradient w.r.t. that tensor from inside.

        Where every use of the tensor is inside, that is the gradient its producer received (exact);
        where one use is, the one edge's; where several uses inside and some outside meet, only
        norms are known here, and their root sum of squares stands in for the norm of their sum.
        """
        ancestors: dict[Optional[tuple[int, str]], frozenset] = {None: frozenset()}

        def chain(key):
            found = ancestors.get(key)
            if found is None:
                found = ancestors[key] = chain(self._drafts[key].parent) | {key}
            return found

        uses: dict[tuple[int, int], int] = {}
        crossing: dict[tuple[int, str], dict[tuple[int, int], list[tuple[int, int]]]] = {}
        for dst, edges in edges_by_dst.items():
            for e in edges:
                tensor = (e.src, e.output_nr)
                uses[tensor] = uses.get(tensor, 0) + 1
                for key in chain(self._of_node.get(dst)) - chain(self._of_node.get(e.src)):
                    crossing.setdefault(key, {}).setdefault(tensor, []).append((dst, e.input_nr))
        left: dict[tuple[int, str], float] = {}
        for key, tensors in crossing.items():
            total, known = 0.0, False
            for tensor, inside in tensors.items():
                if len(inside) == uses[tensor] and tensor in out_grad_norms:
                    norms = [out_grad_norms[tensor]]
                else:
                    norms = [in_grad_norms[use] for use in inside if use in in_grad_norms]
                known = known or bool(norms)
                total += sum(n * n for n in norms)
            if known:
                left[key] = total
        return left

    def repeats(self, modules: list[Module], edges: list[Edge]) -> list[Repeat]:
        """Runs of two or more consecutive siblings with one signature where each feeds the next."""
        module_of = {nid: m.id for m in modules for nid in m.nodes}
        parent_of = {m.id: m.parent for m in modules}
        lineage: dict[str, list[str]] = {}  # a module and its ancestors, innermost first
        for m in modules:
            up = [m.id]
            while parent_of.get(up[-1]) is not None:
                up.append(parent_of[up[-1]])  # type: ignore[arg-type]
            lineage[m.id] = up
        sibling_feeds: set[tuple[str, str]] = set()  # (a, b): a sibling of b made a tensor b used
        for e in edges:
            a, b = module_of.get(e.src), module_of.get(e.dst)
            if a is None or b is None or a == b:
                continue
            b_by_parent = {parent_of.get(y): y for y in lineage[b]}
            for x in lineage[a]:
                y = b_by_parent.get(parent_of.get(x))
                if y is not None and y != x:
                    sibling_feeds.add((x, y))
                    break
        children: dict[Optional[str], list[Module]] = {}
        for m in modules:
            children.setdefault(m.parent, []).append(m)
        out = []
        for parent, kids in children.items():
            run: list[Module] = []
            for kid in [*kids, None]:
                if run and kid is not None and kid.signature == run[-1].signature \
                        and (run[-1].id, kid.id) in sibling_feeds:
                    run.append(kid)
                    continue
                if len(run) >= 2:
                    first, last = run[0], run[-1]
                    out.append(Repeat(f"{first.id}×{len(run)}", parent, [m.id for m in run],
                                      f"{first.path} … {last.path} · {first.type} × {len(run)}"))
                run = [kid] if kid is not None else []
        return out


def leaf_norm(variable: torch.Tensor, summary) -> Optional[float]:
    """The norm of a leaf's ``.grad`` as recorded after its last backward (None when reset since)."""
    if variable.grad is None or summary is None:
        return None
    norm = summary.norm
    return float(norm) if isinstance(norm, (int, float)) else float("nan")
