"""A session's minutes in the knowledge base: a session closed in one place is written, on
the cold path and charged to that place, as a document of its profile's ``minutes_kb``; a
question asked in another place that searches that base is answered citing the minutes; the
citation opens the session and links the asking session to the minutes as its evidence."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

import asyncpg
import httpx

from gateway.agents.base import SummaryRequest, SummaryResult, Turn
from gateway.core.domain import Reply
from session_store.repos.minutes import Minutes
from session_store.repos.operator import OperatorStore
from testsupport.fakes.sink import SinkAdapter
from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import running_gateway, wait_for

CONFIG = """
[profiles.team]
minutes_kb = "decisions"

[profiles.reader]
knowledge = ["decisions"]

[places]
"sink:test:minutes-a" = "team"
"sink:test:minutes-b" = "reader"
"""

CLOSING = "The team chose Friday for the release; Bea checks the rollback plan first."


class MinutesAgent:
    """Answers from the passage numbered [1] when there is one (citing it), else echoes;
    writes closing summaries with its model (a Summarizer)."""

    name = "minutes"

    def __init__(self) -> None:
        self.summaries: list[SummaryRequest] = []

    async def respond(self, turn: Turn) -> Sequence[Reply]:
        found = re.search(r"^\[1\] .*\n(.+)$", turn.system_prompt, re.MULTILINE)
        if found is None:
            return [Reply(text=f"noted: {turn.new_messages[-1].content}", model="tiny")]
        return [Reply(text=f"{found.group(1)} [1]", model="tiny")]

    async def summarize(self, request: SummaryRequest) -> SummaryResult | None:
        self.summaries.append(request)
        return SummaryResult(
            text=CLOSING, model=request.model, prompt_tokens=120, completion_tokens=18
        )


async def _stored_bytes(database_url: str, document_id: int) -> bytes:
    """The document's file as the knowledge base stored it (read on a connection of the
    test's own)."""
    conn = await asyncpg.connect(database_url)
    try:
        return bytes(
            await conn.fetchval(
                "SELECT f.content FROM kb_documents d JOIN kb_files f USING (sha256)"
                " WHERE d.id = $1",
                document_id,
            )
        )
    finally:
        await conn.close()


