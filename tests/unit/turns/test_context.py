"""Context assembly, pure parts: the window table, model resolution, the token estimate and
its calibration, whole-turn eviction (a property test over random transcripts), placing
replies, and the place sentence of the system prompt."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.agents.base import ContextMessage
from gateway.agents.prompt import (
    UNCALIBRATED_FACTOR,
    TokenCounter,
    context_window,
    estimate_text,
    render_message,
    render_prompt,
)
from gateway.core.domain import Place, ReplyTarget, SessionKey
from gateway.core.errors import ContextTooSmall
from gateway.turns.context import (
    MIN_TRUNCATE_CHARS,
    ContextPolicy,
    describe_place,
    fit_turns,
    group_turns,
    prompt_order,
    resolve_model,
    truncate_message,
)
from session_store.records import ContextRecord
from testsupport.fakes.openai import realistic_tokens

# --- windows and budgets --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "overrides", "expected"),
    [
        ("gpt-4o-mini", {}, 128_000),
        ("gpt-4o-2024-08-06", {}, 128_000),
        ("openai/gpt-4o", {}, 128_000),
        ("gpt-4", {}, 8_192),
        ("gpt-4-turbo-preview", {}, 128_000),
        ("gpt-4.1-mini", {}, 1_047_576),
        ("llama3.1:8b", {}, 131_072),
        ("meta-llama/Llama-3.1-8B-Instruct", {}, 131_072),
        ("llama3:8b", {}, 8_192),
        ("llama3.1:8b", {"llama3.1:8b": 4096}, 4096),  # what the local server really runs
        ("GPT-4o", {"gpt-4o": 9000}, 9000),
        ("some-local-finetune", {}, 8192),  # unknown: the conservative default
    ],
)
def test_each_model_has_its_own_window(
    model: str, overrides: dict[str, int], expected: int
) -> None:
    assert context_window(model, overrides=overrides, default=8192) == expected


def test_prompt_budget_is_window_minus_output_and_tools_and_can_be_capped() -> None:
    policy = ContextPolicy(default_model="gpt-4", max_output_tokens=1000)
    assert policy.prompt_budget("gpt-4") == 8192 - 1000
    assert policy.prompt_budget("gpt-4", tool_tokens=500) == 8192 - 1000 - 500
    assert policy.prompt_budget("gpt-4o") == 128_000 - 1000
    capped = ContextPolicy(max_output_tokens=1000, max_prompt_tokens=4000)
    assert capped.prompt_budget("gpt-4o") == 4000
    assert capped.prompt_budget("gpt-4") == 4000


# --- sticky model resolution ----------------------------------------------------------------

ALLOWED = ("small", "big", "huge")


@pytest.mark.parametrize(
    ("session", "user", "allowed", "expected"),
    [
        (None, None, ALLOWED, ("small", "default")),
        ("big", None, ALLOWED, ("big", "session")),
        (None, "huge", ALLOWED, ("huge", "user")),
        ("big", "huge", ALLOWED, ("big", "session")),  # the session's choice wins
        ("gone", "huge", ALLOWED, ("huge", "user")),  # left the allow-list: next layer
        ("gone", "also-gone", ALLOWED, ("small", "default")),
        ("big", "huge", ("small", "huge"), ("huge", "user")),  # big was removed later
        ("big", None, ("small",), ("small", "default")),
        ("", "big", ALLOWED, ("big", "user")),
    ],
)
def test_model_resolution_session_then_person_then_default(
    session: str | None, user: str | None, allowed: tuple[str, ...], expected: tuple[str, str]
) -> None:
    assert (
        resolve_model(session_choice=session, user_choice=user, allowed=allowed, default="small")
        == expected
    )


# --- token estimate -------------------------------------------------------------------------

SAMPLES = {
    "prose": "The quick brown fox jumps over the lazy dog, then writes a short report about "
    "its day. It was sunny; nobody complained. " * 20,
    "code": "def handler(event: dict[str, Any]) -> None:\n    if event.get('type') == 'x':\n"
    "        return process(event['payload'], retries=3)  # why not\n" * 20,
    "hex": "3f2a9c0b7e1d4a6f8c2b5e9d0a1f3c7e " * 40,
    "base64": "SGVsbG8gd29ybGQhIFRoaXMgaXMgYmFzZTY0IGVuY29kZWQgdGV4dC4=" * 20,
    "cjk": "今天天气很好\uff0c我们去公园散步吧。会议改到下午三点。" * 30,
    "cyrillic": "Привет! Давай обсудим план на завтра и сроки релиза. " * 30,
    "emoji": "ship it 🚀🚀 thanks 🙏 great work 👍🏽 " * 30,
    "numbers": "order 1234567 costs 89.50 EUR, ref 2024-11-29T10:00:00Z; " * 30,
}


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_the_uncalibrated_estimate_is_not_below_a_realistic_tokenizer(kind: str) -> None:
    text = SAMPLES[kind]
    assert math.ceil(estimate_text(text) * UNCALIBRATED_FACTOR) >= realistic_tokens(text)


def test_dense_text_costs_more_than_prose_of_the_same_length() -> None:
    prose, hex_ids = SAMPLES["prose"][:1000], SAMPLES["hex"][:1000]
    assert estimate_text(hex_ids) > 1.5 * estimate_text(prose)
    assert estimate_text("") == 0
    assert estimate_text("a") >= 1


def test_calibration_follows_the_worst_reported_ratio_within_bounds() -> None:
    counter = TokenCounter(max_models=2)
    assert counter.factor("m") == UNCALIBRATED_FACTOR
    counter.observe("m", raw=1000, actual=2000)
    counter.observe("m", raw=1000, actual=1500)
    assert counter.factor("m") == pytest.approx(2.0 * 1.05)  # the worst ratio, with margin
    assert counter.calibrated("m", 100) == 210
    counter.observe("m", raw=10, actual=1000)  # tiny prompts say nothing about text
    assert counter.factor("m") == pytest.approx(2.1)
    counter.observe("cheap", raw=1000, actual=100)
    assert counter.factor("cheap") == 0.6  # never trusts a huge overestimate fully
    counter.observe("wild", raw=1000, actual=100_000)
    assert counter.factor("wild") == 4.0
    assert counter.factor("m") == UNCALIBRATED_FACTOR  # bounded: the oldest model dropped


# --- turns and eviction ---------------------------------------------------------------------


def _m(seq: int, role: str, content: str = "x", **kw: object) -> ContextMessage:
    return ContextMessage(seq_no=seq, role=role, content=content, **kw)  # type: ignore[arg-type]


def test_turns_are_user_runs_and_everything_answering_them() -> None:
    transcript = [
        _m(1, "assistant"),  # answers something summarized away
        _m(2, "user"),
        _m(3, "user"),
        _m(4, "assistant", tool_calls=({"id": "c1"},)),
        _m(5, "tool", tool_call_id="c1"),
        _m(6, "assistant"),
        _m(7, "user"),
    ]
    assert [[m.seq_no for m in g] for g in group_turns(transcript)] == [[1], [2, 3, 4, 5, 6], [7]]


def test_replies_sit_after_what_they_answered_not_after_messages_that_came_meanwhile() -> None:
    rows = [
        ContextRecord(id=1, seq_no=1, role="user", content="first"),
        *[ContextRecord(id=i, seq_no=i, role="user", content=f"burst {i}") for i in range(2, 7)],
        ContextRecord(id=7, seq_no=7, role="assistant", content="re: first", answers_seq=1),
    ]
    assert [r.seq_no for r in prompt_order(rows)] == [1, 7, 2, 3, 4, 5, 6]


COUNTER = TokenCounter()


def cost(m: ContextMessage) -> int:
    return COUNTER.message(render_message(m))


@st.composite
def transcripts(draw: st.DrawFn) -> list[ContextMessage]:
    text = st.text(
        # ASCII, Cyrillic (a, b, v), CJK and an emoji
        alphabet=st.sampled_from("abcdefghij klmnop,.\n0123456789\u0430\u0431\u0432日本🙂"),
        max_size=1500,
    )
    messages: list[ContextMessage] = []
    seq = 0
    call = 0

    def add(role: str, **kw: object) -> None:
        nonlocal seq
        seq += 1
        messages.append(_m(seq, role, draw(text), **kw))

    for _ in range(draw(st.integers(1, 12))):
        for _ in range(draw(st.integers(1, 3))):
            add("user")
        for _ in range(draw(st.integers(0, 2))):  # tool rounds
            ids = [f"call{call + i}" for i in range(draw(st.integers(1, 3)))]
            call += len(ids)
            add("assistant", tool_calls=tuple({"id": i, "type": "function"} for i in ids))
            for i in ids:
                add("tool", tool_call_id=i)
        if draw(st.booleans()):
            add("assistant")
    return messages


def _valid(kept: list[ContextMessage]) -> bool:
    """What a chat-completions server accepts: every tool result follows the assistant
    message that called it, and every call has its result."""
    open_calls: set[str] = set()
    for m in kept:
        if m.role == "assistant":
            if open_calls:
                return False
            open_calls = {str(c["id"]) for c in m.tool_calls}
        elif m.role == "tool":
            if m.tool_call_id not in open_calls:
                return False
            open_calls.discard(m.tool_call_id)
        elif open_calls:
            return False
    return not open_calls


def _min_cost(m: ContextMessage) -> int:
    if len(m.content) <= MIN_TRUNCATE_CHARS:
        return cost(m)
    return cost(truncate_message(m, target=1, cost=cost))


@pytest.mark.untraced  # hypothesis: see tests/integration/http/test_fuzz_routes.py
@settings(
    max_examples=300,
    deadline=None,
    database=None,  # no .hypothesis directory in the tree
    suppress_health_check=[HealthCheck.too_slow],
)
@given(transcript=transcripts(), budget=st.integers(20, 6000))
def test_eviction_keeps_whole_turns_under_the_budget(
    transcript: list[ContextMessage], budget: int
) -> None:
    groups = group_turns(transcript)
    newest = groups[-1]
    try:
        fit = fit_turns(transcript, budget=budget, cost=cost)
    except ContextTooSmall:
        # only when even the newest turn, shortened and without its older unanswered
        # questions, cannot fit
        needed = [m for m in newest if m.role != "user"] + [
            [m for m in newest if m.role == "user"][-1]
        ]
        assert sum(_min_cost(m) for m in needed) > budget
        return
    kept = fit.messages
    assert sum(cost(m) for m in kept) <= budget
    assert _valid(kept)
    assert kept[-1].seq_no == transcript[-1].seq_no  # the newest message is always there
    if fit.truncated_messages or fit.dropped_messages:
        # the newest turn alone was too big: nothing older, nothing of it lost but older
        # unanswered questions, contents shortened in the middle
        assert all(m.seq_no >= newest[0].seq_no for m in kept)
        kept_seqs = {m.seq_no for m in kept}
        assert all(m.seq_no in kept_seqs for m in newest if m.role != "user")
        return
    # a suffix of whole turns, oldest first, untouched
    assert kept == transcript[len(transcript) - len(kept) :]
    kept_groups = group_turns(kept)
    assert kept_groups == groups[len(groups) - len(kept_groups) :]
    if len(kept_groups) < len(groups):  # the next older turn really did not fit
        older = groups[len(groups) - len(kept_groups) - 1]
        assert sum(cost(m) for m in kept) + sum(cost(m) for m in older) > budget
    assert fit.evicted_messages == len(transcript) - len(kept)


def test_a_huge_newest_message_is_shortened_in_the_middle_not_dropped() -> None:
    question = "START " + "lorem ipsum dolor " * 3000 + " END?"
    transcript = [_m(1, "user", "earlier"), _m(2, "assistant", "answer"), _m(3, "user", question)]
    fit = fit_turns(transcript, budget=500, cost=cost)
    [kept] = fit.messages
    assert kept.seq_no == 3 and fit.truncated_messages == 1 and fit.evicted_messages == 2
    assert kept.content.startswith("START") and kept.content.endswith("END?")
    assert "characters omitted to fit the context window" in kept.content
    assert cost(kept) <= 500


def test_rendering_names_people_and_keeps_tool_pairs() -> None:
    rendered = render_prompt(
        "sys",
        [
            _m(1, "user", "hi", sender_name="Ann Lee!"),
            _m(2, "assistant", "", tool_calls=({"id": "c1", "type": "function"},)),
            _m(3, "tool", "42", tool_call_id="c1"),
        ],
    )
    assert rendered == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hi", "name": "Ann_Lee"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function"}]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]


# --- where the conversation is ----------------------------------------------------------------


def test_the_place_names_platform_chat_and_the_thread_the_reply_goes_to() -> None:
    key = SessionKey(platform="telegram", scope="bot1", chat_id="-100123", thread_id="42")
    target = ReplyTarget(platform="telegram", scope="bot1", chat_id="-100123", thread_id="42")
    text = describe_place(key, target, place=Place(chat_name="Team\nOps"), title="deploy plan")
    assert "Telegram" in text and '"Team Ops"' in text and "forum topic 42" in text
    assert "deploy plan" in text and "same forum topic" in text

    key = SessionKey(platform="slack", scope="T1", chat_id="C9", thread_id="1700.1")
    target = ReplyTarget(platform="slack", scope="T1", chat_id="C9", thread_id="1700.1")
    text = describe_place(key, target, place=Place())
    assert "Slack, channel C9, thread 1700.1" in text

    key = SessionKey(platform="telegram", scope="bot1", chat_id="77")
    target = ReplyTarget(platform="telegram", scope="bot1", chat_id="77")
    text = describe_place(key, target, place=Place(direct=True))
    assert "a direct conversation" in text and "no thread" in text
