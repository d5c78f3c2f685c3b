"""The recording HTTP server behind ``SinkTransport``: a real local server with a script of
responses, so tests and the fault campaign assert what actually arrived, in which thread, how
many times.

With ``dedupe`` it remembers each idempotency key as a platform does (Mattermost's
pending_post_id): a repeated key is answered as sent but not posted again."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class SinkServer:
    received: list[dict[str, Any]] = field(default_factory=list)
    #: what was posted, in order (with ``dedupe``: once per idempotency key)
    accepted: list[dict[str, Any]] = field(default_factory=list)
    #: scripted answers for the next requests: ("ok",) | ("429", seconds) | ("400", text) |
    #: ("500",) | ("timeout", seconds): posted, but the answer is held that long
    script: deque[tuple[Any, ...]] = field(default_factory=deque)
    dedupe: bool = False
    #: with ``dedupe``: each post by idempotency key, with the monotonic time it arrived
    posts: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: with ``dedupe``: sends repeated under a key already posted
    resends: int = 0
    #: typing indicators shown (``SINK_TYPING``): (thread id, monotonic time)
    typing: list[tuple[str | None, float]] = field(default_factory=list)
    url: str = ""
    _runner: web.AppRunner | None = None
    _ids: Any = field(default_factory=lambda: itertools.count(1000))
    #: set by stop(): a held answer ends at once instead of holding the shutdown
    _stopping: asyncio.Event = field(default_factory=asyncio.Event)

    async def start(self) -> SinkServer:
        app = web.Application()
        app.router.add_post("/send", self._send)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/send"
        return self

    async def stop(self) -> None:
        self._stopping.set()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _send(self, request: web.Request) -> web.Response:
        body = await request.json()
        if body.get("typing"):
            self.typing.append((body["target"].get("thread_id"), time.monotonic()))
            return web.json_response({"id": 0})
        self.received.append(body)
        action = self.script.popleft() if self.script else ("ok",)
        if action[0] == "429":
            return web.json_response(
                {"error": "ratelimited"}, status=429, headers={"Retry-After": str(action[1])}
            )
        if action[0] == "400":
            return web.Response(status=400, text=str(action[1]))
        if action[0] == "500":
            return web.json_response({"error": "oops"}, status=500)
        key = str(body.get("key", ""))
        if self.dedupe and key in self.posts:
            self.resends += 1  # the platform remembers the key: not posted twice
            message_id = self.posts[key]["id"]
        else:
            message_id = next(self._ids)
            self.accepted.append(body)
            if self.dedupe:
                self.posts[key] = {**body, "id": message_id, "at": time.monotonic()}
        if action[0] == "timeout":
            # posted, but the answer comes too late
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=float(action[1]))
        return web.json_response({"id": message_id})

    def texts_in(self, chat: str, thread: str | None) -> list[str]:
        return [
            b["text"]
            for b in self.accepted
            if b["target"]["chat_id"] == chat and b["target"]["thread_id"] == thread
        ]
