"""Approvals across a restart, on every surface. A person asks for a tool whose policy says
``confirm = true``; the approval card lands in their thread; the real ``gateway run`` process
is SIGKILLed while the request waits; a new process starts and does not run the parked turn
on its own; a press by someone else, and the asker's press of the same button in another
thread, are refused and run nothing; the asker's press in the thread approves, the tool runs
exactly once (counted by the tool itself, outside every gateway process), the answer lands in
that same thread and nowhere else, a second press is told it was already decided, and the card
is retired. What differs per surface (a callback query, a signed interaction, a relayed
action, the web chat's POST) lives in the drivers (testsupport/surfaces.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import asyncpg
import pytest

from testsupport.fakes.openai import FakeOpenAI, Step
from testsupport.harness import wait_for
from testsupport.paths import REPO
from testsupport.process import gateway_process
from testsupport.surfaces import Card, Press, Surface, model_env, surface

pytestmark = pytest.mark.slow

RESTART = {"name": "ops__restart_service", "arguments": {"service": "api"}, "id": "r1"}
ANSWER = "Restarted the api."


def _tools_file(tmp_path: Path, runs: Path) -> Path:
    """A real MCP server (testsupport/mcp_server.py, over stdio, one per gateway process)
    whose ``restart_service`` needs the asker's approval."""
    path = tmp_path / "tools.toml"
    path.write_text(
        f'[mcp.ops]\ncommand = ["{sys.executable}", "-m", "testsupport.mcp_server"]\n'
        f'env = {{ PYTHONPATH = "{REPO}", OPS_RUNS_FILE = "{runs}" }}\n'
        'include = ["restart_service"]\nconnect_timeout = 30\n\n'
        '[tools."ops.restart_service"]\ndomains = ["ops"]\noperation = "write"\n'
        'risk = "medium"\nconfirm = true\naliases = ["restart"]\n'
    )
    return path


def _env(database_url: str, fake: FakeOpenAI, tools: Path) -> dict[str, str]:
    # nothing waits for a lease to run out here (the waiting turn holds none); a short one
    # would be lost on a busy machine mid-turn, and the turn run twice
    return model_env(
        database_url, fake.base_url, GATEWAY_TOOLS_FILE=str(tools), GATEWAY_LEASE_SECONDS="10"
    )


async def _card_shown(s: Surface) -> Card | None:
    await s.refresh()
    return s.card()


async def _parked_with_its_card_sent(database_url: str) -> None:
    """A kill between the platform's answer to the card's send and the write of its id would
    send the card again after the restart (the known window of every send, README
    "Streaming"); this suite is about the waiting request, so it kills once the turn is
    parked on it and the card's delivery is recorded."""
    conn = await asyncpg.connect(database_url)
    try:

        async def ready() -> bool:
            return bool(
                await conn.fetchval(
                    "SELECT EXISTS (SELECT 1 FROM sessions s"
                    " JOIN tool_approvals a ON a.id = s.turn_parked_on"
                    " JOIN deliveries d ON d.message_id = a.card_message_id"
                    " WHERE d.status = 'sent')"
                )
            )

        await wait_for(ready, timeout=30, message="the turn never parked with its card sent")
    finally:
        await conn.close()


async def _answered(s: Surface) -> bool:
    """The answer is in the thread (where a surface streams, in the preview the turn opened
    before it asked, which is above the card)."""
    await s.refresh()
    return ANSWER in [m.text for m in s.in_thread()]


@pytest.mark.parametrize(
    "name", ["telegram", "slack", "mattermost", "discord", "matrix", "teams", "web"]
)
async def test_an_approval_waits_across_a_sigkill_and_runs_once_in_its_thread(
    name: str, database_url: str, fake: FakeOpenAI, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    tools = _tools_file(tmp_path, runs)
    async with surface(name) as s:
        env = {**_env(database_url, fake, tools), **s.process_env(), **s.card_env()}
        fake.script.append(Step(tool_calls=[RESTART]))
        async with gateway_process(env, tmp_path / "one.log") as gw:
            await s.attached(gw)
            await s.ask("please restart the api")
            shown = await wait_for(lambda: _card_shown(s), timeout=60, message="no card")
            assert shown is not None
            card = shown
            await _parked_with_its_card_sent(database_url)
            gw.kill()
            await gw.proc.wait()
        asked = len(fake.turn_requests)

        # the turn asks for the same call again after the decision and finds it approved
        fake.script.extend([Step(tool_calls=[RESTART]), Step(text=ANSWER)])
        async with gateway_process(env, tmp_path / "two.log") as gw:
            await s.attached(gw)
            refused = await s.press(card, Press(other_person=True))
            assert "only the person who asked" in refused
            elsewhere = await s.press(card, Press(other_thread=True))
            assert "not known here" in elsewhere
            # nothing ran: not the refused presses, not the parked turn at start-up
            assert not runs.exists() and len(fake.turn_requests) == asked
            assert s.card_open(card)

            await s.press(card)
            await wait_for(lambda: _answered(s), timeout=60, message="no answer")
            again = await s.press(card)
            assert again == "Already decided: approved."
            await wait_for(lambda: _retired(s, card), timeout=30, message="card not retired")
            await s.refresh()
            assert await gw.terminate() == 0
    assert runs.read_text().splitlines() == ["api"]  # once, after the approval
    # the thread holds the card and one answer, and the bot said nothing anywhere else
    in_thread = s.in_thread()
    [answer] = [m for m in in_thread if m.text == ANSWER]
    assert sorted(m.id for m in in_thread) == sorted([card.id, answer.id])
    assert sorted(m.id for m in s.anywhere()) == sorted(m.id for m in in_thread)


async def _retired(s: Surface, card: Card) -> bool:
    await s.refresh()
    return not s.card_open(card)
