"""Edits on Telegram, end to end (the fake's ``edited_message`` -> the real core ->
``editMessageText`` on the fake): an edited question's answer is edited in place after the
answer (``on_edit = "update"``); with ``on_edit = "context"`` nothing is answered again.
Telegram reports no deletions to bots."""

from __future__ import annotations

import pytest

from adapters.telegram.adapter import TelegramAdapter
from testsupport.fakes.telegram import FakeTelegram
from testsupport.harness import running_gateway, wait_for
from testsupport.telegram import telegram_settings

BOT = "@GatewayTestBot"


@pytest.mark.parametrize("on_edit", ["update", "context"])
async def test_an_edited_question_after_its_answer(
    database_url: str, fake: FakeTelegram, on_edit: str
) -> None:
    adapter = TelegramAdapter(telegram_settings(fake), poll_timeout=1, backoff_initial=0.05)
    alice = fake.user("Alice")
    dm = fake.private(alice)
    async with running_gateway(
        database_url, adapters=[adapter], web_chat=False, GATEWAY_ON_EDIT=on_edit
    ):
        asked = fake.user_says(dm, "how mnay legs")
        await fake.wait_until(lambda: len(fake.sent) == 1, within=10, what="the reply")
        fake.user_edits(dm, asked, "how many legs")
        fake.user_says(dm, "and arms")
        await fake.wait_until(lambda: len(fake.sent) == 2, within=10, what="the next reply")
        if on_edit == "update":
            await wait_for(lambda: fake.edits, message="the answer edited")
    first = fake.sent[0]
    if on_edit == "update":
        assert [(e[1], e[2]) for e in fake.edits] == [(first.message_id, "echo: how many legs")]
    else:
        assert fake.edits == []
    assert [s.text for s in fake.sent][1] == "echo: and arms"
