"""The built-in network agents: ``openai`` (any OpenAI-compatible chat-completions server:
OpenAI, vLLM, llama.cpp, Ollama...) and ``http`` (POST the turn as JSON to your service).

Every failure (timeout, connection error, 4xx/5xx, an answer we cannot read) leaves here as
``AgentError`` with a short reason; the turn scheduler turns it into an apology in the same
thread and records the failed turn. The prompt is rendered by ``gateway.context`` — the same
rendering the token estimate was made on — so what the budget counted is what is sent.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import httpx
import structlog

from gateway.agents import (
    ContextMessage,
    StreamSink,
    SummaryRequest,
    SummaryResult,
    ToolCall,
    Turn,
)
from gateway.context import render_prompt
from gateway.domain import Reply
from gateway.errors import AgentError
from gateway.settings import Settings

log = structlog.get_logger(__name__)

#: statuses worth one more try (as OpenAI's own client does): overload, rate limits and
#: server errors; a chat completion has no side effect a retry could double
_RETRYABLE = frozenset({408, 409, 429, 500, 502, 503, 504})
MAX_RETRY_WAIT = 5.0


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _retry_after(response: httpx.Response) -> float:
    try:
        return min(MAX_RETRY_WAIT, max(0.0, float(response.headers.get("Retry-After", "0.5"))))
    except ValueError:
        return 0.5


def _error_detail(response: httpx.Response) -> str:
    """The server's own short reason: OpenAI-style ``{"error": {"message": ...}}`` or text."""
    try:
        data = response.json()
    except ValueError:
        return _short(response.text) if response.text else ""
    if isinstance(data, Mapping):
        error = data.get("error")
        if isinstance(error, Mapping) and error.get("message"):
            return _short(str(error["message"]))
        if isinstance(error, str):
            return _short(error)
        if data.get("detail"):
            return _short(str(data["detail"]))
    return ""


async def _post(
    client: httpx.AsyncClient,
    url: str,
    *,
    content: bytes,
    headers: Mapping[str, str] | Any,
    what: str,
    retries: int,
) -> httpx.Response:
    """POST with one policy for every agent: translate transport errors and HTTP errors into
    ``AgentError``; retry once what failed fast (connection refused, 429, 5xx), never a
    timeout (the call may still be running; a retry would double the wait and the cost).
    ``headers`` may be a callable giving fresh headers per attempt (signatures expire)."""
    attempt = 0
    while True:
        attempt += 1
        try:
            response = await client.post(
                url, content=content, headers=headers() if callable(headers) else headers
            )
        except httpx.TimeoutException as exc:
            raise AgentError(f"{what} did not answer in time") from exc
        except httpx.ConnectError as exc:
            if attempt <= retries:
                await asyncio.sleep(0.5)
                continue
            raise AgentError(f"cannot reach {what}") from exc
        except httpx.HTTPError as exc:
            raise AgentError(f"{what} connection failed ({type(exc).__name__})") from exc
        if response.status_code < 400:
            return response
        if response.status_code in _RETRYABLE and attempt <= retries:
            await asyncio.sleep(_retry_after(response))
            continue
        detail = _error_detail(response)
        reason = f"{what} answered HTTP {response.status_code}"
        raise AgentError(f"{reason}: {detail}" if detail else reason, status=response.status_code)


def _json_body(response: httpx.Response, what: str) -> Any:
    try:
        return response.json()
    except ValueError as exc:
        raise AgentError(f"{what} sent an answer that is not JSON") from exc


# --- openai --------------------------------------------------------------------------------


