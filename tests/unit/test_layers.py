"""Dependencies point one way: adapters -> gateway -> session_store (architecture.md, Layout).

Each rule is checked on the real tree, and each checker is first shown to catch a planted
violation, so a scanner that silently finds nothing cannot pass.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
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
