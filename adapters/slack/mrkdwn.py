"""Markdown (what agents write) -> Slack mrkdwn (what ``chat.postMessage`` ``text`` renders).

Slack's text format is not Markdown: bold is ``*x*``, italic ``_x_``, strike ``~x~``, links
``<url|text>``, no headings, no list syntax. ``&``, ``<`` and ``>`` are control characters and
must be sent as ``&amp;``, ``&lt;``, ``&gt;`` everywhere, code included (Slack decodes them
inside code blocks too; messages typed in the client come back escaped the same way) —
docs.slack.dev/messaging/formatting-message-text#escaping. Slack's own tokens (``<@U…>``,
``<#C…>``, ``<!here>``) pass through so an agent can mention people.
"""

from __future__ import annotations

import re

_PLACEHOLDER = "\x00{}\x00"
_PLACEHOLDER_RE = re.compile("\x00(\\d+)\x00")
_BOLD_MARK = "\x02"

_FENCE_RE = re.compile(r"^(\s*)```")
_HEADING_RE = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_BULLET_RE = re.compile(r"^(\s*)[-*+]\s+(?=\S)")
_QUOTE_RE = re.compile(r"^(\s*)>\s?")
_HRULE_RE = re.compile(r"^\s{0,3}([-*_])(\s*\1){2,}\s*$")

# Order matters: code spans first (nothing inside them is markup), then Slack's own tokens,
# Markdown links/images, autolinks.
_INLINE_RE = re.compile(
    r"(?P<code>`+)(?P<code_body>.+?)(?P=code)"
    r"|(?P<slack><(?:[@#!][A-Za-z0-9^._-]+)(?:\|[^<>]*)?>)"
    r"|!?\[(?P<link_text>[^\]]*)\]\((?P<link_url>[^)\s]+)(?:\s+\"[^\"]*\")?\)"
    r"|<(?P<auto>(?:https?|mailto):[^<>\s]+)>"
)
_BOLD_ITALIC_RE = re.compile(r"\*\*\*(?=\S)(.+?)(?<=\S)\*\*\*")
_BOLD_RE = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1")
_ITALIC_RE = re.compile(r"(?<![*\w])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![*\w])")
_STRIKE_RE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")


def escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def markdown_to_mrkdwn(text: str) -> str:
    """Convert one message (or one split part of it) to mrkdwn.

    Fenced code blocks keep their content (escaped only); the language tag after the opening
    fence is dropped because Slack would render it as the first code line. An unclosed fence
    (a part split inside a block) treats the rest as code.
    """
    out: list[str] = []
    in_code = False
    for line in text.split("\n"):
        fence = _FENCE_RE.match(line)
        if fence is not None:
            if in_code:
                out.append(escape(line))
                in_code = False
            else:
                rest = line[fence.end() :]
                in_code = "```" not in rest  # a one-line ```x``` opens and closes
                out.append(fence.group(1) + "```" + (escape(rest) if not in_code else ""))
            continue
        out.append(escape(line) if in_code else _convert_line(line))
    return "\n".join(out)


def _convert_line(line: str) -> str:
    if _HRULE_RE.match(line):
        return "\u2500" * 10
    heading = _HEADING_RE.match(line)
    if heading is not None:
        inner = heading.group(1).replace("**", "").replace("__", "")
        return f"*{_inline(inner)}*" if inner else ""
    prefix = ""
    quote = _QUOTE_RE.match(line)
    if quote is not None:
        # A literal ">" at line start is Slack's quote marker; it must not be escaped.
        prefix, line = quote.group(1) + ">", line[quote.end() :]
        prefix += " " if line else ""
    bullet = _BULLET_RE.match(line)
    if bullet is not None:
        prefix += bullet.group(1) + "\u2022 "
        line = line[bullet.end() :]
    return prefix + _inline(line)


def _inline(text: str) -> str:
    protected: list[str] = []

    def protect(match: re.Match[str]) -> str:
        if match.group("code") is not None:
            rendered = "`" + escape(match.group("code_body")) + "`"
        elif match.group("slack") is not None:
            rendered = match.group("slack")
        elif match.group("link_url") is not None:
            url = escape(match.group("link_url"))
            label = escape(match.group("link_text").replace("|", "\u2223")).strip()
            rendered = f"<{url}|{label}>" if label else f"<{url}>"
        else:
            rendered = f"<{escape(match.group('auto'))}>"
        protected.append(rendered)
        return _PLACEHOLDER.format(len(protected) - 1)

    text = _INLINE_RE.sub(protect, text)
    text = escape(text)
    text = _BOLD_ITALIC_RE.sub(lambda m: _BOLD_MARK + "_" + m.group(1) + "_" + _BOLD_MARK, text)
    text = _BOLD_RE.sub(lambda m: _BOLD_MARK + m.group(2) + _BOLD_MARK, text)
    text = _ITALIC_RE.sub(r"_\1_", text)
    text = _STRIKE_RE.sub(r"~\1~", text)
    text = text.replace(_BOLD_MARK, "*")
    return _PLACEHOLDER_RE.sub(lambda m: protected[int(m.group(1))], text)
