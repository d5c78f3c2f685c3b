"""Poison input on every surface: text PostgreSQL cannot store (NUL, a lone surrogate) never
blocks what comes behind it. Each surface sends the poison its platform carries (a real Matrix
homeserver passes NULs on, but refuses a lone surrogate itself). A person posts a poison
message, then a normal one: the platform got its success for both (no redelivery loop), the
normal one is answered in its place, and the poison one is either stored cleaned and noted, or
- in the web chat, where the person sees the refusal - refused with its reason and kept as a
dead letter."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from session_store.store import Store
from testsupport.harness import running_gateway
from testsupport.live_surfaces import NAMES, live_surface


async def _user_messages(store: Store) -> list[str]:
    async with store.db.connection() as conn:
        rows = await conn.fetch("SELECT content FROM messages WHERE role = 'user' ORDER BY id")
    return [r["content"] for r in rows]


async def _cleaned(store: Store) -> list[list[str]]:
    """What was cleaned of each person's message (its metadata's ``sanitized`` notes)."""
    async with store.db.connection() as conn:
        rows = await conn.fetch(
            "SELECT metadata->'sanitized' AS notes FROM messages WHERE role = 'user' ORDER BY id"
        )
    return [list(r["notes"] or []) for r in rows]


async def _dead_letters(store: Store) -> list[Any]:
    async with store.db.connection() as conn:
        return list(
            await conn.fetch(
                "SELECT platform, reason FROM inbound_events WHERE status = 'rejected'"
            )
        )


@pytest.mark.parametrize("name", NAMES)
async def test_a_poison_message_never_blocks_the_next_one(name: str, database_url: str) -> None:
    async with live_surface(name) as s:
        async with running_gateway(
            database_url, adapters=s.adapters(), web_chat=name == "web", **s.settings
        ) as gw:
            await s.attached(gw)
            bad = await s.say(s.poison)
            good = await s.say("normal one")
            expected = "echo: " + s.stored_form("normal one")
            for _ in range(150):
                await s.refresh(good)
                # the web chat's refusal of the poison one (a 422, checked below) is already
                # in hand: never "acknowledged", it is not waited for
                bad_done = s.refuses_unstorable_text or s.acknowledged(bad)
                if expected in s.answers(good) and s.acknowledged(good) and bad_done:
                    break
                await asyncio.sleep(0.1)
            stored = await _user_messages(gw.store)
            cleaned = await _cleaned(gw.store)
            dead = await _dead_letters(gw.store)
        assert s.answers(good)[-1] == expected
        # the turn after both answered the newest: at most one answer each, none twice
        assert len(s.all_answers()) <= 2
        assert s.acknowledged(good)
    if s.refuses_unstorable_text:
        refusal = bad[1]
        assert refusal.status_code == 422, refusal.text
        assert "NUL" in refusal.json()["error"] or "surrogate" in refusal.json()["error"]
        assert stored == ["normal one"] and [d["platform"] for d in dead] == [name]
    else:
        assert s.acknowledged(bad)
        assert stored == [s.stored_form(s.cleaned), s.stored_form("normal one")]
        # the poison reached the gateway as sent (no platform cleaned it first): it did
        assert "nul_removed" in cleaned[0]
