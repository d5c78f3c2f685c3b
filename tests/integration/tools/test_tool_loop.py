"""The tool loop for AGENT=openai, end to end: a real gateway, the fake OpenAI server emitting
tool calls (parallel ones too), the built-in tools over the real store, and the sink surface."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import structlog

from gateway.agents.openai import OpenAIAgent
from gateway.runtime.gateway import Gateway
from gateway.tools.catalog import Tool, ToolCaller, ToolSpec
from testsupport.fakes.openai import FakeOpenAI, Step
from testsupport.fakes.sink import SinkAdapter
from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import running_gateway, wait_for


def agent_for(fake: FakeOpenAI) -> OpenAIAgent:
    return OpenAIAgent(base_url=fake.base_url, api_key="sk-test", model="small")


async def rows(gw: Gateway, session_id: int) -> list[dict[str, Any]]:
    async with gw.store.db.connection() as conn:
        found = await conn.fetch(
            "SELECT seq_no, role, content, model, metadata FROM messages "
            "WHERE session_id = $1 ORDER BY seq_no",
            session_id,
        )
    return [dict(r) for r in found]


async def deliveries(gw: Gateway, session_id: int) -> list[str]:
    async with gw.store.db.connection() as conn:
        found = await conn.fetch(
            "SELECT content FROM deliveries WHERE session_id = $1 ORDER BY seq_no, part_no",
            session_id,
        )
    return [r["content"] for r in found]


def call(name: str, arguments: Any = None, id: str | None = None) -> dict[str, Any]:
    return {"name": name, "arguments": arguments or {}, "id": id}


async def test_read_tools_in_parallel_results_fed_back_stored_in_order_only_answer_delivered(
    database_url: str, fake: FakeOpenAI, sink: SinkServer
) -> None:
    adapter = SinkAdapter(sink.url)
    async with running_gateway(
        database_url, adapters=[adapter], agent=agent_for(fake), web_chat=False, AGENT_MODEL="small"
    ) as gw:
        first = await adapter.submit(
            {"chat": "c", "thread": "A", "id": "1", "text": "the deploy key is kiwi-42"}
        )
        await wait_for(lambda: len(sink.accepted) == 1)
        fake.script.extend(
            [
                Step(
                    tool_calls=[
                        call("search_thread", {"query": "deploy key"}, "c1"),
                        call("current_time", {"timezone": "Europe/Berlin"}, "c2"),
                    ]
                ),
                Step(text="The deploy key is kiwi-42."),
            ]
        )
        await adapter.submit(
            {
                "chat": "c",
                "thread": "A",
                "id": "2",
                "text": "what did I say earlier about the key? and what time is it?",
            }
        )
        await wait_for(lambda: len(sink.accepted) == 2)
        stored = await rows(gw, first.session_id)
        sent = await deliveries(gw, first.session_id)
        metrics = gw.metrics.render().decode()
    assert sink.texts_in("c", "A")[-1] == "The deploy key is kiwi-42."
    # the second request carried the calls and both results, in the model's format
    ask, follow = fake.turn_requests[-2:]
    assert "search_thread" in ask.tool_names and "current_time" in ask.tool_names
    assistant, r1, r2 = follow.body["messages"][-3:]
    assert [c["id"] for c in assistant["tool_calls"]] == ["c1", "c2"]
    assert r1["role"] == "tool" and r1["tool_call_id"] == "c1" and "kiwi-42" in r1["content"]
    assert r2["tool_call_id"] == "c2" and "Europe/Berlin" in r2["content"]
    # stored: user, answer, user, assistant-with-calls, tool, tool, answer — dense seqs
    assert [r["role"] for r in stored] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]
    assert [r["seq_no"] for r in stored] == list(range(1, 8))
    calls_msg, res1, _, final = stored[3:]
    assert calls_msg["metadata"]["tool_calls"][0]["function"]["name"] == "search_thread"
    assert res1["metadata"]["tool_call_id"] == "c1" and res1["metadata"]["outcome"] == "ok"
    assert final["metadata"]["routing"]["domains"] == ["history", "time"]
    assert sorted(final["metadata"]["offered_tools"]) == ["current_time", "search_thread"]
    # only the two answers were delivered
    assert sent == ["re: the deploy key is kiwi-42", "The deploy key is kiwi-42."]
    assert 'gateway_tool_calls_total{outcome="ok",tool="search_thread"} 1.0' in metrics
    assert "gateway_tool_routing_decisions_total" in metrics


async def test_next_turn_prompt_carries_stored_calls_and_results_in_openai_format(
    database_url: str, fake: FakeOpenAI, sink: SinkServer
) -> None:
    adapter = SinkAdapter(sink.url)
    fake.script.extend(
        [Step(tool_calls=[call("current_time", {}, "t1")]), Step(text="It is noon."), Step()]
    )
    async with running_gateway(
        database_url, adapters=[adapter], agent=agent_for(fake), web_chat=False, AGENT_MODEL="small"
    ):
        await adapter.submit({"chat": "c", "thread": "B", "id": "1", "text": "what time is it?"})
        await wait_for(lambda: len(sink.accepted) == 1)
        await adapter.submit({"chat": "c", "thread": "B", "id": "2", "text": "and tomorrow?"})
        await wait_for(lambda: len(sink.accepted) == 2)
    messages = fake.turn_requests[-1].body["messages"][1:]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "user"]
    assert messages[1]["tool_calls"][0]["id"] == "t1"
    assert messages[2]["tool_call_id"] == "t1"
    assert messages[3]["content"] == "It is noon."


async def test_fail_closed_a_tool_never_offered_is_refused_by_name_and_never_runs(
    database_url: str, fake: FakeOpenAI, sink: SinkServer, tmp_path: Path
) -> None:
    ran: list[str] = []

    async def secret(args: Mapping[str, Any], caller: ToolCaller) -> str:
        ran.append("secret")
        return "the launch codes"

    tools_file = tmp_path / "tools.toml"
    tools_file.write_text(
        '[tools."x.malformed"]\ndomains = ["x"]\noperation = "maybe"\nrisk = "low"\n'
    )
    adapter = SinkAdapter(sink.url)
    fake.script.extend(
        [
            Step(tool_calls=[call("x.secret", {}, "s1"), call("x.malformed", {}, "s2")]),
            Step(text="I cannot do that."),
        ]
    )
    async with running_gateway(
        database_url,
        adapters=[adapter],
        agent=agent_for(fake),
        web_chat=False,
        AGENT_MODEL="small",
        GATEWAY_TOOLS_FILE=str(tools_file),
    ) as gw:
        assert gw.tools is not None
        spec = ToolSpec(name="x.secret", description="secret", parameters={}, source="test")
        gw.tools.catalog.add(Tool(spec=spec, handler=secret), defaults={})
        spec2 = ToolSpec(name="x.malformed", description="m", parameters={}, source="test")
        gw.tools.catalog.add(Tool(spec=spec2, handler=secret), defaults={})
        assert {x.name for x in gw.tools.catalog.left_out} == {"x.secret", "x.malformed"}
        out = await adapter.submit({"chat": "c", "thread": "C", "id": "1", "text": "x secret"})
        await wait_for(lambda: len(sink.accepted) == 1)
        stored = await rows(gw, out.session_id)
    assert ran == []
    for request in fake.turn_requests:
        assert "x.secret" not in request.tool_names and "x.malformed" not in request.tool_names
    results = [r for r in stored if r["role"] == "tool"]
    assert [r["metadata"]["outcome"] for r in results] == ["refused", "refused"]
    assert all("not available" in r["content"] for r in results)
    assert sink.texts_in("c", "C") == ["I cannot do that."]


async def test_tool_errors_timeouts_and_big_outputs_go_back_to_the_model_as_results(
    database_url: str, fake: FakeOpenAI, sink: SinkServer, tmp_path: Path
) -> None:
    async def boom(args: Mapping[str, Any], caller: ToolCaller) -> str:
        raise RuntimeError("disk on fire")

    async def slow(args: Mapping[str, Any], caller: ToolCaller) -> str:
        await asyncio.sleep(30)
        return "late"

    async def big(args: Mapping[str, Any], caller: ToolCaller) -> str:
        return "x" * 5000

    tools_file = tmp_path / "tools.toml"
    tools_file.write_text(
        "\n".join(
            f'[tools."t.{n}"]\ndomains = ["t"]\noperation = "read"\nrisk = "low"\n'
            f'aliases = ["tee"]\ntimeout_seconds = 0.3\nmax_output_chars = 200\n'
            for n in ("boom", "slow", "big")
        )
    )
    adapter = SinkAdapter(sink.url)
    fake.script.extend(
        [
            Step(
                tool_calls=[
                    call("t.boom", {}, "b"),
                    call("t.slow", {}, "s"),
                    call("t.big", {}, "g"),
                    call("t.big", "{not json", "j"),
                ]
            ),
            Step(text="Done."),
        ]
    )
    async with running_gateway(
        database_url,
        adapters=[adapter],
        agent=agent_for(fake),
        web_chat=False,
        AGENT_MODEL="small",
        GATEWAY_TOOLS_FILE=str(tools_file),
    ) as gw:
        assert gw.tools is not None
        for name, fn in (("t.boom", boom), ("t.slow", slow), ("t.big", big)):
            spec = ToolSpec(name=name, description=name, parameters={}, source="test")
            gw.tools.catalog.add(Tool(spec=spec, handler=fn), defaults={})
        out = await adapter.submit({"chat": "c", "thread": "D", "id": "1", "text": "tee time"})
        await wait_for(lambda: len(sink.accepted) == 1, timeout=15)
        stored = await rows(gw, out.session_id)
    results = {r["metadata"]["tool_call_id"]: r for r in stored if r["role"] == "tool"}
    assert results["b"]["metadata"]["outcome"] == "error"
    assert "RuntimeError" in results["b"]["content"]
    assert results["s"]["metadata"]["outcome"] == "timeout"
    assert results["g"]["metadata"]["outcome"] == "ok"
    # cut to the tools file's max_output_chars (200) with its marker included, at a line or
    # a space, never past it
    big_result = results["g"]["content"]
    assert len(big_result) <= 200 and "more characters cut ...]" in big_result
    assert "not valid JSON" in results["j"]["content"]
    assert sink.texts_in("c", "D") == ["Done."]


async def test_steps_are_capped_and_the_model_must_then_answer_without_tools(
    database_url: str, fake: FakeOpenAI, sink: SinkServer, tmp_path: Path
) -> None:
    tools_file = tmp_path / "tools.toml"
    tools_file.write_text("[settings]\nmax_steps = 2\n")
    adapter = SinkAdapter(sink.url)
    fake.script.extend(
        [Step(tool_calls=[call("current_time")]) for _ in range(2)] + [Step(text="Final.")]
    )
    with structlog.testing.capture_logs():
        async with running_gateway(
            database_url,
            adapters=[adapter],
            agent=agent_for(fake),
            web_chat=False,
            AGENT_MODEL="small",
            GATEWAY_TOOLS_FILE=str(tools_file),
        ):
            await adapter.submit({"chat": "c", "thread": "E", "id": "1", "text": "time now?"})
            await wait_for(lambda: len(sink.accepted) == 1)
    offered = [bool(r.tool_names) for r in fake.turn_requests]
    assert offered == [True, True, False]
    assert sink.texts_in("c", "E") == ["Final."]


async def test_the_offered_schemas_come_out_of_the_prompt_budget(
    database_url: str, fake: FakeOpenAI, sink: SinkServer
) -> None:
    adapter = SinkAdapter(sink.url)
    with structlog.testing.capture_logs() as logs:
        async with running_gateway(
            database_url,
            adapters=[adapter],
            agent=agent_for(fake),
            web_chat=False,
            AGENT_MODEL="small",
            AGENT_DEFAULT_CONTEXT_WINDOW=4096,
            AGENT_MAX_OUTPUT_TOKENS=96,
        ):
            await adapter.submit({"chat": "c", "thread": "F", "id": "1", "text": "hello"})
            await wait_for(lambda: len(sink.accepted) == 1)
    [routing] = [e for e in logs if e["event"] == "tool_routing"]
    [context] = [e for e in logs if e["event"] == "turn_context"]
    assert routing["schema_tokens"] > 50 and routing["phase"] == "explore"
    # budget = window - output - calibrated schema tokens
    assert 4096 - 96 - context["prompt_budget"] >= routing["schema_tokens"]
    sent_schema = json.dumps(fake.turn_requests[0].body["tools"])
    assert len(fake.turn_requests[0].body["tools"]) == len(routing["offered"])
    assert sent_schema


async def test_sessions_show_and_the_admin_api_display_calls_results_and_routing(
    database_url: str, fake: FakeOpenAI, sink: SinkServer, capsys: Any
) -> None:
    from gateway.ops.sessions_cli import _sessions_show
    from testsupport.harness import make_settings

    adapter = SinkAdapter(sink.url)
    fake.script.extend([Step(tool_calls=[call("current_time", {}, "t9")]), Step(text="Noon.")])
    async with running_gateway(
        database_url, adapters=[adapter], agent=agent_for(fake), web_chat=False, AGENT_MODEL="small"
    ) as gw:
        out = await adapter.submit({"chat": "c", "thread": "G", "id": "1", "text": "time?"})
        await wait_for(lambda: len(sink.accepted) == 1)
        import httpx

        async with httpx.AsyncClient() as client:
            page = (await client.get(f"{gw.url}api/v1/sessions/{out.session_id}/messages")).json()
    code = await _sessions_show(make_settings(database_url), str(out.session_id), 0, 100)
    shown = capsys.readouterr().out
    assert code == 0
    assert "-> call t9: current_time({})" in shown
    assert "<- result of t9 (current_time): ok" in shown
    assert "routing: phase=lookup domains=time confidence=1.0" in shown
    roles = [(m["role"], bool(m["metadata"].get("tool_calls"))) for m in page["items"]]
    assert roles == [("user", False), ("assistant", True), ("tool", False), ("assistant", False)]
    assert page["items"][-1]["metadata"]["offered_tools"] == ["current_time"]


async def test_search_knowledge_reads_the_thread_scoped_knowledge_base(
    database_url: str, fake: FakeOpenAI, sink: SinkServer
) -> None:
    """the knowledge-search tool uses the retriever a turn uses, over the
    same scopes (this thread's documents, its chat's, ``default``), and never another
    thread's documents."""
    from gateway.knowledge.places import thread_kb
    from session_store.values import SessionKey

    adapter = SinkAdapter(sink.url)
    async with running_gateway(
        database_url, adapters=[adapter], agent=agent_for(fake), web_chat=False, AGENT_MODEL="small"
    ) as gw:
        here = SessionKey(platform="sink", scope="test", chat_id="c", thread_id="K")
        elsewhere = SessionKey(platform="sink", scope="test", chat_id="c", thread_id="other")
        mine = await gw.knowledge.add(
            "runbook.md", b"# Deploys\n\nThe deploy window is Tuesday 14:00.", kb=thread_kb(here)
        )
        theirs = await gw.knowledge.add(
            "secret.md", b"# Deploys\n\nThe vault code is 4711.", kb=thread_kb(elsewhere)
        )

        async def ready() -> bool:
            docs = [await gw.knowledge.store.get_document(d.document.id) for d in (mine, theirs)]
            return all(d is not None and d.state == "ready" for d in docs)

        await wait_for(ready, timeout=20)
        fake.script.extend(
            [
                Step(tool_calls=[call("search_knowledge", {"query": "deploy window"}, "k1")]),
                Step(text="Tuesday at 14:00."),
            ]
        )
        await adapter.submit(
            {"chat": "c", "thread": "K", "id": "1", "text": "look up the deploy window"}
        )
        await wait_for(lambda: sink.texts_in("c", "K") == ["Tuesday at 14:00."], timeout=20)
    ask, follow = fake.turn_requests[-2:]
    assert "search_knowledge" in ask.tool_names
    result = follow.body["messages"][-1]
    assert result["role"] == "tool" and result["tool_call_id"] == "k1"
    passages = json.loads(result["content"])
    assert [p["document"] for p in passages] == ["runbook.md"]
    assert "Tuesday 14:00" in passages[0]["text"] and "4711" not in result["content"]


