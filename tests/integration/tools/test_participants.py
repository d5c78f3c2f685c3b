"""platform users who speak in a session become its participants (role user),
next to the assistant; MCP participants keep their own rows."""

from __future__ import annotations

from session_store.repos.operator import OperatorStore
from testsupport.fakes.sink import SinkAdapter
from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import running_gateway, wait_for


async def test_speakers_become_participants_with_role_user_and_the_assistant_too(
    database_url: str, sink: SinkServer
) -> None:
    adapter = SinkAdapter(sink.url)
    async with running_gateway(database_url, adapters=[adapter], web_chat=False) as gw:
        first = await adapter.submit(
            {"chat": "c", "thread": "P", "id": "1", "text": "hi", "user": "ann"}
        )
        await wait_for(lambda: len(sink.accepted) == 1)
        await adapter.submit({"chat": "c", "thread": "P", "id": "2", "text": "yo", "user": "bob"})
        again = await adapter.submit(
            {"chat": "c", "thread": "P", "id": "3", "text": "again", "user": "ann"}
        )
        await wait_for(lambda: len(sink.accepted) >= 2)
        ops = OperatorStore(gw.store)

        async def settled() -> bool:
            # "yo" and "again" may be answered in one turn or two: settled once a turn has
            # read "again" and answered last (between two turns the session looked settled
            # with ann's first message as the last she was read at)
            detail = await ops.session_detail(first.session_id)
            read = {p.participant: p.last_read_seq for p in detail.participants}
            return (
                detail.session.last_seq_no == max(read.values())
                and len(read) == 3
                and again.seq_no is not None
                and read.get("sink:ann", 0) >= again.seq_no
            )

        await wait_for(settled)
        detail = await ops.session_detail(first.session_id)
    people = {p.participant: (p.role, p.display_name) for p in detail.participants}
    assert people == {
        "sink:ann": ("user", "ann"),
        "sink:bob": ("user", "bob"),
        "assistant": ("assistant", None),
    }
    cursors = {p.participant: p.last_read_seq for p in detail.participants}
    assert cursors["assistant"] == detail.session.last_seq_no
    assert cursors["sink:bob"] < cursors["sink:ann"] < cursors["assistant"]
