"""Slack formatting and progress against the fake Web API: code fences go out as rich-text
preformatted blocks with the mrkdwn text kept as the fallback, and the thread status
(``assistant.threads.setStatus``) is held while a turn runs and cleared at the end."""

from __future__ import annotations

import asyncio

from adapters.slack.blocks import MAX_SECTION_TEXT, answer_blocks, code_blocks, feedback_block
from adapters.slack.transport import THINKING_STATUS, SlackTransport, make_web_client
from gateway.core.domain import ReplyTarget
from gateway.turns.typing import hold_typing
from testsupport.fakes.slack import BOT_TOKEN, HUMAN, TEAM_ID, FakeSlack
from testsupport.harness import wait_for


def transport_for(fake: FakeSlack) -> SlackTransport:
    return SlackTransport(make_web_client(token=BOT_TOKEN, base_url=fake.api_url, timeout=5))


def target(channel: str, thread: str | None) -> ReplyTarget:
    return ReplyTarget(platform="slack", scope=TEAM_ID, chat_id=channel, thread_id=thread)


REPLY = "Try **this** <now>:\n\n```python\nif a < b & c:\n    pass\n```\n\nThen `run` it."


async def test_code_goes_out_as_preformatted_blocks_with_text_fallback(fake: FakeSlack) -> None:
    transport = transport_for(fake)
    root, _ = fake.seed_thread("C0GENERAL", [(HUMAN, "how?")], root_text="root")
    [row] = transport.parts(REPLY)
    await transport.send(target("C0GENERAL", root), row, idempotency_key="d1:0")
    (posted,) = fake.bot_posts("C0GENERAL")
    assert posted.thread_ts == root
    assert posted.text == row and "```" in row  # mrkdwn fallback: notifications, old clients
    assert posted.blocks == [
        {"type": "section", "text": {"type": "mrkdwn", "text": "Try *this* &lt;now&gt;:"}},
        {
            "type": "rich_text",
            "elements": [
                {
                    "type": "rich_text_preformatted",
                    "elements": [{"type": "text", "text": "if a < b & c:\n    pass"}],
                }
            ],
        },
        {"type": "section", "text": {"type": "mrkdwn", "text": "Then `run` it."}},
        feedback_block(),
    ]


async def test_plain_reply_is_its_text_with_the_feedback_buttons_under_it(
    fake: FakeSlack,
) -> None:
    transport = transport_for(fake)
    await transport.send(target("C0GENERAL", None), "*just text*", idempotency_key="k")
    (call,) = fake.calls_to("chat.postMessage")
    assert call.params["text"] == "*just text*"  # the notification and fallback text
    assert fake.bot_posts("C0GENERAL")[0].blocks == [
        {"type": "section", "text": {"type": "mrkdwn", "text": "*just text*"}},
        feedback_block(),
    ]
    buttons = feedback_block()["elements"][0]
    assert buttons["type"] == "feedback_buttons"
    assert {buttons["positive_button"]["value"], buttons["negative_button"]["value"]} == {
        "good",
        "bad",
    }


def test_a_long_answer_is_cut_into_sections_within_block_kit_limits() -> None:
    line = "x" * 1000
    text = "\n".join([line] * 7)  # two lines a section (a third would pass 3,000)
    blocks = answer_blocks(text)
    assert blocks is not None and blocks[-1] == feedback_block()
    sections = [b["text"]["text"] for b in blocks[:-1]]
    assert all(len(s) <= MAX_SECTION_TEXT for s in sections) and len(sections) == 4
    assert "\n".join(sections) == text
    one_line = "y" * 7000  # a line longer than a section is cut where it must be
    blocks = answer_blocks(one_line)
    assert blocks is not None and "".join(b["text"]["text"] for b in blocks[:-1]) == one_line


def test_blocks_stay_within_block_kit_limits() -> None:
    long_prose = "word " * (MAX_SECTION_TEXT // 4)
    assert code_blocks(f"{long_prose}\n```\ncode\n```") is None  # text alone, as before
    many = "\n".join("x\n```\ny\n```" for _ in range(30))  # 60 blocks > 50
    assert code_blocks(many) is None
    # a part split inside a code block: the rest is code
    assert code_blocks("intro\n```\nline 1\nline 2") == [
        {"type": "section", "text": {"type": "mrkdwn", "text": "intro"}},
        {
            "type": "rich_text",
            "elements": [
                {
                    "type": "rich_text_preformatted",
                    "elements": [{"type": "text", "text": "line 1\nline 2"}],
                }
            ],
        },
    ]


async def test_refused_blocks_fall_back_to_text_once(fake: FakeSlack) -> None:
    fake.fail_next("chat.postMessage", error="invalid_blocks")
    transport = transport_for(fake)
    [row] = transport.parts(REPLY)
    await transport.send(target("C0GENERAL", None), row, idempotency_key="k")
    first, second = fake.calls_to("chat.postMessage")
    assert "blocks" in first.params and "blocks" not in second.params
    (posted,) = fake.bot_posts("C0GENERAL")
    assert posted.text == row and posted.blocks is None


async def test_thread_status_is_renewed_and_cleared(fake: FakeSlack) -> None:
    transport = transport_for(fake)
    transport.typing_interval = 0.05
    root, _ = fake.seed_thread("C0GENERAL", [(HUMAN, "q")], root_text="root")
    holder = asyncio.create_task(hold_typing(transport, target("C0GENERAL", root)))
    await wait_for(lambda: len(fake.statuses) >= 3, timeout=5)
    holder.cancel()
    await asyncio.gather(holder, return_exceptions=True)
    assert all(s == ("C0GENERAL", root, THINKING_STATUS) for s in fake.statuses[:-1])
    assert fake.statuses[-1] == ("C0GENERAL", root, "")  # cleared at the end


async def test_thread_status_unavailable_is_not_retried_nor_cleared(fake: FakeSlack) -> None:
    fake.set_status_error = "missing_scope"
    transport = transport_for(fake)
    root, _ = fake.seed_thread("C0GENERAL", [(HUMAN, "q")], root_text="root")
    t = target("C0GENERAL", root)
    await transport.typing(t)
    await transport.typing(t)
    await transport.clear_typing(t)
    assert len(fake.calls_to("assistant.threads.setStatus")) == 1
    assert fake.statuses == []


async def test_no_status_outside_a_thread(fake: FakeSlack) -> None:
    transport = transport_for(fake)
    await transport.typing(target("D0DM", None))
    await transport.clear_typing(target("D0DM", None))
    assert fake.calls_to("assistant.threads.setStatus") == []
