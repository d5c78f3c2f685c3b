"""Live events between replicas over PostgreSQL ``LISTEN``/``NOTIFY`` (the web chat's streams
show what any replica published, not only their own).

``notify`` sends on a pooled connection; ``listen`` holds one dedicated connection (a LISTEN
is session state, which the pool's connections never carry) and reconnects after a loss.
A notification's payload must stay under PostgreSQL's 8000 bytes (``MAX_PAYLOAD_BYTES``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import asyncpg
import structlog

from session_store.db import CONNECT_TIMEOUT, Database, translated
from session_store.errors import StoreError
from session_store.sql import load

SQL = load(__package__, "live.sql")

log = structlog.get_logger(__name__)

CHANNEL = "gateway_live"
#: PostgreSQL refuses a NOTIFY payload of 8000 bytes or more
MAX_PAYLOAD_BYTES = 7900
#: the listener connections' ``application_name``: how a replica sees whether any other one
#: listens (``others_listening``)
LISTENER_NAME = "gateway-live"
#: how often the listener checks that its connection is alive (asyncpg has no callback for
#: a silently dropped socket)
PROBE_SECONDS = 5.0


class LiveChannel:
    def __init__(self, db: Database) -> None:
        self._db = db
        #: the server process of this replica's listening connection, while it is connected
        self.listener_pid: int | None = None

    async def others_listening(self) -> bool:
        """Whether a listening connection other than this replica's is open on the database
        (a lone replica sends no NOTIFY at all). Raises ``StoreError``."""
        async with self._db.connection() as conn:
            found = await conn.fetchval(SQL.others_listening, LISTENER_NAME, self.listener_pid or 0)
        return bool(found)

    async def notify(self, payload: str) -> None:
        """Send ``payload`` to every listening replica (this one included). Raises
        ``StoreError``; ``ValueError`` when the payload is too big."""
        if len(payload.encode("utf-8")) > MAX_PAYLOAD_BYTES:
            raise ValueError("live payload over the NOTIFY limit")
        async with self._db.connection() as conn:
            await conn.execute(SQL.notify, CHANNEL, payload)

    async def notify_many(self, payloads: list[str]) -> None:
        """``notify`` for several payloads in one statement and one transaction (
        under load the live relay's NOTIFYs were a transaction per message)."""
        if any(len(p.encode("utf-8")) > MAX_PAYLOAD_BYTES for p in payloads):
            raise ValueError("live payload over the NOTIFY limit")
        async with self._db.connection() as conn:
            await conn.execute(SQL.notify_many, CHANNEL, payloads)

    async def listen(
        self,
        on_payload: Callable[[str], None],
        stopping: asyncio.Event,
        *,
        retry_seconds: float = 1.0,
        hello: str | None = None,
    ) -> None:
        """Call ``on_payload`` for every notification until ``stopping`` is set. A lost
        connection is reopened (events sent meanwhile are lost: pages reload their history
        on reconnect, so a live event is a hint, never the record). ``hello`` is sent once
        listening (after every reconnect): the other replicas learn at once that this one
        listens."""
        while not stopping.is_set():
            conn: asyncpg.Connection | None = None
            try:
                with translated():
                    conn = await asyncpg.connect(
                        self._db.dsn,
                        timeout=CONNECT_TIMEOUT,
                        server_settings={"application_name": LISTENER_NAME},
                    )

                    def deliver(_c: Any, _pid: int, _channel: str, payload: str) -> None:
                        on_payload(payload)

                    await conn.add_listener(CHANNEL, deliver)
                    self.listener_pid = conn.get_server_pid()
                    if hello is not None:
                        await conn.execute(SQL.notify, CHANNEL, hello)
                while not stopping.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stopping.wait(), PROBE_SECONDS)
                    if not stopping.is_set():
                        with translated():
                            await conn.fetchval(SQL.ping)
            except StoreError as error:
                log.warning("live_listen_lost", error=str(error))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopping.wait(), retry_seconds)
            finally:
                self.listener_pid = None
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(conn.close(), 2.0)
