"""The ``openai`` agent: any OpenAI-compatible chat-completions server (OpenAI, vLLM,
llama.cpp, Ollama...), streamed or not, with tool calls.

The prompt is rendered by ``gateway.agents.prompt``, the same rendering the token estimate was
made on, so what the budget counted is what is sent.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import httpx
import structlog

from gateway.agents.base import (
    StreamSink,
    SummaryRequest,
    SummaryResult,
    ToolCall,
    Turn,
)
from gateway.agents.prompt import render_prompt
from gateway.agents.wire import (
    _RETRYABLE,
    _error_detail,
    _json_body,
    _post,
    _retry_after,
)
from gateway.core.domain import Reply
from gateway.core.errors import AgentError
from gateway.core.settings import Settings

log = structlog.get_logger(__name__)


class OpenAIAgent:
    """Any OpenAI-compatible ``POST {base}/chat/completions`` server."""

    name = "openai"
    #: sends exactly the prompt the context estimate was made on, so the server's
    #: ``usage.prompt_tokens`` calibrates the estimate
    calibrates = True
    #: tells the server who asks (``user``: an opaque id of the person, ``Turn.user``)
    sends_user = True

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None,
        model: str,
        timeout: float = 60.0,
        max_output_tokens: int = 1024,
        retries: int = 1,
        streams: bool = True,
    ) -> None:
        #: ``Streaming``: asks with ``stream: true`` when the turn has a stream
        self.streams = streams
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._api_key = api_key
        self.model = model
        self._timeout = timeout
        self._max_output_tokens = max_output_tokens
        self._retries = retries
        # OpenAI's newer models refuse ``max_tokens``; compatible servers (vLLM, llama.cpp,
        # Ollama) all read ``max_tokens`` and not all know the newer name
        host = urlsplit(base_url).hostname or ""
        self._limit_field = (
            "max_completion_tokens" if host.endswith("api.openai.com") else "max_tokens"
        )
        self._client: httpx.AsyncClient | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> OpenAIAgent:
        key = settings.openai_api_key
        return cls(
            base_url=settings.openai_base_url,
            api_key=key.get_secret_value() if key else None,
            model=settings.agent_model,
            timeout=settings.agent_timeout_seconds,
            max_output_tokens=settings.agent_max_output_tokens,
        )

    def _http(self) -> httpx.AsyncClient:
        # created on first use, inside the running loop (no I/O in constructors)
        if self._client is None or self._client.is_closed:
            headers = {"Content-Type": "application/json"}
            if self._api_key:
                headers["Authorization"] = f"Bearer {self._api_key}"
            self._client = httpx.AsyncClient(timeout=self._timeout, headers=headers)
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def respond(self, turn: Turn) -> Sequence[Reply]:
        """The tool loop: offer the turn's tools, run the calls the model makes
        (a step's calls in parallel, through the turn's toolbox), feed the results back, and
        repeat until the model answers in text. After ``max_steps`` steps of calls the model
        is asked once more with no tools offered, so the turn always ends in an answer."""
        model = turn.model or self.model
        messages = with_parts(render_prompt(turn.system_prompt, turn.context), turn.attachments)
        limit = turn.max_output_tokens or self._max_output_tokens
        toolbox = turn.toolbox if turn.tools else None
        steps = 0
        first_usage: dict[str, int] | None = None
        total = 0
        #: every request's usage, for the usage ledger (one row per model call)
        made: list[dict[str, Any]] = []
        while True:
            offer = turn.tools if toolbox is not None and steps < toolbox.max_steps else ()
            if turn.stream is not None:
                data = await self._complete_streaming(
                    model, messages, limit, tools=offer, sink=turn.stream, user=turn.user
                )
            else:
                data = await self._complete(model, messages, limit, tools=offer, user=turn.user)
            usage = _read_usage(data)
            if first_usage is None:
                first_usage = usage
            tokens = usage.get("total_tokens")
            if tokens is None:
                tokens = usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)
            total += tokens
            calls, content = _read_tool_calls(data) if offer else ([], None)
            made.append(_call_record(data, model, usage, tool_step=bool(calls and toolbox)))
            if calls and toolbox is not None:
                steps += 1
                if turn.stream is not None:
                    # what the model wrote before its calls is not the answer
                    turn.stream.restart()
                    turn.stream.status(tool_status(calls))
                results = await toolbox.run(calls, content=content or "")
                messages.append(
                    {
                        "role": "assistant",
                        "content": content or "",
                        "tool_calls": [c.to_chat() for c in calls],
                    }
                )
                messages.extend(
                    {"role": "tool", "tool_call_id": r.call_id, "content": r.content}
                    for r in results
                )
                continue
            text, _, finish = _read_completion(data)
            return [
                Reply(
                    text=text,
                    model=str(data.get("model") or model),
                    tokens_used=total or None,
                    metadata={
                        # the first request's usage: the prompt exactly as the estimate saw it
                        "usage": first_usage,
                        "finish_reason": finish,
                        "requested_model": model,
                        "calls": made,
                        **({"tool_steps": steps} if steps else {}),
                    },
                )
            ]

    async def summarize(self, request: SummaryRequest) -> SummaryResult | None:
        messages = [
            {"role": "system", "content": request.instructions},
            {"role": "user", "content": request.transcript},
        ]
        data = await self._complete(request.model, messages, request.max_output_tokens)
        text, usage, _ = _read_completion(data)
        return SummaryResult(
            text=text,
            model=str(data.get("model") or request.model),
            prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=usage.get("completion_tokens"),
        )

    async def _complete(
        self,
        model: str,
        messages: list[dict[str, Any]],
        max_output_tokens: int,
        *,
        tools: Sequence[Mapping[str, Any]] = (),
        user: str | None = None,
    ) -> Mapping[str, Any]:
        body: dict[str, Any] = {
            "model": model,
            "messages": messages,
            self._limit_field: max_output_tokens,
        }
        if user:
            body["user"] = user
        if tools:
            body["tools"] = [dict(t) for t in tools]
        response = await _post(
            self._http(),
            self._url,
            content=json.dumps(body, ensure_ascii=False).encode(),
            headers={},
            what="the model server",
            retries=self._retries,
        )
        data = _json_body(response, "the model server")
        if not isinstance(data, Mapping):
            raise AgentError("the model server's answer is not a JSON object")
        return data

    async def _complete_streaming(
        self,
        model: str,
        messages: list[dict[str, Any]],
        max_output_tokens: int,
        *,
        tools: Sequence[Mapping[str, Any]] = (),
        sink: StreamSink,
        user: str | None = None,
    ) -> Mapping[str, Any]:
        """``stream: true``: text deltas go to ``sink`` as they arrive; returns the same shape
        as a plain completion (content, tool calls, finish reason, ``usage`` where the server
        sends it with ``stream_options.include_usage``). A server that answers with plain
        JSON instead of events is read as such."""
        body: dict[str, Any] = {
            "model": model,
            "messages": messages,
            self._limit_field: max_output_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if user:
            body["user"] = user
        if tools:
            body["tools"] = [dict(t) for t in tools]
        content = json.dumps(body, ensure_ascii=False).encode()
        what = "the model server"
        attempt = 0
        while True:
            attempt += 1
            try:
                async with self._http().stream("POST", self._url, content=content) as response:
                    if response.status_code >= 400:
                        await response.aread()
                        if response.status_code in _RETRYABLE and attempt <= self._retries:
                            await asyncio.sleep(_retry_after(response))
                            continue
                        detail = _error_detail(response)
                        reason = f"{what} answered HTTP {response.status_code}"
                        raise AgentError(
                            f"{reason}: {detail}" if detail else reason,
                            status=response.status_code,
                        )
                    if "text/event-stream" not in response.headers.get("content-type", ""):
                        await response.aread()
                        data = _json_body(response, what)
                        if not isinstance(data, Mapping):
                            raise AgentError("the model server's answer is not a JSON object")
                        return data
                    return await _read_events(response, sink)
            except httpx.TimeoutException as exc:
                raise AgentError(f"{what} did not answer in time") from exc
            except httpx.ConnectError as exc:
                if attempt <= self._retries:
                    await asyncio.sleep(0.5)
                    continue
                raise AgentError(f"cannot reach {what}") from exc
            except httpx.HTTPError as exc:
                raise AgentError(f"{what} connection failed ({type(exc).__name__})") from exc


#: status lines for the built-in tools while they run (others: "using NAME…")
TOOL_STATUS = {
    "search_knowledge": "searching the knowledge base…",
    "search_thread": "searching this thread…",
    "list_my_sessions": "looking through your conversations…",
    "read_session": "reading a conversation…",
    "current_time": "checking the time…",
}


def tool_status(calls: Sequence[ToolCall]) -> str:
    names = list(dict.fromkeys(c.name for c in calls))
    lines = [TOOL_STATUS.get(n, f"using {n}…") for n in names]
    return lines[0] if len(lines) == 1 else "; ".join(lines)


async def _read_events(response: httpx.Response, sink: StreamSink) -> Mapping[str, Any]:
    """Fold chat-completion chunks (``data: {...}`` lines, ``data: [DONE]``) into one
    completion, passing text deltas to ``sink``."""
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish: str | None = None
    usage: Any = None
    model: Any = None
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            break
        try:
            chunk = json.loads(payload)
        except ValueError as exc:
            raise AgentError("the model server sent an event that is not JSON") from exc
        if not isinstance(chunk, Mapping):
            continue
        model = chunk.get("model") or model
        if isinstance(chunk.get("usage"), Mapping):
            usage = chunk["usage"]
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
            continue
        choice = choices[0]
        if isinstance(choice.get("finish_reason"), str):
            finish = choice["finish_reason"]
        delta = choice.get("delta")
        if not isinstance(delta, Mapping):
            continue
        piece = delta.get("content")
        if isinstance(piece, str) and piece:
            text.append(piece)
            sink.text(piece)
        for item in delta.get("tool_calls") or ():
            if not isinstance(item, Mapping):
                continue
            raw_index = item.get("index")
            index = raw_index if isinstance(raw_index, int) else len(calls)
            call = calls.setdefault(index, {"id": None, "function": {"name": "", "arguments": ""}})
            if isinstance(item.get("id"), str):
                call["id"] = item["id"]
            fn = item.get("function")
            if isinstance(fn, Mapping):
                if isinstance(fn.get("name"), str):
                    call["function"]["name"] += fn["name"]
                if isinstance(fn.get("arguments"), str):
                    call["function"]["arguments"] += fn["arguments"]
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text)}
    if calls:
        message["tool_calls"] = [
            {"type": "function", **({"id": c["id"]} if c["id"] else {}), "function": c["function"]}
            for _, c in sorted(calls.items())
            if c["function"]["name"]
        ]
    data: dict[str, Any] = {"choices": [{"message": message, "finish_reason": finish}]}
    if model is not None:
        data["model"] = model
    if usage is not None:
        data["usage"] = usage
    return data


def with_parts(
    messages: list[dict[str, Any]], parts: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Files shared with the question, straight to the model: the newest user
    message's text becomes the first of its content parts, the files follow."""
    if not parts:
        return messages
    for m in reversed(messages):
        if m.get("role") == "user" and isinstance(m.get("content"), str):
            m["content"] = [{"type": "text", "text": m["content"]}, *(dict(p) for p in parts)]
            break
    return messages


