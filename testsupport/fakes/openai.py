"""A local OpenAI-compatible chat-completions server for agent tests and benchmarks.

``stream: true`` requests get server-sent events: the text in chunks of ``chunk_chars``
characters with ``chunk_delay`` seconds between them (per step or for the whole server), then
a usage chunk when ``stream_options.include_usage`` asks for it, then ``data: [DONE]``.

It records every request (body, headers, start and end times), answers from a script
(text, HTTP status, delay, dropped connection, usage) and counts prompt tokens with its own
"true" tokenizer, independent of the gateway's estimate, so tests can check the budget
against what the server saw. Summary requests (recognised by the summarizer's instructions)
have their own script, so a test can slow summaries down without slowing replies.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

SUMMARY_MARKER = "You keep the running summary"
#: how a document's summary requests begin (gateway.knowledge.summaries): summaries too, so a
#: test's scripted turn steps are never spent on them
DOCUMENT_SUMMARY_MARKERS = (
    "You write the stored summary of a document",
    "You summarise part",
    "These are the summaries of the parts of one document",
)


@dataclass
class Step:
    """One scripted answer. ``status`` >= 400 answers an OpenAI-style error; ``drop`` closes
    the connection without answering; ``text`` None answers ``re: <last user message>``."""

    text: str | None = None
    status: int = 200
    delay: float = 0.0
    drop: bool = False
    usage: dict[str, int] | None = None
    retry_after: float | None = None
    #: answer with these tool calls instead of text (several = parallel calls): each
    #: ``{"name": ..., "arguments": {...} or "raw json", "id": optional}``
    tool_calls: list[dict[str, Any]] | None = None
    #: streamed answers: seconds between chunks and characters per chunk (None: the server's)
    chunk_delay: float | None = None
    chunk_chars: int | None = None
    #: provider faults of a streamed answer: the connection closes after this many
    #: characters of text (no ``[DONE]``); the stream stalls this long after its first text
    #: chunk (after ``stall_at`` characters where given); the first text comes this long
    #: after the headers (a slow first token)
    break_after: int | None = None
    stall: float = 0.0
    stall_at: int | None = None
    first_delay: float = 0.0


@dataclass
class Recorded:
    body: dict[str, Any]
    headers: dict[str, str]
    started: float
    finished: float | None = None
    true_prompt_tokens: int = 0
    #: a streamed answer was sent to its end (``[DONE]``), not cut short by the client
    streamed_whole: bool = False

    @property
    def is_summary(self) -> bool:
        """A rolling summary's request, or a document summary's."""
        messages = self.body.get("messages") or []
        first = str(messages[0].get("content", "")) if messages else ""
        return first.startswith((SUMMARY_MARKER, *DOCUMENT_SUMMARY_MARKERS))

    @property
    def is_document_summary(self) -> bool:
        messages = self.body.get("messages") or []
        first = str(messages[0].get("content", "")) if messages else ""
        return first.startswith(DOCUMENT_SUMMARY_MARKERS)

    @property
    def system(self) -> str:
        messages = self.body["messages"]
        return str(messages[0]["content"]) if messages[0]["role"] == "system" else ""

    @property
    def tool_names(self) -> list[str]:
        """The names of the tools this request offered."""
        return [t["function"]["name"] for t in self.body.get("tools") or []]

    def contents(self, role: str) -> list[str]:
        return [str(m["content"]) for m in self.body["messages"] if m["role"] == role]


_WORD = re.compile(r"\w+|[^\w\s]|\n")


def realistic_tokens(text: str) -> int:
    """A tokenizer unlike the gateway's estimate but close to byte-pair tokenizers on real
    text: ~4 ASCII characters per token in words, one per punctuation mark and newline, one
    per CJK character, about two per other non-ASCII letter pair, two per astral symbol."""
    total = 0.0
    for piece in _WORD.findall(text):
        if piece.isascii():
            total += math.ceil(len(piece) / 4) if piece[0].isalnum() or piece[0] == "_" else 1
            continue
        for ch in piece:
            code = ord(ch)
            if ch.isascii():
                total += 0.25
            elif code > 0xFFFF:
                total += 2
            elif 0x2E80 <= code <= 0x9FFF or 0xAC00 <= code <= 0xD7AF:
                total += 1
            else:
                total += 0.5
    return math.ceil(total)


@dataclass
class FakeOpenAI:
    #: multiplies the realistic count: > 1 makes the server's tokenizer harsher than the
    #: gateway's uncalibrated estimate (to test calibration from usage)
    harshness: float = 1.0
    model_suffix: str = ""
    requests: list[Recorded] = field(default_factory=list)
    script: deque[Step] = field(default_factory=deque)
    summary_script: deque[Step] = field(default_factory=deque)
    base_url: str = ""
    #: what ``GET /v1/models`` lists
    models: list[str] = field(default_factory=lambda: ["gpt-4o-mini"])
    #: when set, ``GET /v1/models`` answers 401 unless this bearer key is sent
    api_key: str | None = None
    #: streamed answers, unless a step says otherwise
    chunk_delay: float = 0.05
    chunk_chars: int = 8
    #: a plain (not streamed) answer takes as long as its streamed chunks would (benchmarks
    #: comparing the two); off by default so non-streaming tests stay fast
    paced_plain_answers: bool = False
    #: ``POST /v1/audio/transcriptions``: the text every audio file transcribes to (or the
    #: one for its bytes), the requests (model, file name, bytes), and how many answer 503
    #: first (the client's retries)
    transcript: str = "hello from a voice note"
    transcripts: dict[bytes, str] = field(default_factory=dict)
    transcriptions: list[dict[str, Any]] = field(default_factory=list)
    transcription_failures: int = 0
    transcription_delay: float = 0.0
    #: per model: scripted answers for requests naming it (before ``script``), and a fault
    #: every request for it gets until removed (a model that keeps failing)
    model_scripts: dict[str, deque[Step]] = field(default_factory=dict)
    model_faults: dict[str, Step] = field(default_factory=dict)
    _runner: web.AppRunner | None = None
    _closing: asyncio.Event = field(default_factory=asyncio.Event)

    async def start(self) -> FakeOpenAI:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._complete)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/audio/transcriptions", self._transcribe)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self

    async def stop(self) -> None:
        self._closing.set()  # scripted delays end now, so shutdown does not wait them out
        if self._runner is not None:
            await self._runner.cleanup()

    def count(self, messages: list[dict[str, Any]]) -> int:
        raw = 3 + sum(
            4 + realistic_tokens(str(m.get("content") or "")) + (1 if m.get("name") else 0)
            for m in messages
        )
        return math.ceil(raw * self.harshness)

    @property
    def turn_requests(self) -> list[Recorded]:
        return [r for r in self.requests if not r.is_summary]

    @property
    def summary_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.is_summary]

    async def _models(self, request: web.Request) -> web.Response:
        if self.api_key is not None and request.headers.get("Authorization") != (
            f"Bearer {self.api_key}"
        ):
            return web.json_response(
                {"error": {"message": "Incorrect API key provided", "code": "invalid_api_key"}},
                status=401,
            )
        return web.json_response(
            {"object": "list", "data": [{"id": m, "object": "model"} for m in self.models]}
        )

    async def _transcribe(self, request: web.Request) -> web.Response:
        """OpenAI's transcription endpoint: multipart ``file`` + ``model``; ``{"text": ...}``."""
        form = await request.post()
        upload = form.get("file")
        if not isinstance(upload, web.FileField):
            return web.json_response({"error": {"message": "file is required"}}, status=400)
        data = upload.file.read()
        self.transcriptions.append(
            {
                "model": form.get("model"),
                "name": upload.filename,
                "content_type": upload.content_type,
                "bytes": data,
                "authorization": request.headers.get("Authorization"),
            }
        )
        if self.transcription_failures > 0:
            self.transcription_failures -= 1
            return web.json_response({"error": {"message": "overloaded"}}, status=503)
        if self.transcription_delay:
            try:
                await asyncio.wait_for(self._closing.wait(), self.transcription_delay)
            except TimeoutError:
                pass
        return web.json_response({"text": self.transcripts.get(data, self.transcript)})

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        record = Recorded(
            body=body,
            headers=dict(request.headers),
            started=time.monotonic(),
            true_prompt_tokens=self.count(body["messages"]),
        )
        self.requests.append(record)
        step = self._step(record)
        try:
            if step.delay:
                try:
                    await asyncio.wait_for(self._closing.wait(), step.delay)
                except TimeoutError:
                    pass
            if step.drop:
                assert request.transport is not None
                request.transport.close()
                return web.Response(status=500)
            if step.status >= 400:
                headers = {}
                if step.retry_after is not None:
                    headers["Retry-After"] = str(step.retry_after)
                return web.json_response(
                    {"error": {"message": f"scripted failure {step.status}", "type": "test"}},
                    status=step.status,
                    headers=headers,
                )
            if step.tool_calls is not None and body.get("stream"):
                return await self._stream_calls(request, body, step)
            if step.tool_calls is not None:
                calls = [
                    {
                        "id": c.get("id") or f"call_{len(self.requests)}_{n}",
                        "type": "function",
                        "function": {
                            "name": c["name"],
                            "arguments": c["arguments"]
                            if isinstance(c.get("arguments"), str)
                            else json.dumps(c.get("arguments") or {}),
                        },
                    }
                    for n, c in enumerate(step.tool_calls)
                ]
                return web.json_response(
                    {
                        "id": f"chatcmpl-{len(self.requests)}",
                        "object": "chat.completion",
                        "model": body["model"] + self.model_suffix,
                        "choices": [
                            {
                                "index": 0,
                                "message": {
                                    "role": "assistant",
                                    "content": step.text,
                                    "tool_calls": calls,
                                },
                                "finish_reason": "tool_calls",
                            }
                        ],
                        "usage": step.usage
                        or {
                            "prompt_tokens": record.true_prompt_tokens,
                            "completion_tokens": 10,
                            "total_tokens": record.true_prompt_tokens + 10,
                        },
                    }
                )
            users = [m for m in body["messages"] if m["role"] == "user"]
            text = step.text
            if text is None:
                # a summary: short, naming the range it was given; a reply: an echo
                last = str(users[-1]["content"])
                text = (
                    f"SUMMARY of {last.count(chr(10))} lines"
                    if record.is_summary
                    else f"re: {last}"
                )
            completion = realistic_tokens(text)
            usage = step.usage or {
                "prompt_tokens": record.true_prompt_tokens,
                "completion_tokens": completion,
                "total_tokens": record.true_prompt_tokens + completion,
            }
            if body.get("stream"):
                return await self._stream(request, body, step, text, usage)
            # the stream faults, for a plain answer: held back, or the connection dropped
            if (step.stall or step.first_delay) and await self._pause(
                step.stall + step.first_delay
            ):
                return web.Response(status=503)
            if step.break_after is not None:
                assert request.transport is not None
                request.transport.close()
                return web.Response(status=500)
            if self.paced_plain_answers:
                delay = self.chunk_delay if step.chunk_delay is None else step.chunk_delay
                size = max(1, self.chunk_chars if step.chunk_chars is None else step.chunk_chars)
                try:
                    pause = delay * max(0, -(-len(text) // size) - 1)
                    await asyncio.wait_for(self._closing.wait(), pause)
                except TimeoutError:
                    pass
            return web.json_response(
                {
                    "id": f"chatcmpl-{len(self.requests)}",
                    "object": "chat.completion",
                    "model": body["model"] + self.model_suffix,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": usage,
                }
            )
        finally:
            record.finished = time.monotonic()

    def _step(self, record: Recorded) -> Step:
        model = str(record.body.get("model"))
        if not record.is_summary and model in self.model_faults:
            return self.model_faults[model]
        scripted = self.model_scripts.get(model)
        if not record.is_summary and scripted:
            return scripted.popleft()
        script = self.summary_script if record.is_summary else self.script
        return script.popleft() if script else Step()

    async def _pause(self, seconds: float) -> bool:
        """Sleep ``seconds``; True when the server is closing meanwhile."""
        try:
            await asyncio.wait_for(self._closing.wait(), seconds)
            return True
        except TimeoutError:
            return False

    async def _events(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        return response

    async def _stream(
        self,
        request: web.Request,
        body: dict[str, Any],
        step: Step,
        text: str,
        usage: dict[str, int],
    ) -> web.StreamResponse:
        response = await self._events(request)
        delay = self.chunk_delay if step.chunk_delay is None else step.chunk_delay
        size = max(1, self.chunk_chars if step.chunk_chars is None else step.chunk_chars)
        base = {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion.chunk",
            "model": body["model"] + self.model_suffix,
        }
        first = {"role": "assistant", "content": ""}
        await _event(response, {**base, "choices": [{"index": 0, "delta": first}]})
        if step.first_delay and await self._pause(step.first_delay):
            return response
        stall_at = size if step.stall_at is None else max(1, step.stall_at)
        stalled = False
        for n in range(0, len(text), size):
            if n and delay and await self._pause(delay):
                return response
            if step.stall and not stalled and n >= stall_at:
                stalled = True
                if await self._pause(step.stall):
                    return response
            if step.break_after is not None and n >= step.break_after:
                assert request.transport is not None
                request.transport.close()  # broken off mid-answer: no end, no [DONE]
                return response
            delta = {"content": text[n : n + size]}
            await _event(response, {**base, "choices": [{"index": 0, "delta": delta}]})
        end = {"index": 0, "delta": {}, "finish_reason": "stop"}
        await _event(response, {**base, "choices": [end]})
        if (body.get("stream_options") or {}).get("include_usage"):
            await _event(response, {**base, "choices": [], "usage": usage})
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        for record in self.requests:
            if record.body is body:
                record.streamed_whole = True
        return response

    async def _stream_calls(
        self, request: web.Request, body: dict[str, Any], step: Step
    ) -> web.StreamResponse:
        response = await self._events(request)
        base = {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion.chunk",
            "model": body["model"] + self.model_suffix,
        }
        for n, c in enumerate(step.tool_calls or []):
            arguments = c.get("arguments")
            raw = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
            call = {
                "index": n,
                "id": c.get("id") or f"call_{len(self.requests)}_{n}",
                "type": "function",
                "function": {"name": c["name"], "arguments": raw},
            }
            delta = {"role": "assistant", "tool_calls": [call]}
            await _event(response, {**base, "choices": [{"index": 0, "delta": delta}]})
        end = {"index": 0, "delta": {}, "finish_reason": "tool_calls"}
        await _event(response, {**base, "choices": [end]})
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


async def _event(response: web.StreamResponse, data: dict[str, Any]) -> None:
    await response.write(b"data: " + json.dumps(data).encode() + b"\n\n")
