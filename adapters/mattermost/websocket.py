"""Our own asyncio client for Mattermost's websocket event stream, on ``websockets``.

Why not mattermostdriver's (platforms.md §3.5): it cannot open wss:// on current Python and
does not verify certificates, swallows handler exceptions by dropping the socket, and
reconnects forever without telling anyone. This client:

* verifies TLS for ``wss://`` (the default context, or the one given);
* authenticates with ``Authorization: Bearer`` at the handshake and also sends the
  ``authentication_challenge`` action: servers that accepted the header ignore it silently
  (``if conn.GetSessionToken() != "" { return }`` in the server's websocket router), servers
  behind a proxy that strips the header authenticate with it. The connection is ready when
  ``hello`` arrives - which may come before the challenge's ``OK`` (mattermost#23710);
* isolates handlers: an exception while handling one event is logged and reported to
  ``on_error``; the connection and the following events carry on;
* reconnects with exponential backoff and jitter; calls ``on_connecting`` before each attempt
  and ``on_connected`` after every (re)connect *before* reading further events, so the
  adapter can reconcile what was missed;
* starts the next connection as soon as the socket closes, even while the events queued
  before the close are still being handled (they are handled first, then the new
  connection's ``hello``, reconciliation and events): the server is never left without a
  connection for as long as a backlog takes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

import structlog
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import (
    ConnectionClosed,
    ConnectionClosedOK,
    InvalidStatus,
    WebSocketException,
)

from gateway.core.errors import GatewayError

log = structlog.get_logger(__name__)

EventHandler = Callable[[dict[str, Any]], Awaitable[None]]
ErrorHandler = Callable[[dict[str, Any], BaseException], Awaitable[None]]
ConnectedHook = Callable[[], Awaitable[None]]


class AuthenticationFailed(GatewayError):
    """The server refused our token on the websocket."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Backoff:
    """Exponential backoff with "equal jitter": half the step fixed, half random, so a
    fleet of gateways does not reconnect in lockstep and no retry is immediate."""

    initial: float = 1.0
    maximum: float = 60.0
    factor: float = 2.0
    #: a connection that stayed up this long resets the backoff
    stable_after: float = 30.0

    def delay(self, failures: int, rand: Callable[[], float] = random.random) -> float:
        ceiling = min(self.maximum, self.initial * self.factor ** max(failures, 0))
        return ceiling / 2 + (ceiling / 2) * rand()


