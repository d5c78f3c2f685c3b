"""The built-in read tools see only what the asker takes part in (real PostgreSQL)."""

from __future__ import annotations

import json

import pytest

from gateway.tools.builtin import ToolInputError, builtin_tools
from gateway.tools.catalog import ToolCaller
from testsupport.fakes.sink import SinkAdapter
from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import running_gateway, wait_for


async def test_list_and_read_sessions_only_where_the_asker_takes_part(
    database_url: str, sink: SinkServer
) -> None:
    adapter = SinkAdapter(sink.url)
    async with running_gateway(database_url, adapters=[adapter], web_chat=False) as gw:
        a1 = await adapter.submit(
            {"chat": "c", "thread": "A1", "id": "1", "text": "ann one secret-alpha", "user": "ann"}
        )
        a2 = await adapter.submit(
            {"chat": "d", "thread": "A2", "id": "2", "text": "ann two", "user": "ann"}
        )
        b1 = await adapter.submit(
            {"chat": "c", "thread": "B1", "id": "3", "text": "bob only secret", "user": "bob"}
        )
        await wait_for(lambda: len(sink.accepted) == 3)
        tools = {t.spec.name: t.handler for t in builtin_tools(gw.store)}
        session = await gw.store.sessions.get_session(a1.session_id)
        ann = ToolCaller(
            session_id=a1.session_id,
            platform=session.key.platform,
            scope=session.key.scope,
            chat_id="c",
            thread_id="A1",
            user_id="ann",
        )
        mine = json.loads(await tools["list_my_sessions"]({}, ann))
        other = json.loads(await tools["read_session"]({"session_id": a2.session_id}, ann))
        with pytest.raises(ToolInputError, match="no session"):
            await tools["read_session"]({"session_id": b1.session_id}, ann)
        found = json.loads(await tools["search_thread"]({"query": "secret"}, ann))
    assert {s["session_id"] for s in mine} == {a1.session_id, a2.session_id}
    assert [s["this_thread"] for s in mine if s["session_id"] == a1.session_id] == [True]
    assert [m["text"] for m in other if m["role"] == "user"] == ["ann two"]
    # search covers this thread only: bob's thread's "secret" is not found
    assert sorted(h["seq"] for h in found) == [1, 2]  # the question and its echo
    assert not any("bob" in h["text"] for h in found)
