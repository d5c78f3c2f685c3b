"""Lingering close: a refusal sent before the request body was read reaches the client.

The guard answers a body over ``GATEWAY_MAX_BODY_BYTES`` with 413 from the headers alone, and
a route may answer (401, 403, 415) without reading the body. On a keep-alive connection
uvicorn's parser then reads the rest of the body and drops it, and the client reads the
answer. But when the connection is to close after the answer (the client sent
``Connection: close``, spoke HTTP/1.0, or the server is shutting down), uvicorn closed the
socket at once while the client was still sending: the kernel answers the unread bytes with
a TCP reset, which also throws away the answer the client had not read yet. The client saw
``Connection reset by peer`` or a broken pipe instead of the 413.

``LingeringHttpProtocol`` does what nginx calls a lingering close: when the answer is complete
and the connection is to close while the request body is still arriving, it sends FIN (the
client reads the answer and end of stream), then reads and discards what the client still
sends, and closes once the client stops (its FIN), after ``LINGER_BYTES`` more bytes, or after
``LINGER_SECONDS``, whichever comes first. The bounds keep a client from holding the
connection or the CPU: past them the close is the old abrupt one."""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

#: bytes read and dropped after the answer before giving up on the client
LINGER_BYTES = 64 * 1024 * 1024
#: seconds to keep reading after the answer before giving up on the client
LINGER_SECONDS = 10.0


class _LingeringTransport:
    """The connection's transport as the HTTP protocol sees it: ``close()`` lingers while the
    request body is unfinished; everything else is the real transport's."""

    def __init__(self, transport: asyncio.Transport, protocol: LingeringHttpProtocol) -> None:
        self._transport = transport
        self._protocol = protocol
        self.lingering = False
        self._left = LINGER_BYTES
        self._timer: asyncio.TimerHandle | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def is_closing(self) -> bool:
        return self.lingering or self._transport.is_closing()

    def close(self) -> None:
        if self.lingering or self._transport.is_closing():
            self._close_now()
            return
        if not self._protocol.body_unfinished() or not self._transport.can_write_eof():
            self._close_now()
            return
        self.lingering = True
        # the answer is in the send buffer: FIN after it, so the client reads it whole
        self._transport.write_eof()
        self._transport.resume_reading()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(LINGER_SECONDS, self._close_now)

    def discard(self, size: int) -> None:
        """Bytes that arrived while lingering: dropped, and counted against the bound."""
        self._left -= size
        if self._left < 0:
            self._close_now()

    def _close_now(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._transport.close()


class LingeringHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol whose close after an early answer lingers (see the
    module docstring)."""

    _linger: _LingeringTransport | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._linger = _LingeringTransport(transport, self)
        super().connection_made(self._linger)  # type: ignore[arg-type]

    def body_unfinished(self) -> bool:
        """Whether the current request's body is still arriving."""
        cycle = self.cycle
        return cycle is not None and cycle.more_body and not cycle.disconnected

    def data_received(self, data: bytes) -> None:
        if self._linger is not None and self._linger.lingering:
            self._linger.discard(len(data))
            return
        super().data_received(data)

    def eof_received(self) -> None:
        # the client is done sending: a lingering close ends here (returning None lets the
        # transport close itself, as before)
        if self._linger is not None and self._linger.lingering:
            self._linger.close()
