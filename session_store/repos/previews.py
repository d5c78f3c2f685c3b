"""Streaming previews and the shared pacing budget, in PostgreSQL.

A preview is the platform message that shows an answer while the model writes it. Its id is
stored as soon as the platform returned it, per part, for the turn that runs after
``after_seq`` (the claim's ``done_seq``: a takeover of the same turn finds them). When the
answer is recorded (``Outbox.finish_turn_outbox(previews_after=...)``) the rows get the reply's seq
and its number of parts, and the delivery of part i edits preview i into the final text.

``reserve`` is the one pacing statement shared by every replica: sends, previews and typing of
one bot and chat draw from the same budget (``pace_reserve``, migrations 0008 and 0015)
while more than one gateway process lives (``gateway.outbox.pacing``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from session_store.db import Database

LOAD_PENDING = """
SELECT part_no, platform_message_id FROM stream_previews
WHERE session_id = $1 AND after_seq = $2 AND reply_seq IS NULL AND NOT deleted
ORDER BY part_no
"""

ADD = """
INSERT INTO stream_previews (session_id, after_seq, part_no, platform_message_id)
VALUES ($1, $2, $3, $4)
ON CONFLICT (session_id, after_seq, part_no)
DO UPDATE SET platform_message_id = EXCLUDED.platform_message_id, deleted = false
"""

FOR_REPLY = """
SELECT part_no, platform_message_id, final_parts, deleted FROM stream_previews
WHERE session_id = $1 AND reply_seq = $2
ORDER BY part_no
"""

MARK_DELETED = """
UPDATE stream_previews SET deleted = true
WHERE session_id = $1 AND reply_seq = $2 AND part_no = ANY($3::integer[])
"""

FORGET = """
UPDATE stream_previews SET deleted = true
WHERE session_id = $1 AND after_seq = $2 AND part_no = ANY($3::integer[])
"""

#: used inside ``Outbox.finish_turn_outbox``'s transaction when the turn streamed previews
BIND = """
UPDATE stream_previews SET reply_seq = $3, final_parts = $4
WHERE session_id = $1 AND after_seq = $2 AND reply_seq IS NULL
"""

RESERVE = """
SELECT pace_reserve($1::text[], $2::double precision[], $3::integer[], $4::double precision)
"""
#: carry a reservation made elsewhere into the shared budget: the key is free no sooner than
#: that, and no later than it already was (a maximum, never added to what is already there)
SEED = """
INSERT INTO pace_slots (key, next_at)
SELECT k, clock_timestamp() + make_interval(secs => s)
FROM unnest($1::text[], $2::double precision[]) AS r (k, s)
ORDER BY k
ON CONFLICT (key) DO UPDATE SET next_at = greatest(pace_slots.next_at, excluded.next_at)
"""


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
            rows = await conn.fetch(LOAD_PENDING, session_id, after_seq)
        return [Preview(part_no=r[0], platform_message_id=r[1]) for r in rows]

    async def add(
        self, session_id: int, after_seq: int, part_no: int, platform_message_id: str
    ) -> None:
        async with self.db.connection() as conn:
            await conn.execute(ADD, session_id, after_seq, part_no, platform_message_id)

    async def forget(self, session_id: int, after_seq: int, part_nos: Sequence[int]) -> None:
        """Previews the streamer deleted itself (the text shrank to fewer parts)."""
        async with self.db.connection() as conn:
            await conn.execute(FORGET, session_id, after_seq, list(part_nos))

    async def for_reply(self, session_id: int, reply_seq: int) -> list[Preview]:
        async with self.db.connection() as conn:
            rows = await conn.fetch(FOR_REPLY, session_id, reply_seq)
        return [
            Preview(part_no=r[0], platform_message_id=r[1], final_parts=r[2], deleted=r[3])
            for r in rows
        ]

    async def mark_deleted(self, session_id: int, reply_seq: int, part_nos: Sequence[int]) -> None:
        async with self.db.connection() as conn:
            await conn.execute(MARK_DELETED, session_id, reply_seq, list(part_nos))

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
                RESERVE,
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
            await conn.execute(SEED, [k for k, _ in ahead], [float(s) for _, s in ahead])
