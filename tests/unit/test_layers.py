"""Dependencies point one way: adapters -> gateway -> session_store (architecture.md, Layout),
and inside gateway/ the rooms stand on floors: every import goes down (``LAYERS``).

Each rule is checked on the real tree, and each checker is first shown to catch a planted
violation, so a scanner that silently finds nothing cannot pass.
"""

from __future__ import annotations

import ast
import functools
import json
import subprocess
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from testsupport.paths import REPO

ROOT = REPO

STORE_MODULES = (
    "session_store",
    "session_store.store",
    "session_store.repos.operator",
    "session_store.migrator",
    "session_store.repos.leader",
    "session_store.embedded",
    "session_store.db",
)


#: static imports of ``adapters`` from the core that are known and scheduled to go. Each entry
#: must still exist (a test says so), so the list shrinks as soon as the import is gone.
def imported_modules(source: str) -> Iterator[str]:
    """Every module a file imports statically, at any depth (function bodies included):
    ``import a.b`` gives ``a.b``; ``from a.b import c`` gives ``a.b`` and ``a.b.c`` (``c`` may
    be a submodule); relative imports are ignored (they stay inside their own package)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module
            for alias in node.names:
                yield f"{node.module}.{alias.name}"


def _top(module: str) -> str:
    return module.split(".", 1)[0]


def violations(package_dir: Path, forbidden: str) -> dict[str, list[str]]:
    """``{relative path: [module, ...]}`` for each file under ``package_dir`` that imports the
    top-level package ``forbidden`` (or a module inside it)."""
    found: dict[str, list[str]] = {}
    for path in sorted(package_dir.rglob("*.py")):
        hits = sorted(
            {m for m in imported_modules(path.read_text("utf-8")) if _top(m) == forbidden}
        )
        if hits:
            found[path.relative_to(package_dir.parent).as_posix()] = hits
    return found


# --- the scanner catches what it must ------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "import session_store\n",
        "import session_store.store as s\n",
        "from session_store import store\n",
        "from session_store.values import SessionKey\n",
        "def f():\n    from session_store.db import Database\n",
        "if TYPE_CHECKING:\n    import session_store.records\n",
    ],
)
def test_scanner_finds_a_planted_import(tmp_path: Path, source: str) -> None:
    package = tmp_path / "adapters" / "planted"
    package.mkdir(parents=True)
    (package / "clean.py").write_text("import json\nfrom gateway.core.domain import Envelope\n")
    (package / "bad.py").write_text(source)
    found = violations(tmp_path / "adapters", "session_store")
    assert list(found) == ["adapters/planted/bad.py"]


def test_scanner_ignores_lookalikes_and_relative_imports(tmp_path: Path) -> None:
    package = tmp_path / "gateway"
    package.mkdir()
    (package / "ok.py").write_text(
        "import adapters_extra\nfrom . import adapters\nfrom .adapters import x\n"
        "name = 'adapters.web'\n"
    )
    assert violations(package, "adapters") == {}


def test_import_probe_detects_a_loaded_module() -> None:
    # the subprocess probe below, fed a module that does pull the core in
    assert "gateway.core.domain" in _loaded_after_import(("gateway.inbound.intake",))


# --- the rules on the real tree -------------------------------------------------------------


def _loaded_after_import(modules: tuple[str, ...]) -> set[str]:
    code = (
        "import json, sys\n"
        + "".join(f"import {m}\n" for m in modules)
        + "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_importing_the_store_loads_neither_core_nor_adapters() -> None:
    loaded = _loaded_after_import(STORE_MODULES)
    assert set(STORE_MODULES) <= loaded
    leaked = sorted(m for m in loaded if _top(m) in ("gateway", "adapters"))
    assert leaked == []


def test_adapters_never_import_the_store() -> None:
    assert violations(ROOT / "adapters", "session_store") == {}


def test_the_core_never_imports_adapters_statically() -> None:
    found = violations(ROOT / "gateway", "adapters")
    assert found == {}, "the core loads adapters by name only (gateway/runtime.py)"


@pytest.mark.parametrize("package", ["benchmarks", "campaigns", "testsupport"])
def test_benchmarks_campaigns_and_test_support_never_import_tests(package: str) -> None:
    # tests are a suite, not a library: what `python -m benchmarks` and the campaigns run
    # imports test support (``testsupport``) and never a test module
    assert violations(ROOT / package, "tests") == {}


@pytest.mark.parametrize("package", ["gateway", "session_store", "adapters"])
@pytest.mark.parametrize("unshipped", ["testsupport", "campaigns", "benchmarks", "tests"])
def test_the_shipped_packages_never_import_what_the_wheel_leaves_out(
    package: str, unshipped: str
) -> None:
    assert violations(ROOT / package, unshipped) == {}


# --- the rooms of gateway/ stand on floors ---------------------------------------------------

#: The floors of ``gateway/``, ground floor first (architecture.md, "Code map"). A room imports
#: only rooms on lower floors; rooms on the same floor do not import each other. ``gateway``
#: is the package itself and ``python -m gateway`` (``gateway/__main__.py``): the command line.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("core",),
    ("agents", "audit"),
    ("http",),
    ("files",),
    ("knowledge",),
    ("tools",),
    ("inbound", "outbox"),
    ("turns",),
    ("profiles", "usage"),
    ("people", "retention", "schedules"),
    ("runtime",),
    ("ops",),
    ("gateway",),
)

#: Imports that still run against the floors, each removed by a change under way elsewhere:
#: ``(importing module, imported module)``. Each entry must still be found (a test says so),
#: so the list only shrinks.
ALLOWED_BACK: dict[tuple[str, str], str] = {}

#: private names still imported across rooms, ``(importing module, "module.name")``, each
#: with the change that removes it
ALLOWED_PRIVATE: dict[tuple[str, str], str] = {}


@dataclass(frozen=True, slots=True)
class RoomImport:
    """One import of a module of another room: where it is, what it names, and how it runs
    (``top``: at import; ``lazy``: inside a function; ``typing``: under ``TYPE_CHECKING``)."""

    module: str
    path: str
    line: int
    target: str
    names: tuple[str, ...]
    kind: str

    @property
    def source_room(self) -> str:
        return room_of(self.module)

    @property
    def target_room(self) -> str:
        return room_of(self.target)

    def __str__(self) -> str:
        names = f" ({', '.join(self.names)})" if self.names else ""
        return f"{self.path}:{self.line}: {self.module} -> {self.target}{names} [{self.kind}]"


def room_of(module: str) -> str:
    """``gateway.turns.stages.files`` -> ``turns``; the package itself and its top-level
    modules (``gateway.__main__``) are the room ``gateway``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] != "__main__") else parts[0]


