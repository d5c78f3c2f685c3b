"""Raw delivery of one already-split part through the Bot Connector, on the SDK's connector
client: ``POST {serviceUrl}/v3/conversations/{id}/activities`` (``id`` is the reply chain
``19:…;messageid=<root>`` in a channel, the chat's own id otherwise), ``PUT`` and ``DELETE``
``…/activities/{activityId}`` for streamed previews and decided cards.

Every call carries a client-credentials token (``tokens.py``). The connector has no
idempotency key: a send whose request may have reached it (a timeout, a dropped connection)
is reported ambiguous and never resent blindly. A 429 carries ``Retry-After``, which the
core's pacing honours."""

from __future__ import annotations

from collections.abc import Sequence

import aiohttp
import structlog
from microsoft_agents.activity import Activity
from microsoft_agents.hosting.core.connector.client import ConnectorClient

from adapters.teams.cards import approval_card, decided_card
from adapters.teams.extract import PLATFORM, SERVICE_URL, thread_conversation
from adapters.teams.markdown import to_teams
from adapters.teams.tokens import TokenError, TokenSource
from gateway.core.domain import OutgoingFile, ReplyTarget
from gateway.core.errors import DeliveryError
from gateway.core.ports import PaceRule, SendResult
from gateway.core.retry_after import retry_after_or_default
from gateway.core.text import format_parts

log = structlog.get_logger(__name__)

#: a message activity may be about 28 KB; the text keeps room for the envelope around it
MAX_MESSAGE_BYTES = 24_000
#: the connector's timeout (seconds); a send that times out is reported as ambiguous
CONNECTOR_TIMEOUT_SECONDS = 10.0
#: where a post into a place nobody wrote in yet goes before any activity named a connector
DEFAULT_SERVICE_URL = "https://smba.trafficmanager.net/teams/"


def translate_error(exc: BaseException) -> DeliveryError:
    """Every failure of a connector call becomes one ``DeliveryError``, here and only here."""
    if isinstance(exc, TokenError):
        permanent = exc.status in (400, 401) and exc.error in (
            "invalid_client",
            "unauthorized_client",
        )
        return DeliveryError(
            f"teams token: {exc}", permanent=permanent, retry_after=exc.retry_after
        )
    if isinstance(exc, aiohttp.ClientResponseError):
        detail = f"teams connector {exc.status}"
        if exc.status == 429:
            header = exc.headers.get("Retry-After") if exc.headers is not None else None
            return DeliveryError(detail, retry_after=retry_after_or_default(header))
        if exc.status in (401, 408):
            return DeliveryError(detail)  # a token refused: the next try takes a new one
        if exc.status == 504:
            return DeliveryError(detail, ambiguous=True)
        if 400 <= exc.status < 500:
            # 400 bad activity, 403 the bot was removed, 404 the conversation is gone,
            # 413 too large: the same request cannot succeed
            return DeliveryError(detail, permanent=True)
        return DeliveryError(detail)
    if isinstance(exc, aiohttp.ClientConnectorError):
        return DeliveryError(f"teams connector unreachable: {exc.__class__.__name__}")
    # the request left: the connector may have posted it
    return DeliveryError(f"teams send failed: {exc.__class__.__name__}", ambiguous=True)


_ERRORS = (aiohttp.ClientError, TimeoutError, TokenError, ValueError)


