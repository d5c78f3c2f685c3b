"""The built-in web chat: a page, a small JSON API and a live stream (SSE) per thread.

It is a real adapter: messages go through the same ``Intake`` as every platform, replies come
back through the outbox and the delivery worker to ``WebTransport``, which publishes them to
the live stream of the exact thread they answer."""

from __future__ import annotations

import asyncio
import base64
import json
import re
from collections.abc import AsyncIterator, Sequence
from importlib import resources
from typing import Any

from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route

from adapters.web.extract import CHANNEL, PLATFORM, SCOPE, THREAD, change, extract, voice_note
from adapters.web.transport import WebTransport
from gateway.core.attachments import FileShare
from gateway.core.conversations import Conversations, TranscriptEntry
from gateway.core.domain import Attachment, Rejected, ReplyTarget, SessionKey
from gateway.core.hub import Broadcast
from gateway.core.ports import ApprovalClick, Check, HeldFiles, Intake, WebSignIn
from gateway.files.transcribe import is_audio
from gateway.http.guard import page_headers
from gateway.http.webauth import private_channel
from gateway.inbound.intake import live_topic

KEEPALIVE_SECONDS = 15.0
MAX_SEQ = 2**63 - 1
_FEEDBACK_KEYS = frozenset({"value"})
_DECISIONS = ("approve", "deny")


class _Refused(Exception):
    """A request this person may not make: answered with ``response``."""

    def __init__(self, response: Response) -> None:
        self.response = response


#: the page's own files, served from the package (no CDN): name -> (path, type, max-age)
STATIC_FILES = {
    "app.js": ("static/app.js", "text/javascript; charset=utf-8", 0),
    "favicon.svg": ("static/favicon.svg", "image/svg+xml", 86400),
    "vendor/markdown-it.min.js": (
        "static/vendor/markdown-it.min.js",
        "text/javascript; charset=utf-8",
        86400,
    ),
}


