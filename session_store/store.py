"""The session store: the pool and one repository per area (``session_store.repos``).
Callers never see SQL or driver records, and never a driver error: ``Database`` translates
them at its one boundary."""

from __future__ import annotations

from session_store.db import Database
from session_store.repos.inbox import Inbox
from session_store.repos.outbox import Outbox
from session_store.repos.people import People
from session_store.repos.sessions import Sessions
from session_store.repos.summaries import Summaries
from session_store.repos.turns import Turns
from session_store.repos.usage import Usage


class Store:
    """The pool and the hot path's repositories, one per area: ``inbox`` (ingest, cursors),
    ``sessions`` (sessions, messages, feedback), ``turns`` (claims and context),
    ``summaries``, ``outbox`` (deliveries and their marks), ``people`` and ``usage``. Callers
    use the repositories directly (``store.inbox.ingest(...)``); this class adds no logic of
    its own, only the process id every claim records."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.inbox = Inbox(db)
        self.sessions = Sessions(db)
        self.turns = Turns(db)
        self.summaries = Summaries(db)
        self.outbox = Outbox(db)
        self.people = People(db)
        self.usage = Usage(db)
        self._process_id: int | None = None

    @property
    def process_id(self) -> int | None:
        """This process's id while it holds its liveness lock (``session_store.repos.liveness``);
        recorded on the turns and deliveries it claims, so that they are taken over at once
        if it dies. None: claims carry no process and wait for their lease."""
        return self._process_id

    @process_id.setter
    def process_id(self, value: int | None) -> None:
        self._process_id = value
        self.turns.process_id = value
        self.outbox.process_id = value

    @classmethod
    async def connect(cls, dsn: str, *, min_size: int = 2, max_size: int = 10) -> Store:
        return cls(await Database.connect(dsn, min_size=min_size, max_size=max_size))

    @property
    def dsn(self) -> str:
        return self.db.dsn

    async def close(self) -> None:
        await self.db.close()

    async def ping(self) -> None:
        await self.db.ping()
