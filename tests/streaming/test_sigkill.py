"""SIGKILL of the real ``gateway run`` process in the middle of a streamed answer: the
preview stays in the topic; the restarted process takes the turn over, continues in that
same message and finishes it exactly once - one bot message in the topic, with the final
text, and no second send of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.fakes.openai import FakeOpenAI, Step
from benchmarks.fakes.telegram import FakeTelegram
from tests.e2e.process import gateway_process

pytestmark = pytest.mark.slow

BOT = "@GatewayTestBot"
SLOW = " ".join(f"slow{n}" for n in range(200))
FINAL = "The answer, written again after the restart: " + " ".join(f"w{n}" for n in range(40))


async def test_sigkill_mid_stream_the_thread_ends_with_exactly_one_answer(
    database_url: str, fake: FakeOpenAI, tmp_path: Path
) -> None:
    async with FakeTelegram() as tg:
        forum = tg.forum("Team")
        topic = tg.create_topic(forum, "Questions")
        other = tg.create_topic(forum, "Other")
        env = {
            "DATABASE_URL": database_url,
            "TELEGRAM_BOT_TOKEN": tg.token,
            "TELEGRAM_API_BASE_URL": tg.base_url,
            "AGENT": "openai",
            "OPENAI_BASE_URL": fake.base_url,
            "OPENAI_API_KEY": "test-key",
            "AGENT_MODEL": "small",
            "GATEWAY_TOOLS": "false",
            "GATEWAY_LEASE_SECONDS": "2",
            "GATEWAY_POLL_SECONDS": "0.2",
            "GATEWAY_WEB_CHAT": "false",
            "GATEWAY_STREAM_EDIT_SECONDS": "0.2",
        }
        fake.script.append(Step(text=SLOW, chunk_chars=6, chunk_delay=0.2))

        def bot_messages() -> list[dict[str, object]]:
            return [
                m
                for m in tg.messages_in(forum, topic)
                if (m.get("from") or {}).get("id") == tg.bot.id
            ]

        async with gateway_process(env, tmp_path / "one.log") as gw:
            tg.user_says(forum, f"{BOT} a long question", topic=topic)
            # the preview is in the topic and has grown by an edit: mid-stream
            await tg.wait_until(
                lambda: bool(bot_messages()) and len(tg.edits) >= 1,
                within=30,
                what="the preview to grow",
            )
            gw.kill()
            await gw.proc.wait()
        [orphan] = bot_messages()
        assert SLOW.startswith(str(orphan["text"]).rstrip()) and orphan["text"] != SLOW

        fake.script.append(Step(text=FINAL, chunk_chars=20, chunk_delay=0.05))
        async with gateway_process(env, tmp_path / "two.log") as gw:
            await tg.wait_until(
                lambda: [m["text"] for m in bot_messages()] == [FINAL],
                within=30,
                what="the final answer",
            )
            assert await gw.terminate() == 0
        # the orphan preview became the answer: same message, one sendMessage in all
        [final] = bot_messages()
        assert final["message_id"] == orphan["message_id"]
        assert len(tg.sent_to(forum, topic)) == 1
        assert tg.sent_to(forum, other) == [] and tg.sent_to(forum, None) == []
        assert len(fake.turn_requests) == 2
