"""Reconnects while the adapter is still busy (ingress fuzzing): a frame over the
client's 1 MiB limit closes the socket with 1009, but the frames received before it are still
queued in the client and handled one by one. The next connection must not wait for that
backlog: the server would see no connection, and push nothing live, for as long as it lasts."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from adapters.mattermost.adapter import MattermostAdapter
from testsupport.fakes.mattermost import FakeMattermost
from testsupport.harness import RecordingIntake
from testsupport.mattermost import connected, make_config, wait_until

OVER_LIMIT = '{"event": "posted", "data": {"post": "' + "y" * (2**20 + 1024) + '"}}'


def live(intake: RecordingIntake, post_id: str) -> bool:
    """``post_id`` was submitted from a websocket frame (not found by reconciliation)."""
    return any(
        raw is not None and raw.get("event") == "posted"
        for e, raw in intake.submitted
        if getattr(e, "message_id", None) == post_id
    )


async def test_reconnects_at_once_after_1009_while_frames_are_still_queued(
    fake: FakeMattermost, running: Any
) -> None:
    intake = RecordingIntake()
    adapter = MattermostAdapter(make_config(fake))
    await running(adapter, intake)
    await connected(adapter)
    stream = adapter.stream
    assert stream is not None

    # the adapter is busy: every submit waits (a store working through a backlog)
    intake.gate = asyncio.Event()
    first = await fake.user_posts(fake.town_square, "first", mention_bot=True)
    await wait_until(lambda: intake.in_submit == 1, message="first post in hand")
    queued = [
        await fake.user_posts(fake.town_square, f"queued {n}", mention_bot=True) for n in range(3)
    ]
    await fake.push_raw(OVER_LIMIT)  # the client closes with 1009 as it reads it
    await wait_until(lambda: fake.live_connections == 0, message="the 1009 close")

    # still busy with the first post, the queued ones behind it: a new connection anyway
    await wait_until(lambda: fake.live_connections == 1, message="a new connection")
    assert intake.in_submit == 1 and not intake.submitted
    later = await fake.user_posts(fake.town_square, "later", mention_bot=True)

    intake.gate.set()
    await wait_until(lambda: live(intake, later["id"]), message="the later post, live")
    # nothing lost, in order: the queued frames first, then the new connection's
    order = [e.message_id for e, raw in intake.submitted if raw and raw.get("event")]
    expected = [first["id"], *(p["id"] for p in queued), later["id"]]
    assert [m for m in order if m in expected] == expected
    assert stream.connections == 2
    frames = [r for _, r in intake.submitted if r and "raw_frame" not in r]
    assert all(json.dumps(r) != OVER_LIMIT for r in frames)
