"""Block Kit for a reply part: prose as ``section`` blocks (mrkdwn), each code block as
``rich_text`` / ``rich_text_preformatted`` (monospace, copyable, no mrkdwn inside), and the
answer's feedback buttons under it.

The outbox row stays the mrkdwn ``text`` (``mrkdwn.markdown_to_mrkdwn`` at format time); the
blocks are a pure function of that row, built at send time, so a retry sends the same
message. ``text`` is always sent as well: it is the notification and fallback text, and the
whole message if Slack refuses the blocks (``invalid_blocks``: nothing was posted, so the
transport resends once without them).
"""

from __future__ import annotations

import re
from typing import Any

#: Block Kit limits: 50 blocks per message, 3,000 characters in a section's text
MAX_BLOCKS = 50
MAX_SECTION_TEXT = 3000

_FENCE = re.compile(r"^\s*```")


def unescape(text: str) -> str:
    """mrkdwn's three escapes back to characters: rich text elements are literal text."""
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def code_blocks(mrkdwn: str) -> list[dict[str, Any]] | None:
    """Blocks for ``mrkdwn`` when it holds a fenced code block, else ``None`` (plain text is
    rendered best as ``text`` alone). ``None`` too when the blocks would break Block Kit's
    limits: the text then carries the message, as before."""
    segments: list[tuple[str, str]] = []  # ("prose" | "code", content)
    prose: list[str] = []
    code: list[str] | None = None
    for line in mrkdwn.split("\n"):
        fence = _FENCE.match(line)
        if code is None:
            rest = line[fence.end() :] if fence else ""
            if fence is not None and "```" not in rest:
                segments.append(("prose", "\n".join(prose)))
                prose, code = [], ([rest] if rest.strip() else [])
            else:
                prose.append(line)
        elif fence is not None:
            segments.append(("code", "\n".join(code)))
            code = None
        else:
            code.append(line)
    if code is not None:  # a part split inside a code block: the rest is code
        segments.append(("code", "\n".join(code)))
    segments.append(("prose", "\n".join(prose)))
    if not any(kind == "code" for kind, _ in segments):
        return None
    blocks: list[dict[str, Any]] = []
    for kind, content in segments:
        if not content.strip():
            continue
        if kind == "prose":
            content = content.strip("\n")
            if len(content) > MAX_SECTION_TEXT:
                return None
            blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": content}})
        else:
            blocks.append(
                {
                    "type": "rich_text",
                    "elements": [
                        {
                            "type": "rich_text_preformatted",
                            "elements": [{"type": "text", "text": unescape(content)}],
                        }
                    ],
                }
            )
    return blocks if 0 < len(blocks) <= MAX_BLOCKS else None


#: the feedback buttons' action id; their values say which was pressed
FEEDBACK_ACTION = "gateway_feedback"
FEEDBACK_VALUES = {"good": 1, "bad": -1}


def feedback_block() -> dict[str, Any]:
    """Slack's feedback buttons (👍 / 👎) under an answer: a ``context_actions`` block with one
    ``feedback_buttons`` element (docs.slack.dev/reference/block-kit/blocks/
    context-actions-block). A press comes back as a ``block_actions`` interaction."""
    return {
        "type": "context_actions",
        "block_id": "gateway_feedback",
        "elements": [
            {
                "type": "feedback_buttons",
                "action_id": FEEDBACK_ACTION,
                "positive_button": {
                    "text": {"type": "plain_text", "text": "👍"},
                    "accessibility_label": "Good answer",
                    "value": "good",
                },
                "negative_button": {
                    "text": {"type": "plain_text", "text": "👎"},
                    "accessibility_label": "Bad answer",
                    "value": "bad",
                },
            }
        ],
    }


def prose_blocks(mrkdwn: str) -> list[dict[str, Any]] | None:
    """``mrkdwn`` as ``section`` blocks of at most 3,000 characters each, cut at line ends
    (a longer line is cut where it must); ``None`` when it does not fit in the blocks."""
    sections: list[str] = []
    current = ""
    for line in mrkdwn.strip("\n").split("\n"):
        while len(line) > MAX_SECTION_TEXT:
            if current:
                sections.append(current)
                current = ""
            sections.append(line[:MAX_SECTION_TEXT])
            line = line[MAX_SECTION_TEXT:]
        candidate = f"{current}\n{line}" if current else line
        if len(candidate) > MAX_SECTION_TEXT:
            sections.append(current)
            current = line
        else:
            current = candidate
    if current.strip():
        sections.append(current)
    sections = [s for s in sections if s.strip()]
    if not sections or len(sections) >= MAX_BLOCKS:
        return None
    return [{"type": "section", "text": {"type": "mrkdwn", "text": s}} for s in sections]


def answer_blocks(mrkdwn: str) -> list[dict[str, Any]] | None:
    """An answer's blocks: its text (code as rich text, prose as sections) and the feedback
    buttons under it. Without buttons (the code blocks alone, or ``None``: the text carries
    the message) when the text does not fit in Block Kit's limits."""
    body = code_blocks(mrkdwn) or prose_blocks(mrkdwn)
    if body is None or len(body) >= MAX_BLOCKS:
        return code_blocks(mrkdwn)
    return [*body, feedback_block()]
