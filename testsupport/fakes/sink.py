"""A minimal surface for core tests: inbound over HTTP (``POST /sink/inbound``), outbound by
POSTing each part to a recording HTTP server the test runs (``SINK_URL``).

Loadable in a ``gateway run`` subprocess with ``GATEWAY_ADAPTERS=testsupport.fakes.sink:create``.
The sink server answers 200 (sent), 429 + Retry-After (rate limited) or 400 (permanent), as the
test scripts it, so the core's delivery policy is exercised over a real network hop."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import aiohttp
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway.core.domain import (
    Envelope,
    Facts,
    OutgoingFile,
    Place,
    ReplyTarget,
    Sender,
    SessionKey,
)
from gateway.core.errors import DeliveryError
from gateway.core.ports import AdapterContext, Check, Intake, PaceRule, SendResult
from gateway.core.settings import Settings
from gateway.core.text import format_parts

PLATFORM = "sink"


class SinkTransport:
    platform = PLATFORM
    max_message_length = 4000
    idempotent = False
    resend_window: float | None = None
    typing_interval = 4.0

    def __init__(
        self,
        url: str,
        *,
        idempotent: bool = False,
        max_length: int = 4000,
        pace: float = 0.0,
        typing: bool = False,
    ) -> None:
        self._url = url
        #: report typing indicators to the sink server (the campaigns measure silences)
        self._typing = typing
        self.max_message_length = max_length
        self.idempotent = idempotent
        #: seconds between two calls to one chat (0: unpaced), as Telegram and Slack pace
        self._pace = pace
        # aiohttp rather than httpx: about a fifth of the gateway's CPU per message went to
        # the HTTP client. Made on first use: a session belongs to a running loop
        self._client: aiohttp.ClientSession | None = None

    def measure(self, text: str) -> int:
        return len(text)

    def format(self, text: str) -> str:
        return text

    def parts(self, text: str) -> list[str]:
        return format_parts(text, self.max_message_length, self.measure, self.format)

    def pace(self, target: ReplyTarget) -> Sequence[PaceRule]:
        return [PaceRule(f"chat:{target.chat_id}", self._pace)] if self._pace > 0 else ()

    async def send(self, target: ReplyTarget, text: str, *, idempotency_key: str) -> SendResult:
        return await self._post(target, text, idempotency_key)

    async def _post(self, target: ReplyTarget, text: str, key: str, **extra: Any) -> SendResult:
        if self._client is None:
            self._client = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5))
        try:
            async with self._client.post(
                self._url,
                json={"target": target.to_json(), "text": text, "key": key, **extra},
            ) as response:
                status = response.status
                body = await response.read()
                retry_after = response.headers.get("Retry-After", "1")
        except TimeoutError as exc:
            raise DeliveryError("timeout", ambiguous=True) from exc
        except aiohttp.ClientError as exc:
            raise DeliveryError(f"connection failed: {exc}") from exc
        if status == 429:
            raise DeliveryError("rate limited", retry_after=float(retry_after))
        if status >= 400:
            raise DeliveryError(
                body.decode("utf-8", "replace") or f"HTTP {status}", permanent=status < 500
            )
        return SendResult(platform_message_id=str(json.loads(body)["id"]))

    async def send_file(
        self, target: ReplyTarget, file: OutgoingFile, *, idempotency_key: str
    ) -> SendResult:
        # recorded like a text part, the file described beside it
        described = {"name": file.name, "mime_type": file.mime_type, "size": len(file.data)}
        return await self._post(target, file.caption or "", idempotency_key, file=described)

    async def typing(self, target: ReplyTarget) -> None:
        if self._typing:
            await self._post(target, "", "", typing=True)

    async def clear_typing(self, target: ReplyTarget) -> None:
        return None

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None


#: what a test's ``trigger`` asks for, as the facts the sink reports (the core's door decides)
_ADDRESSED = {"always": {"mentioned": True}, "if_following": {"thread_reply": True}, "never": {}}


def sink_envelope(body: dict[str, Any]) -> Envelope:
    """The sink's message: the test's ``trigger`` (``always``, ``if_following``, ``never``)
    is reported as facts (a mention, a thread reply, neither), for the core's door to decide."""
    chat = str(body["chat"])
    thread = body.get("thread")
    thread = None if thread is None else str(thread)
    message_id = str(body["id"])
    key = SessionKey(platform=PLATFORM, scope="test", chat_id=chat, thread_id=thread)
    user = str(body.get("user", "tester"))
    direct = body.get("direct") is True
    addressed = _ADDRESSED[str(body.get("trigger", "always"))]
    return Envelope(
        key=key,
        target=ReplyTarget(
            platform=PLATFORM,
            scope="test",
            chat_id=chat,
            thread_id=thread,
            reply_to_message_id=message_id,
        ),
        message_id=message_id,
        event_id=body.get("event_id"),
        text=str(body["text"]),
        sender=Sender(id=user, name=user),
        command={"/new": "new", "/help": "help"}.get(str(body["text"]).strip())
        or _with_argument(str(body["text"])),
        place=Place(direct=direct),
        facts=Facts(place=key, person=user, direct=direct, **addressed),
    )


def _with_argument(text: str) -> str | None:
    """``/model NAME``, ``/usage``, ``/link [CODE]``, ``/pause``, ``/resume``, ``/decision
    TEXT``: the commands the sink knows."""
    first = text.split()[:1]
    known = ("/model", "/usage", "/link", "/pause", "/resume", "/decision")
    return first[0][1:] if first and first[0] in known else None


class SinkAdapter:
    platform = PLATFORM

    def __init__(
        self,
        url: str,
        *,
        idempotent: bool = False,
        max_length: int = 4000,
        pace: float = 0.0,
        typing: bool = False,
    ) -> None:
        self.transport = SinkTransport(
            url, idempotent=idempotent, max_length=max_length, pace=pace, typing=typing
        )
        self._intake: Intake | None = None

    async def start(self, intake: Intake) -> None:
        self._intake = intake

    async def stop(self) -> None:
        self._intake = None
        await self.transport.aclose()

    async def check(self) -> Sequence[Check]:
        return [Check(name="sink", ok=True, detail="test surface: nothing to check")]

    def http_routes(self) -> Sequence[Route]:
        return [Route("/sink/inbound", self._inbound, methods=["POST"])]

    async def submit(self, body: dict[str, Any]) -> Any:
        assert self._intake is not None
        return await self._intake.submit(sink_envelope(body), raw=body)

    async def _inbound(self, request: Request) -> Response:
        if self._intake is None:
            return JSONResponse({"error": "starting"}, status_code=503)
        body = json.loads(await request.body())
        outcome = await self.submit(body)
        return JSONResponse({"status": outcome.status, "session_id": outcome.session_id})


def create(settings: Settings, context: AdapterContext) -> SinkAdapter:
    return SinkAdapter(
        os.environ["SINK_URL"],
        idempotent=os.environ.get("SINK_IDEMPOTENT") == "1",
        pace=float(os.environ.get("SINK_PACE_SECONDS", "0")),
        typing=os.environ.get("SINK_TYPING") == "1",
    )
