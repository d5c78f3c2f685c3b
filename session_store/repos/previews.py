"""Streaming previews and the shared pacing budget, in PostgreSQL.

A preview is the platform message that shows an answer while the model writes it. Its id is
stored as soon as the platform returned it, per part, for the turn that runs after
``after_seq`` (the claim's ``done_seq``: a takeover of the same turn finds them). When the
answer is recorded (``Outbox.finish_turn_outbox(previews_after=...)``) the rows get the
reply's seq and its number of parts, and the delivery of part i edits preview i into the
final text. The statements are ``previews.sql`` beside this file.

``reserve`` is the one pacing statement shared by every replica: sends, previews and typing of
one bot and chat draw from the same budget (``pace_reserve``, migrations 0008 and 0015)
while more than one gateway process lives (``gateway.outbox.pacing``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from session_store.db import Database
from session_store.sql import load

SQL = load(__package__, "previews.sql")


@dataclass(frozen=True, slots=True, kw_only=True)
class Preview:
    part_no: int
    platform_message_id: str
    #: how many parts the recorded answer has (None until it is recorded)
    final_parts: int | None = None
    deleted: bool = False


class PreviewStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def pending(self, session_id: int, after_seq: int) -> list[Preview]:
        """The previews a (possibly dead) run of this turn left, not yet bound to an answer."""
        async with self.db.connection() as conn:
            rows = await conn.fetch(SQL.load_pending, session_id, after_seq)
        return [Preview(part_no=r[0], platform_message_id=r[1]) for r in rows]

    async def add(
        self, session_id: int, after_seq: int, part_no: int, platform_message_id: str
    ) -> None:
        async with self.db.connection() as conn:
            await conn.execute(SQL.add, session_id, after_seq, part_no, platform_message_id)

    async def forget(self, session_id: int, after_seq: int, part_nos: Sequence[int]) -> None:
        """Previews the streamer deleted itself (the text shrank to fewer parts)."""
        async with self.db.connection() as conn:
            await conn.execute(SQL.forget, session_id, after_seq, list(part_nos))

    async def for_reply(self, session_id: int, reply_seq: int) -> list[Preview]:
        async with self.db.connection() as conn:
            rows = await conn.fetch(SQL.for_reply, session_id, reply_seq)
        return [
            Preview(part_no=r[0], platform_message_id=r[1], final_parts=r[2], deleted=r[3])
            for r in rows
        ]

    async def mark_deleted(self, session_id: int, reply_seq: int, part_nos: Sequence[int]) -> None:
        async with self.db.connection() as conn:
            await conn.execute(SQL.mark_deleted, session_id, reply_seq, list(part_nos))

    async def reserve(
        self, rules: Sequence[tuple[str, float, int]], *, max_wait: float = 3600.0
    ) -> float:
        """Reserve the next slot under ``(key, interval, burst)`` rules across replicas;
        seconds to wait first. When the wait would be over ``max_wait`` nothing is reserved
        and the wait returned."""
        if not rules:
            return 0.0
        async with self.db.connection() as conn:
            wait = await conn.fetchval(
                SQL.reserve,
                [k for k, _, _ in rules],
                [float(i) for _, i, _ in rules],
                [int(b) for _, _, b in rules],
                max_wait,
            )
        return float(wait or 0.0)

    async def seed(self, ahead: Sequence[tuple[str, float]]) -> None:
        """Carry reservations made elsewhere (a process that paced alone until now) into the
        shared budget: each key is free no sooner than its seconds from now."""
        if not ahead:
            return
        # a maximum, not a reservation after the ones already there: a process that paced in
        # PostgreSQL before mirrors those reservations locally, and adding them again doubled
        # the chat's wait at each solo -> shared switch (seen after database restarts)
        async with self.db.connection() as conn:
            await conn.execute(SQL.seed, [k for k, _ in ahead], [float(s) for _, s in ahead])
