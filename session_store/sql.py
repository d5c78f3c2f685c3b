"""SQL kept in ``.sql`` files beside the repository that runs it, parsed once at import.

A file holds named statements, each under a header line ``-- name: some_name`` (the
procrastinate habit). Every statement is a static string with ``$n`` parameters; the only
composition is ``{{other}}``, which pastes another named statement of the same file (a column
list, a shared filter) or a fragment the loading module passes in, once, at load time.

    _SQL = load(__package__, "turns.sql")
    await conn.fetchrow(_SQL.renew_turn, ...)

An unknown name is an error where it is used (``UnknownQuery``); a file with two statements
of one name, text outside any statement, or an include of nothing fails at import
(``QueryFileError``)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from importlib import resources

_HEADER = re.compile(r"^--\s*name:\s*(?P<name>[a-z_][a-z0-9_]*)\s*$")
_INCLUDE = re.compile(r"\{\{\s*(?P<name>[a-z_][a-z0-9_]*)\s*\}\}")


class QueryFileError(ValueError):
    """A queries file that cannot be read as named statements."""


class UnknownQuery(AttributeError):
    """A statement name that its queries file does not define."""


class Queries:
    """The named statements of one file: ``queries.name`` or ``queries["name"]``.

    Each statement is an instance attribute, so reading one costs a plain attribute lookup;
    only an unknown name reaches ``__getattr__``. (Statement names are lower case, so they
    never meet the two capitalised attributes of the instance's own.)"""

    def __init__(self, statements: Mapping[str, str], *, origin: str) -> None:
        self.__dict__.update(statements)
        self._Statements = dict(statements)
        self._Origin = origin

    def __getattr__(self, name: str) -> str:
        raise UnknownQuery(f"{self._Origin} has no statement {name!r}")

    def __getitem__(self, name: str) -> str:
        try:
            return self._Statements[name]
        except KeyError:
            raise UnknownQuery(f"{self._Origin} has no statement {name!r}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._Statements

    def __iter__(self) -> Iterator[str]:
        return iter(self._Statements)

    def __len__(self) -> int:
        return len(self._Statements)


def load(package: str | None, filename: str, **fragments: str) -> Queries:
    """The statements of ``filename`` in ``package``; ``fragments``: more text its
    statements may include (``{{name}}``), such as a rule another file defines."""
    if package is None:
        raise QueryFileError(f"{filename}: load it with the package it lives in")
    text = resources.files(package).joinpath(filename).read_text(encoding="utf-8")
    return parse(text, origin=f"{package}/{filename}", fragments=fragments)


def parse(
    text: str, *, origin: str = "<sql>", fragments: Mapping[str, str] | None = None
) -> Queries:
    """``load`` on a string (``origin`` names it in errors)."""
    raw = _split(text, origin)
    known = {**(fragments or {}), **raw}
    resolved: dict[str, str] = {}
    for name in raw:
        resolved[name] = _expand(name, known, origin, resolved, ())
    return Queries(resolved, origin=origin)


def _split(text: str, origin: str) -> dict[str, str]:
    statements: dict[str, list[str]] = {}
    current: list[str] | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line.strip())
        if header is not None:
            name = header["name"]
            if name in statements:
                raise QueryFileError(f"{origin}:{number}: a second statement named {name!r}")
            current = statements[name] = []
        elif current is not None:
            current.append(line)
        elif line.strip() and not line.lstrip().startswith("--"):
            raise QueryFileError(f"{origin}:{number}: SQL before the first '-- name:' header")
    out = {name: _body(lines) for name, lines in statements.items()}
    for name, body in out.items():
        if not body.strip():
            raise QueryFileError(f"{origin}: statement {name!r} is empty")
    return out


def _body(lines: list[str]) -> str:
    """A statement without the comment lines that open it (its description)."""
    start = 0
    while start < len(lines) and (
        not lines[start].strip() or lines[start].lstrip().startswith("--")
    ):
        start += 1
    return "\n".join(lines[start:]).strip() + "\n"


def _is_comment(line: str) -> bool:
    text = line.strip()
    return not text or text.startswith("--")


def _expand(
    name: str,
    known: Mapping[str, str],
    origin: str,
    done: dict[str, str],
    seen: tuple[str, ...],
) -> str:
    if name in done:
        return done[name]
    if name in seen:
        raise QueryFileError(f"{origin}: {' -> '.join((*seen, name))} includes itself")

    def include(match: re.Match[str]) -> str:
        other = match["name"]
        if other not in known:
            raise QueryFileError(f"{origin}: {name!r} includes {other!r}, which is not defined")
        return _expand(other, known, origin, done, (*seen, name)).strip()

    return _INCLUDE.sub(include, known[name])
