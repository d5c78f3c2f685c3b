"""The recording HTTP server behind ``SinkTransport``: a real local server with a script of
responses, so tests assert what actually arrived, in which thread, how many times."""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class SinkServer:
    received: list[dict[str, Any]] = field(default_factory=list)
    accepted: list[dict[str, Any]] = field(default_factory=list)
    #: scripted answers for the next requests: ("ok",) | ("429", seconds) | ("400", text)
    script: deque[tuple[Any, ...]] = field(default_factory=deque)
    url: str = ""
    _runner: web.AppRunner | None = None
    _ids: Any = field(default_factory=lambda: itertools.count(1000))

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
        if self._runner is not None:
            await self._runner.cleanup()

    async def _send(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.received.append(body)
        action = self.script.popleft() if self.script else ("ok",)
        if action[0] == "429":
            return web.json_response(
                {"error": "ratelimited"}, status=429, headers={"Retry-After": str(action[1])}
            )
        if action[0] == "400":
            return web.Response(status=400, text=str(action[1]))
        self.accepted.append(body)
        return web.json_response({"id": next(self._ids)})

    def texts_in(self, chat: str, thread: str | None) -> list[str]:
        return [
            b["text"]
            for b in self.accepted
            if b["target"]["chat_id"] == chat and b["target"]["thread_id"] == thread
        ]
