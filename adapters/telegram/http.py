"""python-telegram-bot's HTTP requests over aiohttp instead of its default httpx.

PTB lets a bot bring its own ``BaseRequest`` (the documented way to change its HTTP client).
httpx, with httpcore, h11 and anyio under it, is pure Python: one sendMessage cost the
gateway about five times the CPU of a Slack post through slack_sdk's aiohttp (the e2e
benchmark's profile: 84% of a Telegram send's CPU was in httpx). This request speaks aiohttp
for every JSON call (sendMessage, getUpdates, the rest); uploads (multipart), and every request
the environment sends through a proxy (``HTTPS_PROXY``), keep PTB's own ``HTTPXRequest``.

What a failure means is kept: a request that never left this process (no connection within
the connect timeout) is ``TimedOut``/``NetworkError`` caused by an error ``translate_error``
knows to be safe to retry; a read timeout or a connection lost after the request was written
is the ambiguous kind. A request is attempted exactly once (nothing here retries).
"""

from __future__ import annotations

import functools
import os
import re
import ssl
import urllib.parse
import urllib.request

import aiohttp
from telegram._utils.defaultvalue import DefaultValue
from telegram._utils.types import ODVInput
from telegram.error import NetworkError, TimedOut
from telegram.request import BaseRequest, HTTPXRequest, RequestData

#: the Bot API puts the token in the URL path (``/bot<token>/method``): never in a message
_TOKEN_PATH = re.compile(r"/(file/)?bot[^/\s'\"]+")


class AiohttpRequest(BaseRequest):
    """``BaseRequest`` over one ``aiohttp.ClientSession`` (opened by ``initialize``), with
    PTB's ``HTTPXRequest`` defaults: 5 s to connect, read and write, 1 s to wait for a pooled
    connection, 256 connections."""

    __slots__ = (
        "_connect_timeout",
        "_files",
        "_initialized",
        "_pool_size",
        "_pool_timeout",
        "_read_timeout",
        "_session",
    )

    def __init__(
        self,
        connection_pool_size: int = 256,
        read_timeout: float | None = 5.0,
        connect_timeout: float | None = 5.0,
        pool_timeout: float | None = 1.0,
    ) -> None:
        self._pool_size = connection_pool_size
        self._read_timeout = read_timeout
        self._connect_timeout = connect_timeout
        self._pool_timeout = pool_timeout
        #: opened by the first request after ``initialize``: a bot's request for getUpdates is
        #: initialized with the other, and a ``gateway doctor`` check never uses it
        self._session: aiohttp.ClientSession | None = None
        self._initialized = False
        #: uploads (multipart) and proxied requests, as PTB sends them
        self._files = HTTPXRequest(
            connection_pool_size=connection_pool_size,
            read_timeout=read_timeout,
            connect_timeout=connect_timeout,
            pool_timeout=pool_timeout,
        )

    @property
    def read_timeout(self) -> float | None:
        return self._read_timeout

    async def initialize(self) -> None:
        await self._files.initialize()
        self._initialized = True

    def _open(self) -> aiohttp.ClientSession:
        """The session, opened on first use (synchronous: two first requests share one)."""
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._pool_size, ssl=_tls()),
                # not trust_env: aiohttp then looks up the proxy and .netrc in a thread on
                # every request; a proxied URL goes through httpx instead (``_proxied``)
                headers={"User-Agent": self.USER_AGENT},
                # a 4xx/5xx is PTB's to read (its body says why)
                raise_for_status=False,
            )
        return self._session

    async def shutdown(self) -> None:
        self._initialized = False
        await self._files.shutdown()
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()

    async def do_request(
        self,
        url: str,
        method: str,
        request_data: RequestData | None = None,
        read_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        write_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        connect_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        pool_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
    ) -> tuple[int, bytes]:
        if (request_data is not None and request_data.contains_files) or _proxied(url):
            # an upload, or a URL the environment sends through a proxy (HTTPS_PROXY, not
            # exempted by NO_PROXY): httpx, as PTB's default request always did
            return await self._files.do_request(
                url,
                method,
                request_data,
                read_timeout=read_timeout,
                write_timeout=write_timeout,
                connect_timeout=connect_timeout,
                pool_timeout=pool_timeout,
            )
        if not self._initialized:
            raise RuntimeError("This AiohttpRequest is not initialized!")
        session = self._open()
        read = self._read_timeout if isinstance(read_timeout, DefaultValue) else read_timeout
        connect = (
            self._connect_timeout if isinstance(connect_timeout, DefaultValue) else connect_timeout
        )
        pool = self._pool_timeout if isinstance(pool_timeout, DefaultValue) else pool_timeout
        timeout = aiohttp.ClientTimeout(
            total=None,
            # aiohttp's ``connect`` covers the wait for a pooled connection and the connect
            connect=None if connect is None or pool is None else connect + pool,
            sock_connect=connect,
            sock_read=read,
        )
        # PTB's parameters, each already JSON-encoded, as a form (what HTTPXRequest posts)
        data = request_data.json_parameters if request_data is not None else None
        try:
            async with session.request(method, url, data=data, timeout=timeout) as response:
                return response.status, await response.read()
        except aiohttp.ConnectionTimeoutError as err:
            raise TimedOut(
                "Timed out before the request was sent (no connection): it did not reach Telegram"
            ) from err
        except (TimeoutError, aiohttp.ServerTimeoutError) as err:
            raise TimedOut from err
        except aiohttp.ClientError as err:
            raise NetworkError(f"aiohttp.{type(err).__name__}: {_redacted(str(err))}") from err


@functools.lru_cache(maxsize=64)
def _proxied_origin(scheme: str, host: str) -> bool:
    proxies = urllib.request.getproxies_environment()
    if not proxies.get(scheme) and not proxies.get("all"):
        return False
    # NO_PROXY, as urllib reads it from the environment
    return not urllib.request.proxy_bypass(host)


def _proxied(url: str) -> bool:
    """Does the environment send ``url`` through a proxy (read once per scheme and host)?"""
    parts = urllib.parse.urlsplit(url)
    return _proxied_origin(parts.scheme, parts.hostname or "")


def _redacted(text: str) -> str:
    return _TOKEN_PATH.sub(r"/\1bot<redacted>", text)


def _tls() -> ssl.SSLContext:
    """The CA bundle httpx uses (certifi's), unless ``SSL_CERT_FILE``/``SSL_CERT_DIR`` name
    another (both clients honour them)."""
    if os.environ.get("SSL_CERT_FILE") or os.environ.get("SSL_CERT_DIR"):
        return ssl.create_default_context()
    try:
        import certifi
    except ImportError:  # pragma: no cover - httpx depends on it
        return ssl.create_default_context()
    return ssl.create_default_context(cafile=certifi.where())


def is_unsent(cause: BaseException | None) -> bool:
    """Did the request fail before it left this process (a retry cannot post twice)?"""
    return isinstance(cause, aiohttp.ConnectionTimeoutError | aiohttp.ClientConnectorError)


def is_lost_answer(cause: BaseException | None) -> bool:
    """Was the request written and the connection lost before the answer (it may have
    posted)?"""
    if isinstance(cause, aiohttp.ClientConnectorError):
        return False
    return isinstance(
        cause,
        aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError | aiohttp.ClientOSError,
    )
