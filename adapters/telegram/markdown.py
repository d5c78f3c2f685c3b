"""The agent's Markdown as Telegram text plus message entities (never ``parse_mode``).

Where the conversion happens: **once, when the reply is written to the outbox**
(``TelegramTransport.parts``). The whole reply is parsed with markdown-it-py into a tree and
rendered to plain text plus entities; that rendering is split at clean boundaries with the
4096 limit counted in UTF-16 units; an entity crossing a split is cut into both parts. Each
part is stored in the outbox row as the exact ``sendMessage`` payload, a small JSON object
``{"text": ..., "entities": [...]}`` with offsets and lengths in UTF-16 code units (the
Bot API's unit). ``send`` only decodes it: a retry after a crash sends byte-for-byte what
the first attempt sent, and the split the core measured is the split Telegram receives.

Nothing here can make a send fail to parse: there is no markup left to parse, and the
entities obey the Bot API's nesting rules (``pre``/``code`` contain nothing, a link holds no
code, blockquotes are not nested, entities never intersect because they come from a tree).

Rendering: bold, italic, strikethrough, inline code, code blocks with their language, links
(http/https/tg only; other targets stay as their text), headings in bold, lists with
``•`` / ``1.`` markers indented per level, blockquotes, rules as a line, tables as rows of
cells separated by ``|`` with a bold header. Raw HTML is never interpreted (``html=False``):
it stays literal text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.tree import SyntaxTreeNode

from gateway.core.text import split_spans, utf16_len

#: one parser for the process: CommonMark plus GFM strikethrough and tables, no raw HTML
_PARSER = MarkdownIt("commonmark", {"html": False}).enable(["strikethrough", "table"])
_LINK_SCHEMES = ("http://", "https://", "tg://")
_LANGUAGE = re.compile(r"^[A-Za-z0-9_+#.-]{1,32}$")


@dataclass(frozen=True, slots=True)
class Entity:
    """One entity over ``[start, end)`` in code points of its text (UTF-16 on the wire)."""

    type: str
    start: int
    end: int
    url: str | None = None
    language: str | None = None


@dataclass(frozen=True, slots=True)
class Rendered:
    text: str
    entities: tuple[Entity, ...]

    def payload(self) -> dict[str, Any]:
        """The ``sendMessage`` fields: text and entities with UTF-16 offsets and lengths."""
        units = _utf16_prefix(self.text)
        out: list[dict[str, Any]] = []
        for e in self.entities:
            item: dict[str, Any] = {
                "type": e.type,
                "offset": units[e.start],
                "length": units[e.end] - units[e.start],
            }
            if e.url is not None:
                item["url"] = e.url
            if e.language is not None:
                item["language"] = e.language
            out.append(item)
        return {"text": self.text, "entities": out}


def render(markdown: str) -> Rendered:
    """Parse ``markdown`` and render it as plain text plus entities (code-point offsets)."""
    out = _Out()
    out.blocks(SyntaxTreeNode(_PARSER.parse(markdown)).children, depth=0, sep="\n\n")
    return _strip(Rendered(text="".join(out.buf), entities=tuple(out.entities)))


def split(rendered: Rendered, limit: int) -> list[Rendered]:
    """Parts of at most ``limit`` UTF-16 units, cut at paragraph/line/sentence/word
    boundaries; an entity crossing a cut is cut into both parts (a code block keeps its
    language on both sides)."""
    parts: list[Rendered] = []
    for start, end in split_spans(rendered.text, limit, utf16_len):
        kept = []
        for e in rendered.entities:
            lo, hi = max(e.start, start), min(e.end, end)
            if lo < hi:
                kept.append(replace(e, start=lo - start, end=hi - start))
        parts.append(_strip(Rendered(text=rendered.text[start:end], entities=tuple(kept))))
    return [p for p in parts if p.text]


def to_parts(markdown: str, limit: int) -> list[str]:
    """The outbox rows for one reply: each an encoded ``sendMessage`` payload. A reply whose
    rendering is empty (only an empty link, say) goes out as its literal text instead."""
    parts = split(render(markdown), limit)
    if not parts and markdown.strip():
        parts = split(Rendered(text=markdown.strip(), entities=()), limit)
    return [encode(p) for p in parts]


def encode(part: Rendered) -> str:
    return json.dumps(part.payload(), ensure_ascii=False, separators=(",", ":"))


def decode(content: str) -> tuple[str, list[dict[str, Any]]]:
    """An outbox row back into ``(text, entities)``. A row that is not an encoded payload
    (written before entities existed) is plain text without entities."""
    if content.startswith("{"):
        try:
            data = json.loads(content)
        except ValueError:
            data = None
        if (
            isinstance(data, dict)
            and set(data) == {"text", "entities"}
            and isinstance(data["text"], str)
            and isinstance(data["entities"], list)
        ):
            return data["text"], [e for e in data["entities"] if isinstance(e, dict)]
    return content, []


def _utf16_prefix(text: str) -> list[int]:
    """``units[i]`` = UTF-16 code units before code point ``i`` (``len(text) + 1`` items)."""
    units = [0] * (len(text) + 1)
    total = 0
    for i, ch in enumerate(text):
        total += 2 if ord(ch) > 0xFFFF else 1
        units[i + 1] = total
    return units


def _strip(r: Rendered) -> Rendered:
    """Trim surrounding whitespace (Telegram trims it too, which would shift the offsets)
    and drop entities left empty or only whitespace."""
    lead = len(r.text) - len(r.text.lstrip())
    text = r.text.strip()
    kept = []
    for e in r.entities:
        lo, hi = max(e.start - lead, 0), min(e.end - lead, len(text))
        if lo < hi and text[lo:hi].strip():
            kept.append(replace(e, start=lo, end=hi))
    kept.sort(key=lambda e: (e.start, -e.end))
    return Rendered(text=text, entities=tuple(kept))


class _Out:
    """The text being built, and the entities opened over it (code-point offsets)."""

    def __init__(self) -> None:
        self.buf: list[str] = []
        self.pos = 0
        self.entities: list[Entity] = []
        self.open: list[str] = []  # entity types currently open (nesting rules)

    def emit(self, text: str) -> None:
        self.buf.append(text)
        self.pos += len(text)

    def wrap(
        self,
        kind: str,
        body: Callable[[], object],
        *,
        url: str | None = None,
        lang: str | None = None,
    ) -> None:
        """Run ``body()`` and cover what it emitted with one entity, unless the Bot API's
        nesting rules forbid it here (then the text stays, unformatted)."""
        if not self._allowed(kind):
            body()
            return
        start, index = self.pos, len(self.entities)
        self.open.append(kind)
        try:
            body()
        finally:
            self.open.pop()
        if self.pos > start:
            # before the entities opened inside it: outer first when both cover the same text
            self.entities.insert(index, Entity(kind, start, self.pos, url=url, language=lang))

    def _allowed(self, kind: str) -> bool:
        if "code" in self.open or "pre" in self.open:
            return False  # pre and code contain nothing
        if kind in self.open:
            return False  # **bold inside a bold heading**: one entity is enough
        if kind == "code" and "text_link" in self.open:
            return False  # links and code cannot contain each other
        return True

    # blocks -----------------------------------------------------------------------------

    def blocks(self, nodes: Sequence[SyntaxTreeNode], *, depth: int, sep: str) -> None:
        first = True
        for node in nodes:
            if not first:
                self.emit(sep)
            first = False
            self.block(node, depth=depth)

    def block(self, node: SyntaxTreeNode, *, depth: int) -> None:
        kind = node.type
        if kind == "paragraph":
            self.inlines(node.children)
        elif kind == "heading":
            self.wrap("bold", lambda: self.inlines(node.children))
        elif kind in ("fence", "code_block"):
            code = node.content.rstrip("\n")
            words = node.info.split()
            lang = words[0] if words and _LANGUAGE.match(words[0]) else None
            self.wrap("pre", lambda: self.emit(code), lang=lang)
        elif kind == "blockquote":
            # blockquotes cannot be nested: an inner one is rendered inside the outer entity
            self.wrap("blockquote", partial(self.blocks, node.children, depth=depth, sep="\n"))
        elif kind in ("bullet_list", "ordered_list"):
            self.list(node, depth=depth)
        elif kind == "hr":
            self.emit("———")
        elif kind == "table":
            self.table(node)
        elif kind == "inline":
            self.inlines(node.children)
        elif node.children:
            self.blocks(node.children, depth=depth, sep="\n")
        else:
            self.emit(node.content)

    def list(self, node: SyntaxTreeNode, *, depth: int) -> None:
        start = node.attrs.get("start", 1) if node.type == "ordered_list" else 1
        number = int(start) if isinstance(start, int | float | str) else 1
        for i, item in enumerate(node.children):
            if i:
                self.emit("\n")
            if node.type == "ordered_list":
                marker = f"{number + i}. "
            else:
                marker = "• " if depth == 0 else "◦ "
            self.emit("   " * depth + marker)
            first = True
            for child in item.children:
                if not first:
                    self.emit("\n")
                first = False
                if child.type in ("bullet_list", "ordered_list"):
                    self.list(child, depth=depth + 1)
                else:
                    self.block(child, depth=depth + 1)

    def table(self, node: SyntaxTreeNode) -> None:
        rows = [row for section in node.children for row in section.children]
        for r, row in enumerate(rows):
            if r:
                self.emit("\n")
            for c, cell in enumerate(row.children):
                if c:
                    self.emit(" | ")
                if cell.type == "th":
                    self.wrap("bold", partial(self.inlines, cell.children))
                else:
                    self.inlines(cell.children)

    # inlines ----------------------------------------------------------------------------

    def inlines(self, nodes: Sequence[SyntaxTreeNode]) -> None:
        for node in nodes:
            self.inline(node)

    def inline(self, node: SyntaxTreeNode) -> None:
        kind = node.type
        if kind == "inline":
            self.inlines(node.children)
        elif kind in ("softbreak", "hardbreak"):
            self.emit("\n")
        elif kind == "code_inline":
            self.wrap("code", lambda: self.emit(node.content))
        elif kind in ("strong", "em", "s"):
            entity = {"strong": "bold", "em": "italic", "s": "strikethrough"}[kind]
            self.wrap(entity, lambda: self.inlines(node.children))
        elif kind in ("link", "image"):
            url = str(node.attrs.get("href" if kind == "link" else "src", ""))
            body = partial(self.inlines, node.children)
            if url.lower().startswith(_LINK_SCHEMES):
                self.wrap("text_link", body, url=url)
            else:
                body()
        elif node.children:
            self.inlines(node.children)
        else:
            self.emit(node.content)
