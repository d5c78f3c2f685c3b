"""The queries-file loader: named statements parsed once, and every mistake in a file fails
at import rather than at the first call."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

import session_store
from session_store.sql import QueryFileError, UnknownQuery, load, parse

FILE = """
-- A file's opening comment is allowed.

-- name: columns
id, name

-- name: get_thing
-- what the statement does (its description, not sent)
SELECT {{columns}} FROM things WHERE id = $1

-- name: list_things
SELECT {{columns}} FROM things
-- a comment inside the statement stays
ORDER BY id LIMIT $1
"""


def test_statements_are_read_by_name_with_their_includes_pasted() -> None:
    queries = parse(FILE)
    assert queries.get_thing == "SELECT id, name FROM things WHERE id = $1\n"
    assert queries["list_things"].startswith("SELECT id, name FROM things\n-- a comment")
    assert sorted(queries) == ["columns", "get_thing", "list_things"]
    assert "get_thing" in queries and len(queries) == 3


def test_an_unknown_name_is_an_error_naming_the_file() -> None:
    queries = parse(FILE, origin="things.sql")
    with pytest.raises(UnknownQuery, match=r"things\.sql has no statement 'get_thnig'"):
        _ = queries.get_thnig
    with pytest.raises(UnknownQuery):
        _ = queries["nope"]


def test_a_second_statement_of_one_name_is_an_error() -> None:
    text = FILE + "\n-- name: get_thing\nSELECT 1\n"
    with pytest.raises(QueryFileError, match="a second statement named 'get_thing'"):
        parse(text, origin="things.sql")


def test_sql_before_the_first_header_is_an_error() -> None:
    with pytest.raises(QueryFileError, match="before the first"):
        parse("SELECT 1\n-- name: one\nSELECT 1\n")


def test_an_empty_statement_is_an_error() -> None:
    with pytest.raises(QueryFileError, match="'two' is empty"):
        parse("-- name: one\nSELECT 1\n-- name: two\n-- only a comment\n")


def test_an_include_of_nothing_or_of_itself_is_an_error() -> None:
    with pytest.raises(QueryFileError, match="includes 'missing', which is not defined"):
        parse("-- name: one\nSELECT {{missing}}\n")
    with pytest.raises(QueryFileError, match="includes itself"):
        parse("-- name: one\nSELECT {{two}}\n-- name: two\nSELECT {{one}}\n")


def test_fragments_passed_in_are_included_and_the_file_wins_over_them() -> None:
    queries = parse(
        "-- name: one\nSELECT {{rule}}, {{columns}}\n-- name: columns\nid\n",
        fragments={"rule": "true", "columns": "ignored"},
    )
    assert queries.one == "SELECT true, id\n"


ROOT = Path(session_store.__file__).parent
#: every queries file of the store (the declared schema is not one)
QUERY_FILES = sorted(p for p in ROOT.rglob("*.sql") if p.name != "schema.sql")


def test_the_store_keeps_its_sql_in_files_beside_its_repositories() -> None:
    names = {str(p.relative_to(ROOT)) for p in QUERY_FILES}
    assert {"repos/inbox.sql", "repos/turns.sql", "repos/operator.sql"} <= names


@pytest.mark.parametrize("path", QUERY_FILES, ids=lambda p: p.name)
def test_every_queries_file_is_loaded_by_its_module_as_static_sql(path: Path) -> None:
    """Each file belongs to the module of the same name beside it, which loads it at import
    (with the fragments it needs); no statement keeps a placeholder or a %-style parameter."""
    text = path.read_text(encoding="utf-8")
    names = re.findall(r"^-- name: (\w+)$", text, flags=re.M)
    assert names and len(names) == len(set(names))
    package = ".".join(("session_store", *path.relative_to(ROOT).parent.parts))
    queries = importlib.import_module(f"{package}.{path.stem}").SQL
    assert sorted(queries) == sorted(names)
    for name in names:
        statement = queries[name]
        assert "{" not in statement and "%s" not in statement, name


def test_load_needs_the_package() -> None:
    with pytest.raises(QueryFileError):
        load(None, "turns.sql")
