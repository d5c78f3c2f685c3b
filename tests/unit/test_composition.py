"""Compose, don't scatter (style.md, habit 17): a class too big for one file becomes objects it
holds, never mixins whose attributes another file's ``__init__`` sets.

The checker reads the source (no import), over ``gateway/``, ``adapters/`` and
``session_store/``, and reports:

* a class with more than one base class of our own (a class split into mixins), unless it is
  a ``Protocol`` made of protocols (an interface that is all of them: no state to scatter);
* a class whose methods read ``self.x`` where ``x`` is defined neither by the class nor by
  any of its own ancestors, but set in the ``__init__`` of a related class (a subclass, or
  another base of a common subclass) in another file: the mixin's state is scattered;
* an ``__init__`` that sets an attribute on another object (``other.x = ...``): that object's
  attributes are then set in this file's constructor, not its own.

A class-level annotation without a value (``_client: AsyncWebClient``) does not define an
attribute: it only declares one that someone else sets. It does in a dataclass, a pydantic
model, a ``NamedTuple``, a ``TypedDict``, a ``Protocol`` and an ``Enum``, where annotations are
the fields.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from testsupport.paths import REPO

PACKAGES = ("gateway", "adapters", "session_store")

#: bases whose subclasses declare their fields by annotation
_FIELD_BASES = frozenset(
    {
        "BaseModel",
        "BaseSettings",
        "SurfaceSettings",
        "NamedTuple",
        "TypedDict",
        "Protocol",
        "Enum",
        "StrEnum",
        "IntEnum",
    }
)


@dataclass
class _Class:
    name: str  # module.Class
    path: str
    line: int
    bases: list[str]  # resolved dotted names
    fields_by_annotation: bool
    defined: set[str] = field(default_factory=set)  # methods, class attributes, self.x = ...
    set_in_init: set[str] = field(default_factory=set)
    reads: dict[str, int] = field(default_factory=dict)  # attribute -> first line read
    foreign_sets: list[tuple[int, str]] = field(default_factory=list)  # in __init__


def _module_name(path: str) -> str:
    parts = Path(path).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else None
    if isinstance(node, ast.Subscript):  # Generic[T], SurfacePlugin[Settings]
        return _dotted(node.value)
    if isinstance(node, ast.Call):  # NamedTuple("X", ...) and the like
        return _dotted(node.func)
    return None


def _module_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The module's statements, those under ``if TYPE_CHECKING:`` and ``try:`` included (base
    classes are named at module level; a lazy import inside a function names none)."""
    for node in body:
        yield node
        if isinstance(node, ast.If | ast.Try):
            yield from _module_level([*node.body, *node.orelse])


def _imports(tree: ast.Module, module: str) -> dict[str, str]:
    names: dict[str, str] = {}
    package = module.rsplit(".", 1)[0] if "." in module else module
    for node in _module_level(tree.body):
        if isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:  # relative: rare here, resolved against the package
                source = ".".join([*package.split(".")[: 1 - node.level or None], source])
            for alias in node.names:
                names[alias.asname or alias.name] = f"{source}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0]
                )
    return names


def _resolve(name: str, module: str, local: set[str], imports: Mapping[str, str]) -> str:
    head, _, rest = name.partition(".")
    if head in local and not rest:
        return f"{module}.{head}"
    if head in imports:
        return imports[head] + (f".{rest}" if rest else "")
    return name


def _targets(node: ast.AST) -> Iterator[ast.expr]:
    if isinstance(node, ast.Assign):
        for target in node.targets:
            yield from _flatten(target)
    elif isinstance(node, ast.AnnAssign | ast.AugAssign):
        yield node.target
    elif isinstance(node, ast.NamedExpr):
        yield node.target


def _flatten(target: ast.expr) -> Iterator[ast.expr]:
    if isinstance(target, ast.Tuple | ast.List):
        for item in target.elts:
            yield from _flatten(item)
    elif isinstance(target, ast.Starred):
        yield from _flatten(target.value)
    else:
        yield target


