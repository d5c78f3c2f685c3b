"""Reconciliation after a (re)connect (Mattermost was the slowest surface to recover
from a database restart): missed posts are submitted concurrently across conversations, each
conversation in creation order; a channel's cursor is written once and never passes a post that
failed, nor moves to a far-future post; a store that just came back (transient errors) is
retried instead of holding posts until the next resync."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from adapters.mattermost.adapter import MattermostAdapter
from gateway.core.domain import Envelope, Extracted, Rejected
from gateway.core.errors import StoreError
from gateway.core.ports import IngestOutcome
from testsupport.fakes.mattermost import FakeMattermost
from testsupport.harness import RecordingIntake
from testsupport.mattermost import connected, make_config


class PeakIntake(RecordingIntake):
    """Records the most submits in flight at once; the first ``transient`` submits fail the
    way the store fails right after a database restart (a dead pooled connection)."""

    def __init__(self, *, transient: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.peak = 0
        self.transient = transient

    async def submit(self, extracted: Extracted, *, raw: Mapping[str, Any] | None) -> IngestOutcome:
        if self.transient:
            self.transient -= 1
            raise StoreError("database connection: connection was closed", transient=True)
        self.peak = max(self.peak, self.in_submit + 1)
        return await super().submit(extracted, raw=raw)


async def cursors_after_a_first_start(fake: FakeMattermost, running: Any) -> dict[str, str]:
    intake = RecordingIntake()
    adapter = MattermostAdapter(make_config(fake))
    await running(adapter, intake)
    await connected(adapter)
    await adapter.stop()
    return dict(intake.cursors)


def cursor(fake: FakeMattermost, intake: RecordingIntake, channel: Any) -> int:
    return int(intake.cursors[f"mattermost:127.0.0.1:{fake.port}:channel:{channel.id}"])


async def test_conversations_concurrently_each_in_order_cursors_behind_failures(
    fake: FakeMattermost, running: Any
) -> None:
    saved = await cursors_after_a_first_start(fake, running)
    # while away: two threads in town square, chatter in private, a DM
    threads: dict[str, list[str]] = {}
    for name in ("one", "two"):
        root = await fake.user_posts(fake.town_square, f"{name} root", mention_bot=True)
        threads[root["id"]] = [root["id"]]
        for n in range(3):
            reply = await fake.user_posts(fake.town_square, f"{name} {n}", root_id=root["id"])
            threads[root["id"]].append(reply["id"])
    before = await fake.user_posts(fake.private, "chatter before")
    bad = await fake.user_posts(fake.private, "fails every time")
    after = await fake.user_posts(fake.private, "chatter after")
    dms = [await fake.user_posts(fake.dm_alice, f"dm {n}") for n in range(3)]
    future = await fake.user_posts(fake.dm_alice, "from the far future")
    fake.posts[future["id"]]["create_at"] = 2**62  # must not move the DM's cursor

    intake = PeakIntake(cursors=saved, fail=lambda e: getattr(e, "text", "") == "fails every time")
    intake.delay = 0.01  # a store that takes its time, so submits overlap
    adapter = MattermostAdapter(make_config(fake))
    await running(adapter, intake)
    await connected(adapter)

    assert intake.peak > 1  # conversations were submitted concurrently
    for root_id, posts in threads.items():
        order = [e.message_id for e in intake.envelopes if e.key.thread_id == root_id]
        assert order == posts  # each thread in creation order
    assert [e.message_id for e in intake.envelopes if e.key.chat_id == fake.dm_alice.id] == [
        *(p["id"] for p in dms),
        future["id"],
    ]
    assert intake.by_message(after["id"]) and intake.by_message(before["id"])
    # a failed post: a dead letter, and its channel's cursor stays at it (fetched again)
    assert any(
        isinstance(e, Rejected) and e.reason.startswith("handler failed") for e in intake.extracted
    )
    assert cursor(fake, intake, fake.private) == bad["create_at"]
    newest = fake.posts_in(fake.town_square)[-1]
    assert cursor(fake, intake, fake.town_square) == newest["create_at"]
    assert cursor(fake, intake, fake.dm_alice) == dms[-1]["create_at"]


async def test_transient_store_errors_are_retried_not_held(
    fake: FakeMattermost, running: Any
) -> None:
    saved = await cursors_after_a_first_start(fake, running)
    missed = [await fake.user_posts(fake.town_square, f"missed {n}") for n in range(4)]

    # the database just came back: the first calls on the pool's dead connections fail
    intake = PeakIntake(cursors=saved, transient=3)
    adapter = MattermostAdapter(make_config(fake))
    await running(adapter, intake)
    await connected(adapter)

    # each once (separate threads: in any order)
    assert sorted(e.message_id for e in intake.envelopes) == sorted(p["id"] for p in missed)
    assert not [e for e in intake.extracted if isinstance(e, Rejected)]  # no dead letters
    assert cursor(fake, intake, fake.town_square) == missed[-1]["create_at"]
    assert all(isinstance(e, Envelope) for e in intake.extracted)
