"""Markdown -> Slack mrkdwn conversion table."""

from __future__ import annotations

import pytest

from adapters.slack.mrkdwn import markdown_to_mrkdwn

# fmt: off  (one case per line)
CASES = [
    ("plain", "hello world", "hello world"),
    ("bold", "a **bold** word", "a *bold* word"),
    ("bold-underscores", "a __bold__ word", "a *bold* word"),
    ("italic-star", "an *italic* word", "an _italic_ word"),
    ("italic-underscore-kept", "an _italic_ word", "an _italic_ word"),
    ("bold-italic", "***both***", "*_both_*"),
    ("strike", "~~gone~~", "~gone~"),
    ("multiplication-is-not-italic", "2 * 3 * 4", "2 * 3 * 4"),
    ("snake_case-untouched", "call snake_case_name()", "call snake_case_name()"),
    ("link", "see [the docs](https://x.test/a)", "see <https://x.test/a|the docs>"),
    ("link-with-ampersand", "[q](https://x.test/?a=1&b=2)", "<https://x.test/?a=1&amp;b=2|q>"),
    ("link-label-escaped", "[a<b>](https://x.test)", "<https://x.test|a&lt;b&gt;>"),
    ("link-label-pipe", "[a|b](https://x.test)", "<https://x.test|a\u2223b>"),
    ("image-becomes-link", "![chart](https://x.test/c.png)", "<https://x.test/c.png|chart>"),
    ("autolink", "<https://x.test>", "<https://x.test>"),
    ("escape-outside-links", "a & b < c > d", "a &amp; b &lt; c &gt; d"),
    ("html-is-escaped", "<b>not html</b>", "&lt;b&gt;not html&lt;/b&gt;"),
    (
        "slack-tokens-pass",
        "hi <@U123>, see <#C1|general> <!here>",
        "hi <@U123>, see <#C1|general> <!here>",
    ),
    ("heading", "# Title", "*Title*"),
    ("heading-with-bold", "## A **b** c ##", "*A b c*"),
    ("bullets", "- a\n* b\n+ c", "\u2022 a\n\u2022 b\n\u2022 c"),
    ("nested-bullets", "- a\n  - b", "\u2022 a\n  \u2022 b"),
    ("numbered-kept", "1. one\n2. two", "1. one\n2. two"),
    ("bullet-with-bold", "- **k**: v", "\u2022 *k*: v"),
    ("quote-marker-not-escaped", "> quoted **x**", "> quoted *x*"),
    ("hrule", "---", "\u2500" * 10),
    ("inline-code-untouched", "run `a **b** <c>` now", "run `a **b** &lt;c&gt;` now"),
    (
        "code-block-untouched",
        "```python\nif a < b: **x**\n- item\n```\nafter **b**",
        "```\nif a &lt; b: **x**\n- item\n```\nafter *b*",
    ),
    ("code-block-one-line", "```x = 1```", "```x = 1```"),
    ("unclosed-fence-is-code", "```\ncode *x*", "```\ncode *x*"),
]
# fmt: on


@pytest.mark.parametrize(("source", "expected"), [pytest.param(s, e, id=i) for i, s, e in CASES])
def test_markdown_to_mrkdwn(source: str, expected: str) -> None:
    assert markdown_to_mrkdwn(source) == expected
