"""Time to first visible text: a question in a Telegram forum topic (and in a
private chat, where drafts are used), answered by the OpenAI agent from the fake model
server streaming its answer in chunks; the fake Bot API is watched for the first bot text in
the thread and for the final text. The same with ``GATEWAY_STREAMING=false`` for comparison:
there the first visible text is the final one."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from adapters.telegram.adapter import TelegramAdapter
from adapters.telegram.settings import TelegramSettings
from benchmarks.common import scratch_database, summarize
from gateway.agents.openai import OpenAIAgent
from gateway.core.settings import Settings
from gateway.runtime.gateway import Gateway
from session_store.store import Store
from testsupport.fakes.openai import FakeOpenAI, Step
from testsupport.fakes.telegram import Chat, FakeTelegram

BOT = "@GatewayTestBot"


def _answer(chars: int) -> str:
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < chars:
        words.append(f"word{len(words)}")
    return "Here is the **answer**: " + " ".join(words) + "."


async def _watch(condition: Callable[[], bool], started: float, within: float = 60.0) -> float:
    while not condition():
        if time.perf_counter() - started > within:
            raise TimeoutError("the answer did not show")
        await asyncio.sleep(0.002)
    return time.perf_counter() - started


def _tail(fake: FakeOpenAI) -> float:
    """Seconds from the model's last token (the fake server ended its answer) to now, just
    after the final text showed (polled every 2 ms)."""
    now = time.monotonic()
    last = fake.requests[-1].finished
    if last is None:
        raise RuntimeError("the model's answer did not end")
    return now - last


async def _one_mode(
    srv: Any, *, streaming: bool, runs: int, chunk_delay: float, chars: int
) -> dict[str, Any]:
    out: dict[str, list[float]] = {
        "topic_first": [],
        "topic_final": [],
        "dm_first": [],
        "dm_final": [],
        "topic_tail": [],
        "dm_tail": [],
    }
    async with (
        scratch_database(srv) as dsn,
        FakeTelegram() as tg,
    ):
        fake = await FakeOpenAI(
            chunk_delay=chunk_delay, chunk_chars=8, paced_plain_answers=True
        ).start()
        store = await Store.connect(dsn, min_size=1, max_size=10)
        values: dict[str, Any] = {
            "DATABASE_URL": dsn,
            "GATEWAY_HTTP_PORT": 0,
            "GATEWAY_WEB_CHAT": False,
            "GATEWAY_TOOLS": False,
            "GATEWAY_STREAMING": streaming,
            "GATEWAY_POLL_SECONDS": 0.2,
            "AGENT_MODEL": "small",
            "TELEGRAM_BOT_TOKEN": tg.token,
            "TELEGRAM_API_BASE_URL": tg.base_url,
        }
        settings = Settings(_env_file=None, **values)  # type: ignore[call-arg]
        adapter = TelegramAdapter(
            settings.surface(TelegramSettings), poll_timeout=1, backoff_initial=0.05
        )
        agent = OpenAIAgent(base_url=fake.base_url, api_key="k", model="small")
        gateway = Gateway(settings, store=store, agent=agent, adapters=[adapter])
        await gateway.start()
        try:
            ann = tg.user("Ann")
            for n in range(runs):
                answer = _answer(chars)
                final = answer.replace("**", "")
                # a group of its own per run: the group pacing of one run never holds the next
                forum = tg.forum(f"Bench {n}")
                topic = tg.create_topic(forum, f"Run {n}", by=ann)
                fake.script.append(Step(text=answer))

                def shown(chat: Chat, topic: int | None) -> list[str]:
                    return [
                        str(m.get("text"))
                        for m in tg.messages_in(chat, topic)
                        if (m.get("from") or {}).get("id") == tg.bot.id
                    ]

                def visible(chat: Chat, topic: int | None) -> Callable[[], bool]:
                    return lambda: bool(shown(chat, topic))

                def done(chat: Chat, topic: int | None, final: str) -> Callable[[], bool]:
                    return lambda: shown(chat, topic) == [final]

                def drafted(chat: Chat, before: int) -> Callable[[], bool]:
                    return lambda: len(tg.drafts) > before or bool(shown(chat, None))

                started = time.perf_counter()
                tg.user_says(forum, f"{BOT} question {n}", topic=topic, user=ann)
                out["topic_first"].append(await _watch(visible(forum, topic), started))
                out["topic_final"].append(await _watch(done(forum, topic, final), started))
                out["topic_tail"].append(_tail(fake))
                # a private chat: a draft (Bot API 9.3) when streaming, else the message
                user = tg.user(f"Dm{n}")
                dm = tg.private(user)
                fake.script.append(Step(text=answer))
                drafts = len(tg.drafts)
                started = time.perf_counter()
                tg.user_says(dm, f"question {n}", user=user)
                out["dm_first"].append(await _watch(drafted(dm, drafts), started))
                out["dm_final"].append(await _watch(done(dm, None, final), started))
                out["dm_tail"].append(_tail(fake))
        finally:
            await gateway.stop()
            await store.close()
            await fake.stop()
    return {k: summarize([x * 1000 for x in v]) for k, v in out.items()}


async def run_stream(srv: Any, *, runs: int, chunk_delay: float, chars: int) -> dict[str, Any]:
    on = await _one_mode(srv, streaming=True, runs=runs, chunk_delay=chunk_delay, chars=chars)
    off = await _one_mode(srv, streaming=False, runs=runs, chunk_delay=chunk_delay, chars=chars)
    generation = chars / 8 * chunk_delay
    return {
        "streaming": on,
        "one_piece": off,
        "answer_chars": chars,
        "chunk_delay_ms": chunk_delay * 1000,
        "generation_ms": round(generation * 1000),
        "runs": runs,
    }


def stream_markdown(r: dict[str, Any]) -> list[str]:
    def fig(d: dict[str, Any]) -> str:
        return f"{d['median']:.0f} ({d['min']:.0f}-{d['max']:.0f})"

    on, off = r["streaming"], r["one_piece"]
    return [
        f"The fake model streams a {r['answer_chars']}-character answer, 8 characters every "
        f"{r['chunk_delay_ms']:.0f} ms (about {r['generation_ms'] / 1000:.1f} s of writing); "
        f"{r['runs']} questions per figure, ms from the question to what the fake Bot API shows.",
        "",
        "The final text's wait after the model's last token is the 'after last token' column.",
        "",
        "| | first visible text, topic | final text, topic | after last token, topic | "
        "first visible text, private chat | final text, private chat | after last token, "
        "private chat |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *(
            f"| {name} | {fig(d['topic_first'])} | {fig(d['topic_final'])} | "
            f"{fig(d['topic_tail'])} | {fig(d['dm_first'])} | {fig(d['dm_final'])} | "
            f"{fig(d['dm_tail'])} |"
            for name, d in (
                ("streaming (edits; drafts in private chats)", on),
                ("GATEWAY_STREAMING=false", off),
            )
        ),
    ]
