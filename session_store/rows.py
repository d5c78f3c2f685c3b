"""Records built from their rows by their fields, not by hand.

``reader(cls)`` returns the function that builds a ``cls`` from a row (an asyncpg Record, a
dict, a JSON object): each field is read from the column of its name. A record declares only
the exceptions, in ``row_columns``: a field read from a column of another name, through a
converter, from the whole row (a value spread over several columns), or not from the row at
all. The function is generated once per record (as ``dataclasses`` generates ``__init__``),
so a row costs what a hand-written ``cls(id=row["id"], ...)`` costs: the claim reads its
pending messages through it.

Records are frozen dataclasses or ``NamedTuple``s (built positionally, in one step)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

#: how one record's rows are read: ``reader(cls)``
RowReader = Callable[[Mapping[str, Any]], T]


class _Convert:
    """``Column.if_null``'s default: a NULL goes through ``convert`` like any value."""

    def __repr__(self) -> str:
        return "CONVERT"


CONVERT: Any = _Convert()


@dataclass(frozen=True, slots=True, kw_only=True)
class Column:
    """How one field is read when it is not simply the column of its name."""

    #: the column's name, when it differs from the field's
    name: str | None = None
    #: applied to the column's value (or to the whole row, with ``whole_row``)
    convert: Callable[[Any], Any] | None = None
    #: ``convert`` takes the whole row: a value made of several columns
    whole_row: bool = False
    #: not read from the row: the field keeps its default
    skip: bool = False
    #: the value of a NULL column, without calling ``convert`` (by default NULL is
    #: converted too)
    if_null: Any = CONVERT


#: a field that the row does not hold
SKIP = Column(skip=True)

_readers: dict[tuple[type[Any], str, bool], Callable[[Any], Any]] = {}


def reader(
    cls: type[T],
    *,
    prefix: str = "",
    columns: Mapping[str, Column] | None = None,
    by_position: bool = False,
) -> Callable[[Any], T]:
    """The function that builds a ``cls`` from a row; ``prefix``: its columns are named
    ``prefix + column`` inside a wider row (a summary joined into a turn's state).
    ``columns``: the exceptions, for a record that cannot declare ``row_columns`` (a
    ``NamedTuple``); ``by_position``: the row's columns are the fields in order (no name
    lookups: the hot path's context rows)."""
    key = (cls, prefix, by_position)
    found = None if columns is not None else _readers.get(key)
    if found is None:
        spec = getattr(cls, "row_columns", {}) if columns is None else columns
        found = _compile(cls, spec, prefix, by_position)
        if columns is None:
            _readers[key] = found
    return found


def from_row(cls: type[T], row: Mapping[str, Any], *, prefix: str = "") -> T:
    """One ``cls`` from ``row``; a loop should take ``reader(cls)`` once instead."""
    return reader(cls, prefix=prefix)(row)


def or_empty(value: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """A JSON object column that may be NULL, as a mapping."""
    return value or {}


def field_names(cls: type[Any]) -> tuple[str, ...]:
    """The fields of a dataclass or ``NamedTuple``, in declaration order."""
    if dataclasses.is_dataclass(cls):
        return tuple(f.name for f in dataclasses.fields(cls))
    names = getattr(cls, "_fields", None)
    if isinstance(cls, type) and issubclass(cls, tuple) and names is not None:
        return tuple(names)
    raise TypeError(f"{cls.__name__} is neither a dataclass nor a NamedTuple")


def _compile(
    cls: type[Any], spec: Mapping[str, Column], prefix: str, by_position: bool
) -> Callable[[Any], Any]:
    names = field_names(cls)
    unknown = set(spec) - set(names)
    if unknown:
        raise TypeError(f"{cls.__name__}.row_columns names no field: {sorted(unknown)}")
    positional = not dataclasses.is_dataclass(cls)
    env: dict[str, Any] = {"cls": cls, "new_tuple": tuple.__new__}
    values: list[str] = []
    for name in names:
        column = spec.get(name, Column())
        if by_position and (column.skip or column.whole_row or column.name):
            raise TypeError(f"{cls.__name__}.{name}: a row read by position has one column each")
        if column.skip:
            if positional:
                raise TypeError(f"{cls.__name__}: a NamedTuple field cannot be skipped")
            continue
        # by position the row is unpacked once into locals (cheaper than one index each)
        expr = f"v_{name}" if by_position else f"row[{prefix + (column.name or name)!r}]"
        if column.convert is not None:
            env[f"convert_{name}"] = column.convert
            if column.whole_row:
                expr = f"convert_{name}(row)"
            elif column.if_null is CONVERT:
                expr = f"convert_{name}({expr})"
            else:
                env[f"null_{name}"] = column.if_null
                value = f"v_{name}" if by_position else f"(v_{name} := {expr})"
                expr = f"(null_{name} if {value} is None else convert_{name}(v_{name}))"
        values.append(expr if positional else f"{name}={expr}")
    body = f"new_tuple(cls, ({', '.join(values)},))" if positional else f"cls({', '.join(values)})"
    unpack = f"    {', '.join(f'v_{n}' for n in names)}, = row\n" if by_position else ""
    source = f"def read_{cls.__name__}(row):\n{unpack}    return {body}\n"
    # generated from field names (identifiers) and column names (repr'd literals) only
    exec(compile(source, f"<row reader {cls.__qualname__}>", "exec"), env)
    read: Callable[[Any], Any] = env[f"read_{cls.__name__}"]
    return read
