"""The agent's Markdown as Teams renders it in a message (``textFormat: markdown``).

Teams renders bold, italic, strikethrough, lists, block quotes, links and code (inline and
fenced) as the agent writes them. It shows headings, horizontal rules, images and tables as
their raw characters, so those are rewritten: a heading becomes a bold line, a rule a line of
dashes, an image its link, a table a preformatted block (its columns stay aligned). Code is
left exactly as written."""

from __future__ import annotations

import re

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_RULE = re.compile(r"^\s{0,3}([-*_])(\s*\1){2,}\s*$")
_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$")


def to_teams(text: str) -> str:
    out: list[str] = []
    fence: str | None = None
    table: list[str] = []

    def flush_table() -> None:
        if table:
            out.append("```")
            out.extend(row.strip() for row in table)
            out.append("```")
            table.clear()

    for line in text.split("\n"):
        opened = _FENCE.match(line)
        if fence is not None:
            out.append(line)
            if opened and opened.group(1) == fence:
                fence = None
            continue
        if opened:
            flush_table()
            fence = opened.group(1)
            out.append(line)
            continue
        if _TABLE_ROW.match(line):
            table.append(line)
            continue
        flush_table()
        heading = _HEADING.match(line)
        if heading:
            out.append(f"**{heading.group(1)}**" if heading.group(1) else "")
        elif _RULE.match(line):
            out.append("――――――――")
        else:
            out.append(_IMAGE.sub(lambda m: f"[{m.group(1) or m.group(2)}]({m.group(2)})", line))
    flush_table()
    return "\n".join(out)
