"""An agent service for AGENT=http: verify each signed turn, answer with replies.

Run it, then start the gateway with
AGENT=http AGENT_HTTP_URL=http://127.0.0.1:9000/turn AGENT_HTTP_SECRET=change-me
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import time

from aiohttp import web


def verified(secret: str, request: web.Request, body: bytes) -> bool:
    """The signature over the raw body, and a recent timestamp (refuses replays)."""
    timestamp = request.headers.get("X-Gateway-Timestamp", "")
    signature = request.headers.get("X-Gateway-Signature", "")
    if not timestamp.isdigit() or abs(time.time() - int(timestamp)) > 300:
        return False
    signed = b"v1:" + timestamp.encode() + b":" + body
    expected = "v1=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, signature)


def make_app(secret: str) -> web.Application:
    async def turn(request: web.Request) -> web.Response:
        body = await request.read()
        if not verified(secret, request, body):
            return web.json_response({"error": "bad signature"}, status=401)
        payload = json.loads(body)
        if payload["kind"] == "summarize":
            return web.json_response({"error": "no summaries here"}, status=404)  # excerpts
        question = payload["new_messages"][-1]["content"]
        where = payload["target"]["chat_id"]
        return web.json_response(
            {"replies": [{"text": f"You asked in {where}: {question}", "model": "my-service"}]}
        )

    app = web.Application()
    app.router.add_post("/turn", turn)
    return app


if __name__ == "__main__":
    web.run_app(make_app(os.environ["AGENT_HTTP_SECRET"]), host="127.0.0.1", port=9000)
