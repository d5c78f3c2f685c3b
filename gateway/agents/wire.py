"""What the network agents share: one POST with bounded retries, and every failure turned
into ``AgentError`` with a short reason (the turn scheduler apologises in the thread with it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import httpx
import structlog

from gateway.core.errors import AgentError

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
