"""The Discord surface: hikari's gateway connection, one ordered event queue, the door.

* hikari keeps the WebSocket: HELLO, IDENTIFY with our intents, heartbeats, RESUME after a
  dropped connection (Discord then replays what was missed), a new session after an invalid
  one. Every dispatch reaches us raw (``ShardPayloadEvent``) and is queued in arrival order;
  one worker handles them one at a time, so a conversation's messages are stored in order.
* After a READY (a new session: nothing is replayed) the worker first catches up every
  known channel from its history (``reconcile``), then reads on.
* ``MESSAGE_CREATE`` / ``MESSAGE_UPDATE`` / ``MESSAGE_DELETE`` go through the core's door as
  messages, edits and deletions; ``INTERACTION_CREATE`` of an approval button goes to the
  core's approvals, and the presser is told the outcome in a message only they see.
* The gateway runs on the replica holding the bot's leader lock; sending works everywhere.
"""

from __future__ import annotations

import asyncio
import base64
import importlib
import json
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import structlog

from adapters.discord.api import DiscordApi, DiscordApiError
from adapters.discord.check import INTENT_FIX, check_bot
from adapters.discord.extract import (
    DM,
    PLATFORM,
    BotIdentity,
    Channel,
    channel_of,
    extract_message,
    is_snowflake,
)
from adapters.discord.reconcile import Reconciler
from adapters.discord.settings import DiscordSettings
from adapters.discord.transport import APPROVE_PREFIX, DENY_PREFIX, DiscordTransport
from gateway.core.domain import EventKind, Rejected
from gateway.core.errors import ConfigError, GatewayError
from gateway.core.ports import ApprovalClick, Check, Intake
from gateway.inbound.ingress import ingest

__all__ = ["DiscordAdapter", "DiscordConfig"]

log = structlog.get_logger(__name__)

