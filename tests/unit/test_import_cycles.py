"""No import cycles between our modules (architecture.md, Layout).

Every static import counts, at any depth: module level, inside functions, and under
``TYPE_CHECKING``. A cycle hidden behind a lazy import is still two rooms that each need the
other. The detector is first shown to find planted cycles, so a scanner that silently finds
nothing cannot pass.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

from testsupport.paths import REPO

ROOT = REPO
PACKAGES = ("gateway", "session_store", "adapters")


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(module: str, known: set[str]) -> str | None:
    """The longest known module that ``module`` names (``a.b.c`` may be attribute ``c``)."""
    while module:
        if module in known:
            return module
        module = module.rpartition(".")[0]
    return None


def import_graph(root: Path, packages: Iterable[str]) -> dict[str, set[str]]:
    """``{module: {module it imports}}`` over our own modules. ``from a import b`` counts as
    importing ``a.b`` when that is a module, else ``a``; relative imports are resolved."""
    files = {
        module_name(path, root): path
        for package in packages
        for path in sorted((root / package).rglob("*.py"))
    }
    known = set(files)
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = name.split(".")
                    anchor = anchor if is_package else anchor[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{alias.name}" for alias in node.names]
            for target in targets:
                hit = _resolve(target, known)
                # a package's __init__ importing its own submodule is not an edge back
                if hit and hit != name:
                    graph[name].add(hit)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, list[str]]] = [(start, sorted(graph[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, pending = work[-1]
            if pending:
                nxt = pending.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
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
                    found.append(sorted(component))
    return found


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, source in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return tmp_path


@pytest.mark.parametrize(
    "files",
    [
        {  # a plain two-module cycle
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg.b import x\n",
            "pkg/b.py": "from pkg import a\n",
        },
        {  # hidden behind TYPE_CHECKING and a lazy import, through three modules
            "pkg/__init__.py": "",
            "pkg/a.py": "if TYPE_CHECKING:\n    from pkg.b import X\n",
            "pkg/b.py": "def f():\n    import pkg.c\n",
            "pkg/c.py": "from .a import y\n",
        },
        {  # a relative import from a sub-package's __init__ back up
            "pkg/__init__.py": "",
            "pkg/sub/__init__.py": "from ..top import z\n",
            "pkg/top.py": "from pkg.sub import thing\n",
        },
    ],
)
def test_planted_cycles_are_found(tmp_path: Path, files: dict[str, str]) -> None:
    found = cycles(import_graph(_tree(tmp_path, files), ["pkg"]))
    assert len(found) == 1
    assert all(m.startswith("pkg") for m in found[0])


def test_an_acyclic_tree_has_no_cycle(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg.b import x\nimport os\n",
            "pkg/b.py": "from pkg.c import y\n",
            "pkg/c.py": "import json\n",
        },
    )
    assert cycles(import_graph(root, ["pkg"])) == []


def test_our_modules_import_no_cycle() -> None:
    found = cycles(import_graph(ROOT, PACKAGES))
    assert found == [], "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)
