"""Long conversations: the prompt stays inside the model's window for 2,000 messages, and
rolling summaries are written off the hot path and then used."""

from __future__ import annotations

import itertools
import random
import re

from gateway.agents.base import EchoAgent, Turn
from gateway.agents.openai import OpenAIAgent
from gateway.agents.prompt import TokenCounter
from gateway.core.domain import Envelope, ReplyTarget, Sender, SessionKey
from gateway.inbound.intake import to_inbound
from gateway.turns.context import ContextAssembler, ContextPolicy
from gateway.turns.summaries import SummaryJob, SummaryWorker
from session_store.records import OutgoingReply
from session_store.store import Store
from testsupport.fakes.openai import FakeOpenAI, Step
from testsupport.fakes.sink import SinkAdapter
from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import running_gateway, wait_for

KEY = SessionKey(platform="sink", scope="test", chat_id="long", thread_id="T")
TARGET = ReplyTarget(platform="sink", scope="test", chat_id="long", thread_id="T")

WORDS = "deploy rollback latency budget postgres index vacuum thread topic reply".split()


def chat_text(rng: random.Random, i: int) -> str:
    """Messages of every kind a team chat has, from one word to pasted logs."""
    kind = rng.choice(["short", "short", "prose", "prose", "code", "hex", "cjk", "emoji", "log"])
    if kind == "short":
        return f"m{i} ok " + rng.choice(WORDS)
    if kind == "prose":
        return f"m{i} " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 120))) + "."
    if kind == "code":
        return f"m{i}\n```python\n" + "def f(x):\n    return x * 2  # why\n" * 8 + "```"
    if kind == "hex":
        return f"m{i} trace " + " ".join(f"{rng.getrandbits(64):016x}" for _ in range(20))
    if kind == "cjk":
        return f"m{i} 会议改到下午三点。请确认部署计划。" * rng.randint(1, 8)
    if kind == "emoji":
        return f"m{i} ship it 🚀🙏👍🏽 " * rng.randint(1, 10)
    return f"m{i} log\n" + "\n".join(
        f"2026-11-29T10:{n:02d}:00Z ERROR worker-{n} timeout after 30s" for n in range(60)
    )


def envelope(i: int, text: str) -> Envelope:
    return Envelope(
        key=KEY,
        target=TARGET,
        message_id=f"u{i}",
        text=text,
        sender=Sender(id="ann", name="ann"),
    )


