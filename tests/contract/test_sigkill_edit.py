"""SIGKILL of the real ``gateway run`` process between a person's edit and its answer: the
question was answered, the person fixed a typo in it (``on_edit = "update"``), the edit is
stored and its answer is being written when the process dies. The restarted process takes
the rewrite over and the thread ends with exactly one answer - the first answer's own
message, now answering the edited text; the old text is never answered twice."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import pytest

from testsupport.fakes.openai import FakeOpenAI, Step
from testsupport.harness import wait_for
from testsupport.process import gateway_process
from testsupport.surfaces import Surface, model_env, surface

pytestmark = pytest.mark.slow

FIRST = "the first answer"


async def _shown(s: Surface) -> list[str]:
    await s.refresh()
    return [m.text for m in s.in_thread()]


async def _edit_stored(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        for _ in range(500):
            if await conn.fetchval("SELECT count(*) FROM message_annotations WHERE kind='edit'"):
                return
            await asyncio.sleep(0.02)
        raise AssertionError("the edit was never stored")
    finally:
        await conn.close()


def _asked(fake: FakeOpenAI) -> str:
    """The newest user message of the newest model request."""
    messages = fake.turn_requests[-1].body["messages"]
    return str([m for m in messages if m["role"] == "user"][-1]["content"])


@pytest.mark.parametrize(
    "name", ["web", "telegram", "slack", "mattermost", "discord", "matrix", "teams"]
)
async def test_sigkill_between_an_edit_and_its_answer_leaves_one_answer_to_the_edit(
    name: str, database_url: str, fake: FakeOpenAI, tmp_path: Path
) -> None:
    async with surface(name) as s:
        env = {
            **model_env(
                database_url,
                fake.base_url,
                GATEWAY_TOOLS="false",
                GATEWAY_LEASE_SECONDS="2",
                GATEWAY_STREAMING="false",
                GATEWAY_ON_EDIT="update",
            ),
            **s.process_env(),
        }
        # the question's answer; then the rewrite's, still being written at the kill
        fake.script.extend([Step(text=FIRST), Step(text="never delivered", delay=60)])
        async with gateway_process(env, tmp_path / "one.log") as gw:
            await s.attached(gw)
            await s.ask("how mnay legs")

            async def first() -> bool:
                return await _shown(s) == [FIRST]

            await wait_for(first, timeout=30, interval=0.1, message="the first answer")
            [answer] = s.in_thread()
            await s.edit_question("how many legs")
            await _edit_stored(database_url)
            await wait_for(lambda: len(fake.turn_requests) == 2, timeout=30, message="rewrite")
            gw.kill()
            await gw.proc.wait()
        assert "how many legs" in _asked(fake)

        # after the restart the fake model answers "re: <the newest user message>"
        async with gateway_process(env, tmp_path / "two.log") as gw:
            await s.attached(gw)

            async def rewritten() -> list[str]:
                shown = await _shown(s)
                return shown if shown != [FIRST] else []

            shown = await wait_for(rewritten, timeout=60, interval=0.1, message="the rewrite")
            await asyncio.sleep(1.0)  # nothing else follows
            shown = await _shown(s)
            final = s.in_thread()
            assert await gw.terminate() == 0
    assert len(shown) == 1, shown
    assert shown[0].startswith("re: ") and shown[0].endswith("how many legs"), shown
    if name != "web":  # the web chat lists the rewrite under its own number, in the old's place
        assert final[0].id == answer.id  # the first answer's message, rewritten in place
    assert "how many legs" in _asked(fake) and "mnay" not in _asked(fake)
    assert len(fake.turn_requests) == 3  # the question, the killed rewrite, its takeover