async def test_a_citation_of_a_tool_search_resolves_to_the_passage_the_tool_gave(
    database_url: str, fake: FakeOpenAI, sink: SinkServer
) -> None:
    """One numbering per answer: the turn is given the lunch menu as [1]; the model's own
    search returns the runbook under the next number, [2]; the answer's [2] is footnoted with
    the runbook (not with a pre-turn passage), and an invented [7] is dropped."""
    from gateway.knowledge.places import thread_kb
    from session_store.values import SessionKey

    adapter = SinkAdapter(sink.url)
    async with running_gateway(
        database_url, adapters=[adapter], agent=agent_for(fake), web_chat=False, AGENT_MODEL="small"
    ) as gw:
        here = SessionKey(platform="sink", scope="test", chat_id="c", thread_id="N")
        docs = [
            await gw.knowledge.add(name, body, kb=thread_kb(here))
            for name, body in (
                ("menu.md", b"# Lunch\n\nLunch on Friday is tomato soup."),
                ("runbook.md", b"# Deploys\n\nThe deploy window is Tuesday 14:00."),
            )
        ]

        async def ready() -> bool:
            found = [await gw.knowledge.store.get_document(d.document.id) for d in docs]
            return all(d is not None and d.state == "ready" for d in found)

        await wait_for(ready, timeout=20)
        fake.script.extend(
            [
                Step(tool_calls=[call("search_knowledge", {"query": "deploy window"}, "k1")]),
                Step(text="Soup on Friday [1]; deploys on Tuesday [2], says [7]."),
            ]
        )
        await adapter.submit(
            {"chat": "c", "thread": "N", "id": "1", "text": "what is for lunch on Friday?"}
        )
        await wait_for(lambda: len(sink.texts_in("c", "N")) == 1, timeout=20)
    ask, follow = fake.turn_requests[-2:]
    system = ask.body["messages"][0]["content"]
    assert "[1] menu.md — Lunch" in system and "runbook.md" not in system
    shown = json.loads(follow.body["messages"][-1]["content"])
    assert (shown[0]["n"], shown[0]["document"]) == (2, "runbook.md")
    (text,) = sink.texts_in("c", "N")
    assert text.endswith("Sources:\n[1] menu.md — Lunch\n[2] runbook.md — Deploys")