async def test_context_never_exceeds_the_window_across_a_2000_message_session(
    store: Store, fake: FakeOpenAI
) -> None:
    window, reserved = 4096, 512
    policy = ContextPolicy(
        default_model="tiny",
        window_overrides={"tiny": window},
        max_output_tokens=reserved,
        summary_tokens=256,
    )
    assembler = ContextAssembler(store, policy, TokenCounter())
    agent = OpenAIAgent(
        base_url=fake.base_url, api_key=None, model="tiny", max_output_tokens=reserved
    )
    summaries = SummaryWorker(store, agent, assembler)
    rng = random.Random(6)
    budget = policy.prompt_budget("tiny")
    sizes: list[int] = []
    try:
        for i in range(1000):  # 1,000 questions + 1,000 answers
            text = chat_text(rng, i)
            if i == 500:  # a paste bigger than the whole window, as the newest message
                text = "m500 paste " + " ".join(f"{rng.getrandbits(32):08x}" for _ in range(4000))
            stored = await store.inbox.ingest(to_inbound(envelope(i, text)), raw=None)
            assert stored.seq_no is not None and stored.session_id is not None
            claim = await store.turns.claim_turn(lease_seconds=30, platforms=["sink"])
            assert claim is not None
            answer = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 150)))
            if i % 10 == 9 or i == 500:  # the real path: assemble, call the server
                ctx = await assembler.assemble(
                    session_id=claim.session_id,
                    key=KEY,
                    target=TARGET,
                    upto_seq=stored.seq_no,
                    question_seq=stored.seq_no,
                    user_id="ann",
                )
                [reply] = await agent.respond(
                    Turn(
                        session_id=claim.session_id,
                        key=KEY,
                        target=TARGET,
                        context=ctx.messages,
                        new_messages=ctx.messages[-1:],
                        model=ctx.model,
                        system_prompt=ctx.system_prompt,
                        max_output_tokens=reserved,
                    )
                )
                request = fake.turn_requests[-1]
                # what the server counted, plus the output it may write, fits the window
                assert request.true_prompt_tokens + reserved <= window, i
                assert ctx.estimated_tokens <= budget
                assert request.contents("user")[-1].startswith(f"m{i}")
                sizes.append(request.true_prompt_tokens)
                assembler.counter.observe(
                    "tiny", raw=ctx.raw_tokens, actual=reply.metadata["usage"]["prompt_tokens"]
                )
                if ctx.evicted:  # the cold path, run inline here to keep the test exact
                    await summaries.summarize(
                        SummaryJob(
                            session_id=claim.session_id,
                            model="tiny",
                            upto_seq=stored.seq_no,
                            keep_raw=ctx.history_raw_budget // 2,
                        )
                    )
                answer = reply.text[:2000]
            await store.outbox.finish_turn_outbox(
                claim,
                handled_seq=stored.seq_no,
                replies=[
                    OutgoingReply(
                        content=answer, parts=[answer], metadata={"answers_seq": stored.seq_no}
                    )
                ],
                target=TARGET,
            )
        assert claim is not None
        session = await store.sessions.get_session(claim.session_id)
        written = await store.summaries.summaries(claim.session_id)
        stored_rows = await store.sessions.delta(claim.session_id, 0, limit=5000)
    finally:
        await agent.aclose()
    # the 2,000 messages, and each rolling summary kept in the transcript (kind rolling)
    rolling = [r for r in stored_rows if r.kind == "rolling"]
    assert session.message_count == 2000 + len(rolling)
    assert [r.content for r in rolling] == [w.content for w in written]
    seq_of = {
        int(found.group(1)): r.seq_no
        for r in stored_rows
        if r.role == "user" and (found := re.match(r"m(\d+)", r.content))
    }
    assert len(sizes) == 101 and max(sizes) + reserved <= window
    # bounded, yet the window is used: later prompts are not starved
    assert min(sizes[20:]) > 0.25 * budget
    assert written and written[-1].model_written and written[-1].to_seq > 1500
    assert all(a.to_seq < b.to_seq for a, b in itertools.pairwise(written))
    # every late prompt is a summary + messages after it, none of them covered by it twice
    ends = {s.to_seq for s in written}
    for request in fake.turn_requests[-30:]:
        covered = re.search(r"messages 1-(\d+), written by a model", request.system)
        first = re.match(r"m(\d+)", request.contents("user")[0])
        assert covered is not None and first is not None
        assert int(covered.group(1)) in ends
        assert seq_of[int(first.group(1))] > int(covered.group(1))