class OpenAIAgent:
    """Any OpenAI-compatible ``POST {base}/chat/completions`` server."""

    name = "openai"
    #: sends exactly the prompt the context estimate was made on, so the server's
    #: ``usage.prompt_tokens`` calibrates the estimate
    calibrates = True

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
        #: ``Streaming`` (issue 16): asks with ``stream: true`` when the turn has a stream
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
        """The tool loop (issue 14): offer the turn's tools, run the calls the model makes
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
        while True:
            offer = turn.tools if toolbox is not None and steps < toolbox.max_steps else ()
            if turn.stream is not None:
                data = await self._complete_streaming(
                    model, messages, limit, tools=offer, sink=turn.stream
                )
            else:
                data = await self._complete(model, messages, limit, tools=offer)
            usage = _read_usage(data)
            if first_usage is None:
                first_usage = usage
            tokens = usage.get("total_tokens")
            if tokens is None:
                tokens = usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)
            total += tokens
            calls, content = _read_tool_calls(data) if offer else ([], None)
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
        )

    async def _complete(
        self,
        model: str,
        messages: list[dict[str, Any]],
        max_output_tokens: int,
        *,
        tools: Sequence[Mapping[str, Any]] = (),
    ) -> Mapping[str, Any]:
        body: dict[str, Any] = {
            "model": model,
            "messages": messages,
            self._limit_field: max_output_tokens,
        }
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
    """Files shared with the question, straight to the model (issue 15): the newest user
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

SIGNATURE_HEADER = "X-Gateway-Signature"
TIMESTAMP_HEADER = "X-Gateway-Timestamp"
SCHEMA_VERSION = 1


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """``v1=`` + hex HMAC-SHA256 of ``v1:{timestamp}:{body}`` under the shared secret (the
    timestamp is signed too, so a receiver can refuse old requests replayed)."""
    mac = hmac.new(secret.encode(), b"v1:" + timestamp.encode() + b":" + body, hashlib.sha256)
    return "v1=" + mac.hexdigest()


def verify(
    secret: str, *, timestamp: str, signature: str, body: bytes, tolerance: float = 300.0
) -> bool:
    """What a receiver checks: the signature, and that the timestamp is recent."""
    try:
        age = abs(time.time() - int(timestamp))
    except ValueError:
        return False
    return age <= tolerance and hmac.compare_digest(sign(secret, timestamp, body), signature)


def _message_json(m: ContextMessage) -> dict[str, Any]:
    out: dict[str, Any] = {
        "seq_no": m.seq_no,
        "role": m.role,
        "content": m.content,
        "sender": {"id": m.sender_id, "name": m.sender_name},
    }
    if m.tool_calls:
        out["tool_calls"] = [dict(c) for c in m.tool_calls]
    if m.tool_call_id:
        out["tool_call_id"] = m.tool_call_id
    return out


def turn_payload(turn: Turn) -> dict[str, Any]:
    """The JSON an ``http`` agent receives for a turn (schema in the README)."""
    key = turn.key
    summary = turn.summary
    return {
        "version": SCHEMA_VERSION,
        "kind": "turn",
        "session": {
            "id": turn.session_id,
            "key": str(key),
            "platform": key.platform,
            "scope": key.scope,
            "chat_id": key.chat_id,
            "thread_id": key.thread_id,
            "metadata": dict(turn.session_metadata),
        },
        "target": turn.target.to_json(),
        "model": turn.model,
        "system_prompt": turn.system_prompt,
        "summary": None
        if summary is None
        else {
            "content": summary.content,
            "from_seq": summary.from_seq,
            "to_seq": summary.to_seq,
            "model_written": summary.model_written,
        },
        "context": [_message_json(m) for m in turn.context],
        "new_messages": [_message_json(m) for m in turn.new_messages],
        # tools (issue 14): the schemas offered this turn, OpenAI format; answer with
        # {"tool_calls": [...]} to have the gateway run them (README, "Tools and agents")
        "tools": [dict(t) for t in turn.tools],
        "tool_exchange": [],
        # files shared with the question that go straight to the model (AGENT_INLINE_FILES):
        # OpenAI content parts for the newest user message
        "attachments": [dict(p) for p in turn.attachments],
        "limits": {
            "context_window": turn.context_window,
            "max_output_tokens": turn.max_output_tokens,
            "estimated_prompt_tokens": turn.estimated_prompt_tokens,
        },
    }