async def test_minutes_written_at_close_then_cited_from_another_place_open_the_session(
    database_url: str, sink: SinkServer, tmp_path: Path
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(CONFIG)
    agent = MinutesAgent()
    adapter = SinkAdapter(sink.url)
    async with (
        running_gateway(
            database_url,
            adapters=[adapter],
            agent=agent,
            web_chat=False,
            AGENT_MODEL="tiny",
            GATEWAY_CONFIG_FILE=str(config),
            GATEWAY_ADMIN_TOKEN="admin-secret-of-the-minutes-test-0123456789",
        ) as gw,
        httpx.AsyncClient(base_url=gw.url) as client,
    ):
        ops = OperatorStore(gw.store)
        headers = {"Authorization": "Bearer admin-secret-of-the-minutes-test-0123456789"}
        a = {"chat": "minutes-a", "thread": "plan"}
        first = await adapter.submit({**a, "id": "1", "text": "Which day do we release?"})
        await wait_for(lambda: sink.texts_in("minutes-a", "plan"), timeout=20)
        await adapter.submit({**a, "id": "2", "text": "/decision Release on Friday"})
        session_id = first.session_id
        await ops.update_checkpoint(
            session_id, name="rollback plan", status="pending", detail="Bea checks it"
        )
        await ops.add_link(session_id, link_type="issue", target_ref="TRACK-7", relation="related")

        async def decided() -> bool:
            return bool((await gw.store.sessions.decisions(session_id))[0])

        await wait_for(decided, timeout=20)
        # /new closes the session in the turn's finishing statement: its minutes are due
        await adapter.submit({**a, "id": "3", "text": "/new"})
        minutes = Minutes(gw.store.db)

        async def written() -> int | None:
            found = await minutes.of_session(session_id)
            return found.document_id if found is not None and found.state == "written" else None

        found = await wait_for(written, timeout=30)
        assert found is not None
        document_id: int = found
        record = await minutes.of_session(session_id)
        assert record is not None and record.kb == "decisions"

        async def ready() -> bool:
            doc = await gw.knowledge.store.get_document(document_id)
            return doc is not None and doc.state == "ready"

        await wait_for(ready, timeout=30)
        doc = await gw.knowledge.store.get_document(document_id)
        assert doc is not None and doc.name == f"minutes-session-{session_id}.md"
        text = (await _stored_bytes(database_url, document_id)).decode()
        assert CLOSING in text
        if os.environ.get("MINUTES_DOCUMENT_OUT"):  # the document as stored, to show it
            Path(os.environ["MINUTES_DOCUMENT_OUT"]).write_text(text)
        assert text.startswith(f"# Minutes of session {session_id}: ")
        for heading in ("## Summary (written by tiny)", "## Decisions", "## Open checkpoints"):
            assert heading in text
        # and what was ingested of it is searchable: the summary is among its passages
        passages = await gw.knowledge.store.whole.passages([document_id])
        assert any(CLOSING in p["content"] for p in passages)
        assert f"/ops/sessions/{session_id}" in text
        assert "tester: Release on Friday" in text  # the decision, as decided
        assert "rollback plan (pending): Bea checks it" in text  # the open checkpoint
        assert "related: issue TRACK-7" in text  # the link
        # a supervised loop like the others, counted on /metrics
        assert "minutes" in gw.supervisor.loops
        metrics = (await client.get("/metrics", headers=headers)).text
        assert 'gateway_worker_up{worker="minutes"} 1.0' in metrics
        assert 'gateway_minutes_total{outcome="written"} 1.0' in metrics
        # the session is linked to its minutes as its output
        closed_links = (await ops.session_detail(session_id)).links
        assert ("doc", f"kb-document:{document_id}", "output") in [
            (x.link_type, x.target_ref, x.relation) for x in closed_links
        ]
        # the closing summary was the model's, with the place's model, charged to the place
        assert [s.session_id for s in agent.summaries] == [session_id]
        assert "Which day do we release?" in agent.summaries[0].transcript
        charged = [r for r in await gw.store.usage.ledger(session_id) if r.kind == "summary"]
        assert [(r.place, r.model, r.prompt_tokens) for r in charged] == [
            ("sink:test:minutes-a", "tiny", 120)
        ]

        # another place whose profile searches that base: the answer cites the minutes
        b = {"chat": "minutes-b", "thread": "q"}
        asked = await adapter.submit({**b, "id": "1", "text": "Which day do we release?"})
        await wait_for(lambda: sink.texts_in("minutes-b", "q"), timeout=20)
        answer = sink.texts_in("minutes-b", "q")[0]
        assert f"Sources:\n[1] minutes-session-{session_id}.md — Minutes of session" in answer
        reply = next(
            m for m in await gw.store.sessions.delta(asked.session_id, 0) if m.role == "assistant"
        )
        # the citation opens the session: the admin API names it, its page is served
        cited = await client.get(f"/api/v1/kb/citations/{reply.id}", headers=headers)
        assert cited.status_code == 200, cited.text
        [citation] = cited.json()
        assert citation["document_id"] == document_id
        assert citation["minutes_of"] == session_id
        page = await client.get(f"/ops/sessions/{citation['minutes_of']}")
        assert page.status_code == 200
        opened = await client.get(f"/api/v1/sessions/{session_id}", headers=headers)
        assert opened.status_code == 200 and opened.json()["session"]["status"] == "closed"
        # ... and the asking session has the minutes as its evidence
        links = (await ops.session_detail(asked.session_id)).links
        assert [(x.link_type, x.target_ref, x.relation) for x in links] == [
            ("doc", f"kb-document:{document_id}", "evidence")
        ]