async def test_summaries_are_written_off_the_hot_path_and_then_used(
    database_url: str, fake: FakeOpenAI, sink: SinkServer
) -> None:
    fake.summary_script.append(Step(text="SUMMARY-ONE: ann planned the rollout", delay=1.0))
    adapter = SinkAdapter(sink.url)
    async with running_gateway(
        database_url,
        adapters=[adapter],
        agent=OpenAIAgent(base_url=fake.base_url, api_key=None, model="tiny"),
        web_chat=False,
        AGENT_MODEL="tiny",
        AGENT_CONTEXT_WINDOWS="tiny=2048",
        AGENT_MAX_OUTPUT_TOKENS=256,
        AGENT_SUMMARY_TOKENS=128,
    ) as gw:
        evicted_at = None
        for i in range(40):
            words = " ".join(WORDS[(i + n) % len(WORDS)] for n in range(60))
            out = await adapter.submit(
                {"chat": "c", "thread": "S", "id": str(i), "text": f"message {i}: {words}"}
            )
            await wait_for(lambda: len(sink.accepted) == i + 1)  # noqa: B023 - awaited at once
            if not fake.turn_requests[-1].contents("user")[0].startswith("message 0:"):
                evicted_at = i  # this turn left older turns out: it asked for a summary
                break
        assert evicted_at is not None, "the budget never evicted anything"
        # the reply is out while the summary, which takes a second to write, is not
        assert await gw.store.summaries.summaries(out.session_id) == []
        await wait_for(lambda: fake.summary_requests, timeout=5)
        assert fake.summary_requests[0].finished is None
        [summary] = await wait_for(lambda: gw.store.summaries.summaries(out.session_id), timeout=5)
        assert summary.model_written and summary.model == "tiny"
        assert summary.from_seq == 1 and summary.to_seq >= 2
        assert summary.content == "SUMMARY-ONE: ann planned the rollout"
        # the summary's model call is in the usage ledger, charged to the place
        charged = await gw.store.usage.ledger(out.session_id)
        [summary_call] = [r for r in charged if r.kind == "summary"]
        assert summary_call.account is None and summary_call.place == "sink:test:c"
        assert summary_call.prompt_tokens == fake.summary_requests[0].true_prompt_tokens
        summarized = fake.summary_requests[0].contents("user")[0]
        assert "message 0:" in summarized and f"message {evicted_at}:" not in summarized

        # the summary is kept in the transcript too, as a system message of kind rolling
        [rolling] = [
            m for m in await gw.store.sessions.messages(out.session_id) if m.kind == "rolling"
        ]
        assert rolling.role == "system" and rolling.content == summary.content
        assert rolling.metadata["from_seq"] == 1
        assert rolling.metadata["to_seq"] == summary.to_seq
        assert rolling.metadata["model_written"] is True

        await adapter.submit({"chat": "c", "thread": "S", "id": "next", "text": "and now?"})
        await wait_for(lambda: len(sink.accepted) == evicted_at + 2)
    after = fake.turn_requests[-1]
    assert "SUMMARY-ONE: ann planned the rollout" in after.system
    # ... which the context never reads back: the summary is in the prompt once
    assert (
        sum(
            c.count("SUMMARY-ONE")
            for r in ("system", "user", "assistant")
            for c in after.contents(r)
        )
        == 1
    )
    assert f"messages 1-{summary.to_seq}, written by a model" in after.system
    assert all(not c.startswith("message 0:") for c in after.contents("user"))
    assert after.contents("user")[-1] == "and now?"


async def test_agents_without_a_summarizer_get_extractive_summaries(
    database_url: str, sink: SinkServer
) -> None:
    adapter = SinkAdapter(sink.url)
    async with running_gateway(
        database_url,
        adapters=[adapter],
        agent=EchoAgent(),
        web_chat=False,
        AGENT_MODEL="tiny",
        AGENT_CONTEXT_WINDOWS="tiny=1400",
        AGENT_MAX_OUTPUT_TOKENS=256,
        AGENT_SUMMARY_TOKENS=256,
    ) as gw:
        for i in range(12):
            words = " ".join(WORDS[(i + n) % len(WORDS)] for n in range(80))
            out = await adapter.submit(
                {"chat": "c", "thread": "E", "id": str(i), "text": f"note {i}: {words}"}
            )
            await wait_for(lambda: len(sink.accepted) == i + 1)  # noqa: B023 - awaited at once
        written = await wait_for(lambda: gw.store.summaries.summaries(out.session_id), timeout=5)
        messages = await gw.store.sessions.messages(out.session_id, limit=200)
    assert not written[0].model_written and written[0].model is None
    # without a model the rolling summary is extractive, and kept as a message of kind rolling
    rolling = [m for m in messages if m.kind == "rolling"]
    assert [m.content for m in rolling][: len(written)] == [w.content for w in written]
    assert all(m.role == "system" and m.model is None for m in rolling)
    assert rolling[0].metadata["model_written"] is False
    assert written[0].content.startswith("Excerpts of earlier messages")
    first = written[0]
    assert "- [1] tester: note 0:" in first.content  # excerpts, each line one message
    assert f"[{first.to_seq}] assistant: echo: note" in first.content
