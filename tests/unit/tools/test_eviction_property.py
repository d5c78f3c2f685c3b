"""Whole-turn eviction never separates a tool call from its result (property test)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.agents.base import ContextMessage
from gateway.agents.prompt import TokenCounter, render_message, render_prompt
from gateway.turns.context import fit_turns

counter = TokenCounter()


def cost(m: ContextMessage) -> int:
    return counter.message(render_message(m))


@st.composite
def transcripts(draw: st.DrawFn) -> list[ContextMessage]:
    out: list[ContextMessage] = []
    seq = 0
    for turn in range(draw(st.integers(1, 8))):
        for _ in range(draw(st.integers(1, 2))):
            seq += 1
            words = draw(st.integers(1, 60))
            out.append(ContextMessage(seq_no=seq, role="user", content="word " * words))
        for step in range(draw(st.integers(0, 3))):
            n = draw(st.integers(1, 3))
            ids = [f"c{turn}_{step}_{i}" for i in range(n)]
            seq += 1
            calls = tuple(
                {"id": i, "type": "function", "function": {"name": "t", "arguments": "{}"}}
                for i in ids
            )
            out.append(ContextMessage(seq_no=seq, role="assistant", content="", tool_calls=calls))
            for i in ids:
                seq += 1
                size = draw(st.integers(1, 200))
                out.append(
                    ContextMessage(seq_no=seq, role="tool", content="r " * size, tool_call_id=i)
                )
        seq += 1
        out.append(ContextMessage(seq_no=seq, role="assistant", content="answer"))
    return out


@pytest.mark.untraced  # hypothesis: see tests/integration/http/test_fuzz_routes.py
@settings(max_examples=300, deadline=None)
@given(transcripts(), st.integers(60, 3000))
def test_eviction_keeps_each_call_with_its_results(
    messages: list[ContextMessage], budget: int
) -> None:
    try:
        fit = fit_turns(messages, budget=budget, cost=cost)
    except Exception as exc:  # noqa: BLE001 - ContextTooSmall is a legal outcome here
        assert type(exc).__name__ == "ContextTooSmall"
        return
    kept = fit.messages
    called = {c["id"] for m in kept for c in m.tool_calls}
    answered = {m.tool_call_id for m in kept if m.role == "tool"}
    assert called == answered  # no call without its result, no result without its call
    # the kept transcript is a valid chat: starts with a user message, every tool result
    # follows the assistant message that called it
    assert kept[0].role == "user"
    open_calls: set[str] = set()
    for m in render_prompt("", kept):
        if m.get("tool_calls"):
            open_calls = {c["id"] for c in m["tool_calls"]}
        elif m["role"] == "tool":
            assert m["tool_call_id"] in open_calls
