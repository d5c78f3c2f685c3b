"""Outbound tokens: client credentials at ``TEAMS_TOKEN_URL`` with the Bot Framework scope,
cached until shortly before they expire (one request at a time; the others wait for it)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import aiohttp
import structlog

from gateway.core.retry_after import parse_retry_after

log = structlog.get_logger(__name__)

#: what the Bot Connector accepts
SCOPE = "https://api.botframework.com/.default"
#: a token is renewed this long before it expires
RENEW_BEFORE_SECONDS = 300.0


class TokenError(Exception):
    """The token endpoint refused or failed. ``status`` is its HTTP status (``None``: not
    reached), ``error`` its OAuth error code; ``retry_after`` its ``Retry-After``."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        error: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error = error
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class _Token:
    value: str
    renew_at: float


class TokenSource:
    def __init__(self, url: str, *, app_id: str, password: str, timeout: float = 10.0) -> None:
        self.url = url
        self._app_id = app_id
        self._password = password
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._token: _Token | None = None
        self._lock = asyncio.Lock()
        #: how many tokens were asked for (the tests watch the cache with it)
        self.requests = 0

    def forget(self) -> None:
        """Drop the cached token (the connector refused it)."""
        self._token = None

    async def token(self) -> str:
        current = self._token
        if current is not None and time.monotonic() < current.renew_at:
            return current.value
        async with self._lock:
            current = self._token
            if current is not None and time.monotonic() < current.renew_at:
                return current.value
            self._token = await self._request()
            return self._token.value

    async def _request(self) -> _Token:
        form = {
            "grant_type": "client_credentials",
            "client_id": self._app_id,
            "client_secret": self._password,
            "scope": SCOPE,
        }
        self.requests += 1
        try:
            async with aiohttp.ClientSession(timeout=self._timeout) as session:
                async with session.post(self.url, data=form) as response:
                    body = await response.json(content_type=None)
                    status = response.status
                    retry_after = parse_retry_after(response.headers.get("Retry-After"))
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise TokenError(f"token endpoint unreachable ({exc.__class__.__name__})") from exc
        error = body.get("error") if isinstance(body, dict) else None
        if status != 200 or not isinstance(body, dict):
            raise TokenError(
                f"token endpoint answered {status}"
                + (f" ({error})" if isinstance(error, str) else ""),
                status=status,
                error=error if isinstance(error, str) else None,
                retry_after=retry_after,
            )
        value = body.get("access_token")
        expires_in = body.get("expires_in")
        if not isinstance(value, str) or not value:
            raise TokenError("token endpoint answered no access_token", status=status)
        lifetime = (seconds(str(expires_in)) if expires_in is not None else None) or 3600.0
        # renew 5 minutes early, or at half the lifetime of a short-lived token
        early = min(RENEW_BEFORE_SECONDS, lifetime / 2)
        log.info("teams_token_fetched", expires_in=lifetime)
        return _Token(value=value, renew_at=time.monotonic() + lifetime - early)


def seconds(value: str | None) -> float | None:
    """A count of seconds as the token endpoint writes one (``expires_in``, a number or a
    string of one); None when absent or not a number."""
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None
