"""The "memo" surface: people post to ``POST /memo/inbound`` (``X-Memo-Token`` checked), and
replies are kept in the transport's ``sent`` list, in order, with their place.

It reports what a memo is (``mention``, ``bot``, ``direct`` in the body) as ``Facts`` and
does nothing about who is answered: it even asks for every memo to be answered
(``trigger="always"``). The core's door decides, with the rules the plugin declares
(``MEMO_ALLOWED_BOARDS`` as its shorthand for allowed places).

Written only against the public plugin API (``gateway.core.plugins``) and the ports and values
it names; registered through a real entry point by the test that uses it, never by the core.
"""

from __future__ import annotations

import argparse
import hmac
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field, SecretStr, model_validator
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
    Trigger,
)
from gateway.core.errors import ConfigError
from gateway.core.plugins import (
    Prompter,
    SetupFlag,
    SetupSpec,
    Shorthand,
    SurfacePlugin,
    SurfaceSettings,
)
from gateway.core.ports import AdapterContext, Check, Intake, PaceRule, PlatformAdapter, SendResult
from gateway.core.settings import Settings

PLATFORM = "memo"


class MemoSettings(SurfaceSettings):
    memo_token: SecretStr | None = Field(default=None, alias="MEMO_TOKEN")
    memo_board: str = Field(default="main", alias="MEMO_BOARD")
    memo_streaming: bool | None = Field(default=None, alias="MEMO_STREAMING")
    #: places (``kitchen``...) whose memos are taken; empty: every place
    memo_allowed_places: list[str] = Field(default_factory=list, alias="MEMO_ALLOWED_PLACES")

    @model_validator(mode="after")
    def _long_token(self) -> MemoSettings:
        if self.memo_token is not None and len(self.memo_token.get_secret_value()) < 8:
            raise ConfigError("MEMO_TOKEN", "must be at least 8 characters")
        return self

    def streaming(self) -> bool | None:
        return self.memo_streaming


@dataclass
class MemoTransport:
    platform: str = PLATFORM
    max_message_length: int = 1000
    idempotent: bool = True
    resend_window: float | None = None
    typing_interval: float = 5.0
    #: (place, thread, text) of every reply, in the order sent
    sent: list[tuple[str, str | None, str]] = field(default_factory=list)

    def measure(self, text: str) -> int:
        return len(text)

    def format(self, text: str) -> str:
        return text

    def parts(self, text: str) -> list[str]:
        size = self.max_message_length
        return [text[i : i + size] for i in range(0, len(text), size)] or [""]

    def pace(self, target: ReplyTarget) -> Sequence[PaceRule]:
        return ()

    async def send(self, target: ReplyTarget, text: str, *, idempotency_key: str) -> SendResult:
        self.sent.append((target.chat_id, target.thread_id, text))
        return SendResult(platform_message_id=f"m{len(self.sent)}")

    async def send_file(
        self, target: ReplyTarget, file: OutgoingFile, *, idempotency_key: str
    ) -> SendResult:
        return await self.send(target, file.caption or file.name, idempotency_key=idempotency_key)

    async def typing(self, target: ReplyTarget) -> None:
        return None

    async def clear_typing(self, target: ReplyTarget) -> None:
        return None


class MemoAdapter:
    platform = PLATFORM

    def __init__(self, settings: MemoSettings) -> None:
        if settings.memo_token is None:
            raise ConfigError("MEMO_TOKEN", "required for the memo surface")
        self._token = settings.memo_token.get_secret_value()
        self._board = settings.memo_board
        self.transport = MemoTransport()
        self._intake: Intake | None = None

    async def start(self, intake: Intake) -> None:
        self._intake = intake

    async def stop(self) -> None:
        self._intake = None

    def http_routes(self) -> Sequence[Route]:
        return [Route("/memo/inbound", self._inbound, methods=["POST"])]

    async def check(self) -> Sequence[Check]:
        return [Check(name=PLATFORM, ok=True, detail=f"board {self._board}")]

    async def _inbound(self, request: Request) -> Response:
        if self._intake is None:
            return JSONResponse({"error": "starting"}, status_code=503)
        given = request.headers.get("x-memo-token", "")
        if not hmac.compare_digest(given.encode(), self._token.encode()):
            return JSONResponse({"error": "bad token"}, status_code=401)
        body = json.loads(await request.body())
        outcome = await self._intake.submit(self._envelope(body), raw=body)
        return JSONResponse({"status": outcome.status})

    def _envelope(self, body: dict[str, Any]) -> Envelope:
        place, thread, message_id = body["place"], body.get("thread"), body["id"]
        key = SessionKey(platform=PLATFORM, scope=self._board, chat_id=place, thread_id=thread)
        person, bot, direct = body["person"], body.get("bot") is True, body.get("direct") is True
        return Envelope(
            key=key,
            target=ReplyTarget(
                platform=PLATFORM,
                scope=self._board,
                chat_id=place,
                thread_id=thread,
                reply_to_message_id=message_id,
            ),
            message_id=message_id,
            event_id=message_id,
            text=body["text"],
            sender=Sender(id=person, name=person, is_bot=bot),
            # asks for an answer to everything: the core's door does not listen
            trigger=Trigger("always"),
            place=Place(direct=direct),
            facts=Facts(
                place=key,
                person=person,
                direct=direct,
                mentioned=body.get("mention") is True,
                from_bot=bot,
            ),
        )


def collect(args: argparse.Namespace, prompter: Prompter) -> dict[str, str]:
    token = args.memo_token or prompter.ask(
        "Memo token (not shown): ", setting="MEMO_TOKEN", flag="--memo-token", secret=True
    )
    return {"MEMO_TOKEN": token}


class MemoPlugin(SurfacePlugin[MemoSettings]):
    name = PLATFORM
    settings_class = MemoSettings
    enabling_setting = "MEMO_TOKEN"
    webhook_prefixes = ("/memo/",)
    setup = SetupSpec(
        flags=(SetupFlag("--memo-token", "memo: the board's token"),),
        collect=collect,
        enabling=("MEMO_TOKEN",),
        guide="tests/integration/runtime/memo_surface/plugin.py",
    )

    def enabled(self, settings: MemoSettings, core: Settings) -> bool:
        return settings.memo_token is not None

    def create(
        self, settings: MemoSettings, core: Settings, context: AdapterContext
    ) -> PlatformAdapter:
        return MemoAdapter(settings)

    def answer_settings(self, settings: MemoSettings) -> Shorthand:
        return Shorthand(
            platform=PLATFORM,
            chat_word="place",
            allowed_chats=settings.memo_allowed_places,
            allowed_chats_name="MEMO_ALLOWED_PLACES",
        )


plugin = MemoPlugin()
