"""Approvals on Mattermost: the card is a post in the asker's thread; ✅ / ❌
reactions on it decide, and with ``MATTERMOST_ACTIONS_URL`` its Approve / Deny buttons too
(the server POSTs the press to the gateway, the context HMAC-signed); someone else's reaction
or press changes nothing; the card is edited to show the decision. A press on another post,
a double press and a restart while the request waits: tests/contract/test_approvals.py."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp

from adapters.mattermost.adapter import MattermostAdapter
from tests.integration.tools.test_approvals_telegram import RESTART, approvals_gateway, install
from testsupport.fakes.mattermost import FakeMattermost
from testsupport.fakes.openai import FakeOpenAI, Step
from testsupport.harness import wait_for
from testsupport.mattermost import connected, make_config


async def test_mattermost_reactions_decide_only_by_the_asker_and_the_card_is_edited(
    database_url: str, fake: FakeOpenAI, tmp_path: Path
) -> None:
    runs: list[Mapping[str, Any]] = []
    # the turn parks on the request; after the decision it runs again and the model
    # asks for the same call, which finds the decided request
    fake.script.extend(
        [
            Step(tool_calls=[RESTART]),
            Step(tool_calls=[RESTART]),
            Step(text="OK, I will not restart it."),
        ]
    )
    async with FakeMattermost() as mm:
        adapter = MattermostAdapter(make_config(mm))
        async with approvals_gateway(
            database_url,
            fake,
            tmp_path,
            adapter,
        ) as gw:
            install(gw, runs)
            await connected(adapter)
            root = await mm.user_posts(mm.town_square, "restart the api", mention_bot=True)

            def cards() -> list[dict[str, Any]]:
                return [
                    p
                    for p in mm.posts_in(mm.town_square, root_id=root["id"], by=mm.bot)
                    if "React with" in p["message"]
                ]

            [card] = await wait_for(cards)
            assert card["root_id"] == root["id"]  # in the asker's thread
            await mm.react(card["id"], "white_check_mark", user="bob")  # not the asker
            await mm.react(card["id"], "+1", user="alice")  # feedback, not a decision
            await mm.react(card["id"], "x", user="alice")  # the asker denies
            await wait_for(
                lambda: any(
                    p["message"] == "OK, I will not restart it."
                    for p in mm.posts_in(mm.town_square, root_id=root["id"], by=mm.bot)
                ),
                timeout=15,
            )
            await wait_for(lambda: mm.posts[card["id"]]["message"].startswith("❌ Denied"))
            async with gw.store.db.connection() as conn:
                row = await conn.fetchrow("SELECT status, decided_by, version FROM tool_approvals")
    assert runs == []
    assert row is not None and row["status"] == "denied" and row["version"] == 2
    assert row["decided_by"] == f"mattermost:{mm.alice.id}"
    denied = fake.turn_requests[-1].body["messages"][-1]
    assert denied["role"] == "tool" and denied["content"].startswith("not approved (denied)")


async def _card_with_buttons(mm: FakeMattermost, root: dict[str, Any]) -> dict[str, Any]:
    def cards() -> list[dict[str, Any]]:
        return [
            p
            for p in mm.posts_in(mm.town_square, root_id=root["id"], by=mm.bot)
            if p["props"].get("attachments")
        ]

    [card] = await wait_for(cards)
    return card


def _context(card: dict[str, Any], action: str) -> dict[str, Any]:
    [attachment] = card["props"]["attachments"]
    [button] = [a for a in attachment["actions"] if a["id"] == action]
    context = button["integration"]["context"]
    assert isinstance(context, dict)
    return dict(context)


async def _post(url: str, body: dict[str, Any]) -> int:
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as resp:
        return resp.status


async def test_mattermost_buttons_post_back_signed_and_only_the_asker_decides(
    database_url: str, fake: FakeOpenAI, tmp_path: Path
) -> None:
    """Interactive buttons (``MATTERMOST_ACTIONS_URL``): the server POSTs the press to the
    gateway; a forged or moved context is refused before the core sees it; the core refuses
    another user; the asker's press approves; the card loses its buttons and shows the
    decision."""
    runs: list[Mapping[str, Any]] = []
    # the turn parks on the request; after the decision it runs again and the model
    # asks for the same call, which finds the decided request
    fake.script.extend(
        [Step(tool_calls=[RESTART]), Step(tool_calls=[RESTART]), Step(text="Restarted the api.")]
    )
    async with FakeMattermost() as mm:
        # the route is served when the URL is set; the gateway's port is known once it runs
        adapter = MattermostAdapter(make_config(mm, actions_url="http://gateway.invalid/"))
        async with approvals_gateway(
            database_url,
            fake,
            tmp_path,
            adapter,
        ) as gw:
            url = f"{gw.url}mattermost/actions"
            adapter.transport.actions_url = url
            install(gw, runs)
            await connected(adapter)
            root = await mm.user_posts(mm.town_square, "restart the api", mention_bot=True)
            card = await _card_with_buttons(mm, root)
            assert card["root_id"] == root["id"] and "React with" in card["message"]
            approve = _context(card, "approve")
            press = {
                "user_id": mm.alice.id,
                "channel_id": mm.town_square.id,
                "post_id": card["id"],
                "team_id": mm.team_id,
            }
            # forged: the deny button's signature on an approve, a made-up signature, the
            # context moved to another channel, a non-ASCII signature
            deny_sig = _context(card, "deny")["sig"]
            assert await _post(url, press | {"context": approve | {"sig": deny_sig}}) == 403
            assert await _post(url, press | {"context": approve | {"sig": "0" * 64}}) == 403
            moved = press | {"channel_id": mm.private.id}
            assert await _post(url, moved | {"context": approve}) == 403
            assert await _post(url, press | {"context": approve | {"sig": "é" * 64}}) == 403
            assert await _post(url, {"context": "x"}) == 403
            # bob is not the asker: refused politely, only bob sees it (a press on another
            # post, a double press: tests/contract/test_approvals.py)
            status, answer = await mm.press_button(card["id"], "approve", user="bob")
            assert status == 200 and answer["ephemeral_text"].startswith("Sorry, only")
            assert [e.user_id for e in mm.ephemeral] == [mm.bob.id]
            assert runs == []
            status, answer = await mm.press_button(card["id"], "approve", user="alice")
            assert (status, answer["ephemeral_text"]) == (200, "Approved. Running it now.")
            await wait_for(
                lambda: any(
                    p["message"] == "Restarted the api."
                    for p in mm.posts_in(mm.town_square, root_id=root["id"], by=mm.bot)
                ),
                timeout=15,
            )
            await wait_for(lambda: mm.posts[card["id"]]["message"].startswith("✅ Approved"))
            assert mm.posts[card["id"]]["props"].get("attachments") == []  # buttons gone
            async with gw.store.db.connection() as conn:
                row = await conn.fetchrow("SELECT status, decided_by, version FROM tool_approvals")
    assert runs == [{"service": "api"}]
    assert row is not None and row["status"] == "approved" and row["version"] == 2
    assert row["decided_by"] == f"mattermost:{mm.alice.id}"
    assert [r[2] for r in mm.action_requests] == [200, 200]


async def test_mattermost_deny_button_tells_the_model_not_approved(
    database_url: str, fake: FakeOpenAI, tmp_path: Path
) -> None:
    runs: list[Mapping[str, Any]] = []
    # the turn parks on the request; after the decision it runs again and the model
    # asks for the same call, which finds the decided request
    fake.script.extend(
        [
            Step(tool_calls=[RESTART]),
            Step(tool_calls=[RESTART]),
            Step(text="OK, I will not restart it."),
        ]
    )
    async with FakeMattermost() as mm:
        adapter = MattermostAdapter(make_config(mm, actions_url="http://gateway.invalid/"))
        async with approvals_gateway(
            database_url,
            fake,
            tmp_path,
            adapter,
        ) as gw:
            adapter.transport.actions_url = f"{gw.url}mattermost/actions"
            install(gw, runs)
            await connected(adapter)
            root = await mm.user_posts(mm.town_square, "restart the api", mention_bot=True)
            card = await _card_with_buttons(mm, root)
            status, answer = await mm.press_button(card["id"], "deny", user="alice")
            assert (status, answer["ephemeral_text"]) == (200, "Denied. It will not run.")
            await wait_for(lambda: mm.posts[card["id"]]["message"].startswith("❌ Denied"))
            await wait_for(
                lambda: any(
                    p["message"] == "OK, I will not restart it."
                    for p in mm.posts_in(mm.town_square, root_id=root["id"], by=mm.bot)
                ),
                timeout=15,
            )
    assert runs == []
    denied = fake.turn_requests[-1].body["messages"][-1]
    assert denied["role"] == "tool" and denied["content"].startswith("not approved (denied)")
