"""The architecture's rules, read from the source: no import loops in forgeviz (imports inside functions
count), torch's private API only in the capture package, and renderers that import nothing from Jupyter.

Each rule is checked by parsing the tree, so a change that breaks one fails here, naming the files."""

from __future__ import annotations

import ast
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "forgeviz"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, known: set[str]) -> set[str]:
    """The forgeviz modules ``path`` imports anywhere (module level or inside functions)."""
    name = module_name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1] + [node.module or ""] if node.level
                            else [node.module or ""]).strip(".")
            # `from . import module` imports that module; `from .module import Name`, the module
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        elif isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # `from .x import Name`: the module x
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


def package_imports() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: imported_modules(path, set(files)) for name, path in files.items()}


def test_forgeviz_has_no_import_loops():
    edges = package_imports()
    assert len(edges) > 50 and edges["forgeviz.api"], "the parser found forgeviz's modules and their imports"
    assert import_cycles(edges) == []


def test_the_cycle_finder_finds_a_loop_hidden_in_a_function():
    """The check above can fail: a loop closed by an import inside a function is found."""
    edges = package_imports()
    edges["forgeviz.model.run"] = edges["forgeviz.model.run"] | {"forgeviz.api"}  # as if run.py imported api
    cycles = import_cycles(edges)
    assert cycles and any({"forgeviz.model.run", "forgeviz.api"} <= set(c) for c in cycles)


# torch's private API: torch._C, torch._dynamo, torch.utils._python_dispatch, tensor._version, ...
PRIVATE_TORCH = re.compile(r"\btorch\.(?:\w+\.)*_(?!_)\w+|\b_C\.|(?<=\w)\._version\b|(?<=\w)\._base\b")


def code_only(path: Path) -> str:
    """``path``'s source without comments and strings (docstrings may name torch's private API)."""
    code, previous = [], ""
    with path.open("rb") as f:
        for token in tokenize.tokenize(f.readline):
            if token.type not in (tokenize.COMMENT, tokenize.STRING, tokenize.ENCODING):
                # an attribute chain stays one run of text: `torch._C.x`
                joined = "." in (token.string, previous) and previous not in ("from", "import")  # not `from .x`
                code.append(token.string if joined else f" {token.string}")
                previous = token.string
    return "".join(code)


@pytest.mark.parametrize("path", sorted(p for p in PACKAGE.rglob("*.py") if "_capture" not in p.parts),
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_the_capture_package_touches_torch_internals(path):
    assert PRIVATE_TORCH.findall(code_only(path)) == []


def test_the_private_api_pattern_finds_private_uses():
    """The check above can fail: the pattern matches the private API forms capture uses, and not public ones."""
    for private in ("torch._C._autograd", "torch.utils._python_dispatch", "tensor._version", "torch._dynamo.config"):
        assert PRIVATE_TORCH.search(private), private
    for public in ("torch.autograd.graph.GradientEdge", "torch.nn.Linear", "tensor.grad_fn", "torch.__version__"):
        assert not PRIVATE_TORCH.search(public), public
    capture = "\n".join(code_only(p) for p in (PACKAGE / "_capture").rglob("*.py"))
    assert len(PRIVATE_TORCH.findall(capture)) > 10


def test_renderers_import_nothing_from_jupyter():
    """src/render/ draws from the wire model alone, so saved outputs, the headless exporter and any host
    can use it: its imports are relative, or a bundled drawing library."""
    outside, relative = {}, 0
    for path in (ROOT / "src" / "render").rglob("*.ts"):
        for spec in re.findall(r"""(?:from|import)\s*\(?\s*['"]([^'"]+)['"]""", path.read_text(encoding="utf-8")):
            if spec.startswith("."):
                relative += 1
            else:
                outside.setdefault(spec, []).append(path.name)
    assert relative > 50, "the parser found the renderers' own imports"
    assert not any(re.match(r"@jupyter|@lumino|anywidget", s) for s in outside), outside
    assert set(outside) <= {"gifenc"}, f"a new package in src/render/ (add it here if it draws): {outside}"