class HttpAgent:
    """POSTs each turn as JSON to ``AGENT_HTTP_URL`` (signed) and delivers the replies."""

    name = "http"

    def __init__(self, *, url: str, secret: str, timeout: float = 60.0, retries: int = 1):
        self._url = url
        self._secret = secret
        self._timeout = timeout
        self._retries = retries
        self._client: httpx.AsyncClient | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> HttpAgent:
        if not settings.agent_http_url or settings.agent_http_secret is None:
            # Settings already refuse AGENT=http without these; this guards direct use
            raise AgentError("AGENT_HTTP_URL and AGENT_HTTP_SECRET are required")
        return cls(
            url=settings.agent_http_url,
            secret=settings.agent_http_secret.get_secret_value(),
            timeout=settings.agent_timeout_seconds,
        )

    def _http(self) -> httpx.AsyncClient:
        if self._client is None or self._client.is_closed:
            self._client = httpx.AsyncClient(timeout=self._timeout)
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _call(self, payload: Mapping[str, Any], *, retries: int) -> httpx.Response:
        body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()

        def headers() -> dict[str, str]:
            timestamp = str(int(time.time()))
            return {
                "Content-Type": "application/json",
                TIMESTAMP_HEADER: timestamp,
                SIGNATURE_HEADER: sign(self._secret, timestamp, body),
            }

        return await _post(
            self._http(),
            self._url,
            content=body,
            headers=headers,
            what="the agent service",
            retries=retries,
        )

    async def respond(self, turn: Turn) -> Sequence[Reply]:
        payload = turn_payload(turn)
        exchange: list[dict[str, Any]] = payload["tool_exchange"]
        steps = 0
        while True:
            response = await self._call(payload, retries=self._retries)
            data = _json_body(response, "the agent service")
            raw_calls = data.get("tool_calls") if isinstance(data, Mapping) else None
            if not raw_calls or turn.toolbox is None or not turn.tools:
                break
            if steps >= turn.toolbox.max_steps:
                raise AgentError("the agent service kept calling tools past the step limit")
            steps += 1
            calls, content = _read_tool_calls(
                {
                    "choices": [
                        {"message": {"tool_calls": raw_calls, "content": data.get("content")}}
                    ]
                }
            )
            results = await turn.toolbox.run(calls, content=content or "")
            exchange.append(
                {
                    "role": "assistant",
                    "content": content or "",
                    "tool_calls": [c.to_chat() for c in calls],
                }
            )
            exchange.extend(
                {"role": "tool", "tool_call_id": r.call_id, "content": r.content} for r in results
            )
        replies = data.get("replies") if isinstance(data, Mapping) else None
        if not isinstance(replies, list):
            raise AgentError('the agent service\'s answer has no "replies" list')
        out: list[Reply] = []
        for item in replies:
            if not isinstance(item, Mapping) or not isinstance(item.get("text"), str):
                raise AgentError('each reply from the agent service needs a "text" string')
            tokens = item.get("tokens_used")
            metadata = item.get("metadata")
            out.append(
                Reply(
                    text=item["text"],
                    model=str(item["model"]) if item.get("model") else turn.model,
                    tokens_used=tokens
                    if isinstance(tokens, int) and not isinstance(tokens, bool)
                    else None,
                    metadata=dict(metadata) if isinstance(metadata, Mapping) else {},
                )
            )
        return out

    async def summarize(self, request: SummaryRequest) -> SummaryResult | None:
        payload = {
            "version": SCHEMA_VERSION,
            "kind": "summarize",
            "session": {"id": request.session_id, "key": str(request.key)},
            "model": request.model,
            "instructions": request.instructions,
            "previous_summary": request.previous,
            "messages": [_message_json(m) for m in request.messages],
            "max_output_tokens": request.max_output_tokens,
        }
        try:
            response = await self._call(payload, retries=0)
        except AgentError as exc:
            # a service that only answers turns: extractive summaries instead
            if exc.status in (400, 404, 405, 501):
                return None
            raise
        data = _json_body(response, "the agent service")
        text = data.get("summary") if isinstance(data, Mapping) else None
        if not isinstance(text, str) or not text.strip():
            return None
        model = data.get("model") if isinstance(data, Mapping) else None
        return SummaryResult(text=text, model=str(model) if model else request.model)
