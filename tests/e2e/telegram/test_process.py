"""The real ``gateway run`` process against the fake Bot API: SIGKILL in the middle of a turn,
messages sent while it is down, restart -> every question answered exactly once, each in its
own topic."""

from __future__ import annotations

from pathlib import Path

import pytest

from testsupport.fakes.telegram import FakeTelegram
from testsupport.process import gateway_process

pytestmark = pytest.mark.slow

BOT = "@GatewayTestBot"


async def test_sigkill_mid_turn_then_restart_answers_each_topic_once(
    database_url: str, fake: FakeTelegram, tmp_path: Path
) -> None:
    forum = fake.forum()
    topic_a, topic_b = fake.create_topic(forum, "A"), fake.create_topic(forum, "B")
    base = {
        "DATABASE_URL": database_url,
        "TELEGRAM_BOT_TOKEN": fake.token,
        "TELEGRAM_API_BASE_URL": fake.base_url,
        "GATEWAY_LEASE_SECONDS": "2",
        "GATEWAY_POLL_SECONDS": "0.2",
        "GATEWAY_WEB_CHAT": "false",
    }
    slow = {**base, "AGENT": "testsupport.agents:SlowAgent"}
    async with gateway_process(slow, tmp_path / "one.log") as gw:
        fake.user_says(forum, f"{BOT} question in A", topic=topic_a)
        # typing in topic A means the turn is running inside the agent call
        await fake.wait_until(
            lambda: (forum.id, topic_a, "typing") in fake.typing,
            within=30,
            what="the turn to start",
        )
        gw.kill()
        await gw.proc.wait()
    assert fake.sent == []

    fake.user_says(forum, f"{BOT} question in B, sent while down", topic=topic_b)

    async with gateway_process(base, tmp_path / "two.log") as gw:
        await fake.wait_until(lambda: len(fake.sent) == 2, within=30, what="both answers")
        assert await gw.terminate() == 0
    assert [s.text for s in fake.sent_to(forum, topic_a)] == [f"echo: {BOT} question in A"]
    assert [s.text for s in fake.sent_to(forum, topic_b)] == [
        f"echo: {BOT} question in B, sent while down"
    ]
    assert fake.sent_to(forum, None) == []
    assert fake.token not in (tmp_path / "one.log").read_text() + (tmp_path / "two.log").read_text()
