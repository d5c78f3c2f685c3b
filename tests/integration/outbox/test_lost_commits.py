"""A write that the database committed but whose answer never came back (the server stopped,
or the connection dropped, between its commit and its reply) must not strand a claimed part.

Two writes claim a delivery: the statement that finishes a turn (its first part comes back
claimed for this process's worker) and a worker's claim. When either commits and the answer is
lost, the caller sees a transient error; the finish is retried and finds its turn already
finished (``LeaseLost``), the claim is given up. Before, the claimed row stayed ``sending``
under this live process with a token nobody held: nobody sent it, and when its lease ran out
recovery failed it as ambiguous (on a platform without idempotency keys, as Slack's and
Telegram's sends), though nothing of it had reached the platform. The answer never reached its
thread. Now the caller chooses the claim's token itself and, after such an error, hands back
whatever its lost write claimed under it, so the part is sent once, at once."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from gateway.core.errors import StoreError
from session_store.store import Store
from testsupport.fakes.sink import SinkAdapter
from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import running_gateway, wait_for


class AnswerLostOnce:
    """``real``, whose first call matching ``when`` is committed and then answered with the
    error a dropped connection gives (transient): the database has the write, the caller
    does not know it."""

    def __init__(
        self, real: Callable[..., Awaitable[Any]], *, when: Callable[[Any], bool] = bool
    ) -> None:
        self._real = real
        self._when = when
        self.lost = False

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        result = await self._real(*args, **kwargs)
        if not self.lost and self._when(result):
            self.lost = True
            raise StoreError("database connection: connection was closed", transient=True)
        return result


async def _rows(store: Store) -> list[tuple[str, bool]]:
    async with store.db.connection() as conn:
        rows = await conn.fetch("SELECT status, ambiguous FROM deliveries ORDER BY seq_no, part_no")
    return [(r["status"], r["ambiguous"]) for r in rows]


async def test_a_finished_turn_whose_commit_answer_was_lost_still_sends_its_answer_once(
    database_url: str, sink: SinkServer
) -> None:
    adapter = SinkAdapter(sink.url)  # no idempotency keys: a send found in flight is ambiguous
    async with running_gateway(database_url, adapters=[adapter], web_chat=False) as gw:
        finish = AnswerLostOnce(gw.store.outbox.finish_turn_outbox)
        gw.store.outbox.finish_turn_outbox = finish  # type: ignore[method-assign]
        await adapter.submit({"chat": "c", "thread": "t", "id": "m1", "text": "hello"})
        await wait_for(lambda: sink.texts_in("c", "t"), timeout=8, message="the answer sent")
        assert finish.lost

        async def recorded() -> bool:
            return await _rows(gw.store) == [("sent", False)]

        await wait_for(recorded, timeout=5, message="its delivery recorded sent, once")
        assert len(sink.texts_in("c", "t")) == 1


async def test_a_claim_whose_commit_answer_was_lost_is_handed_back_and_sent_once(
    database_url: str, sink: SinkServer
) -> None:
    # an answer in three parts: the first is handed over by the finish, the next are claimed
    adapter = SinkAdapter(sink.url, max_length=12)
    async with running_gateway(database_url, adapters=[adapter], web_chat=False) as gw:
        claim = AnswerLostOnce(gw.store.outbox.claim_deliveries)
        gw.store.outbox.claim_deliveries = claim  # type: ignore[method-assign]
        await adapter.submit(
            {"chat": "c", "thread": "t", "id": "m1", "text": "one two three four five six"}
        )

        async def all_sent() -> bool:
            rows = await _rows(gw.store)
            return len(rows) > 2 and all(status == "sent" for status, _ in rows)

        await wait_for(all_sent, timeout=8, message="every part sent")
        assert claim.lost
        rows = await _rows(gw.store)
        assert all(not ambiguous for _, ambiguous in rows)
        assert len(sink.texts_in("c", "t")) == len(rows)
