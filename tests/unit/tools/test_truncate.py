"""Tool output cut by its structure: JSON stays valid with its first items and a count of the
rest, CSV keeps its header and whole rows, text is cut at a line boundary with a marker."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.tools.truncate import cap_output


def test_output_within_the_limit_is_left_alone() -> None:
    text = '{"a": [1, 2, 3]}'
    assert cap_output(text, 100) is text


def test_a_long_json_list_keeps_its_first_items_and_counts_the_rest() -> None:
    items = [{"id": i, "name": f"item {i}"} for i in range(200)]
    out = cap_output(json.dumps(items, indent=2), 300)
    assert len(out) <= 300
    value = json.loads(out)
    *kept, note = value
    assert kept == items[: len(kept)] and len(kept) >= 5
    assert note == f"... {200 - len(kept)} more"


def test_a_json_object_keeps_its_first_keys_and_counts_the_rest() -> None:
    mapping = {f"key{i:03}": "v" * 20 for i in range(100)}
    out = cap_output(json.dumps(mapping), 400)
    value = json.loads(out)
    assert len(out) <= 400
    left = value.pop("...")
    assert list(value) == list(mapping)[: len(value)] and value
    assert all(value[k] == mapping[k] for k in value)
    assert left == f"... {100 - len(value)} more"


def test_nested_json_is_cut_inside_and_stays_valid() -> None:
    doc = {
        "query": "refunds",
        "total": 5000,
        "results": [
            {"id": i, "title": f"result {i}", "tags": ["a", "b", "c"], "body": "x" * 2000}
            for i in range(50)
        ],
        "took_ms": 12,
    }
    out = cap_output(json.dumps(doc), 1000)
    assert len(out) <= 1000
    value = json.loads(out)
    # the keys before the long list are whole; the list is cut inside, then counted
    assert value["query"] == "refunds" and value["total"] == 5000
    results = value["results"]
    assert results[0]["id"] == 0 and results[0]["tags"] == ["a", "b", "c"]
    assert "more characters]" in results[0]["body"]  # a long string keeps its start
    assert results[-1] == f"... {50 - len(results) + 1} more"
    assert value["..."] == "... 1 more"  # took_ms did not fit after the cut list


def test_a_huge_single_string_in_json_keeps_its_start() -> None:
    out = cap_output(json.dumps({"text": "é" * 5000}), 200)
    value = json.loads(out)
    assert len(out) <= 200
    assert value["text"].startswith("ééé") and value["text"].endswith("more characters]")


def test_text_is_cut_at_a_line_boundary_with_a_marker() -> None:
    lines = [f"line {i}: " + "word " * 8 for i in range(100)]
    text = "\n".join(lines)
    out = cap_output(text, 500)
    assert len(out) <= 500
    *kept, marker = out.split("\n")
    assert kept == lines[: len(kept)] and kept
    left = "\n".join(lines[len(kept) :])
    assert marker == f"[... {100 - len(kept)} more lines, {len(left)} more characters cut ...]"


def test_one_very_long_line_is_cut_at_a_space() -> None:
    text = " ".join(f"w{i}" for i in range(2000))
    out = cap_output(text, 300)
    assert len(out) <= 300
    kept, marker = out.split("\n")
    assert text.startswith(kept) and text[len(kept)] == " "
    assert marker.startswith("[... ") and marker.endswith("more characters cut ...]")


def test_csv_keeps_its_header_and_whole_rows() -> None:
    rows = [["id", "name", "note"]] + [
        [str(i), f"person {i}", 'said, "hello"' if i % 2 else "plain"] for i in range(300)
    ]
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    out = cap_output(buffer.getvalue(), 600)
    assert len(out) <= 600
    table, marker = out.rstrip("\n").rsplit("\n", 1)
    read = list(csv.reader(io.StringIO(table)))
    assert read[0] == ["id", "name", "note"]
    assert read[1:] == rows[1 : len(read)]  # whole rows, quoting intact
    assert marker == f"[... {300 - (len(read) - 1)} more rows ...]"


def test_tab_separated_tables_keep_their_header_too() -> None:
    text = "a\tb\n" + "".join(f"{i}\t{i * i}\n" for i in range(500))
    out = cap_output(text, 200)
    assert out.startswith("a\tb\n1\t1\n".replace("1\t1", "0\t0"))
    assert out.endswith("more rows ...]") and len(out) <= 200


def test_something_that_only_looks_like_json_is_cut_as_text() -> None:
    text = "{not json\n" + "more text\n" * 100
    out = cap_output(text, 200)
    assert out.startswith("{not json\nmore text\n")
    assert out.endswith("more characters cut ...]") and len(out) <= 200


json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=12)
        | st.dictionaries(st.text(max_size=12), children, max_size=12)
    ),
    max_leaves=60,
)


def _follows(orig: Any, cut: Any) -> None:
    """``cut`` is ``orig`` or its start: the first items, keys and characters, each cut the
    same way inside, and every part left out counted by its note."""
    if cut == orig and type(cut) is type(orig):
        return
    if isinstance(orig, str):
        assert isinstance(cut, str)
        kept = cut[: cut.rindex("... [")]
        assert orig.startswith(kept)
        assert cut == kept + f"... [{len(orig) - len(kept)} more characters]"
    elif isinstance(orig, list):
        assert isinstance(cut, list)
        items = cut
        if cut and len(cut) - 1 < len(orig) and cut[-1] == f"... {len(orig) - len(cut) + 1} more":
            items = cut[:-1]
        else:
            assert len(cut) == len(orig)
        for whole, part in zip(orig, items, strict=False):
            _follows(whole, part)
    elif isinstance(orig, dict):
        assert isinstance(cut, dict)
        body = dict(cut)
        note = body.pop("...", None)
        if note is None:
            assert len(body) == len(orig)
        else:
            assert note == f"... {len(orig) - len(body)} more"
        assert list(body) == list(orig)[: len(body)]
        for key, part in body.items():
            _follows(orig[key], part)
    else:
        raise AssertionError(f"{cut!r} is not {orig!r}")


@settings(max_examples=150, deadline=None)
@given(value=json_values, limit=st.integers(min_value=100, max_value=1200))
def test_cut_json_always_parses_and_fits_the_limit(value: Any, limit: int) -> None:
    text = json.dumps(value, indent=1)
    out = cap_output(text, limit)
    assert len(out) <= limit
    if len(text) <= limit:
        assert out == text
    else:
        _follows(value, json.loads(out))
