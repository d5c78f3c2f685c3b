"""SIGKILL of the real ``gateway run`` process in the middle of a streamed answer that had
already overflowed into a second message: both previews stay in the topic; the restarted
process takes the turn over, continues in those same messages and finishes exactly once - its
shorter answer edits the first preview in place, the surplus second preview is deleted, and
the text is never sent again."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import pytest

from testsupport.fakes.openai import FakeOpenAI, Step
from testsupport.fakes.telegram import FakeTelegram
from testsupport.process import gateway_process

pytestmark = pytest.mark.slow

BOT = "@GatewayTestBot"
SLOW = " ".join(f"slow{n}" for n in range(950))  # about 7,400 characters: two messages
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
        fake.script.append(Step(text=SLOW, chunk_chars=75, chunk_delay=0.25))

        def bot_messages() -> list[dict[str, object]]:
            return [
                m
                for m in tg.messages_in(forum, topic)
                if (m.get("from") or {}).get("id") == tg.bot.id
            ]

        async with gateway_process(env, tmp_path / "one.log") as gw:
            tg.user_says(forum, f"{BOT} a long question", topic=topic)
            # the first preview grew by edits and the text went on in a second: mid-stream
            await tg.wait_until(
                lambda: len(bot_messages()) == 2 and bool(tg.edits),
                within=60,
                what="the second preview",
            )
            # and its id is stored: a kill between the platform's answer and that write
            # leaves a stray partial message no Bot API call can find again (a known window,
            # README "Streaming"); this test is about what recovery does with stored previews
            conn = await asyncpg.connect(database_url)
            try:
                for _ in range(200):
                    if await conn.fetchval("SELECT count(*) FROM stream_previews") == 2:
                        break
                    await asyncio.sleep(0.02)
            finally:
                await conn.close()
            gw.kill()
            await gw.proc.wait()
        orphan, second = bot_messages()
        shown = f"{orphan['text']} {second['text']}"
        assert SLOW.startswith(shown.rstrip()) and shown != SLOW

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
        assert tg.deleted == [(forum.id, second["message_id"])]
        assert len(tg.sent_to(forum, topic)) == 2  # the two previews; nothing sent again
        assert tg.sent_to(forum, other) == [] and tg.sent_to(forum, None) == []
        assert len(fake.turn_requests) == 2
