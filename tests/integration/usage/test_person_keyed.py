"""What keys on the person, not the account: the model a person chose and
``list_my_sessions`` follow every linked account."""

from __future__ import annotations

import json

from gateway.tools.builtin import builtin_tools
from gateway.tools.catalog import ToolCaller
from testsupport.fakes.sink import SinkAdapter
from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import running_gateway, wait_for


async def test_linked_accounts_share_model_choice_and_sessions(
    database_url: str, sink: SinkServer
) -> None:
    adapter = SinkAdapter(sink.url)
    async with running_gateway(database_url, adapters=[adapter], web_chat=False) as gw:
        ann = await adapter.submit(
            {"chat": "c", "thread": "A", "id": "1", "text": "hi", "user": "ann"}
        )
        other = await adapter.submit(
            {"chat": "d", "thread": "B", "id": "2", "text": "hello", "user": "ann2"}
        )
        await wait_for(lambda: len(sink.accepted) == 2)
        await gw.store.people.link("sink:test:ann", "sink:test:ann2")
        await gw.store.turns.set_model_choice(
            ann.session_id, platform="sink", user_id="ann", model="gpt-big"
        )
        state = await gw.store.turns.turn_state(
            other.session_id,
            question_seq=other.seq_no,
            upto_seq=other.seq_no,
            user_platform="sink",
            user_id="ann2",
        )
        assert state.user_model == "gpt-big"
        tools = {t.spec.name: t.handler for t in builtin_tools(gw.store)}
        caller = ToolCaller(
            session_id=other.session_id,
            platform="sink",
            scope="test",
            chat_id="d",
            thread_id="B",
            user_id="ann2",
        )
        found = json.loads(await tools["list_my_sessions"]({}, caller))
        assert {s["session_id"] for s in found} == {ann.session_id, other.session_id}
        read = await tools["read_session"]({"session_id": ann.session_id}, caller)
        assert "hi" in read