class WebAdapter:
    platform = PLATFORM

    def __init__(
        self,
        conversations: Conversations,
        live: Broadcast,
        identity: WebSignIn,
        *,
        files: FileShare | None = None,
        held: HeldFiles | None = None,
        echo_agent: bool = False,
    ) -> None:
        self._conversations = conversations
        #: the built-in echo agent answers (AGENT=echo): the page says so, and how to connect
        #: a model
        self._echo_agent = echo_agent
        self._identity = identity
        self._files = files
        self._held = held
        self._live = live
        self.transport = WebTransport(live, held)
        self._intake: Intake | None = None
        self._stopping = asyncio.Event()
        package = resources.files("adapters.web")
        self._page = package.joinpath("static/index.html").read_text(encoding="utf-8")
        self._static = {
            name: (package.joinpath(path).read_bytes(), media_type, max_age)
            for name, (path, media_type, max_age) in STATIC_FILES.items()
        }
        # a CSP allowing the page's own inline styles and scripts only from this origin
        # (gateway.http.guard), so even a rendering bug cannot run a script from a message
        self._page_headers = page_headers(
            scripts=_blocks(self._page, "script"), styles=_blocks(self._page, "style")
        )

    async def start(self, intake: Intake) -> None:
        self._intake = intake

    async def stop(self) -> None:
        self._stopping.set()
        self._intake = None

    async def check(self) -> Sequence[Check]:
        # nothing outside the gateway to reach: served on its own HTTP server
        return [Check(name="web chat", ok=True, detail="served at / by the gateway's HTTP server")]

    def http_routes(self) -> Sequence[Route]:
        return [
            *self._identity.routes(),
            Route("/", self._index, methods=["GET"]),
            Route("/web/api/me", self._me, methods=["GET"]),
            Route("/favicon.ico", self._favicon, methods=["GET"]),
            Route("/web/static/{name:path}", self._static_file, methods=["GET"]),
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
                "/web/api/channels/{channel}/threads/{thread}/messages/{seq:int}",
                self._change,
                methods=["PATCH", "DELETE"],
            ),
            Route(
                "/web/api/channels/{channel}/threads/{thread}/messages/{seq:int}/feedback",
                self._feedback,
                methods=["POST"],
            ),
            Route(
                "/web/api/channels/{channel}/threads/{thread}/messages/{seq:int}/citations",
                self._citations,
                methods=["GET"],
            ),
            Route(
                "/web/api/channels/{channel}/threads/{thread}/approvals/{approval}",
                self._approval,
                methods=["POST"],
            ),
        ]

    # --- who may see what -------------------------------------------------------------------

    async def _person(self, request: Request) -> str:
        person = await self._identity.person(request)
        if person is None:
            raise _Refused(
                JSONResponse(
                    {"error": "sign in first", "login": "/login"},
                    status_code=401,
                    headers={"Cache-Control": "no-store"},
                )
            )
        return person

    @staticmethod
    def _channel(request: Request, person: str) -> str:
        """The channel of the path, if this person may see it: shared channels are everyone's,
        a private one (``~name``) only its owner's."""
        channel = str(request.path_params["channel"])
        if not CHANNEL.match(channel) or (
            channel.startswith("~") and channel != private_channel(person)
        ):
            raise _Refused(JSONResponse({"error": "no such channel"}, status_code=404))
        return channel

    def _key(self, request: Request, person: str) -> SessionKey:
        thread = str(request.path_params["thread"])
        if not THREAD.match(thread):
            raise _Refused(JSONResponse({"error": "no such thread"}, status_code=404))
        return SessionKey(
            platform=PLATFORM,
            scope=SCOPE,
            chat_id=self._channel(request, person),
            thread_id=thread,
        )

    # --- routes ------------------------------------------------------------------------------

    async def _index(self, request: Request) -> Response:
        if await self._identity.person(request) is None:
            if self._identity.signs_in:
                return RedirectResponse("/login", status_code=303)
            return PlainTextResponse(
                "not signed in: open the web chat through the sign-in proxy", status_code=401
            )
        return HTMLResponse(self._page, headers=self._page_headers)

    async def _me(self, request: Request) -> Response:
        try:
            person = await self._person(request)
        except _Refused as refused:
            return refused.response
        return JSONResponse(
            {
                "user": person,
                "auth": self._identity.mode,
                "private_channel": private_channel(person),
                "can_sign_out": self._identity.signs_in,
                "echo_agent": self._echo_agent,
            }
        )

    async def _static_file(self, request: Request) -> Response:
        found = self._static.get(request.path_params["name"])
        if found is None:
            return JSONResponse({"error": "not found"}, status_code=404)
        body, media_type, max_age = found
        cache = f"public, max-age={max_age}" if max_age else "no-cache"
        return Response(body, media_type=media_type, headers={"Cache-Control": cache})

    async def _favicon(self, request: Request) -> Response:
        body, media_type, _ = self._static["favicon.svg"]
        return Response(
            body, media_type=media_type, headers={"Cache-Control": "public, max-age=86400"}
        )

    async def _channels(self, request: Request) -> Response:
        try:
            person = await self._person(request)
        except _Refused as refused:
            return refused.response
        mine = private_channel(person)
        chats = [c for c in await self._conversations.chats(PLATFORM) if not c.startswith("~")]
        if "general" not in chats:
            chats.append("general")
        return JSONResponse({"channels": chats, "private": mine})

    async def _threads(self, request: Request) -> Response:
        try:
            person = await self._person(request)
            channel = self._channel(request, person)
        except _Refused as refused:
            return refused.response
        threads = await self._conversations.threads(PLATFORM, channel)
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
        try:
            person = await self._person(request)
            channel = self._channel(request, person)
        except _Refused as refused:
            return refused.response
        raw = await request.body()
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError):  # deep nesting (found by fuzzing)
            body = None
        if not isinstance(body, dict):
            rejected = Rejected(platform=PLATFORM, reason="body is not a JSON object")
            await intake.submit(rejected, raw={"body": raw.decode(errors="replace")[:10_000]})
            return JSONResponse({"error": rejected.reason}, status_code=400)
        extracted = extract(channel, body, sender=person)
        outcome = await intake.submit(extracted, raw=body)
        if isinstance(extracted, Rejected):
            # the reason may quote the input: a lone surrogate cannot be encoded (found by
            # fuzzing: a 500 here), so it is escaped
            reason = extracted.reason.encode("utf-8", "backslashreplace").decode("utf-8")
            return JSONResponse({"error": reason}, status_code=422)
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

    async def _change(self, request: Request) -> Response:
        """The person edits (``PATCH {"text": ...}``) or deletes (``DELETE``) their own message
        at ``seq``: stored as an edit or deletion of it, which the core's conversation rules
        act on (the answer follows the new text, or goes with the message). Someone else's
        message is refused (403)."""
        intake = self._intake
        if intake is None:
            return JSONResponse({"error": "starting up"}, status_code=503)
        try:
            person = await self._person(request)
            key = self._key(request, person)
        except _Refused as refused:
            return refused.response
        seq = request.path_params["seq"]
        found = None
        if 0 < seq <= MAX_SEQ:
            found = await self._conversations.person_message(key, seq)
        if found is None:
            return JSONResponse({"error": "no such message"}, status_code=404)
        if found.sender_id != person:
            return JSONResponse({"error": "only its author may change it"}, status_code=403)
        text = None
        body: Any = None
        if request.method == "PATCH":
            try:
                body = json.loads(await request.body())
            except (ValueError, UnicodeDecodeError, RecursionError):
                body = None
            text = body.get("text") if isinstance(body, dict) else None
            if not isinstance(body, dict) or set(body) - {"text"} or not isinstance(text, str):
                return JSONResponse({"error": 'send {"text": "..."}'}, status_code=422)
        changed = change(key, found.message_id, person, text=text)
        if isinstance(changed, Rejected):
            reason = changed.reason.encode("utf-8", "backslashreplace").decode("utf-8")
            return JSONResponse({"error": reason}, status_code=422)
        outcome = await intake.submit(changed, raw=body if isinstance(body, dict) else {})
        return JSONResponse({"status": outcome.status, "seq_no": seq})

    async def _upload(self, request: Request) -> Response:
        """A file for this thread's documents (the body is the file, ``?name=`` its name);
        the thread is told when it has been read. Audio is a voice note instead."""
        if self._files is None:
            return JSONResponse({"error": "file sharing is off"}, status_code=501)
        try:
            person = await self._person(request)
            key = self._key(request, person)
        except _Refused as refused:
            return refused.response
        name = request.query_params.get("name", "").strip()
        if not name or len(name) > 255 or "/" in name or "\x00" in name:
            return JSONResponse({"error": "name must be a file name"}, status_code=400)
        # the body arrives as application/octet-stream (gateway.http.guard: a type no foreign
        # page can send without a preflight); the browser's idea of its type rides along
        declared = request.query_params.get("type", "").strip()[:127] or None
        data = await request.body()
        if not data:
            return JSONResponse({"error": "the file is empty"}, status_code=400)
        if is_audio(Attachment(kind="file", name=name, mime_type=declared)):
            return await self._voice_note(key, person, name, declared, data)
        target = ReplyTarget(
            platform=PLATFORM, scope=SCOPE, chat_id=key.chat_id, thread_id=key.thread_id
        )
        accepted, note = await self._files.share(key, target, name, data, declared)
        return JSONResponse({"note": note}, status_code=200 if accepted else 415)

    async def _voice_note(
        self, key: SessionKey, person: str, name: str, media_type: str | None, data: bytes
    ) -> Response:
        """Audio shared in the thread: kept, then a message of the person's that is answered
        once it is transcribed (like a voice note on any platform)."""
        if self._held is None or self._intake is None:
            return JSONResponse({"error": "voice notes are off"}, status_code=501)
        file_id = await self._held.keep(name, media_type, data)
        note = voice_note(key, person, file_id, name=name, media_type=media_type, size=len(data))
        outcome = await self._intake.submit(note, raw=None)
        return JSONResponse(
            {"note": f"🎙️ {name} received.", "status": outcome.status, "seq_no": outcome.seq_no}
        )

    async def _history(self, request: Request) -> Response:
        try:
            key = self._key(request, await self._person(request))
        except _Refused as refused:
            return refused.response
        transcript = await self._conversations.transcript(key)
        if transcript is None:
            return JSONResponse({"session_id": None, "messages": [], "earlier": []})
        # the thread's sessions before this one (/new restarts the context, not the view)
        earlier = await self._conversations.earlier(key, transcript.session_id)
        return JSONResponse(
            {
                "session_id": transcript.session_id,
                "status": transcript.status,
                "messages": [_message_json(m) for m in transcript.messages],
                "earlier": [
                    {
                        "session_id": e.session_id,
                        "messages": [_message_json(m) for m in e.messages],
                    }
                    for e in earlier
                ],
            },
            headers={"Cache-Control": "no-store"},
        )

    async def _citations(self, request: Request) -> Response:
        """The sources an answer cites, frozen when it was written: document name,
        page, section and the passage text, for the ``[n]`` links. Guarded like the
        transcript: only someone who may read this thread, and only this thread's answers."""
        try:
            key = self._key(request, await self._person(request))
        except _Refused as refused:
            return refused.response
        seq = request.path_params["seq"]
        # ?n=3: the person opened [3] (counted as a read of that passage)
        raw = request.query_params.get("n", "")
        opened = int(raw) if raw.isdigit() and len(raw) <= 3 else None
        found = (
            None
            if not 0 < seq <= MAX_SEQ
            else await self._conversations.citations(key, seq, opened=opened)
        )
        if found is None:
            return JSONResponse({"error": "no such message"}, status_code=404)
        return JSONResponse(
            {
                "seq_no": seq,
                "citations": [
                    {
                        "n": c.ordinal,
                        "document": c.document_name,
                        "page": c.page,
                        "section": c.section,
                        "passage": c.passage,
                    }
                    for c in found
                ],
            },
            headers={"Cache-Control": "no-store"},
        )

    async def _feedback(self, request: Request) -> Response:
        """Thumbs up/down on an answer: ``{"value": 1 | -1 | 0}`` from the signed-in person;
        0 takes their feedback back. Answers with the message's resulting feedback."""
        try:
            person = await self._person(request)
            key = self._key(request, person)
        except _Refused as refused:
            return refused.response
        seq = request.path_params["seq"]
        if not 0 < seq <= MAX_SEQ:
            return JSONResponse({"error": "no such message"}, status_code=404)
        try:
            body = json.loads(await request.body())
        except (ValueError, UnicodeDecodeError, RecursionError):
            body = None
        value = body.get("value") if isinstance(body, dict) else None
        if (
            not isinstance(body, dict)
            or set(body) - _FEEDBACK_KEYS
            or value not in (-1, 0, 1)
            or isinstance(value, bool)
        ):
            return JSONResponse({"error": 'send {"value": 1, -1 or 0}'}, status_code=422)
        vote = await self._conversations.vote(key, seq, user_id=person, value=value)
        if vote.outcome == "no_such_message":
            return JSONResponse({"error": "no such message"}, status_code=404)
        if vote.outcome == "not_an_answer":
            return JSONResponse({"error": "only answers take feedback"}, status_code=404)
        return JSONResponse({"feedback": vote.feedback})

    async def _approval(self, request: Request) -> Response:
        """Approve / Deny on an approval card: ``{"decision": "approve" | "deny"}``
        from the signed-in person. Only the asker (or an approver) decides; anyone else gets a
        polite refusal (403) and nothing changes; a second click answers "already decided"."""
        intake = self._intake
        if intake is None:
            return JSONResponse({"error": "starting up"}, status_code=503)
        try:
            person = await self._person(request)
            key = self._key(request, person)
        except _Refused as refused:
            return refused.response
        try:
            body = json.loads(await request.body())
        except (ValueError, UnicodeDecodeError, RecursionError):
            body = None
        decision = body.get("decision") if isinstance(body, dict) else None
        if not isinstance(body, dict) or set(body) - {"decision"} or decision not in _DECISIONS:
            return JSONResponse({"error": 'send {"decision": "approve" or "deny"}'}, 422)
        outcome = await intake.approval_click(
            ApprovalClick(
                platform=PLATFORM,
                approval_id=request.path_params["approval"][:64],
                user_id=person,
                approve=decision == "approve",
                chat_id=key.chat_id,
                thread_id=key.thread_id,
            )
        )
        status = {"unknown": 404, "not_allowed": 403}.get(outcome.outcome, 200)
        return JSONResponse(
            {"outcome": outcome.outcome, "message": outcome.message}, status_code=status
        )

    async def _stream(self, request: Request) -> Response:
        try:
            topic = live_topic(self._key(request, await self._person(request)))
        except _Refused as refused:
            return refused.response

        async def events() -> AsyncIterator[str]:
            async with self._live.subscribe(topic) as queue:
                # a real event, sent once subscribed: the page reloads history on it, so a reply
                # published between its history load and this subscription is not missed
                yield 'data: {"type": "connected"}\n\n'
                if self.transport.is_typing(topic):
                    # a new thread subscribes after its first turn began: say so now
                    yield 'data: {"type": "typing"}\n\n'
                # the gateway stopping ends the stream at once (a page left open must not
                # hold the HTTP server's shutdown until its grace period runs out)
                stopping = asyncio.ensure_future(self._stopping.wait())
                try:
                    while not self._stopping.is_set():
                        got = asyncio.ensure_future(queue.get())
                        await asyncio.wait(
                            {got, stopping},
                            timeout=KEEPALIVE_SECONDS,
                            return_when=asyncio.FIRST_COMPLETED,
                        )
                        if got.done():
                            yield f"data: {json.dumps(got.result())}\n\n"
                            continue
                        got.cancel()
                        if not self._stopping.is_set():
                            yield ": keepalive\n\n"
                finally:
                    stopping.cancel()

        return StreamingResponse(
            events(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )


def _message_json(m: TranscriptEntry) -> dict[str, Any]:
    return {
        "seq_no": m.seq_no,
        "role": m.role,
        "content": m.content,
        "sender": m.sender,
        "model": m.model,
        "delivery": m.delivery,
        "feedback": m.feedback,
        "edited": m.edited,
        "approval": dict(m.approval) if m.approval else None,
        "citations": list(m.citations),
        "files": [
            {
                "id": f.id,
                "name": f.name,
                "mime_type": f.mime_type,
                "caption": f.caption,
                "data": base64.b64encode(f.data).decode("ascii"),
            }
            for f in m.files
        ],
    }


def _blocks(page: str, tag: str) -> list[str]:
    """The contents of the page's inline ``<tag>`` blocks, exactly as the browser hashes them."""
    return re.findall(rf"<{tag}>(.*?)</{tag}>", page, flags=re.DOTALL)