#: GUILDS, GUILD_MESSAGES, DIRECT_MESSAGES and the privileged MESSAGE_CONTENT
INTENTS = (1 << 0) | (1 << 9) | (1 << 12) | (1 << 15)
#: close code of an IDENTIFY asking for an intent the application may not use
DISALLOWED_INTENTS = 4014
_CHANNEL_CACHE = 10_000
_MESSAGE_EVENTS = {
    "MESSAGE_CREATE": EventKind.MESSAGE,
    "MESSAGE_UPDATE": EventKind.EDIT,
    "MESSAGE_DELETE": EventKind.DELETE,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class DiscordConfig:
    token: str = field(repr=False)
    api_base_url: str
    http_timeout: float = 30.0
    #: how often the idle event loop retries messages whose handling failed
    tick_interval: float = 1.0
    stop_timeout: float = 10.0
    trust_env: bool = True

    @classmethod
    def from_settings(cls, settings: DiscordSettings) -> DiscordConfig:
        if settings.discord_bot_token is None:
            raise ConfigError("DISCORD_BOT_TOKEN", "Discord needs DISCORD_BOT_TOKEN")
        token = settings.discord_bot_token.get_secret_value().strip()
        if bot_id_of(token) is None:
            raise ConfigError(
                "DISCORD_BOT_TOKEN",
                "not a bot token (three dot-separated parts, the first the bot's id)",
            )
        return cls(token=token, api_base_url=settings.discord_api_base_url)


def bot_id_of(token: str) -> str | None:
    """A bot token's first part is the bot's id in base64."""
    head = token.split(".", 1)[0]
    try:
        decoded = base64.b64decode(head + "=" * (-len(head) % 4), validate=False).decode()
    except (ValueError, UnicodeDecodeError):
        return None
    return decoded if is_snowflake(decoded) else None


def _tolerant_loads(fast: Callable[[str | bytes], Any]) -> Callable[[str | bytes], Any]:
    """hikari's JSON decoder (orjson when installed) refuses a lone surrogate escape
    (``"\\ud800"``), which is valid JSON: the shard dropped the connection, resumed, got
    the same event replayed and dropped again, forever. Python's decoder takes it; the core
    cleans the text as for every surface."""

    def loads(data: str | bytes) -> Any:
        try:
            return fast(data)
        except ValueError:
            return json.loads(data)

    return loads


class DiscordAdapter:
    """``PlatformAdapter`` for one Discord bot."""

    platform = PLATFORM

    def __init__(self, config: DiscordConfig) -> None:
        self._config = config
        self._api = DiscordApi(
            base_url=config.api_base_url,
            token=config.token,
            timeout=config.http_timeout,
            trust_env=config.trust_env,
        )
        self.transport = DiscordTransport(self._api)
        self.reconciler = Reconciler(api=self._api)
        self._intake: Intake | None = None
        self._bot: BotIdentity | None = None
        self._channels: OrderedDict[str, Channel] = OrderedDict()
        self._queue: asyncio.Queue[tuple[str, Mapping[str, Any]]] = asyncio.Queue()
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._gateway: Any = None
        #: READY / RESUMED seen (observability, tests)
        self.sessions = 0
        self.resumes = 0

    @property
    def identity(self) -> BotIdentity | None:
        return self._bot

    @property
    def connected(self) -> bool:
        return self.sessions > 0 and self._gateway is not None

    def http_routes(self) -> Sequence[Any]:
        return ()  # everything arrives over the gateway WebSocket

    async def check(self) -> Sequence[Check]:
        api = DiscordApi(
            base_url=self._config.api_base_url,
            token=self._config.token,
            timeout=self._config.http_timeout,
            trust_env=self._config.trust_env,
        )
        return await check_bot(api, base_url=self._config.api_base_url)

    # --- lifecycle ---------------------------------------------------------------------

    async def start(self, intake: Intake) -> None:
        self._intake = intake
        self._stopping.clear()
        bot_id = bot_id_of(self._config.token) or "bot"
        self.reconciler.bind(intake, bot_id)
        try:
            await self._resolve_identity()
        except DiscordApiError as exc:
            if exc.status in (401, 403):
                raise ConfigError(
                    "DISCORD_BOT_TOKEN", f"Discord refused the token ({exc.status})"
                ) from exc
            log.warning("discord_identity_deferred", error=str(exc))
        except httpx.HTTPError as exc:
            log.warning("discord_identity_deferred", error=repr(exc))
        self._task = asyncio.create_task(
            intake.lead(f"discord-gateway:{bot_id}", self._run, stopping=self._stopping),
            name="discord-gateway",
        )

    async def _resolve_identity(self) -> BotIdentity:
        if self._bot is None:
            me = await self._api.me()
            uid, name = me.get("id"), me.get("username")
            if not is_snowflake(uid) or not isinstance(name, str):
                raise GatewayError("users/@me gave no id/username")
            self._bot = BotIdentity(user_id=str(uid), username=name)
            log.info("discord_identity", user_id=uid, username=name)
        return self._bot

    async def stop(self) -> None:
        self._stopping.set()
        gateway = self._gateway
        if gateway is not None:
            try:
                await gateway.close()
            except Exception:  # broad: closing a half-started connection
                log.debug("discord_close_failed", exc_info=True)
        task, self._task = self._task, None
        if task is not None:
            done, _ = await asyncio.wait({task}, timeout=self._config.stop_timeout)
            if not done:
                task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await self.transport.close(timeout=self._config.http_timeout)

    async def _run(self) -> None:
        """The leader's body: the gateway connection and the worker that handles its
        events, until stopped (or the connection ends for good)."""
        # the client library only when the gateway runs, imported off the event loop: it
        # takes seconds, and a loop blocked that long loses the turn leases it holds
        await asyncio.to_thread(importlib.import_module, "hikari")
        import hikari

        await self._resolve_identity()
        gateway = hikari.GatewayBot(
            self._config.token,
            rest_url=self._config.api_base_url,
            intents=hikari.Intents(INTENTS),
            banner=None,
            logs=None,
            suppress_optimization_warning=True,
            auto_chunk_members=False,
            cache_settings=hikari.impl.CacheSettings(components=hikari.api.CacheComponents.NONE),
            http_settings=hikari.impl.HTTPSettings(enable_cleanup_closed=False),
            loads=_tolerant_loads(hikari.internal.data_binding.default_json_loads),
        )

        async def on_payload(event: hikari.ShardPayloadEvent) -> None:
            # runs as its own task, in arrival order: queue before any await
            self._queue.put_nowait((event.name, event.payload))

        gateway.subscribe(hikari.ShardPayloadEvent, on_payload)
        worker = asyncio.create_task(self._work(), name="discord-events")
        self._gateway = gateway
        try:
            await gateway.start(check_for_updates=False, ignore_session_start_limit=True)
            await gateway.join()
        except hikari.errors.GatewayServerClosedConnectionError as exc:
            if exc.code == DISALLOWED_INTENTS:
                log.error("discord_message_content_intent_missing", fix=INTENT_FIX)
            raise
        finally:
            self._gateway = None
            if gateway.is_alive:
                try:
                    await gateway.close()
                except hikari.errors.ComponentStateConflictError:
                    pass  # stop() closed it already
            worker.cancel()
            await asyncio.gather(worker, return_exceptions=True)

    # --- events ------------------------------------------------------------------------

    async def _work(self) -> None:
        while True:
            try:
                name, payload = await asyncio.wait_for(
                    self._queue.get(), timeout=self._config.tick_interval
                )
            except TimeoutError:
                if self.reconciler.wants_retry():
                    await self.reconciler.retry_held(self._channel, self._submit)
                continue
            try:
                await self._on_event(name, payload)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # broad: one bad event never stops the loop
                log.exception("discord_event_failed", event=name)
                held = payload if name == "MESSAGE_CREATE" else None
                await self.reconciler.hold(held, exc, {"t": name, "d": payload})

    async def _on_event(self, name: str, payload: Mapping[str, Any]) -> None:
        if name == "READY":
            self.sessions += 1
            # a new session: nothing it missed will be replayed
            await self.reconciler.catch_up(self._channel, self._submit)
        elif name == "RESUMED":
            self.resumes += 1
        elif name == "GUILD_CREATE":
            guild = payload.get("id")
            # the active threads: one no session heard begin (no THREAD_CREATE while none
            # was there) is followed and read from its start
            active: list[Mapping[str, Any]] = []
            for key in ("channels", "threads"):
                listed = payload.get(key)
                for raw in listed if isinstance(listed, list) else ():
                    if isinstance(raw, Mapping):
                        self._remember({**raw, "guild_id": raw.get("guild_id") or guild})
                        if key == "threads":
                            active.append(raw)
            bot = (await self._resolve_identity()).user_id
            await self.reconciler.follow_listed(active, bot, self._channel, self._submit)
        elif name in ("THREAD_CREATE", "CHANNEL_CREATE", "THREAD_UPDATE", "CHANNEL_UPDATE"):
            channel = self._remember(payload)
            if channel is not None and channel.thread and name == "THREAD_CREATE":
                # a thread started on a message (by us or a person): follow it from there
                await self.reconciler.watch(channel.id, str(int(channel.id) - 1))
        elif name in _MESSAGE_EVENTS:
            cid = payload.get("channel_id")
            if not is_snowflake(cid):
                await self._require().submit(
                    Rejected(platform=PLATFORM, reason=f"{name} without a channel_id"),
                    raw={"t": name, "d": payload},
                )
                return
            channel = await self._channel(str(cid), guild=payload.get("guild_id"))
            await self._submit(payload, channel, "gateway", kind=_MESSAGE_EVENTS[name])
        elif name == "INTERACTION_CREATE":
            await self._on_interaction(payload)

    def _require(self) -> Intake:
        if self._intake is None:
            raise GatewayError("discord adapter not started")
        return self._intake

    async def _submit(
        self,
        message: Mapping[str, Any],
        channel: Channel,
        source: str,
        *,
        kind: EventKind = EventKind.MESSAGE,
    ) -> None:
        intake = self._require()
        bot = await self._resolve_identity()
        await ingest(
            intake,
            platform=PLATFORM,
            raw={"source": source, "kind": kind.value, "message": dict(message)},
            extract=lambda: extract_message(
                message, bot=bot, channel=channel, kind=kind, source=source
            ),
        )
        if kind is EventKind.MESSAGE:
            await self.reconciler.seen(channel.id, str(message.get("id")))

    # --- channels ----------------------------------------------------------------------

    def _remember(self, payload: Mapping[str, Any]) -> Channel | None:
        channel = channel_of(payload)
        if channel is not None:
            self._channels[channel.id] = channel
            self._channels.move_to_end(channel.id)
            while len(self._channels) > _CHANNEL_CACHE:
                self._channels.popitem(last=False)
        return channel

    async def _channel(self, channel_id: str, guild: object = None) -> Channel:
        known = self._channels.get(channel_id)
        if known is not None:
            return known
        try:
            channel = self._remember(await self._api.channel(channel_id))
        except DiscordApiError as exc:
            if exc.status in (403, 404) and guild is None:
                # no guild: a DM the bot cannot look up (the DM channel is ours to answer)
                return Channel(id=channel_id, type=DM)
            raise
        if channel is None:
            raise GatewayError(f"channel {channel_id}: not a channel object")
        return channel

    # --- approval buttons ----------------------------------------------------------------

    async def _on_interaction(self, payload: Mapping[str, Any]) -> None:
        data = payload.get("data")
        custom = data.get("custom_id") if isinstance(data, Mapping) else None
        iid, token = payload.get("id"), payload.get("token")
        if not isinstance(custom, str) or not isinstance(iid, str) or not isinstance(token, str):
            return
        if custom.startswith(APPROVE_PREFIX):
            approve, approval_id = True, custom.removeprefix(APPROVE_PREFIX)
        elif custom.startswith(DENY_PREFIX):
            approve, approval_id = False, custom.removeprefix(DENY_PREFIX)
        else:
            return
        member = payload.get("member")
        user = member.get("user") if isinstance(member, Mapping) else payload.get("user")
        user_id = user.get("id") if isinstance(user, Mapping) else None
        cid = payload.get("channel_id")
        message = payload.get("message")
        mid = message.get("id") if isinstance(message, Mapping) else None
        if not is_snowflake(user_id) or not is_snowflake(cid):
            log.warning("discord_interaction_refused", reason="no user or channel")
            return
        channel = await self._channel(str(cid), guild=payload.get("guild_id"))
        if channel.thread:
            chat_id, thread_id = channel.parent_id or channel.id, channel.id
        else:
            chat_id, thread_id = channel.id, None
        outcome = await self._require().approval_click(
            ApprovalClick(
                platform=PLATFORM,
                approval_id=approval_id,
                user_id=str(user_id),
                approve=approve,
                chat_id=chat_id,
                thread_id=thread_id,
                message_id=str(mid) if is_snowflake(mid) else None,
            )
        )
        log.info("discord_approval_press", outcome=outcome.outcome)
        try:
            await self._api.interaction_reply(iid, token, outcome.message)
        except (DiscordApiError, httpx.HTTPError) as exc:
            # the press is decided; only the presser's notice is lost
            log.warning("discord_interaction_reply_failed", error=str(exc))
