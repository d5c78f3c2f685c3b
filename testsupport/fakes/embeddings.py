"""A small OpenAI-compatible ``/v1/embeddings`` server for tests: deterministic vectors from
hashed words, a record of every request, and a switch to fail."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

DIM = 16


def hashed_vector(text: str, dim: int = DIM) -> list[float]:
    vector = [0.0] * dim
    for word in re.findall(r"\w+", text.lower()):
        digest = hashlib.sha256(word.encode()).digest()
        vector[digest[0] % dim] += 1.0 if digest[1] % 2 else -1.0
    return vector


@dataclass
class FakeEmbeddings:
    dim: int = DIM
    requests: list[dict[str, Any]] = field(default_factory=list)
    fail_status: int | None = None
    url: str = ""
    _runner: web.AppRunner | None = None

    async def start(self) -> FakeEmbeddings:
        app = web.Application()
        app.router.add_post("/v1/embeddings", self._embeddings)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/v1"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _embeddings(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append({"body": body, "auth": request.headers.get("Authorization")})
        if self.fail_status is not None:
            return web.json_response({"error": "down"}, status=self.fail_status)
        data = [
            {"object": "embedding", "index": i, "embedding": hashed_vector(t, self.dim)}
            for i, t in enumerate(body["input"])
        ]
        data.reverse()  # servers may answer out of order; ``index`` says where each goes
        return web.json_response({"object": "list", "data": data, "model": body["model"]})