def _read_class(node: ast.ClassDef, module: str, path: str, imports: Mapping[str, str],
                local: set[str]) -> _Class:  # fmt: skip
    bases = [
        _resolve(dotted, module, local, imports)
        for dotted in (_dotted(b) for b in node.bases)
        if dotted is not None
    ]
    decorated = {(_dotted(d) or "").rsplit(".", 1)[-1] for d in node.decorator_list}
    found = _Class(
        name=f"{module}.{node.name}",
        path=path,
        line=node.lineno,
        bases=bases,
        fields_by_annotation="dataclass" in decorated
        or any(b.rsplit(".", 1)[-1] in _FIELD_BASES for b in bases),
    )
    for item in node.body:
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.defined.add(item.name)
        elif isinstance(item, ast.Assign):
            found.defined.update(t.id for t in _targets(item) if isinstance(t, ast.Name))
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            if item.value is not None or found.fields_by_annotation:
                found.defined.add(item.target.id)
    for method in node.body:
        if not isinstance(method, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        args = method.args.posonlyargs + method.args.args
        if not args or any(_dotted(d) in ("staticmethod", "classmethod") for d in
                           method.decorator_list):  # fmt: skip
            continue
        me = args[0].arg
        for sub in ast.walk(method):
            for target in _targets(sub):
                if not isinstance(target, ast.Attribute):
                    continue
                if isinstance(target.value, ast.Name) and target.value.id == me:
                    found.defined.add(target.attr)
                    if method.name == "__init__":
                        found.set_in_init.add(target.attr)
                elif method.name == "__init__":
                    owner = ast.unparse(target.value)
                    found.foreign_sets.append((target.lineno, f"{owner}.{target.attr}"))
            if (
                isinstance(sub, ast.Attribute)
                and isinstance(sub.ctx, ast.Load)
                and isinstance(sub.value, ast.Name)
                and sub.value.id == me
            ):
                found.reads.setdefault(sub.attr, sub.lineno)
    return found


def read_classes(sources: Mapping[str, str]) -> dict[str, _Class]:
    """Every top-level class of ``sources`` (path relative to the repository -> text)."""
    classes: dict[str, _Class] = {}
    for path, text in sources.items():
        module = _module_name(path)
        tree = ast.parse(text, filename=path)
        imports = _imports(tree, module)
        local = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                found = _read_class(node, module, path, imports, local)
                classes[found.name] = found
    return classes


def _ancestors(name: str, classes: Mapping[str, _Class]) -> list[str]:
    seen: list[str] = []
    todo = [name]
    while todo:
        current = classes.get(todo.pop())
        for base in current.bases if current else ():
            if base in classes and base not in seen:
                seen.append(base)
                todo.append(base)
    return seen


def scattered(sources: Mapping[str, str]) -> list[str]:
    """What breaks the rule, one line each (``path:line: why``); empty when nothing does."""
    return scattered_classes(read_classes(sources))


def scattered_classes(classes: Mapping[str, _Class]) -> list[str]:
    lineage = {name: [name, *_ancestors(name, classes)] for name in classes}
    problems: list[str] = []
    for c in classes.values():
        ours = [b for b in c.bases if b in classes]
        protocol = any(b.rsplit(".", 1)[-1] == "Protocol" for b in c.bases)
        if len(ours) > 1 and not protocol:
            problems.append(
                f"{c.path}:{c.line}: {c.name} inherits {len(ours)} of our classes "
                f"({', '.join(ours)}): hold them as objects instead"
            )
        for line, target in c.foreign_sets:
            problems.append(
                f"{c.path}:{line}: {c.name}.__init__ sets {target}: another object's "
                "attribute, set outside its own class"
            )
        own = set().union(*(classes[a].defined for a in lineage[c.name]))
        # classes that share a subclass with this one, or are its subclasses
        descendants = [d for d, line in lineage.items() if c.name in line and d != c.name]
        related = {r for d in descendants for r in lineage[d]} - set(lineage[c.name])
        for attr, line in sorted(c.reads.items(), key=lambda item: (item[1], item[0])):
            if attr in own:
                continue
            setters = sorted(
                r for r in related if attr in classes[r].set_in_init and classes[r].path != c.path
            )
            if setters:
                problems.append(
                    f"{c.path}:{line}: {c.name} reads self.{attr}, which only "
                    f"{', '.join(setters)} sets (in __init__, in "
                    f"{', '.join(sorted({classes[s].path for s in setters}))})"
                )
    return sorted(problems, key=_where)


def _where(problem: str) -> tuple[str, int, str]:
    path, line, _ = problem.split(":", 2)
    return path, int(line), problem


def _our_sources() -> dict[str, str]:
    return {
        str(path.relative_to(REPO)): path.read_text(encoding="utf-8")
        for package in PACKAGES
        for path in sorted((REPO / package).rglob("*.py"))
    }


def test_no_class_is_scattered_over_mixins() -> None:
    classes = read_classes(_our_sources())
    assert len(classes) > 300, "the checker found too few classes"
    problems = scattered_classes(classes)
    assert not problems, "\n".join(problems)


# --- the checker fails on what it is there to find ---------------------------------------

_MIXIN = '''
from pkg.ports import Client


class Ingest:
    """The mixin: its state is declared here and set by the adapter's __init__."""

    _client: Client
    _rules: object

    def ingest(self) -> object:
        self._seen = True  # defined here: not reported
        return self._client.get(self._rules), self._seen
'''

_HOST = """
from pkg.ingest import Ingest
from pkg.socket import Socket


class Adapter(Ingest, Socket):
    def __init__(self, client: object) -> None:
        self._client = client
        self._rules = ()
        self._app = None
"""

_SOCKET = """
class Socket:
    def run(self) -> object:
        return self._app
"""

_COMPOSED = """
from dataclasses import dataclass


class Ingest:
    def __init__(self, client: object) -> None:
        self._client = client

    def ingest(self) -> object:
        return self._client


@dataclass
class Facts:
    text: str

    def shout(self) -> str:
        return self.text.upper()


class Adapter:
    def __init__(self, client: object) -> None:
        self.ingest = Ingest(client)
        self.ingest._client = None  # reaching into the part from outside
"""


def test_a_planted_mixin_is_reported_with_each_scattered_attribute() -> None:
    problems = scattered(
        {"pkg/ingest.py": _MIXIN, "pkg/adapter.py": _HOST, "pkg/socket.py": _SOCKET}
    )
    assert problems == [
        "pkg/adapter.py:6: pkg.adapter.Adapter inherits 2 of our classes "
        "(pkg.ingest.Ingest, pkg.socket.Socket): hold them as objects instead",
        "pkg/ingest.py:13: pkg.ingest.Ingest reads self._client, which only "
        "pkg.adapter.Adapter sets (in __init__, in pkg/adapter.py)",
        "pkg/ingest.py:13: pkg.ingest.Ingest reads self._rules, which only "
        "pkg.adapter.Adapter sets (in __init__, in pkg/adapter.py)",
        "pkg/socket.py:4: pkg.socket.Socket reads self._app, which only "
        "pkg.adapter.Adapter sets (in __init__, in pkg/adapter.py)",
    ]


def test_one_mixin_base_is_reported_too_and_composition_is_not() -> None:
    one_base = _HOST.replace("(Ingest, Socket)", "(Ingest)").replace(
        "from pkg.socket import Socket\n", ""
    )
    problems = scattered({"pkg/ingest.py": _MIXIN, "pkg/adapter.py": one_base})
    assert [p.split(": ", 1)[0] for p in problems] == ["pkg/ingest.py:13", "pkg/ingest.py:13"]
    assert scattered({"pkg/composed.py": _COMPOSED}) == [
        "pkg/composed.py:24: pkg.composed.Adapter.__init__ sets self.ingest._client: another "
        "object's attribute, set outside its own class"
    ]


def test_a_protocol_made_of_protocols_is_not_a_mixin() -> None:
    parts = (
        "from typing import Protocol\n"
        "class Ingest(Protocol):\n    def submit(self) -> None: ...\n"
        "class Cursors(Protocol):\n    def load(self) -> None: ...\n"
    )
    both = "class Intake(Ingest, Cursors, Protocol):\n    pass\n"
    assert scattered({"pkg/ports.py": parts + both}) == []
    assert scattered({"pkg/ports.py": parts + both.replace(", Protocol)", ")")}) == [
        "pkg/ports.py:6: pkg.ports.Intake inherits 2 of our classes "
        "(pkg.ports.Ingest, pkg.ports.Cursors): hold them as objects instead"
    ]
