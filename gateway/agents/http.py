"""The ``http`` agent: the gateway POSTs the turn as JSON (signed with the shared secret) to your
service and delivers the replies it returns.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import structlog

from gateway.agents.base import (
    ContextMessage,
    SummaryRequest,
    SummaryResult,
    Turn,
)
from gateway.agents.completions import read_tool_calls
from gateway.agents.wire import (
    _json_body,
    _post,
)
from gateway.core.domain import Reply
from gateway.core.errors import AgentError
from gateway.core.settings import Settings

log = structlog.get_logger(__name__)


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
        # tools: the schemas offered this turn, OpenAI format; answer with
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
            calls, content = read_tool_calls(
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
