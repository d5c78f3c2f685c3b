"""The built-in web chat: a page, a small JSON API and a live stream (SSE) per thread.

It is a real adapter: messages go through the same ``Intake`` as every platform, replies come
back through the outbox and the delivery worker to ``WebTransport``, which publishes them to
the live stream of the exact thread they answer."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from importlib import resources

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from adapters.web.extract import _NAME, PLATFORM, SCOPE, extract
from adapters.web.transport import WebTransport
from gateway.conversations import Conversations
from gateway.domain import Rejected, ReplyTarget, SessionKey
from gateway.hub import Broadcast
from gateway.intake import live_topic
from gateway.knowledge.attachments import FileShare
from gateway.ports import Intake

KEEPALIVE_SECONDS = 15.0


class WebAdapter:
    platform = PLATFORM

    def __init__(
        self, conversations: Conversations, live: Broadcast, *, files: FileShare | None = None
    ) -> None:
        self._conversations = conversations
        self._files = files
        self._live = live
        self.transport = WebTransport(live)
        self._intake: Intake | None = None
        self._stopping = asyncio.Event()
        self._page = (
            resources.files("adapters.web")
            .joinpath("static/index.html")
            .read_text(encoding="utf-8")
        )

    async def start(self, intake: Intake) -> None:
        self._intake = intake

    async def stop(self) -> None:
        self._stopping.set()
        self._intake = None

    def http_routes(self) -> Sequence[Route]:
        return [
            Route("/", self._index, methods=["GET"]),
            Route("/web/api/channels", self._channels, methods=["GET"]),
            Route("/web/api/channels/{channel}/threads", self._threads, methods=["GET"]),
            Route("/web/api/channels/{channel}/messages", self._post, methods=["POST"]),
            Route(
                "/web/api/channels/{channel}/threads/{thread}/messages",
                self._history,
                methods=["GET"],
            ),
            Route(
                "/web/api/channels/{channel}/threads/{thread}/stream",
                self._stream,
                methods=["GET"],
            ),
            Route(
                "/web/api/channels/{channel}/threads/{thread}/files",
                self._upload,
                methods=["POST"],
            ),
            Route(
                "/web/api/channels/{channel}/threads/{thread}/messages/{seq:int}/feedback",
                self._feedback,
                methods=["POST"],
            ),
        ]

    async def _index(self, request: Request) -> Response:
        return HTMLResponse(self._page)

    async def _channels(self, request: Request) -> Response:
        chats = await self._conversations.chats(PLATFORM)
        if "general" not in chats:
            chats.append("general")
        return JSONResponse({"channels": chats})

    async def _threads(self, request: Request) -> Response:
        threads = await self._conversations.threads(PLATFORM, request.path_params["channel"])
        return JSONResponse(
            {
                "threads": [
                    {
                        "thread_id": t.thread_id,
                        "title": t.title,
                        "session_id": t.session_id,
                        "status": t.status,
                        "message_count": t.message_count,
                        "last_message_at": t.last_message_at.isoformat()
                        if t.last_message_at
                        else None,
                    }
                    for t in threads
                ]
            }
        )

    async def _post(self, request: Request) -> Response:
        intake = self._intake
        if intake is None:
            return JSONResponse({"error": "starting up"}, status_code=503)
        channel = request.path_params["channel"]
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            body = None
        if not isinstance(body, dict):
            rejected = Rejected(platform=PLATFORM, reason="body is not a JSON object")
            await intake.submit(
                rejected, raw={"body": (await request.body()).decode(errors="replace")[:10_000]}
            )
            return JSONResponse({"error": rejected.reason}, status_code=400)
        extracted = extract(channel, body)
        outcome = await intake.submit(extracted, raw=body)
        if isinstance(extracted, Rejected):
            return JSONResponse({"error": extracted.reason}, status_code=422)
        # answered only after the message is durably stored (ack after durable ingest)
        return JSONResponse(
            {
                "status": outcome.status,
                "thread_id": extracted.key.thread_id,
                "session_id": outcome.session_id,
                "seq_no": outcome.seq_no,
            },
            status_code=200,
        )

    async def _upload(self, request: Request) -> Response:
        """A file for this thread's documents (the body is the file, ``?name=`` its name);
        the thread is told when it has been read."""
        if self._files is None:
            return JSONResponse({"error": "file sharing is off"}, status_code=501)
        channel, thread = request.path_params["channel"], request.path_params["thread"]
        name = request.query_params.get("name", "").strip()
        if not (_NAME.match(channel) and _NAME.match(thread)):
            return JSONResponse({"error": "bad channel or thread"}, status_code=400)
        if not name or len(name) > 255 or "/" in name:
            return JSONResponse({"error": "name must be a file name"}, status_code=400)
        data = await request.body()
        if not data:
            return JSONResponse({"error": "the file is empty"}, status_code=400)
        key = SessionKey(platform=PLATFORM, scope=SCOPE, chat_id=channel, thread_id=thread)
        target = ReplyTarget(platform=PLATFORM, scope=SCOPE, chat_id=channel, thread_id=thread)
        accepted, note = await self._files.share(
            key, target, name, data, request.headers.get("content-type")
        )
        return JSONResponse({"note": note}, status_code=200 if accepted else 415)

    async def _history(self, request: Request) -> Response:
        transcript = await self._conversations.transcript(self._key(request))
        if transcript is None:
            return JSONResponse({"session_id": None, "messages": []})
        return JSONResponse(
            {
                "session_id": transcript.session_id,
                "status": transcript.status,
                "messages": [
                    {
                        "seq_no": m.seq_no,
                        "role": m.role,
                        "content": m.content,
                        "sender": m.sender,
                        "model": m.model,
                        "delivery": m.delivery,
                        "feedback": m.feedback,
                    }
                    for m in transcript.messages
                ],
            }
        )

    async def _feedback(self, request: Request) -> Response:
        """Thumbs up/down on an answer: ``{"value": 1 | -1 | 0, "user": name}``; 0 takes
        this person's feedback back. Answers with the message's resulting feedback."""
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            body = None
        value = body.get("value") if isinstance(body, dict) else None
        user = (body.get("user") if isinstance(body, dict) else None) or "guest"
        if value not in (-1, 0, 1) or isinstance(value, bool) or not isinstance(user, str):
            return JSONResponse({"error": "value must be 1, -1 or 0"}, status_code=422)
        vote = await self._conversations.vote(
            self._key(request), request.path_params["seq"], user_id=user[:64], value=value
        )
        if vote.outcome == "no_such_message":
            return JSONResponse({"error": "no such message"}, status_code=404)
        if vote.outcome == "not_an_answer":
            return JSONResponse({"error": "only answers take feedback"}, status_code=404)
        return JSONResponse({"feedback": vote.feedback})

    async def _stream(self, request: Request) -> Response:
        topic = live_topic(self._key(request))

        async def events() -> AsyncIterator[str]:
            async with self._live.subscribe(topic) as queue:
                # a real event, sent once subscribed: the page reloads history on it, so a reply
                # published between its history load and this subscription is not missed
                yield 'data: {"type": "connected"}\n\n'
                while not self._stopping.is_set():
                    try:
                        event = await asyncio.wait_for(queue.get(), KEEPALIVE_SECONDS)
                    except TimeoutError:
                        yield ": keepalive\n\n"
                        continue
                    yield f"data: {json.dumps(event)}\n\n"

        return StreamingResponse(
            events(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    @staticmethod
    def _key(request: Request) -> SessionKey:
        return SessionKey(
            platform=PLATFORM,
            scope=SCOPE,
            chat_id=request.path_params["channel"],
            thread_id=request.path_params["thread"],
        )