def _read_tool_calls(data: Mapping[str, Any]) -> tuple[list[ToolCall], str | None]:
    """The tool calls of a completion (OpenAI format), with the text that came with them.
    A call without an id gets one (some local servers omit it); one without a name is
    skipped (nothing could answer it)."""
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        return [], None
    message = choices[0].get("message")
    if not isinstance(message, Mapping):
        return [], None
    raw = message.get("tool_calls")
    content = message.get("content") if isinstance(message.get("content"), str) else None
    if not isinstance(raw, list):
        return [], content
    calls: list[ToolCall] = []
    for n, item in enumerate(raw):
        fn = item.get("function") if isinstance(item, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            continue
        args = fn.get("arguments")
        if isinstance(args, Mapping):
            args = json.dumps(args)
        call_id = item.get("id") if isinstance(item.get("id"), str) and item.get("id") else None
        calls.append(
            ToolCall(
                id=call_id or f"call_{n}",
                name=fn["name"],
                arguments=args if isinstance(args, str) else "{}",
            )
        )
    return calls, content


def _call_record(
    data: Mapping[str, Any], model: str, usage: Mapping[str, int], *, tool_step: bool
) -> dict[str, Any]:
    """One model call as the usage ledger records it."""
    return {
        "model": str(data.get("model") or model),
        "kind": "tool_step" if tool_step else "answer",
        "prompt_tokens": usage.get("prompt_tokens", 0),
        "completion_tokens": usage.get("completion_tokens", 0),
    }


def _read_usage(data: Mapping[str, Any]) -> dict[str, int]:
    raw_usage = data.get("usage")
    usage: dict[str, int] = {}
    if isinstance(raw_usage, Mapping):
        for name in ("prompt_tokens", "completion_tokens", "total_tokens"):
            value = raw_usage.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                usage[name] = value
    return usage


def _read_completion(data: Mapping[str, Any]) -> tuple[str, dict[str, int], str | None]:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        raise AgentError("the model server's answer has no choices")
    choice = choices[0]
    raw_message = choice.get("message")
    message: Mapping[str, Any] = raw_message if isinstance(raw_message, Mapping) else {}
    content = message.get("content")
    if isinstance(content, list):  # content parts, as some servers answer
        content = "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    if not isinstance(content, str) or not content.strip():
        content = message.get("refusal") if isinstance(message.get("refusal"), str) else None
    finish = choice.get("finish_reason")
    if not content or not content.strip():
        raise AgentError(f"the model returned no text (finish_reason: {finish})")
    raw_usage = data.get("usage")
    usage: dict[str, int] = {}
    if isinstance(raw_usage, Mapping):
        for name in ("prompt_tokens", "completion_tokens", "total_tokens"):
            value = raw_usage.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                usage[name] = value
    return content, usage, finish if isinstance(finish, str) else None


# --- http ------------------------------------------------------------------------------------
