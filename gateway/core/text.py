"""Splitting over-long replies at clean boundaries, in the platform's own length unit."""

from __future__ import annotations

import re
from collections.abc import Callable

Measure = Callable[[str], int]


def utf16_len(text: str) -> int:
    """Telegram counts entity offsets (and, conservatively, its 4096 limit) in UTF-16 units."""
    return len(text.encode("utf-16-le")) // 2


_BOUNDARIES: tuple[re.Pattern[str], ...] = (
    re.compile(r"\n\s*\n"),  # paragraph
    re.compile(r"\n"),  # line
    re.compile(r"(?<=[.!?…])\s+"),  # sentence
    re.compile(r"\s+"),  # word
)


def split_text(text: str, limit: int, measure: Measure = len) -> list[str]:
    """Split ``text`` into parts each at most ``limit`` long (per ``measure``), preferring
    paragraph, then line, sentence and word boundaries; a word longer than the limit is cut.
    A fenced code block cut in two is closed and reopened so each part renders on its own."""
    if limit <= 0:
        raise ValueError("limit must be positive")
    text = text.strip()
    if not text:
        return []
    parts: list[str] = []
    rest = text
    reopen = ""
    while rest:
        candidate = reopen + rest
        if measure(candidate) <= limit:
            parts.append(candidate)
            break
        budget = limit - measure(reopen) - 4  # room for a closing fence
        head = _cut(rest, budget, measure)
        piece = reopen + head.rstrip()
        fence_open = piece.count("```") % 2 == 1
        if fence_open:
            piece += "\n```"
            lang = re.findall(r"```(\w*)", piece)
            reopen = f"```{lang[-2] if len(lang) >= 2 else ''}\n"
        else:
            reopen = ""
        parts.append(piece)
        rest = rest[len(head) :].lstrip()
    return parts


def format_parts(
    text: str, limit: int, measure: Measure, format: Callable[[str], str]
) -> list[str]:
    """The common ``Transport.parts``: split the Markdown, then ``format`` each part."""
    return [format(p) for p in split_text(text, limit, measure)]


def split_spans(text: str, limit: int, measure: Measure = len) -> list[tuple[int, int]]:
    """Where to cut ``text`` (already rendered, no markup) into parts of at most ``limit``:
    ``(start, end)`` index pairs into ``text``, each part without surrounding whitespace,
    cut at the same boundaries ``split_text`` prefers. For a transport that renders before
    it splits (Telegram entities) and carries its formatting across the cuts itself."""
    if limit <= 0:
        raise ValueError("limit must be positive")
    spans: list[tuple[int, int]] = []
    start = len(text) - len(text.lstrip())
    while start < len(text):
        rest = text[start:]
        if measure(rest.rstrip()) <= limit:
            spans.append((start, start + len(rest.rstrip())))
            break
        head = _cut(rest, limit, measure)
        spans.append((start, start + len(head.rstrip())))
        start += len(head)
        start += len(text[start:]) - len(text[start:].lstrip())
    return spans


def _cut(text: str, budget: int, measure: Measure) -> str:
    """The longest prefix within ``budget`` that ends at the best available boundary."""
    budget = max(budget, 1)
    # the largest prefix (in characters) that fits the budget
    lo, hi = 1, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if measure(text[:mid]) <= budget:
            lo = mid
        else:
            hi = mid - 1
    window = text[:lo]
    for pattern in _BOUNDARIES:
        ends = [m.end() for m in pattern.finditer(window)]
        # don't accept a boundary that leaves a tiny part: at least a third of the window
        good = [e for e in ends if e >= len(window) // 3 and e < len(text)]
        if good:
            return window[: good[-1]]
    if lo < len(text) and 0xD800 <= ord(text[lo - 1]) <= 0xDBFF:
        lo -= 1  # never split a surrogate pair (only possible with odd inputs)
    return window[:lo]


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and the noun in the number it needs: ``1 passage``, ``2 passages``, ``0 pages``."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
