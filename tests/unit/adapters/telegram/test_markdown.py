"""The agent's Markdown as Telegram entities: UTF-16 offsets from a parser's tree, splits that
keep entities valid, and the send path (text + entities, never parse_mode) against the fake
Bot API, which validates entities as the real one does."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.telegram import markdown
from adapters.telegram.transport import TelegramBot, TelegramTransport
from gateway.core.text import utf16_len
from gateway.turns.typing import hold_typing
from tests.unit.adapters.telegram.test_transport import target_of
from testsupport.fakes.telegram import FakeTelegram, _check_entities
from testsupport.harness import wait_for


def entity_texts(payload: dict[str, Any]) -> list[tuple[str, str]]:
    """``(type, covered text)`` per entity, slicing by UTF-16 units as a client would."""
    raw = payload["text"].encode("utf-16-le")
    out = []
    for e in payload["entities"]:
        covered = raw[2 * e["offset"] : 2 * (e["offset"] + e["length"])].decode("utf-16-le")
        out.append((e["type"], covered))
    return out


def test_inline_styles_become_entities() -> None:
    p = markdown.render("Use **bold**, *it*, ~~gone~~, `x = 1` and [docs](https://e.com/a).")
    payload = p.payload()
    assert payload["text"] == "Use bold, it, gone, x = 1 and docs."
    assert entity_texts(payload) == [
        ("bold", "bold"),
        ("italic", "it"),
        ("strikethrough", "gone"),
        ("code", "x = 1"),
        ("text_link", "docs"),
    ]
    assert payload["entities"][-1]["url"] == "https://e.com/a"


def test_offsets_count_utf16_units_after_emoji() -> None:
    # 😀 and 🎉 are outside the BMP: two UTF-16 units each, one Python character
    payload = markdown.render("😀😀 **b🎉ld** then `c😀de`").payload()
    assert payload["text"] == "😀😀 b🎉ld then c😀de"
    bold, code = payload["entities"]
    assert (bold["type"], bold["offset"], bold["length"]) == ("bold", 5, 5)
    assert (code["type"], code["offset"], code["length"]) == ("code", 16, 5)
    assert entity_texts(payload) == [("bold", "b🎉ld"), ("code", "c😀de")]
    assert _check_entities(payload["text"], payload["entities"], None) is None


def test_code_block_keeps_its_language_and_nothing_inside_is_formatted() -> None:
    payload = markdown.render("Run:\n\n```python\nprint('**not bold**')\n```").payload()
    assert payload["text"] == "Run:\n\nprint('**not bold**')"
    assert payload["entities"] == [{"type": "pre", "offset": 6, "length": 21, "language": "python"}]


def test_headings_lists_quotes_and_raw_html() -> None:
    md = (
        "# Title\n\n- one **b**\n  - nested\n- two\n\n3. three\n4. four\n\n"
        "> quoted *x*\n\n<script>alert(1)</script> [js](javascript:alert(1))"
    )
    payload = markdown.render(md).payload()
    assert payload["text"] == (
        "Title\n\n• one b\n   ◦ nested\n• two\n\n3. three\n4. four\n\nquoted x\n\n"
        "<script>alert(1)</script> [js](javascript:alert(1))"
    )
    assert entity_texts(payload) == [
        ("bold", "Title"),
        ("bold", "b"),
        ("blockquote", "quoted x"),
        ("italic", "x"),
    ]


def test_link_holding_code_keeps_the_link_only() -> None:
    payload = markdown.render("[`api`](https://e.com) **`x`**").payload()
    assert entity_texts(payload) == [("text_link", "api"), ("bold", "x"), ("code", "x")]
    assert _check_entities(payload["text"], payload["entities"], None) is None


def test_split_cuts_an_entity_into_both_parts() -> None:
    words = " ".join(f"w{i}😀" for i in range(400))  # one bold paragraph, ~2400 units
    parts = markdown.split(markdown.render(f"intro\n\n**{words}**"), 1000)
    assert len(parts) >= 3
    for p in parts:
        payload = p.payload()
        assert utf16_len(payload["text"]) <= 1000
        assert _check_entities(payload["text"], payload["entities"], None) is None
    # every part after the first is bold from its first to its last character
    for p in parts[1:]:
        payload = p.payload()
        assert [(e["type"], e["offset"], e["length"]) for e in payload["entities"]] == [
            ("bold", 0, utf16_len(payload["text"]))
        ]
    assert " ".join(" ".join(p.text for p in parts).split()) == f"intro {words}"


def test_split_code_block_keeps_language_on_both_sides() -> None:
    code = "\n".join(f"line_{i} = '🎉'" for i in range(200))
    parts = markdown.split(markdown.render(f"```py\n{code}\n```"), 1500)
    assert len(parts) >= 2
    for p in parts:
        [entity] = p.payload()["entities"]
        assert entity["type"] == "pre" and entity["language"] == "py"
        assert entity["offset"] == 0 and entity["length"] == utf16_len(p.text)


def test_outbox_rows_round_trip_and_legacy_rows_stay_plain() -> None:
    [row] = markdown.to_parts("**hi** 😀", 4096)
    assert json.loads(row) == {
        "text": "hi 😀",
        "entities": [{"type": "bold", "offset": 0, "length": 2}],
    }
    assert markdown.decode(row) == ("hi 😀", [{"type": "bold", "offset": 0, "length": 2}])
    assert markdown.decode("**legacy** plain row") == ("**legacy** plain row", [])
    assert markdown.decode('{"text": "json-looking reply"}') == (
        '{"text": "json-looking reply"}',
        [],
    )


def test_fake_refuses_invalid_entities() -> None:
    text = "a😀b"  # 4 UTF-16 units
    ok = [{"type": "bold", "offset": 1, "length": 2}]
    assert _check_entities(text, ok, None) is None
    assert _check_entities(text, ok, "MarkdownV2") is not None
    assert _check_entities(text, [{"type": "bold", "offset": 2, "length": 3}], None)  # beyond
    assert _check_entities(text, [{"type": "bold", "offset": 2, "length": 1}], None)  # pair
    crossing = [
        {"type": "bold", "offset": 0, "length": 2},
        {"type": "italic", "offset": 1, "length": 3},
    ]
    assert _check_entities(text, crossing, None)
    assert _check_entities(text, [{"type": "text_link", "offset": 0, "length": 1}], None)


@pytest.fixture
async def transport(fake: FakeTelegram) -> AsyncIterator[TelegramTransport]:
    t = TelegramTransport(TelegramBot(fake.token, base_url=fake.base_url))
    yield t
    await t.close()


async def test_send_carries_entities_into_the_topic(
    fake: FakeTelegram, transport: TelegramTransport
) -> None:
    forum = fake.forum()
    topic = fake.create_topic(forum, "A")
    target = target_of(fake, fake.user_says(forum, "plan?", topic=topic))
    reply = "## Plan 🎉\n\n1. **first** step\n2. run `make`\n\n```sh\nmake test\n```"
    rows = transport.parts(reply)
    assert len(rows) == 1
    await transport.send(target, rows[0], idempotency_key="k")
    params = fake.calls("sendMessage")[-1].params
    assert "parse_mode" not in params
    [sent] = fake.sent_to(forum, topic)
    assert sent.text == "Plan 🎉\n\n1. first step\n2. run make\n\nmake test"
    assert entity_texts({"text": sent.text, "entities": sent.entities}) == [
        ("bold", "Plan 🎉"),
        ("bold", "first"),
        ("code", "make"),
        ("pre", "make test"),
    ]


async def test_long_reply_splits_into_valid_parts_the_fake_accepts(
    fake: FakeTelegram, transport: TelegramTransport
) -> None:
    chat = fake.group()
    target = target_of(fake, fake.user_says(chat, "go"))
    body = " ".join(f"*word{i}* 🧪" for i in range(1200))  # > 4096 UTF-16 units, all italic
    rows = transport.parts(f"**Report**\n\n{body}")
    assert len(rows) >= 3
    for i, row in enumerate(rows):
        await transport.send(target, row, idempotency_key=f"k{i}")
    sent = fake.sent_to(chat, None)
    assert len(sent) == len(rows)
    for s in sent:
        assert utf16_len(s.text) <= 4096
        assert s.entities and _check_entities(s.text, s.entities, None) is None
    assert "*" not in "".join(s.text for s in sent)


async def test_legacy_plain_row_is_sent_as_text(
    fake: FakeTelegram, transport: TelegramTransport
) -> None:
    chat = fake.group()
    target = target_of(fake, fake.user_says(chat, "go"))
    await transport.send(target, "**stored before entities**", idempotency_key="k")
    [sent] = fake.sent_to(chat, None)
    assert sent.text == "**stored before entities**" and sent.entities == []
    assert "entities" not in fake.calls("sendMessage")[-1].params


async def test_typing_is_renewed_in_the_topic_while_held(
    fake: FakeTelegram, transport: TelegramTransport
) -> None:
    forum = fake.forum()
    topic = fake.create_topic(forum, "A")
    target = target_of(fake, fake.user_says(forum, "slow question", topic=topic))
    assert transport.typing_interval < 5  # a chat action lasts "5 seconds or less"
    transport.typing_interval = 0.05
    holder = asyncio.create_task(hold_typing(transport, target))
    await wait_for(lambda: len(fake.typing) >= 3, timeout=5)
    holder.cancel()
    await asyncio.gather(holder, return_exceptions=True)
    assert {t for t in fake.typing} == {(forum.id, topic, "typing")}


def test_a_reply_that_renders_empty_is_sent_literally() -> None:
    assert [markdown.decode(r) for r in markdown.to_parts("[](https://e.com)", 4096)] == [
        ("[](https://e.com)", [])
    ]
    assert markdown.to_parts("  \n ", 4096) == []


def test_odd_code_languages_are_left_out() -> None:
    [entity] = markdown.render("```{.python .numberLines}\nx\n```").payload()["entities"]
    assert entity == {"type": "pre", "offset": 0, "length": 1}


async def test_refused_entities_fall_back_to_plain_text_once(
    fake: FakeTelegram, transport: TelegramTransport
) -> None:
    chat = fake.group()
    target = target_of(fake, fake.user_says(chat, "go"))
    fake.fail_next(
        "sendMessage", status=400, description="Bad Request: can't parse entities: wrong url"
    )
    [row] = transport.parts("see [docs](https://e.com) **now**")
    await transport.send(target, row, idempotency_key="k")
    first, second = fake.calls("sendMessage")
    assert "entities" in first.params and "entities" not in second.params
    [sent] = fake.sent_to(chat, None)
    assert sent.text == "see docs now" and sent.entities == []


_PIECES = [
    "**b**", "*i*", "~~s~~", "`c`", "[l](https://e.com/x)", "😀", "🎉🎉", "é", " ", "\n",
    "\n\n", "- ", "1. ", "> ", "# ", "```py\n", "```\n", "<b>", "&amp;", "|a|b|\n|-|-|\n",
    "word", "longerword", "\\*", "_", "__u__", "***bi***",
]  # fmt: skip


@pytest.mark.untraced  # hypothesis: see tests/integration/http/test_fuzz_routes.py
@settings(max_examples=150, deadline=None)
@given(
    pieces=st.lists(st.sampled_from(_PIECES), min_size=1, max_size=60),
    limit=st.integers(min_value=8, max_value=120),
)
def test_any_markdown_renders_and_splits_into_parts_the_api_accepts(
    pieces: list[str], limit: int
) -> None:
    source = "".join(pieces)
    whole = markdown.render(source)
    payload = whole.payload()
    assert _check_entities(payload["text"], payload["entities"], None) is None
    for part in markdown.split(whole, limit):
        p = part.payload()
        assert p["text"] and utf16_len(p["text"]) <= limit
        assert p["text"] == p["text"].strip()
        assert _check_entities(p["text"], p["entities"], None) is None
    for row in markdown.to_parts(source, limit):
        text, entities = markdown.decode(row)
        assert utf16_len(text) <= limit
        assert _check_entities(text, entities, None) is None
