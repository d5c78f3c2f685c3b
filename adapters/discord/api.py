"""The Discord REST calls the surface makes itself (httpx): sends, edits, threads, history,
interaction answers. A 429 is never waited out here: it is raised with its ``retry_after``
(per route, or ``global``) so the core's outbox paces the retry (``transport``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from gateway.core.retry_after import body_seconds, retry_after_or_default

#: Discord's JSON error codes we act on
UNKNOWN_CHANNEL = 10003
UNKNOWN_MESSAGE = 10008
THREAD_ALREADY_CREATED = 160004

#: ``GET /channels/{id}/messages`` answers at most this many at once
HISTORY_LIMIT = 100


class DiscordApiError(Exception):
    """A non-2xx answer: the HTTP status, Discord's JSON error ``code`` (0 when none) and,
    for a 429, how long to wait and whether the limit is the bot's global one."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: int = 0,
        retry_after: float | None = None,
        global_limit: bool = False,
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after
        self.global_limit = global_limit


def _error(response: httpx.Response) -> DiscordApiError:
    try:
        body = response.json()
    except ValueError:
        body = None
    body = body if isinstance(body, Mapping) else {}
    message = str(body.get("message") or response.reason_phrase or "error")[:300]
    code = body.get("code")
    code = code if isinstance(code, int) and not isinstance(code, bool) else 0
    retry_after: float | None = None
    global_limit = False
    if response.status_code == 429:
        # the body's retry_after (seconds, with a fraction) is finer than the header's
        retry_after = body_seconds(body.get("retry_after"))
        if retry_after is None:
            retry_after = retry_after_or_default(response.headers.get("Retry-After"))
        global_limit = body.get("global") is True or "X-RateLimit-Global" in response.headers
    return DiscordApiError(
        response.status_code,
        message,
        code=code,
        retry_after=retry_after,
        global_limit=global_limit,
    )


class DiscordApi:
    """One bot token's REST client (``Authorization: Bot <token>``)."""

    def __init__(
        self, *, base_url: str, token: str, timeout: float = 30.0, trust_env: bool = True
    ) -> None:
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/") + "/",
            headers={
                "Authorization": f"Bot {token}",
                "User-Agent": "DiscordBot (chat-gateway, 1)",
            },
            timeout=timeout,
            trust_env=trust_env,
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _call(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
        files: Sequence[tuple[str, tuple[str, bytes, str]]] | None = None,
    ) -> Any:
        if files:
            data = {"payload_json": json.dumps(dict(body or {}))}
            response = await self._client.request(
                method, path.lstrip("/"), params=params, data=data, files=list(files)
            )
        else:
            response = await self._client.request(
                method, path.lstrip("/"), params=params, json=body
            )
        if response.status_code >= 400:
            raise _error(response)
        if response.status_code == 204 or not response.content:
            return None
        return response.json()

    # --- who we are ------------------------------------------------------------------------

    async def me(self) -> dict[str, Any]:
        return dict(await self._call("GET", "users/@me"))

    async def application(self) -> dict[str, Any]:
        return dict(await self._call("GET", "applications/@me"))

    async def gateway_bot(self) -> dict[str, Any]:
        return dict(await self._call("GET", "gateway/bot"))

    # --- channels and messages -------------------------------------------------------------

    async def channel(self, channel_id: str) -> dict[str, Any]:
        return dict(await self._call("GET", f"channels/{channel_id}"))

    async def create_message(
        self,
        channel_id: str,
        body: Mapping[str, Any],
        *,
        files: Sequence[tuple[str, tuple[str, bytes, str]]] | None = None,
    ) -> dict[str, Any]:
        return dict(
            await self._call("POST", f"channels/{channel_id}/messages", body=body, files=files)
        )

    async def edit_message(
        self, channel_id: str, message_id: str, body: Mapping[str, Any]
    ) -> dict[str, Any]:
        return dict(
            await self._call("PATCH", f"channels/{channel_id}/messages/{message_id}", body=body)
        )

    async def delete_message(self, channel_id: str, message_id: str) -> None:
        await self._call("DELETE", f"channels/{channel_id}/messages/{message_id}")

    async def start_thread(self, channel_id: str, message_id: str, name: str) -> dict[str, Any]:
        """A public thread on a message; its id is the message's id."""
        return dict(
            await self._call(
                "POST",
                f"channels/{channel_id}/messages/{message_id}/threads",
                body={"name": name, "auto_archive_duration": 1440},
            )
        )

    async def messages_after(
        self, channel_id: str, after: str, limit: int = HISTORY_LIMIT
    ) -> list[dict[str, Any]]:
        """Up to ``limit`` messages right after ``after`` (Discord lists them newest first)."""
        listed = await self._call(
            "GET", f"channels/{channel_id}/messages", params={"after": after, "limit": limit}
        )
        return [m for m in listed if isinstance(m, dict)] if isinstance(listed, list) else []

    async def typing(self, channel_id: str) -> None:
        await self._call("POST", f"channels/{channel_id}/typing")

    async def interaction_reply(
        self, interaction_id: str, token: str, content: str, *, ephemeral: bool = True
    ) -> None:
        """Answer a component press: a message only the presser sees."""
        await self._call(
            "POST",
            f"interactions/{interaction_id}/{token}/callback",
            body={"type": 4, "data": {"content": content, "flags": 64 if ephemeral else 0}},
        )

    async def download(self, url: str, *, max_bytes: int) -> bytes:
        """An attachment from Discord's CDN (its URL carries its own signature)."""
        # never with the bot's token: the CDN is another host
        async with (
            httpx.AsyncClient(timeout=self._client.timeout) as cdn,
            cdn.stream("GET", url) as response,
        ):
            if response.status_code >= 400:
                raise _error(response)
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > max_bytes:
                    raise ValueError(f"file larger than {max_bytes} bytes")
                chunks.append(chunk)
            return b"".join(chunks)
