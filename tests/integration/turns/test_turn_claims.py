"""Which session a turn worker claims: the one whose message woke it, before an older one
that nobody woke a worker for. With only the longest-waiting order, two workers woken for
two new sessions could swap them, and one found nothing: its claim began before the other
session was committed and its own session was locked by the sibling. That session then
waited for the next poll (one reply in about 16,000 waited 973 ms at 200 msgs/s). The swap
needs two claims' snapshots to interleave; what closes it is that a wake-up claims its own
session first, and that is what these tests hold to."""

from __future__ import annotations

import dataclasses
import functools

import pytest

from gateway.core.domain import Trigger
from gateway.inbound.intake import to_inbound
from session_store.records import InboundItem, OutgoingReply
from session_store.store import Store
from session_store.values import ReplyTarget
from testsupport.fakes.sink import SinkAdapter, sink_envelope
from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import running_gateway, wait_for


def _asking(thread: str, text: str) -> InboundItem:
    """A message that asks for a turn, stored the way the intake stores it."""
    body = {"chat": "c", "thread": thread, "id": f"{thread}-1", "text": text}
    return to_inbound(dataclasses.replace(sink_envelope(body), trigger=Trigger.ALWAYS))


async def test_a_woken_worker_answers_the_message_that_woke_it_first(
    database_url: str, sink: SinkServer
) -> None:
    adapter = SinkAdapter(sink.url)
    # no poll within the test: only a wake-up can start a turn
    async with running_gateway(
        database_url, adapters=[adapter], web_chat=False, GATEWAY_POLL_SECONDS=60.0
    ) as gw:
        await adapter.submit({"chat": "c", "thread": "warm", "id": "m0", "text": "warm up"})
        await wait_for(lambda: len(sink.accepted) == 1, timeout=20, message="first reply")
        # a due session no worker of this process was woken for (as another replica's
        # message, or one whose wake-up went to a sibling): older than the next one
        left = await gw.store.inbox.ingest(_asking("left", "left behind"), raw=None)
        assert left.turn_requested
        await adapter.submit({"chat": "c", "thread": "new", "id": "m1", "text": "hello"})
        # claimed first, so answered at once rather than after the older one and the poll
        await wait_for(
            lambda: any(r["text"] == "echo: hello" for r in sink.accepted),
            timeout=10,
            message="the answer to the message that woke a worker",
        )
        assert [r["text"] for r in sink.accepted] == ["echo: warm up", "echo: hello"]


@pytest.mark.parametrize(
    ("with_pending", "context_page"),
    [(0, 0), (10, 0), (10, 64)],
    ids=["claim", "with-pending", "with-context"],
)
async def test_a_claim_takes_the_session_it_prefers_and_else_the_longest_waiting(
    store: Store, with_pending: int, context_page: int
) -> None:
    older = await store.inbox.ingest(_asking("a", "first"), raw=None)
    newer = await store.inbox.ingest(_asking("b", "second"), raw=None)
    claim_newer = functools.partial(
        store.turns.claim_turn,
        lease_seconds=30,
        prefer=newer.session_id,
        with_pending=with_pending,
        context_page=context_page,
    )
    claim = await claim_newer()
    assert claim is not None and claim.session_id == newer.session_id
    if with_pending:
        assert claim.pending is not None and [m.content for m in claim.pending] == ["second"]
    # the preferred one is taken now: the claim falls back to the longest-waiting
    again = await claim_newer()
    assert again is not None and again.session_id == older.session_id
    # nothing due at all: no claim, preferred or not
    assert await store.turns.claim_turn(lease_seconds=30, prefer=older.session_id) is None
    await store.outbox.finish_turn_outbox(
        claim,
        handled_seq=1,
        replies=[OutgoingReply(content="ok", parts=["ok"])],
        target=ReplyTarget(platform="sink", scope="test", chat_id="c", thread_id="b"),
    )
    # answered: preferring it claims nothing of it
    assert await store.turns.claim_turn(lease_seconds=30, prefer=newer.session_id) is None
