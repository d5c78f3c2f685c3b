from __future__ import annotations

import pytest

from gateway.core.text import format_parts, split_spans, split_text, utf16_len


def test_short_text_is_one_part() -> None:
    assert split_text("hello", 10) == ["hello"]


def test_empty_text_has_no_parts() -> None:
    assert split_text("  \n ", 10) == []


def test_splits_at_paragraphs_first() -> None:
    text = "first paragraph here.\n\nsecond paragraph here."
    assert split_text(text, 30) == ["first paragraph here.", "second paragraph here."]


def test_splits_at_sentences_then_words() -> None:
    text = "One two three. Four five six seven eight nine ten."
    parts = split_text(text, 20)
    assert all(len(p) <= 20 for p in parts)
    assert parts[0] == "One two three."
    assert " ".join(parts) == text


@pytest.mark.parametrize("limit", [7, 50, 4096])
def test_every_part_fits_and_nothing_is_lost(limit: int) -> None:
    text = ("lorem ipsum dolor sit amet, consectetur. " * 300).strip()
    parts = split_text(text, limit)
    assert all(len(p) <= limit for p in parts)
    assert "".join(parts).replace(" ", "") == text.replace(" ", "")


def test_utf16_measure_counts_astral_characters_twice() -> None:
    assert utf16_len("a😀") == 3
    text = "😀" * 3000  # 3000 code points, 6000 UTF-16 units
    parts = split_text(text, 4096, utf16_len)
    assert len(parts) == 2
    assert all(utf16_len(p) <= 4096 for p in parts)
    assert "".join(parts) == text


def test_a_code_block_cut_in_two_is_closed_and_reopened() -> None:
    code = "```python\n" + "\n".join(f"x = {i}" for i in range(40)) + "\n```"
    parts = split_text(code, 120)
    assert len(parts) > 1
    assert all(p.count("```") % 2 == 0 for p in parts)
    assert parts[1].startswith("```python")


def test_split_spans_cut_rendered_text_at_boundaries_without_whitespace() -> None:
    text = "  first paragraph here.\n\nsecond 😀 paragraph that is longer  "
    spans = split_spans(text, 24, utf16_len)
    parts = [text[a:b] for a, b in spans]
    # the emoji counts two UTF-16 units: "second 😀 paragraph that" would be 25
    assert parts == ["first paragraph here.", "second 😀 paragraph", "that is longer"]
    assert all(utf16_len(p) <= 24 and p == p.strip() for p in parts)
    assert split_spans("   ", 10) == []
    assert split_spans("short", 10) == [(0, 5)]


def test_format_parts_splits_then_formats_each_part() -> None:
    assert format_parts("aaa bbb ccc", 8, len, str.upper) == ["AAA", "BBB CCC"]