def _kinds(tree: ast.AST) -> dict[ast.AST, str]:
    """How each import statement of ``tree`` runs: at import, lazily or only for the type
    checker (a function body wins over ``TYPE_CHECKING``: neither runs at import)."""
    found: dict[ast.AST, str] = {}

    def walk(node: ast.AST, kind: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = kind
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                inner = "lazy"
            elif (
                isinstance(child, ast.If)
                and kind == "top"
                and "TYPE_CHECKING" in ast.unparse(child.test)
            ):
                for branch in child.body:
                    found.update({n: "typing" for n in ast.walk(branch)})
                    walk(branch, "typing")
                for branch in child.orelse:
                    found[branch] = "top"
                    walk(branch, "top")
                continue
            found.setdefault(child, inner)
            walk(child, inner)

    walk(tree, "top")
    return found


def room_imports(root: Path, package: str = "gateway") -> list[RoomImport]:
    """Every import in ``root/package`` of a module of ``package`` in another room than the
    importer's: ``import a.b``, ``from a.b import c`` and relative imports, at module level,
    inside functions and under ``TYPE_CHECKING``."""
    found: list[RoomImport] = []
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        module = ".".join(parts[:-1] if is_package else parts)
        tree = ast.parse(path.read_text("utf-8"))
        kinds = _kinds(tree)
        for node in ast.walk(tree):
            pairs: list[tuple[str, tuple[str, ...]]]
            if isinstance(node, ast.Import):
                pairs = [(alias.name, ()) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = module.split(".") if is_package else module.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                names = tuple(alias.name for alias in node.names)
                # ``from gateway import audit`` names the room in the imported name
                pairs = [(f"{base}.{n}", ()) for n in names] if base == package else [(base, names)]
            else:
                continue
            for target, imported in pairs:
                if target.split(".")[0] != package:
                    continue
                hit = RoomImport(
                    module,
                    path.relative_to(root).as_posix(),
                    node.lineno,
                    target,
                    imported,
                    kinds.get(node, "top"),
                )
                if hit.source_room != hit.target_room:
                    found.append(hit)
    return found


def floor_of(layers: Sequence[Sequence[str]]) -> dict[str, int]:
    return {room: n for n, floor in enumerate(layers) for room in floor}


def against_the_floors(
    imports: Iterable[RoomImport], layers: Sequence[Sequence[str]]
) -> list[RoomImport]:
    """The imports that do not go down: to a room on the same floor or above, or from or to
    a room the floors do not name."""
    floor = floor_of(layers)
    return [
        i
        for i in imports
        if floor.get(i.source_room, -1) <= floor.get(i.target_room, len(floor) + 1)
    ]


def room_graph(imports: Iterable[RoomImport]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for i in imports:
        graph.setdefault(i.source_room, set()).add(i.target_room)
        graph.setdefault(i.target_room, set())
    return graph


def reaching_each_other(graph: dict[str, set[str]]) -> set[str]:
    """The rooms on a cycle: each reaches another that reaches it back."""

    def reach(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for nxt in graph.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    reached = {room: reach(room) for room in graph}
    return {r for r in graph if any(r in reached[o] for o in reached[r] if o != r)}


def mutual_pairs(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted((a, b) for a in graph for b in graph[a] if a < b and a in graph.get(b, ()))


def private_imports(imports: Iterable[RoomImport]) -> list[tuple[RoomImport, str]]:
    """Each private name of another room an import takes, dotted (``a.b._x``, or the module
    ``a._b`` itself), with the import."""
    found: list[tuple[RoomImport, str]] = []
    for i in imports:
        if any(p.startswith("_") and not p.startswith("__") for p in i.target.split(".")):
            found.append((i, i.target))
        found += [(i, f"{i.target}.{n}") for n in i.names if n.startswith("_")]
    return found


def _report(root: Path) -> str:
    imports = room_imports(root)
    lines: list[str] = []
    for label, kinds in (("top-level", {"top"}), ("every import", {"top", "lazy", "typing"})):
        graph = room_graph(i for i in imports if i.kind in kinds)
        rooms = sorted({room_of(m) for m in _modules(root)})
        lines.append(
            f"{label}: {len(rooms)} rooms, {len(reaching_each_other(graph))} reach each other, "
            f"{len(mutual_pairs(graph))} pairs import each other: "
            + ", ".join(f"{a}<->{b}" for a, b in mutual_pairs(graph))
        )
    back = against_the_floors(imports, LAYERS)
    pairs = sorted({(i.source_room, i.target_room) for i in back})
    lines.append(f"against the floors: {len(back)} imports, {len(pairs)} room arrows")
    lines += [f"  {i}" for i in back]
    return "\n".join(lines)


def _modules(root: Path) -> list[str]:
    return [
        ".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        for p in (root / "gateway").rglob("*.py")
    ]


def _plant(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, source in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return tmp_path


_CLEAN = {
    "gateway/__init__.py": "",
    "gateway/__main__.py": "from gateway.ops.cli import main\n",
    "gateway/core/__init__.py": "",
    "gateway/core/values.py": "import json\nfrom session_store.values import Role\n",
    "gateway/outbox/__init__.py": "",
    "gateway/outbox/delivery.py": "from gateway.core.values import Role\n",
    "gateway/turns/__init__.py": "",
    "gateway/turns/run.py": "from ..outbox import delivery\nfrom gateway import core\n",
    "gateway/ops/__init__.py": "",
    "gateway/ops/cli.py": "def main() -> None:\n    import gateway.turns.run\n",
}
_PLANTED_FLOORS = (("core",), ("outbox",), ("turns",), ("ops",), ("gateway",))


def test_a_tree_whose_imports_go_down_passes(tmp_path: Path) -> None:
    imports = room_imports(_plant(tmp_path, _CLEAN))
    assert {(i.source_room, i.target_room) for i in imports} == {
        ("gateway", "ops"),
        ("outbox", "core"),
        ("turns", "outbox"),
        ("turns", "core"),
        ("ops", "turns"),
    }
    assert against_the_floors(imports, _PLANTED_FLOORS) == []


@pytest.mark.parametrize(
    ("source", "kind", "target"),
    [
        ("from gateway.turns.run import x\n", "top", "gateway.turns.run"),
        ("import gateway.turns\n", "top", "gateway.turns"),
        ("from gateway import turns\n", "top", "gateway.turns"),
        ("from ..turns.run import x\n", "top", "gateway.turns.run"),
        ("def f():\n    from gateway.ops import cli\n", "lazy", "gateway.ops"),
        (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import gateway.turns.run\n",
            "typing",
            "gateway.turns.run",
        ),
    ],
)
def test_a_planted_back_edge_is_reported_with_its_file_and_line(
    tmp_path: Path, source: str, kind: str, target: str
) -> None:
    files = {**_CLEAN, "gateway/core/bad.py": "import json\n\n" + source}
    found = against_the_floors(room_imports(_plant(tmp_path, files)), _PLANTED_FLOORS)
    assert len(found) == 1
    hit = found[0]
    assert (hit.path, hit.module, hit.target, hit.kind) == (
        "gateway/core/bad.py",
        "gateway.core.bad",
        target,
        kind,
    )
    assert hit.line == source.count("\n") + 2
    assert str(hit).startswith(f"gateway/core/bad.py:{hit.line}: gateway.core.bad -> {target}")


def test_rooms_on_one_floor_do_not_import_each_other(tmp_path: Path) -> None:
    files = {**_CLEAN, "gateway/turns/run.py": "", "gateway/outbox/x.py": "import gateway.turns\n"}
    found = against_the_floors(
        room_imports(_plant(tmp_path, files)),
        (("core",), ("outbox", "turns"), ("ops",), ("gateway",)),
    )
    assert [(i.module, i.target) for i in found] == [("gateway.outbox.x", "gateway.turns")]


def test_a_room_the_floors_do_not_name_is_reported(tmp_path: Path) -> None:
    files = {**_CLEAN, "gateway/newroom/__init__.py": "from gateway.core import values\n"}
    found = against_the_floors(room_imports(_plant(tmp_path, files)), _PLANTED_FLOORS)
    assert [(i.source_room, i.target_room) for i in found] == [("newroom", "core")]


def test_a_private_name_of_another_room_is_found(tmp_path: Path) -> None:
    files = {
        **_CLEAN,
        "gateway/turns/run.py": "from gateway.outbox.delivery import _helper, public\n"
        "from gateway.turns._inner import x\n",
        "gateway/ops/cli.py": "def main():\n    from gateway.outbox._pacing import y\n",
    }
    found = private_imports(room_imports(_plant(tmp_path, files)))
    assert sorted((i.path, i.line, name) for i, name in found) == [
        ("gateway/ops/cli.py", 2, "gateway.outbox._pacing"),
        ("gateway/turns/run.py", 1, "gateway.outbox.delivery._helper"),
    ]


@functools.cache
def _our_imports() -> tuple[RoomImport, ...]:
    return tuple(room_imports(ROOT))


def test_the_floors_name_every_room_once() -> None:
    named = [room for floor in LAYERS for room in floor]
    assert len(named) == len(set(named))
    assert set(named) == {room_of(m) for m in _modules(ROOT)}


def test_every_import_between_rooms_goes_down() -> None:
    found = [
        i
        for i in against_the_floors(_our_imports(), LAYERS)
        if (i.module, i.target) not in ALLOWED_BACK
    ]
    assert found == [], "imports against the floors (architecture.md, Code map):\n" + "\n".join(
        map(str, found)
    )


def test_every_allowed_back_edge_has_a_reason_and_is_still_there() -> None:
    back = {(i.module, i.target) for i in against_the_floors(_our_imports(), LAYERS)}
    assert all(len(why) > 20 for why in ALLOWED_BACK.values())
    gone = sorted(set(ALLOWED_BACK) - back)
    assert gone == [], f"no longer against the floors, take them off ALLOWED_BACK: {gone}"


def test_no_private_name_is_imported_across_rooms() -> None:
    found = [
        f"{i} takes {name}"
        for i, name in private_imports(_our_imports())
        if (i.module, name) not in ALLOWED_PRIVATE
    ]
    assert found == [], "private names of another room:\n" + "\n".join(found)


def test_every_allowed_private_import_has_a_reason_and_is_still_there() -> None:
    seen = {(i.module, name) for i, name in private_imports(_our_imports())}
    assert all(len(why) > 20 for why in ALLOWED_PRIVATE.values())
    assert sorted(set(ALLOWED_PRIVATE) - seen) == []


def test_test_support_does_not_import_the_campaigns() -> None:
    # the campaigns stand on test support (its fakes, its stoppable PostgreSQL), not under it
    assert violations(ROOT / "testsupport", "campaigns") == {}


if __name__ == "__main__":
    # the room graph of a checkout: python -m tests.unit.test_layers [ROOT]
    print(_report(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT))