class TeamsTransport:
    platform = PLATFORM
    max_message_length = MAX_MESSAGE_BYTES
    #: the connector has no idempotency key
    idempotent = False
    resend_window: float | None = None
    #: Teams shows a typing indicator for about 3 seconds
    typing_interval = 3.0
    preview_interval = 1.0

    def __init__(self, tokens: TokenSource, *, timeout: float = CONNECTOR_TIMEOUT_SECONDS) -> None:
        self._tokens = tokens
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._clients: dict[str, ConnectorClient] = {}
        #: the connector of the last activity seen, per tenant (a first post into a place)
        self.service_urls: dict[str, str] = {}

    async def close(self) -> None:
        clients, self._clients = self._clients, {}
        for client in clients.values():
            await client.close()

    # --- the Transport port -----------------------------------------------------------------

    def measure(self, text: str) -> int:
        return len(text.encode("utf-8"))

    def format(self, text: str) -> str:
        return to_teams(text)

    def parts(self, text: str) -> list[str]:
        return format_parts(text, self.max_message_length, self.measure, self.format)

    def pace(self, target: ReplyTarget) -> Sequence[PaceRule]:
        # Bot Framework's limits per bot and conversation: 7 in 1 s, 8 in 2 s, 60 in 30 s;
        # per tenant about 50 requests a second for the whole app
        return [
            PaceRule(f"conversation:{target.chat_id}", 0.5, 3),
            PaceRule(f"tenant:{target.scope}", 0.05, 20),
        ]

    async def send(self, target: ReplyTarget, text: str, *, idempotency_key: str) -> SendResult:
        return await self._post(target, _message(text, feedback=True))

    async def send_card(
        self, target: ReplyTarget, text: str, *, approval_id: str, idempotency_key: str
    ) -> SendResult:
        activity = Activity(type="message", summary=text[:200])
        activity.attachments = [approval_card(text, approval_id)]
        return await self._post(target, activity)

    async def send_file(
        self, target: ReplyTarget, file: OutgoingFile, *, idempotency_key: str
    ) -> SendResult:
        # a bot uploads files to a channel through SharePoint (Graph permissions this surface
        # does not ask for): the file is named, its caption sent
        note = f"📎 {file.name} ({len(file.data)} bytes) could not be attached in Teams."
        text = f"{file.caption}\n\n{note}" if file.caption else note
        return await self._post(target, _message(text, feedback=False))

    async def typing(self, target: ReplyTarget) -> None:
        try:
            await self._post(target, Activity(type="typing"))
        except DeliveryError:
            log.debug("teams_typing_failed", exc_info=True)

    async def clear_typing(self, target: ReplyTarget) -> None:
        return None  # the indicator ends with the reply, or after 3 seconds

    # --- previews: a message, updated in place ------------------------------------------------

    async def send_preview(self, target: ReplyTarget, text: str) -> str:
        sent = await self._post(target, _message(text, feedback=False))
        if sent.platform_message_id is None:
            raise DeliveryError("teams: the connector gave no activity id", ambiguous=True)
        return sent.platform_message_id

    async def edit_preview(
        self, target: ReplyTarget, message_id: str, text: str, *, final: bool = False
    ) -> None:
        activity = _message(text, feedback=final)
        activity.id = message_id
        await self._call(target, "update", activity, message_id)

    async def delete_preview(self, target: ReplyTarget, message_id: str) -> None:
        try:
            await self._call(target, "delete", None, message_id)
        except DeliveryError as exc:
            cause = exc.__cause__
            if isinstance(cause, aiohttp.ClientResponseError) and cause.status == 404:
                return  # gone already
            raise

    # --- answers changed after the fact: an edited question, a deleted one -------------------

    async def edit_message(self, target: ReplyTarget, message_id: str, text: str) -> None:
        await self.edit_preview(target, message_id, text, final=True)

    async def delete_message(self, target: ReplyTarget, message_id: str) -> None:
        await self.delete_preview(target, message_id)

    async def retire_card(self, target: ReplyTarget, platform_message_id: str, text: str) -> None:
        """The card, updated in place: the decision shown, the buttons gone."""
        activity = Activity(type="message", id=platform_message_id, summary=text[:200])
        activity.attachments = [decided_card(text)]
        await self._call(target, "update", activity, platform_message_id)

    # --- the connector ------------------------------------------------------------------------

    async def _post(self, target: ReplyTarget, activity: Activity) -> SendResult:
        return await self._call(target, "send", activity, None)

    async def _call(
        self,
        target: ReplyTarget,
        operation: str,
        activity: Activity | None,
        activity_id: str | None,
    ) -> SendResult:
        conversation = thread_conversation(target.chat_id, target.thread_id)
        try:
            client = await self._client(self.service_url(target))
            conversations = client.conversations
            if operation == "send":
                assert activity is not None
                response = await conversations.send_to_conversation(conversation, activity)
            elif operation == "update":
                assert activity is not None and activity_id is not None
                response = await conversations.update_activity(conversation, activity_id, activity)
            else:
                assert activity_id is not None
                await conversations.delete_activity(conversation, activity_id)
                return SendResult(platform_message_id=activity_id)
        except _ERRORS as exc:
            if isinstance(exc, aiohttp.ClientResponseError) and exc.status == 401:
                self._tokens.forget()
            error = translate_error(exc)
            log.warning(
                "teams_send_failed",
                operation=operation,
                chat_id=target.chat_id,
                thread_id=target.thread_id,
                permanent=error.permanent,
                retry_after=error.retry_after,
                error=str(error),
            )
            raise error from exc
        return SendResult(platform_message_id=response.id or activity_id)

    def service_url(self, target: ReplyTarget) -> str:
        url = target.extra.get(SERVICE_URL)
        if url:
            return url
        return self.service_urls.get(target.scope) or DEFAULT_SERVICE_URL

    async def _client(self, service_url: str) -> ConnectorClient:
        token = await self._tokens.token()
        client = self._clients.get(service_url)
        if client is None or client.client.closed:
            base = service_url if service_url.endswith("/") else service_url + "/"
            session = aiohttp.ClientSession(base_url=base, timeout=self._timeout)
            client = ConnectorClient(base, "", session=session)
            self._clients[service_url] = client
        client.client.headers["Authorization"] = f"Bearer {token}"
        return client


def _message(text: str, *, feedback: bool) -> Activity:
    activity = Activity(type="message", text=text, text_format="markdown")
    if feedback:
        # Teams shows 👍/👎 under the answer; a press is a ``message/submitAction`` invoke
        activity.channel_data = {"feedbackLoopEnabled": True}
    return activity


__all__ = ["TeamsTransport", "translate_error"]
