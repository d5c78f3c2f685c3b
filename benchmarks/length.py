"""Section 3, cost versus conversation length: what one more message costs in a conversation
that already has L messages, for three ways of storing it, side by side in the same run.

* ``ours``: ``Inbox.ingest`` (one row per message) then ``Sessions.recent(50)`` for the context.
* ``blob``: the document pattern: one row per session holding the whole transcript as jsonb;
  per message, read it (it is the context), append, write it back, in one transaction.
* ``langgraph``: LangGraph's ``AsyncPostgresSaver`` storing a chat whose ``messages`` channel
  grows by one message per turn, as a ``MessagesState`` graph does: per turn, load the latest
  checkpoint, append, put a new checkpoint (the channel is re-serialized whole every turn).
  Optional: ``pip install 'chat-gateway[bench]'``.

Each pattern starts from a conversation of L messages written in bulk (how it got there is not
what is measured), then takes ``turns`` more messages; the figure is the median per message,
with the WAL bytes per message (what the write costs the disk and every replica)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from benchmarks.common import TEXT, inbound, raw_payload, wal_lsn
from benchmarks.hot_path import seed
from session_store.store import Store

PATTERNS = ("ours", "blob", "langgraph")

_BLOB_TABLE = """
CREATE TABLE IF NOT EXISTS bench_blob_sessions (
    id         bigint PRIMARY KEY,
    transcript jsonb       NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
)
"""


def _message(n: int) -> dict[str, Any]:
    return {
        "seq_no": n,
        "role": "assistant" if n % 2 == 0 else "user",
        "sender": "bench",
        "content": f"{TEXT} #{n}",
        "reply_target": {"platform": "bench", "scope": "s", "chat_id": "c", "thread_id": "t"},
    }


def langgraph_available() -> str | None:
    """None when the LangGraph checkpointer can run here, else why not."""
    try:
        import langchain_core.messages  # noqa: F401
        import langgraph.checkpoint.postgres.aio  # noqa: F401
        import psycopg  # noqa: F401
    except ImportError as exc:
        return f"{exc.name} not installed (pip install 'chat-gateway[bench]')"
    return None


@dataclass
class _Conversation:
    """One conversation of one pattern, and how to add a message to it."""

    pattern: str
    length: int
    handle: Any = None
    n: int = 0


@dataclass
class LengthBench:
    dsn: str
    turns: int
    store: Store | None = None
    conn: asyncpg.Connection | None = None
    saver: Any = None
    _saver_cm: Any = None
    skipped: dict[str, str] = field(default_factory=dict)
    _sessions: int = 0

    async def start(self) -> None:
        self.store = await Store.connect(self.dsn, min_size=1, max_size=2)
        self.conn = await asyncpg.connect(self.dsn)
        await self.conn.set_type_codec(
            "jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog"
        )
        await self.conn.execute(_BLOB_TABLE)
        reason = langgraph_available()
        if reason is not None:
            self.skipped["langgraph"] = reason
            return
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        self._saver_cm = AsyncPostgresSaver.from_conn_string(self.dsn)
        self.saver = await self._saver_cm.__aenter__()
        await self.saver.setup()

    async def close(self) -> None:
        if self._saver_cm is not None:
            await self._saver_cm.__aexit__(None, None, None)
        if self.conn is not None:
            await self.conn.close()
        if self.store is not None:
            await self.store.close()

    def patterns(self) -> list[str]:
        return [p for p in PATTERNS if p not in self.skipped]

    # --- seeding: a conversation of ``length`` messages, written in bulk ----------------

    async def conversation(self, pattern: str, length: int) -> _Conversation:
        self._sessions += 1
        conv = _Conversation(pattern=pattern, length=length, n=length)
        if pattern == "ours":
            platform = f"len{self._sessions}"
            [sid] = await seed(self.dsn, platform=platform, sessions=1, length=length)
            conv.handle = (platform, sid)
        elif pattern == "blob":
            assert self.conn is not None
            await self.conn.execute(
                "INSERT INTO bench_blob_sessions (id, transcript) VALUES ($1, $2)",
                self._sessions,
                [_message(n) for n in range(1, length + 1)],
            )
            conv.handle = self._sessions
        else:
            conv.handle = await self._seed_langgraph(f"thread-{self._sessions}", length)
        return conv

    async def _seed_langgraph(self, thread_id: str, length: int) -> dict[str, Any]:
        from langgraph.checkpoint.base import empty_checkpoint

        checkpoint = empty_checkpoint()
        version = self.saver.get_next_version(None, None)
        checkpoint["channel_values"] = {"messages": [_lc_message(n) for n in range(1, length + 1)]}
        checkpoint["channel_versions"] = {"messages": version}
        config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        return dict(
            await self.saver.aput(
                config, checkpoint, {"source": "input", "step": 0}, {"messages": version}
            )
        )

    # --- one more message ------------------------------------------------------------

    async def add(self, conv: _Conversation) -> None:
        conv.n += 1
        n = conv.n
        if conv.pattern == "ours":
            assert self.store is not None
            platform, sid = conv.handle
            result = await self.store.inbox.ingest(
                inbound(0, n, platform=platform), raw=raw_payload(0, n)
            )
            assert result.session_id == sid and result.seq_no == n, result
            context = await self.store.sessions.recent(sid, 50)
            assert context[-1].seq_no == n
        elif conv.pattern == "blob":
            assert self.conn is not None
            async with self.conn.transaction():
                transcript = await self.conn.fetchval(
                    "SELECT transcript FROM bench_blob_sessions WHERE id = $1 FOR UPDATE",
                    conv.handle,
                )
                transcript.append(_message(n))
                await self.conn.execute(
                    "UPDATE bench_blob_sessions SET transcript = $2, updated_at = now() "
                    "WHERE id = $1",
                    conv.handle,
                    transcript,
                )
            context = transcript[-50:]
            assert context[-1]["seq_no"] == n
        else:
            await self._langgraph_turn(conv, n)

    async def _langgraph_turn(self, conv: _Conversation, n: int) -> None:
        from langgraph.checkpoint.base import create_checkpoint

        config = {"configurable": {"thread_id": conv.handle["configurable"]["thread_id"]}}
        latest = await self.saver.aget_tuple(config)
        messages = [*latest.checkpoint["channel_values"]["messages"], _lc_message(n)]
        checkpoint = create_checkpoint(latest.checkpoint, None, n)
        version = self.saver.get_next_version(
            latest.checkpoint["channel_versions"]["messages"], None
        )
        checkpoint["channel_values"] = {"messages": messages}
        checkpoint["channel_versions"] = {"messages": version}
        conv.handle = await self.saver.aput(
            latest.config, checkpoint, {"source": "loop", "step": n}, {"messages": version}
        )
        assert len(messages) == n

    async def measure(self, conv: _Conversation) -> dict[str, float]:
        """``turns`` more messages: median ms per message and WAL bytes per message."""
        assert self.conn is not None
        times: list[float] = []
        before = await wal_lsn(self.conn)
        for _ in range(self.turns):
            t0 = time.perf_counter()
            await self.add(conv)
            times.append(time.perf_counter() - t0)
        wal = await wal_lsn(self.conn) - before
        times.sort()
        return {"ms": times[len(times) // 2] * 1000, "wal_bytes_per_msg": wal / self.turns}


def _lc_message(n: int) -> Any:
    from langchain_core.messages import AIMessage, HumanMessage

    cls = AIMessage if n % 2 == 0 else HumanMessage
    return cls(content=f"{TEXT} #{n}", name="bench", id=f"m{n}")
