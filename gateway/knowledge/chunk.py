"""Chunking by structure: a chunk never crosses a page or a heading, holds whole paragraphs
where it can (about ``target`` tokens), and starts with the tail of the chunk before it in
the same section (``overlap`` tokens) so a sentence cut at a border is still found."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import groupby

from gateway.agents.prompt import estimate_text
from gateway.knowledge.parse import Block

TARGET_TOKENS = 512
OVERLAP_TOKENS = 64
#: how heading paths are joined for display and storage
SECTION_SEP = " > "


@dataclass(frozen=True, slots=True)
class Chunk:
    ordinal: int
    text: str
    page: int | None
    section: str
    tokens: int


def chunk_blocks(
    blocks: Sequence[Block], *, target: int = TARGET_TOKENS, overlap: int = OVERLAP_TOKENS
) -> list[Chunk]:
    chunks: list[Chunk] = []
    for (page, headings), group in groupby(blocks, key=lambda b: (b.page, b.headings)):
        section = SECTION_SEP.join(headings)
        for text in _pack([b.text for b in group], target, overlap):
            chunks.append(Chunk(len(chunks), text, page, section, estimate_text(text)))
    return chunks


def _pack(paragraphs: Sequence[str], target: int, overlap: int) -> Iterator[str]:
    """Whole paragraphs up to ``target`` tokens; a longer paragraph is cut into windows."""
    pieces: list[str] = []
    for p in paragraphs:
        if estimate_text(p) > target:
            pieces.extend(_windows(p, max(target - overlap, 1), overlap))
        else:
            pieces.append(p)
    current: list[str] = []
    size = 0
    for piece in pieces:
        cost = estimate_text(piece)
        if current and size + cost > target:
            yield "\n\n".join(current)
            tail = _tail(current[-1], overlap)
            # the overlap, unless the next piece would not fit beside it (a window, which
            # carries its own overlap)
            if tail and estimate_text(tail) + cost <= target:
                current, size = [tail], estimate_text(tail)
            else:
                current, size = [], 0
        current.append(piece)
        size += cost
    if current:
        yield "\n\n".join(current)


def _words(text: str) -> list[str]:
    return re.findall(r"\S+\s*", text)


def _windows(text: str, size: int, overlap: int) -> Iterator[str]:
    """Windows of about ``size`` tokens, each starting ``overlap`` tokens before the end of
    the one before."""
    words = _words(text)
    costs = [estimate_text(w) for w in words]
    start = 0
    while start < len(words):
        end, total = start, 0
        while end < len(words) and (end == start or total + costs[end] <= size):
            total += costs[end]
            end += 1
        yield "".join(words[start:end]).strip()
        if end >= len(words):
            break
        back, kept = end, 0
        while back > start + 1 and kept + costs[back - 1] <= overlap:
            back -= 1
            kept += costs[back]
        start = back


def _tail(text: str, overlap: int) -> str:
    """About ``overlap`` tokens from the end of ``text``, starting at a word."""
    if overlap <= 0:
        return ""
    words = _words(text)
    taken: list[str] = []
    for word in reversed(words):
        taken.append(word)
        if estimate_text("".join(reversed(taken))) >= overlap:
            break
    return "".join(reversed(taken)).strip()
