"""The few client-server API calls the surface makes, through mautrix's HTTP client.

mautrix raises ``MLimitExceeded`` for a 429 without the body's ``retry_after_ms``; an aiohttp
trace reads it off the response (the body of a 429 is small) into a context variable of the
task that made the request, and ``MatrixApiError`` carries it to the gateway's pacing.
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any
from urllib.parse import quote

import aiohttp
from mautrix.api import HTTPAPI, Method
from mautrix.errors import MatrixConnectionError, MatrixRequestError

from gateway.core.retry_after import body_seconds, retry_after_or_default

#: the retry_after_ms of the last 429 this task saw, in seconds
_retry_after: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "matrix_retry_after", default=None
)


class MatrixApiError(Exception):
    """A call the homeserver refused, or could not be reached for."""

    def __init__(
        self, status: int, errcode: str, message: str, *, retry_after: float | None = None
    ) -> None:
        super().__init__(f"matrix {status} {errcode}: {message}")
        self.status = status
        self.errcode = errcode
        self.message = message
        self.retry_after = retry_after


async def _on_request_end(
    session: aiohttp.ClientSession, context: SimpleNamespace, params: Any
) -> None:
    response = params.response
    if response.status != 429:
        return
    seconds: float | None = None
    try:
        body = json.loads(await response.read())
        if isinstance(body, dict):
            seconds = body_seconds(body.get("retry_after_ms"), per_second=1000)
    except (ValueError, aiohttp.ClientError):
        pass
    if seconds is None:
        seconds = retry_after_or_default(response.headers.get("Retry-After"))
    _retry_after.set(seconds)


def q(value: str) -> str:
    return quote(value, safe="")


class MatrixApi:
    """One homeserver, one access token."""

    def __init__(self, base_url: str, token: str, *, timeout: float = 60.0) -> None:
        self.base_url = base_url
        self._token = token
        self._timeout = timeout
        self._http: HTTPAPI | None = None

    def _api(self) -> HTTPAPI:
        if self._http is None:
            trace = aiohttp.TraceConfig()
            trace.on_request_end.append(_on_request_end)
            session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self._timeout), trace_configs=[trace]
            )
            self._http = HTTPAPI(self.base_url, self._token, client_session=session)
        return self._http

    def set_token(self, token: str) -> None:
        self._token = token
        if self._http is not None:
            self._http.token = token

    async def aclose(self) -> None:
        http, self._http = self._http, None
        if http is not None:
            await http.session.close()

    async def call(
        self,
        method: Method,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        params: Mapping[str, str] | None = None,
        sensitive: bool = False,
    ) -> dict[str, Any]:
        """``/_matrix/client/v3`` + ``path``; raises ``MatrixApiError``. ``sensitive``: mautrix
        logs the body's size only (a password)."""
        _retry_after.set(None)
        try:
            got = await self._api().request(
                method,
                f"/_matrix/client/v3{path}",
                dict(body) if body is not None else None,
                query_params=dict(params or {}),
                sensitive=sensitive,
            )
        except MatrixRequestError as exc:
            status = int(getattr(exc, "http_status", 0) or 0)
            errcode = str(getattr(exc, "errcode", "") or "")
            raise MatrixApiError(
                status,
                errcode,
                str(getattr(exc, "message", "") or exc),
                retry_after=_retry_after.get() if status == 429 else None,
            ) from exc
        except MatrixConnectionError as exc:
            raise MatrixApiError(0, "CONNECTION", str(exc)) from exc
        return got if isinstance(got, dict) else {}

    # --- the calls ---------------------------------------------------------------------------

    async def whoami(self) -> str:
        return str((await self.call(Method.GET, "/account/whoami"))["user_id"])

    async def login(self, user_id: str, password: str) -> str:
        got = await self.call(
            Method.POST,
            "/login",
            {
                "type": "m.login.password",
                "identifier": {"type": "m.id.user", "user": user_id},
                "password": password,
                "initial_device_display_name": "chat-gateway",
            },
            sensitive=True,
        )
        token = str(got["access_token"])
        self.set_token(token)
        return token

    async def sync(
        self, since: str | None, *, timeout_ms: int, filter_json: str | None = None
    ) -> dict[str, Any]:
        params = {"timeout": str(timeout_ms)}
        if filter_json:
            params["filter"] = filter_json
        if since:
            params["since"] = since
        return await self.call(Method.GET, "/sync", params=params)

    async def send(self, room_id: str, kind: str, content: Mapping[str, Any], txn_id: str) -> str:
        got = await self.call(
            Method.PUT, f"/rooms/{q(room_id)}/send/{q(kind)}/{q(txn_id)}", content
        )
        return str(got["event_id"])

    async def redact(self, room_id: str, event_id: str, txn_id: str) -> None:
        await self.call(Method.PUT, f"/rooms/{q(room_id)}/redact/{q(event_id)}/{q(txn_id)}", {})

    async def join(self, room_id: str) -> None:
        await self.call(Method.POST, f"/join/{q(room_id)}", {})

    async def leave(self, room_id: str) -> None:
        await self.call(Method.POST, f"/rooms/{q(room_id)}/leave", {})

    async def state(self, room_id: str) -> list[dict[str, Any]]:
        _retry_after.set(None)
        try:
            got = await self._api().request(
                Method.GET, f"/_matrix/client/v3/rooms/{q(room_id)}/state"
            )
        except MatrixRequestError as exc:
            raise MatrixApiError(
                int(getattr(exc, "http_status", 0) or 0),
                str(getattr(exc, "errcode", "") or ""),
                str(exc),
            ) from exc
        return [e for e in got if isinstance(e, dict)] if isinstance(got, list) else []

    async def joined_rooms(self) -> list[str]:
        got = await self.call(Method.GET, "/joined_rooms")
        return [r for r in got.get("joined_rooms", []) if isinstance(r, str)]

    async def typing(self, room_id: str, user_id: str, *, on: bool) -> None:
        body: dict[str, Any] = {"typing": on}
        if on:
            body["timeout"] = 10000
        await self.call(Method.PUT, f"/rooms/{q(room_id)}/typing/{q(user_id)}", body)

    async def upload(self, name: str, mime_type: str, data: bytes) -> str:
        _retry_after.set(None)
        try:
            got = await self._api().request(
                Method.POST,
                "/_matrix/media/v3/upload",
                data,
                headers={"Content-Type": mime_type},
                query_params={"filename": name},
            )
        except MatrixRequestError as exc:
            status = int(getattr(exc, "http_status", 0) or 0)
            raise MatrixApiError(
                status,
                str(getattr(exc, "errcode", "") or ""),
                str(exc),
                retry_after=_retry_after.get() if status == 429 else None,
            ) from exc
        return str(got["content_uri"])

    async def download(self, mxc: str, *, max_bytes: int) -> bytes:
        """An ``mxc://server/id`` file (authenticated media, the client v1 path)."""
        server, _, media = mxc.removeprefix("mxc://").partition("/")
        url = f"{self.base_url}/_matrix/client/v1/media/download/{q(server)}/{q(media)}"
        session = self._api().session
        headers = {"Authorization": f"Bearer {self._token}"}
        async with session.get(url, headers=headers) as response:
            if response.status != 200:
                raise MatrixApiError(response.status, "M_UNKNOWN", "download failed")
            data = await response.content.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise MatrixApiError(413, "M_TOO_LARGE", f"over {max_bytes} bytes")
        return data
