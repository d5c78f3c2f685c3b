"""The Matrix surface: the ``/sync`` long poll into the core's intake.

"Nothing missed, nothing twice" is the sync token's: each batch's events are submitted in
order (durable ingest), and only then is its ``next_batch`` saved with the intake's cursors;
a crash in between syncs the same batch again, and the inbox keeps each event id once. The
first sync of a bot without a token only learns its rooms: history from before the gateway
is not answered.

What a batch holds: invites (joined when the door would answer the inviter in that room,
declined otherwise), the joined rooms' state and timelines (messages, edits, redactions,
reactions: ✅/❌ decide an approval card, 👍/👎 are feedback). An encrypted room gets one
``m.notice`` saying it is not supported (once: remembered as a cursor) and its events are
never read.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from adapters.matrix.api import MatrixApi, MatrixApiError
from adapters.matrix.extract import (
    APPROVE_KEYS,
    DENY_KEYS,
    FEEDBACK,
    PLATFORM,
    Context,
    ReactionOf,
    RoomFacts,
    extract_event,
    reaction_of,
)
from adapters.matrix.settings import MatrixSettings, scope_of
from adapters.matrix.transport import MatrixTransport
from gateway.core.domain import Reaction, SessionKey
from gateway.core.errors import ConfigError
from gateway.core.ports import ApprovalClick, Check, Intake
from gateway.inbound.ingress import ingest, record_reaction, refusal

__all__ = ["MatrixAdapter", "MatrixConfig"]

log = structlog.get_logger(__name__)

#: the notice an encrypted room gets, once
ENCRYPTED_NOTICE = (
    "This room is end-to-end encrypted, which this bot does not support: it cannot read "
    "messages here. Talk to it in a room without encryption."
)
#: events per room in one sync: a gap longer than this (a long outage) is not read back
TIMELINE_LIMIT = 500


@dataclass(frozen=True, slots=True, kw_only=True)
class MatrixConfig:
    homeserver_url: str
    access_token: str | None = field(default=None, repr=False)
    user_id: str | None = None
    password: str | None = field(default=None, repr=False)
    #: the long poll's wait, in milliseconds
    sync_timeout_ms: int = 30000
    backoff_initial: float = 1.0
    backoff_max: float = 30.0
    http_timeout: float = 60.0
    #: the account's pace (MATRIX_MESSAGES_PER_SECOND); Synapse's default limit
    messages_per_second: float = 0.2

    @classmethod
    def from_settings(cls, settings: MatrixSettings) -> MatrixConfig:
        if not settings.matrix_homeserver_url:
            raise ConfigError("MATRIX_HOMESERVER_URL", "Matrix needs MATRIX_HOMESERVER_URL")
        token = settings.matrix_access_token
        password = settings.matrix_password
        return cls(
            homeserver_url=settings.matrix_homeserver_url,
            access_token=token.get_secret_value() if token else None,
            user_id=settings.matrix_user_id,
            password=password.get_secret_value() if password else None,
            messages_per_second=settings.matrix_messages_per_second,
        )


@dataclass(slots=True)
class Room:
    """What the adapter keeps of a joined room (from sync state, or its state once)."""

    members: set[str] = field(default_factory=set)
    encrypted: bool = False
    name: str | None = None

    def apply(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        content = event.get("content")
        if not isinstance(content, Mapping):
            return
        if kind == "m.room.member" and isinstance(event.get("state_key"), str):
            if content.get("membership") == "join":
                self.members.add(event["state_key"])
            else:
                self.members.discard(event["state_key"])
        elif kind in ("m.room.encryption", "m.room.encrypted"):
            self.encrypted = True
        elif kind == "m.room.name" and isinstance(content.get("name"), str):
            self.name = content["name"] or None


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


class MatrixAdapter:
    """``PlatformAdapter`` for one bot account on one homeserver."""

    platform = PLATFORM

    def __init__(self, config: MatrixConfig) -> None:
        self._config = config
        self.scope = scope_of(config.homeserver_url)
        self._api = MatrixApi(
            config.homeserver_url, config.access_token or "", timeout=config.http_timeout
        )
        self.transport = MatrixTransport(
            self._api, scope=self.scope, messages_per_second=config.messages_per_second
        )
        self.user_id: str | None = None
        self.rooms: dict[str, Room] = {}
        self._intake: Intake | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        #: sync batches handled since start (tests wait on it)
        self.batches = 0

    # --- PlatformAdapter ---------------------------------------------------------------------

    def http_routes(self) -> Sequence[Any]:
        return ()  # the sync is outbound; reactions decide approval cards

    async def check(self) -> Sequence[Check]:
        """whoami, and the rooms the bot is in (``gateway doctor`` / ``gateway setup``)."""
        api = MatrixApi(self._config.homeserver_url, self._config.access_token or "", timeout=15)
        try:
            try:
                if not self._config.access_token and self._config.user_id:
                    await api.login(self._config.user_id, self._config.password or "")
                user_id = await api.whoami()
            except MatrixApiError as exc:
                if exc.status in (401, 403):
                    return [
                        Check(
                            name="matrix",
                            ok=False,
                            detail=f"the homeserver refused the credentials ({exc.errcode})",
                            fix="set MATRIX_ACCESS_TOKEN to the bot account's access token",
                        )
                    ]
                return [
                    Check(
                        name="matrix",
                        ok=False,
                        detail=f"{self._config.homeserver_url} answered: {exc}",
                        fix="check MATRIX_HOMESERVER_URL (the client-server API's base URL)",
                    )
                ]
            rooms = await api.joined_rooms()
        finally:
            await api.aclose()
        checks = [Check(name="matrix", ok=True, detail=f"signed in as {user_id}")]
        checks.append(
            Check(
                name="matrix rooms",
                ok=True,
                detail=f"in {len(rooms)} room(s)",
                fix=None if rooms else f"invite {user_id} to a room (it joins by itself)",
            )
        )
        return checks

    async def start(self, intake: Intake) -> None:
        self._intake = intake
        self._stopping.clear()
        try:
            if not self._config.access_token and self._config.user_id:
                await self._api.login(self._config.user_id, self._config.password or "")
            self.user_id = await self._api.whoami()
        except MatrixApiError as exc:
            if exc.status in (401, 403):
                setting = "MATRIX_ACCESS_TOKEN" if self._config.access_token else "MATRIX_PASSWORD"
                raise ConfigError(setting, f"the homeserver refused it ({exc.errcode})") from exc
            raise
        self.transport.user_id = self.user_id
        # one sync per bot across replicas; sending works on every replica
        self._task = asyncio.create_task(
            intake.lead(
                f"matrix-sync:{self.scope}:{self.user_id}", self._run, stopping=self._stopping
            ),
            name="matrix-sync",
        )

    async def stop(self) -> None:
        self._stopping.set()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await self._api.aclose()

    # --- the sync loop ------------------------------------------------------------------------

    @property
    def _cursor(self) -> str:
        return f"{PLATFORM}:{self.scope}:{self.user_id}:sync"

    def _intake_now(self) -> Intake:
        if self._intake is None:
            raise RuntimeError("matrix adapter not started")
        return self._intake

    async def _run(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            try:
                await self.sync_once()
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - one bad batch or an outage never ends it
                failures += 1
                ceiling = min(
                    self._config.backoff_max, self._config.backoff_initial * 2 ** (failures - 1)
                )
                retry = getattr(exc, "retry_after", None)
                delay = (
                    retry
                    if isinstance(retry, float)
                    else ceiling / 2 + ceiling / 2 * random.random()
                )
                log.warning("matrix_sync_failed", error=repr(exc), retry_in=round(delay, 2))
                try:
                    await asyncio.wait_for(self._stopping.wait(), delay)
                except TimeoutError:
                    pass

    async def sync_once(self) -> None:
        """One long poll: handle its events in order, then save its token."""
        intake = self._intake_now()
        since = await intake.load_cursor(self._cursor)
        batch = await self._api.sync(
            since,
            timeout_ms=0 if since is None else self._config.sync_timeout_ms,
            filter_json=json.dumps({"room": {"timeline": {"limit": TIMELINE_LIMIT}}}),
        )
        rooms = _mapping(batch.get("rooms"))
        for room_id, invited in _mapping(rooms.get("invite")).items():
            await self._on_invite(str(room_id), invited)
        for room_id, data in _mapping(rooms.get("join")).items():
            if isinstance(data, Mapping):
                await self._on_room(str(room_id), data, history=since is None)
        for room_id in _mapping(rooms.get("leave")):
            self.rooms.pop(str(room_id), None)
        token = batch.get("next_batch")
        if isinstance(token, str) and token:
            await intake.save_cursor(self._cursor, token)
        self.batches += 1

    async def _on_invite(self, room_id: str, invited: object) -> None:
        """Join when the door would answer the inviter in that room; else decline."""
        events = (
            invited.get("invite_state", {}).get("events", [])
            if isinstance(invited, Mapping)
            else []
        )
        inviter = next(
            (
                e.get("sender")
                for e in events
                if isinstance(e, Mapping)
                and e.get("type") == "m.room.member"
                and e.get("state_key") == self.user_id
            ),
            None,
        )
        if not isinstance(inviter, str):
            return
        key = SessionKey(platform=PLATFORM, scope=self.scope, chat_id=room_id)
        # the door decides who is welcome: whether it would answer the inviter there
        refused = refusal(self._intake_now(), place=key, person=inviter)
        try:
            if refused is not None:
                log.info("matrix_invite_declined", room_id=room_id, inviter=inviter, reason=refused)
                await self._api.leave(room_id)
            else:
                log.info("matrix_invite_joined", room_id=room_id, inviter=inviter)
                await self._api.join(room_id)
        except MatrixApiError as exc:
            # gone or withdrawn meanwhile: the next sync says what became of it
            log.warning("matrix_invite_failed", room_id=room_id, error=str(exc))

    async def _room(self, room_id: str) -> Room:
        room = self.rooms.get(room_id)
        if room is None:
            room = Room()
            try:
                for event in await self._api.state(room_id):
                    room.apply(event)
            except MatrixApiError as exc:
                log.warning("matrix_room_state_failed", room_id=room_id, error=str(exc))
            self.rooms[room_id] = room
        return room

    async def _on_room(self, room_id: str, data: Mapping[str, Any], *, history: bool) -> None:
        state = (
            data.get("state", {}).get("events", [])
            if isinstance(data.get("state"), Mapping)
            else []
        )
        timeline = data.get("timeline", {}) if isinstance(data.get("timeline"), Mapping) else {}
        events = [e for e in timeline.get("events", []) if isinstance(e, Mapping)]
        if (
            room_id not in self.rooms
            and (state or any(e.get("state_key") is not None for e in events))
            and history
        ):
            self.rooms[room_id] = Room()
        room = await self._room(room_id)
        for event in state:
            if isinstance(event, Mapping):
                room.apply(event)
        if history:
            for event in events:
                room.apply(event)
            if room.encrypted:
                await self._encrypted(room_id)
            return  # before the gateway's time: learnt, not answered
        if timeline.get("limited"):
            log.warning("matrix_timeline_gap", room_id=room_id, limit=TIMELINE_LIMIT)
        for event in events:
            room.apply(event)
            if room.encrypted:
                await self._encrypted(room_id)
                if event.get("type") not in ("m.room.encrypted", "m.room.message"):
                    continue
            await self._on_event(room_id, room, event)

    async def _encrypted(self, room_id: str) -> None:
        """One notice per room that it is not supported (remembered across restarts)."""
        intake = self._intake_now()
        name = f"{PLATFORM}:{self.scope}:{self.user_id}:encrypted:{room_id}"
        if await intake.load_cursor(name):
            return
        await self.transport.notice(room_id, ENCRYPTED_NOTICE, txn_id=f"gw-encrypted-{room_id}")
        await intake.save_cursor(name, "noticed")
        log.info("matrix_encrypted_room_noticed", room_id=room_id)

    async def _on_event(self, room_id: str, room: Room, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        if kind == "m.reaction":
            found = reaction_of(event, room_id)
            if found is not None and found.user_id != self.user_id:
                await self._on_reaction(found)
            return
        if kind not in ("m.room.message", "m.room.redaction", "m.room.encrypted"):
            return  # state and other noise: kept in the room cache only
        if room.encrypted and kind == "m.room.message":
            kind = "m.room.encrypted"  # never read a message of an encrypted room
            event = {**event, "type": kind}
        assert self.user_id is not None
        ctx = Context(scope=self.scope, bot_user_id=self.user_id)
        facts = RoomFacts(room_id=room_id, direct=len(room.members) == 2, name=room.name)
        await ingest(
            self._intake_now(),
            platform=PLATFORM,
            raw=dict(event),
            extract=lambda: extract_event(event, ctx=ctx, room=facts),
            event_id=str(event.get("event_id") or "") or None,
        )

    async def _on_reaction(self, found: ReactionOf) -> None:
        intake = self._intake_now()
        if found.key in APPROVE_KEYS or found.key in DENY_KEYS:
            click = ApprovalClick(
                platform=PLATFORM,
                approval_id="",
                user_id=found.user_id,
                approve=found.key in APPROVE_KEYS,
                chat_id=found.room_id,
                message_id=found.event_id,
            )
            outcome = await intake.approval_click(click)
            # Matrix has no message only the reacting person sees: what they would be told
            # (a refusal, "already decided") is logged, not posted to the whole room
            log.info(
                "matrix_approval_reaction",
                outcome=outcome.outcome,
                told=outcome.message,
                user_id=found.user_id,
                event_id=found.event_id,
            )
            return
        value = FEEDBACK.get(found.key)
        if value is None:
            return
        await record_reaction(
            intake,
            platform=PLATFORM,
            reaction=lambda: Reaction(
                chat_id=found.room_id, message_id=found.event_id, user_id=found.user_id, value=value
            ),
        )
