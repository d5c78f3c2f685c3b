"""The minutes worker's faults, on a real PostgreSQL reached through a TCP relay the test can
cut: one session whose closing summary fails is retried and then marked failed with its
error while the others are written or skipped, and a database outage is waited out, the
loop writing the minutes of a session closed meanwhile once the database is back."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest

from gateway.agents.base import SummaryRequest, SummaryResult, Turn
from gateway.core.domain import Reply, SessionKey
from gateway.core.errors import AgentError
from gateway.core.metrics import Metrics
from gateway.knowledge.service import Knowledge
from gateway.turns.minutes import MinutesSettings, MinutesWorker
from session_store.repos.knowledge import KnowledgeStore
from session_store.repos.minutes import Minutes
from session_store.repos.operator import OperatorStore
from session_store.store import Store
from testsupport.harness import wait_for
from testsupport.knowledge import SharedLocalEmbedder, _embedder_loaded  # noqa: F401

KB = "minutes-faults"


class Relay:
    """A TCP relay to PostgreSQL: ``cut`` closes the listener and every open connection (the
    database is gone, as far as its clients can tell); ``restore`` listens again."""

    def __init__(self, host: str, port: int) -> None:
        #: a TCP host, or the directory of a Unix socket (the embedded server's)
        self.host, self.port = host, port
        self.listen_port = 0
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._client, "127.0.0.1", self.listen_port)
        self.listen_port = self._server.sockets[0].getsockname()[1]

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if self.host.startswith("/"):
                path = f"{self.host}/.s.PGSQL.{self.port}"
                up_reader, up_writer = await asyncio.open_unix_connection(path)
            else:
                up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        except OSError:
            writer.close()
            return
        self._open.update((writer, up_writer))

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))
        self._open.difference_update((writer, up_writer))

    async def cut(self) -> None:
        assert self._server is not None
        self._server.close()
        for w in list(self._open):
            w.transport.abort()
        self._open.clear()
        await self._server.wait_closed()

    async def restore(self) -> None:
        await self.start()


class PickySummarizer:
    """Writes closing summaries, except for the chat ``m-bad``, where its model fails."""

    name = "picky"

    async def respond(self, turn: Turn) -> list[Reply]:
        return [Reply(text="ok")]

    async def summarize(self, request: SummaryRequest) -> SummaryResult | None:
        if request.key.chat_id == "m-bad":
            raise AgentError("the model is down for this one")
        return SummaryResult(text=f"summary of {request.key.chat_id}", model=request.model)


@pytest.fixture
async def relayed(database_url: str) -> AsyncIterator[tuple[Relay, str]]:
    parts = urlsplit(database_url)
    query = dict(parse_qsl(parts.query))
    socket_dir = query.pop("host", None)
    host = socket_dir or parts.hostname or "127.0.0.1"
    port = int(query.pop("port", None) or parts.port or 5432)
    relay = Relay(host, port)
    await relay.start()
    userinfo = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    netloc = f"{userinfo}127.0.0.1:{relay.listen_port}"
    yield relay, urlunsplit(parts._replace(netloc=netloc, query=urlencode(query)))
    with contextlib.suppress(Exception):
        await relay.cut()


async def _closed(store: Store, chat: str) -> int:
    ops = OperatorStore(store)
    key = SessionKey(platform="sink", scope="test", chat_id=chat, thread_id=None)
    session, _ = await ops.create_session(key, participant="agent:test")
    await ops.append_message(session.id, participant="agent:test", role="user", content="hi")
    assert await store.sessions.close_session(session.id)
    return session.id


async def test_one_bad_session_and_a_database_outage_never_stop_the_minutes(
    store: Store, relayed: tuple[Relay, str]
) -> None:
    relay, dsn = relayed
    ids = {chat: await _closed(store, chat) for chat in ("m-ok", "m-bad", "m-off")}
    worker_store = await Store.connect(dsn, min_size=1, max_size=4)
    knowledge = Knowledge(KnowledgeStore(worker_store.db), SharedLocalEmbedder())
    metrics = Metrics()
    worker = MinutesWorker(
        worker_store,
        Minutes(worker_store.db),
        knowledge,
        PickySummarizer(),
        kb_of=lambda key: None if key.chat_id == "m-off" else KB,
        model_of=lambda key: "tiny",
        settings=MinutesSettings(poll_seconds=0.05, backoff_seconds=0.05, max_tries=2),
        metrics=metrics,
    )
    minutes = Minutes(store.db)  # the test's own view, not through the relay

    async def state(session_id: int) -> str | None:
        found = await minutes.of_session(session_id)
        return None if found is None else found.state

    stopping = asyncio.Event()
    beats: list[float] = []
    task = asyncio.create_task(worker.run(stopping, lambda: beats.append(0.0)))
    try:
        await wait_for(lambda: _is(state(ids["m-ok"]), "written"), timeout=20)
        await wait_for(lambda: _is(state(ids["m-bad"]), "failed"), timeout=20)
        assert await state(ids["m-off"]) == "skipped"
        bad = await minutes.of_session(ids["m-bad"])
        assert bad is not None and bad.tries == 2 and bad.document_id is None
        assert bad.error == "AgentError: the model is down for this one"

        # the database goes away under the worker; a session closes meanwhile
        await relay.cut()
        later = await _closed(store, "m-later")
        seen = len(beats)
        await wait_for(lambda: len(beats) > seen + 3, timeout=10)  # still looping, failing
        assert await state(later) == "due" and not task.done()
        await relay.restore()
        await wait_for(lambda: _is(state(later), "written"), timeout=20)
        assert not task.done()
    finally:
        stopping.set()
        worker.wake.set()
        await asyncio.wait_for(task, 10)
        await knowledge.aclose()
        await worker_store.close()

    def counted(outcome: str) -> float:
        return metrics.minutes.labels(outcome)._value.get()

    assert (counted("written"), counted("skipped")) == (2, 1)
    assert (counted("retried"), counted("failed")) == (1, 1)


async def _is(found: object, wanted: str) -> bool:
    return await found == wanted  # type: ignore[misc]