class EventStream:
    """One logical event stream over successive websocket connections. ``run()`` loops until
    cancelled. Construction does no I/O."""

    def __init__(
        self,
        *,
        url: str,
        token: str,
        on_event: EventHandler,
        on_error: ErrorHandler,
        on_connected: ConnectedHook,
        on_connecting: ConnectedHook | None = None,
        on_tick: ConnectedHook | None = None,
        tick_interval: float = 10.0,
        ssl_context: ssl.SSLContext | None = None,
        backoff: Backoff | None = None,
        hello_timeout: float = 30.0,
        open_timeout: float = 10.0,
        ping_interval: float | None = 20.0,
        ping_timeout: float | None = 20.0,
        use_env_proxy: bool = True,
    ) -> None:
        self._url = url
        self._token = token
        self._on_event = on_event
        self._on_error = on_error
        self._on_connected = on_connected
        self._on_connecting = on_connecting
        self._on_tick = on_tick
        self._tick_interval = tick_interval
        self._ssl = ssl_context
        self._backoff = backoff or Backoff()
        self._hello_timeout = hello_timeout
        self._open_timeout = open_timeout
        self._ping_interval = ping_interval
        self._ping_timeout = ping_timeout
        self._proxy: Literal[True] | None = True if use_env_proxy else None
        self._ws: ClientConnection | None = None
        self._ready = False
        self._seq = 0
        self._challenge_seq: int | None = None
        self._expected_seq: int | None = None
        #: observability (and tests): how many connections reached ``hello``
        self.connections = 0
        self.attempts = 0
        self.last_error: BaseException | None = None
        self.delays: list[float] = []
        self.connection_id: str | None = None
        self._hello_at: float | None = None
        self._stopping = asyncio.Event()
        self._failures = 0
        #: the next connection, under way while the last one's queued events are handled
        self._next: asyncio.Task[ClientConnection | None] | None = None

    @property
    def connected(self) -> bool:
        return self._ready and self._ws is not None

    async def run(self) -> None:
        """Connect, handle, reconnect - until ``stop()`` (or cancellation)."""
        self._failures = 0
        try:
            while not self._stopping.is_set():
                self.attempts += 1
                self._hello_at = None
                try:
                    await self._session(await self._take_next())
                    log.info("mattermost_ws_closed")
                except AuthenticationFailed as exc:
                    self.last_error = exc
                    log.error("mattermost_ws_auth_failed", error=str(exc))
                except InvalidStatus as exc:
                    self.last_error = exc
                    status = exc.response.status_code
                    level = log.error if status in (401, 403) else log.warning
                    level("mattermost_ws_handshake_refused", status=status)
                except (OSError, TimeoutError, WebSocketException) as exc:
                    # refused/reset connections, TLS verification failures (ssl.SSLError is
                    # an OSError), abnormal closes (1006) -> reconnect
                    self.last_error = exc
                    log.warning("mattermost_ws_disconnected", error=repr(exc))
                except Exception as exc:  # broad on purpose, see below
                    # A failure in on_connecting/on_connected (REST calls) or a bug must not
                    # end the event stream: the next connection reconciles again from saved
                    # cursors.
                    self.last_error = exc
                    log.exception("mattermost_ws_session_failed")
                finally:
                    self._ready = False
                    self._ws = None
                if self._stopping.is_set():
                    break
                if self._next is None:
                    # not already under way (started when the socket closed, _watch_close)
                    self._next = asyncio.create_task(self._connect(self._reconnect_delay()))
        finally:
            await self._discard_next()
        log.info("mattermost_ws_stopped")

    def _reconnect_delay(self) -> float:
        """The backoff before the next connection, counting this end as one more failure."""
        # however it ended (a clean close or a 1006), a connection that was healthy for a
        # while starts the backoff over
        hello_at = self._hello_at
        if hello_at is not None and time.monotonic() - hello_at >= self._backoff.stable_after:
            self._failures = 0
        delay = self._backoff.delay(self._failures)
        self._failures += 1
        self.delays.append(delay)
        del self.delays[:-50]  # bounded
        log.info("mattermost_ws_reconnect_scheduled", delay=round(delay, 3))
        return delay

    async def _take_next(self) -> ClientConnection | None:
        """The next connection: the one under way, or a new one at once (the first)."""
        task, self._next = self._next, None
        if task is None:
            return await self._connect(0.0)
        return await task

    async def _discard_next(self) -> None:
        task, self._next = self._next, None
        if task is None:
            return
        task.cancel()
        (result,) = await asyncio.gather(task, return_exceptions=True)
        if isinstance(result, ClientConnection):
            await result.close()

    async def stop(self) -> None:
        """Ask ``run()`` to end: the event being handled finishes, the socket is closed
        cleanly (1000) and no reconnect follows. The caller awaits the ``run()`` task."""
        self._stopping.set()
        ws = self._ws
        if ws is not None:
            await ws.close()

    async def send_action(self, action: str, data: dict[str, Any]) -> bool:
        """Send a client action (``user_typing``...). False when not connected."""
        ws = self._ws
        if ws is None or not self._ready:
            return False
        try:
            await self._send(ws, action, data)
        except ConnectionClosed:
            return False
        return True

    # --- one connection ------------------------------------------------------------------

    async def _connect(self, delay: float) -> ClientConnection | None:
        """After ``delay`` (backoff): ``on_connecting``, the handshake and the
        ``authentication_challenge`` (always the connection's first action, seq 1). None if
        ``stop()`` came first. Events the server sends from then on wait in the connection's
        queue until ``_session`` reads them."""
        if delay > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)
        if self._stopping.is_set():
            return None
        if self._on_connecting is not None:
            await self._on_connecting()
        if self._stopping.is_set():
            return None
        kwargs: dict[str, Any] = {}
        if self._url.startswith("wss://") and self._ssl is not None:
            kwargs["ssl"] = self._ssl
        ws = await connect(
            self._url,
            additional_headers={"Authorization": f"Bearer {self._token}"},
            open_timeout=self._open_timeout,
            ping_interval=self._ping_interval,
            ping_timeout=self._ping_timeout,
            close_timeout=5,
            # buffer events while on_connected reconciles before the read loop resumes (and
            # while the previous connection's last events are handled, _watch_close)
            max_queue=4096,
            proxy=self._proxy,
            user_agent_header="chat-gateway (mattermost adapter)",
            **kwargs,
        )
        try:
            challenge = {"seq": 1, "action": "authentication_challenge"}
            await ws.send(json.dumps({**challenge, "data": {"token": self._token}}))
        except BaseException:
            ws.transport.abort()
            raise
        return ws

    async def _session(self, ws: ClientConnection | None) -> None:
        """Authenticate, reconcile, then read events until the socket closes."""
        if ws is None:  # stop() came while connecting
            return
        async with ws:
            self._ws = ws
            if self._stopping.is_set():  # stop() came while the handshake was in flight
                return
            self._seq = 1
            self._challenge_seq = 1
            self._expected_seq = None
            try:
                await asyncio.wait_for(self._until_hello(ws), self._hello_timeout)
            except TimeoutError as exc:
                raise AuthenticationFailed(
                    "no hello from the server (token not accepted?)"
                ) from exc
            self._ready = True
            self._hello_at = time.monotonic()
            self.connections += 1
            log.info(
                "mattermost_ws_connected",
                connection_id=self.connection_id,
                connections=self.connections,
            )
            await self._on_connected()
            watch = asyncio.create_task(self._watch_close(ws))
            try:
                await self._read(ws)
            finally:
                watch.cancel()

    async def _watch_close(self, ws: ClientConnection) -> None:
        """When the socket closes (the server went away, or we refused a frame over the
        limit: 1009), start the next connection at once - with the usual backoff - although
        the read loop may still be handling the events queued before the close (a
        backlog of up to ``max_queue`` events kept the server without a connection for
        minutes). The new connection's events queue up; its ``hello`` and reconciliation
        follow the old connection's last event, so the order is kept."""
        await ws.wait_closed()
        log.info("mattermost_ws_connection_lost", code=ws.close_code, reason=ws.close_reason)
        if self._stopping.is_set() or self._next is not None:
            return
        self._next = asyncio.create_task(self._connect(self._reconnect_delay()))

    async def _read(self, ws: ClientConnection) -> None:
        """Handle frames one at a time, in order, until the socket closes; call ``on_tick``
        when idle (and at least every ``tick_interval`` when busy)."""
        last_tick = time.monotonic()
        while True:
            try:
                # recv() is cancellation-safe in websockets >= 13: a timeout loses nothing
                message = await asyncio.wait_for(ws.recv(), self._tick_interval)
            except TimeoutError:
                message = None
            except ConnectionClosedOK:
                return
            if message is not None:
                await self._frame(message)
            if time.monotonic() - last_tick >= self._tick_interval:
                last_tick = time.monotonic()
                await self._tick()

    async def _tick(self) -> None:
        if self._on_tick is None:
            return
        try:
            await self._on_tick()
        except Exception:  # broad: housekeeping must not drop the connection
            log.exception("mattermost_ws_tick_failed")

    async def _until_hello(self, ws: ClientConnection) -> None:
        async for message in ws:
            frame = _decode(message)
            if frame is not None and frame.get("event") == "hello":
                self._note_seq(frame)
                data = frame.get("data")
                if isinstance(data, dict) and isinstance(data.get("connection_id"), str):
                    self.connection_id = data["connection_id"]
                return
            await self._frame(message, frame=frame)
        # Servers close the socket when the challenge's token is invalid.
        raise AuthenticationFailed("connection closed before hello (token rejected?)")

    async def _frame(self, message: str | bytes, *, frame: dict[str, Any] | None = None) -> None:
        if frame is None:
            frame = _decode(message)
        if frame is None:
            # Not a JSON object: let the adapter record it as a rejected event.
            text = message.decode("utf-8", "replace") if isinstance(message, bytes) else message
            await self._dispatch({"raw_frame": text[:10_000]})
            return
        if "seq_reply" in frame and "event" not in frame:
            self._reply(frame)
            return
        self._note_seq(frame)
        await self._dispatch(frame)

    def _reply(self, frame: dict[str, Any]) -> None:
        status = frame.get("status")
        if status == "OK":
            log.debug("mattermost_ws_action_ok", seq_reply=frame.get("seq_reply"))
            return
        error = frame.get("error")
        error_id = error.get("id") if isinstance(error, dict) else None
        log.warning(
            "mattermost_ws_action_failed",
            seq_reply=frame.get("seq_reply"),
            status=status,
            error_id=error_id,
        )
        if frame.get("seq_reply") == self._challenge_seq and not self._ready:
            raise AuthenticationFailed(f"authentication_challenge failed: {error_id}")

    def _note_seq(self, frame: dict[str, Any]) -> None:
        seq = frame.get("seq")
        if not isinstance(seq, int):
            return
        if self._expected_seq is not None and seq != self._expected_seq:
            # Events were lost on the server side (its send queue overflowed); posts among
            # them are recovered by the reconciliation after the next reconnect.
            log.warning("mattermost_ws_seq_gap", expected=self._expected_seq, got=seq)
        self._expected_seq = seq + 1

    async def _dispatch(self, frame: dict[str, Any]) -> None:
        try:
            await self._on_event(frame)
        except Exception as exc:  # broad: one bad event must not drop the connection
            log.exception("mattermost_event_handler_failed", event_type=frame.get("event"))
            try:
                await self._on_error(frame, exc)
            except Exception:  # broad: the error path itself failed (store down?)
                log.exception("mattermost_event_error_handler_failed")

    async def _send(self, ws: ClientConnection, action: str, data: dict[str, Any]) -> int:
        self._seq += 1
        seq = self._seq
        await ws.send(json.dumps({"seq": seq, "action": action, "data": data}))
        return seq


def _decode(message: str | bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(message)
    except (ValueError, RecursionError):  # deep nesting (found by fuzzing)
        return None
    return value if isinstance(value, dict) else None
