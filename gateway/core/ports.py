"""The ports each surface implements. Shared policy (retries, pacing, splitting) lives in the
core above them; an adapter only does the raw receive and the raw send."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

from gateway.core.attachments import FileShare
from gateway.core.conversations import Conversations
from gateway.core.domain import Extracted, OutgoingFile, ReplyTarget, SessionKey
from gateway.core.hub import Broadcast
from gateway.core.profile import Profile
from session_store.values import IngestStatus

if TYPE_CHECKING:
    import re

    from starlette.requests import Request
    from starlette.routing import Route

    from gateway.core.settings import Settings


class PaceRule(NamedTuple):
    """One pacing rule of a send (``Transport.pace``): calls sharing ``key`` average at most
    one per ``interval`` seconds, and up to ``burst`` of them may go at once when the key has
    been quiet (GCRA; a burst of 1 is plain spacing). Example: Mattermost's limiter allows 10
    requests per second with a burst of 100, ``PaceRule("server:…", 0.1, 50)`` stays under it
    with room for the gateway's other calls."""

    key: str
    interval: float
    burst: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class Check:
    """One finding of ``PlatformAdapter.check`` (and of ``gateway doctor``): what was checked,
    whether it is fine, what was seen, and - when something is wrong or worth changing - the
    exact setting or step that fixes it. ``ok`` with a ``fix`` is advice, not a failure."""

    name: str
    ok: bool
    detail: str
    fix: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class IngestOutcome:
    """What the core did with one inbound event; adapters ack the platform from it."""

    status: IngestStatus
    session_id: int | None = None
    seq_no: int | None = None
    reason: str | None = None


class Ingest(Protocol):
    """The one door of inbound messages (``gateway.inbound.ingress.Door``): every event an
    adapter extracts passes it, and it applies the answer policy (who is answered, kept as
    context or ignored) from the ``Facts`` the envelope reports, with the rules the surface's
    plugin declares and the place's profile. An adapter has no other way in."""

    def admit(self, extracted: Extracted) -> Extracted:
        """The answer policy's verdict on ``extracted``, nothing stored: the envelope with
        its trigger (and command) decided, or ``Ignored`` with the reason. ``submit`` applies
        it again (it is idempotent); an adapter asks first only when it acts on the verdict
        before the store (Slack fetches a thread's history for an answered message)."""
        ...

    async def submit(self, extracted: Extracted, *, raw: Mapping[str, Any] | None) -> IngestOutcome:
        """Decide (``admit``), then store one inbound event (inbox dedupe, session, message)
        and schedule its turn. Returns only after the transaction committed, so the adapter
        may ack the platform as soon as it returns (ack after durable ingest). Never raises for
        bad input: a ``Rejected`` is stored as a dead letter and reported as ``rejected``."""
        ...

    async def knows(self, key: SessionKey) -> bool:
        """True if an active session exists for ``key`` (e.g. to decide on a backfill)."""
        ...


class Cursors(Protocol):
    """Durable per-adapter cursors (Mattermost's last-seen post time per channel...)."""

    async def load_cursor(self, name: str) -> str | None: ...

    async def save_cursor(self, name: str, value: str) -> None: ...


class Interactions(Protocol):
    """What people do to the bot's messages besides writing: feedback and approval clicks."""

    async def record_feedback(
        self, *, platform: str, chat_id: str, message_id: str, user_id: str, value: int
    ) -> bool:
        """A reaction on one of the bot's messages (``message_id`` is the platform's id of
        it, as the send returned): +1, -1, or 0 when the person takes it back. Returns False
        when that message is not one of ours (a reaction on someone else's post)."""
        ...

    async def approval_click(self, click: ApprovalClick) -> ClickOutcome:
        """Someone pressed an approval card's button or reacted ✅/❌ to it: the
        core checks the place, the card and the person, and decides the request once."""
        ...

    async def stop_answer(self, *, platform: str, chat_id: str, message_id: str) -> bool:
        """A stop reaction (⏹) on one of the bot's messages: the answer being written in
        its thread stops, as with ``/stop``. False when nothing is written there."""
        ...


class Lifecycle(Protocol):
    """How an adapter runs its receive loops: on the leader, or on every replica, supervised
    (also offered before start, as ``AdapterContext.lifecycle``)."""

    async def lead(
        self,
        name: str,
        body: Callable[[], Coroutine[Any, Any, None]],
        *,
        stopping: asyncio.Event | None = None,
    ) -> None:
        """Run ``body`` on exactly one replica: the one holding the leader lock ``name``
        (single-connection ingress: long polling, a websocket). If the lock is lost, ``body``
        is cancelled and the replica competes again. Returns when ``body`` returns, or when
        ``stopping`` is set while not leading."""
        ...

    async def supervise(
        self,
        name: str,
        body: Callable[[], Coroutine[Any, Any, None]],
        *,
        stopping: asyncio.Event | None = None,
    ) -> None:
        """Run ``body`` on this replica (every replica runs its own: Slack Socket Mode),
        under the core's supervisor: restarted with backoff when it raises, counted and
        shown in ``/readyz`` as ``ingress:NAME``. Returns when ``body`` returns."""
        ...


class Places(Protocol):
    """What the assistant is in a place, for what a surface offers there itself (Slack's
    suggested prompts when an assistant thread opens)."""

    def profile(self, key: SessionKey) -> Profile:
        """The profile in force at ``key`` (``[places]`` of the config file, as reloaded)."""
        ...


class Intake(Ingest, Cursors, Interactions, Lifecycle, Places, Protocol):
    """What an adapter gets at ``start``: the door (``Ingest``), its cursors, the interactions,
    the lifecycle of its receive loops and the places' profiles. Code inside an adapter takes
    the part it uses."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SendResult:
    platform_message_id: str | None


class Transport(Protocol):
    """The raw send of one already-split part. Raises ``DeliveryError`` on failure."""

    platform: str
    #: the platform's per-message limit, in the unit ``measure`` counts
    max_message_length: int

    def measure(self, text: str) -> int:
        """Length of ``text`` in the platform's unit (UTF-16 units for Telegram, ...)."""
        ...

    def format(self, text: str) -> str:
        """Convert the agent's Markdown to the platform's markup (identity by default)."""
        ...

    def parts(self, text: str) -> list[str]:
        """The agent's reply as outbox rows, in order: split within ``max_message_length``
        and each part in the form ``send`` takes. Most surfaces split the Markdown and
        ``format`` each part (``gateway.core.text.format_parts``); Telegram renders first and
        splits the rendering, so its entities stay valid across the cut."""
        ...

    def pace(self, target: ReplyTarget) -> Sequence[PaceRule]:
        """Pacing rules for a send to ``target``. Sends sharing a key keep to its interval
        (after a burst of at most ``burst``); other keys (other chats) are not blocked.
        Example: Telegram ``[PaceRule("chat:42", 1.0, 3), PaceRule("group:42", 3.0, 3)]``."""
        ...

    #: True when a retried send with the same idempotency key cannot double-post.
    idempotent: bool
    #: seconds the platform remembers an idempotency key (Mattermost: 30); ``None`` for
    #: forever. The core never resends something that may have landed longer ago.
    resend_window: float | None

    async def send(self, target: ReplyTarget, text: str, *, idempotency_key: str) -> SendResult: ...

    #: seconds between typing heartbeats: below the platform's expiry of the indicator
    typing_interval: float

    async def send_file(
        self, target: ReplyTarget, file: OutgoingFile, *, idempotency_key: str
    ) -> SendResult:
        """Upload ``file`` into the target's thread (caption included). Raises
        ``DeliveryError`` like ``send``; ``gateway.outbox.delivery.send_part`` picks by
        the part's kind."""
        ...

    async def typing(self, target: ReplyTarget) -> None:
        """Show a typing indicator in the target's thread (no-op where unsupported). Held by
        ``gateway.turns.typing.hold_typing``: renewed every ``typing_interval``, then
        cleared."""
        ...

    async def clear_typing(self, target: ReplyTarget) -> None:
        """End the indicator now (no-op where it expires on its own or with the reply)."""
        ...


@runtime_checkable
class Previewing(Protocol):
    """Optional: a transport that can show an answer while it is being written.

    A preview is a message in the target's thread that is edited as the text grows; the
    final text is still the outbox delivery, which edits the preview in place
    (``final=True``) instead of sending again, and deletes previews it does not need. Texts
    are parts in the form ``send`` takes (``Transport.parts``). Failures raise
    ``DeliveryError`` (a 429 with ``retry_after``)."""

    #: seconds between two edits of one preview (about one a second, within pacing)
    preview_interval: float

    async def send_preview(self, target: ReplyTarget, text: str) -> str:
        """Post a new preview message; returns its platform message id."""
        ...

    async def edit_preview(
        self, target: ReplyTarget, message_id: str, text: str, *, final: bool = False
    ) -> None:
        """Replace a preview's text ("not modified" is success). ``final``: this is the
        answer's delivery (the web chat then shows it as the stored reply)."""
        ...

    async def delete_preview(self, target: ReplyTarget, message_id: str) -> None:
        """Remove a preview (one that is gone already is success)."""
        ...


@runtime_checkable
class MessageEditing(Protocol):
    """Optional: a transport that can change a message the bot sent before: edit its text
    (an answer written again for its edited question) or delete it (an answer retracted
    with its deleted question). ``text`` is a part in the form ``send`` takes. Editing to
    the same text, and deleting what is gone already, are success; failures raise
    ``DeliveryError`` (permanent when the platform refuses for good)."""

    async def edit_message(self, target: ReplyTarget, message_id: str, text: str) -> None: ...

    async def delete_message(self, target: ReplyTarget, message_id: str) -> None: ...


@runtime_checkable
class Drafting(Protocol):
    """Optional: a transport with native drafts for some places (Telegram
    ``sendMessageDraft`` in private chats): an animated draft that is not a message, so
    nothing has to be edited or deleted afterwards; the final answer is a normal send."""

    def drafts_for(self, target: ReplyTarget) -> bool: ...

    async def send_draft(self, target: ReplyTarget, draft_id: int, text: str) -> None: ...


class PlatformAdapter(Protocol):
    """One surface: receives events into ``Intake`` and owns the ``Transport`` for replies.

    An adapter whose ingress must run on exactly one replica (long polling, a websocket)
    runs that receive loop through ``Lifecycle.lead``; its transport keeps
    sending on every replica. What it extracts goes through ``Ingest``, the core's one door,
    which decides who is answered: the adapter only reports facts.
    """

    # read-only in the protocol so an adapter may narrow it to its own transport class
    @property
    def platform(self) -> str: ...

    @property
    def transport(self) -> Transport: ...

    async def start(self, intake: Intake) -> None:
        """Resolve the bot identity, then begin receiving. Must not block: long-running
        receive loops run as tracked, named tasks owned by the adapter."""
        ...

    async def stop(self) -> None:
        """Stop receiving, finish in-flight acks, close clients."""
        ...

    def http_routes(self) -> Sequence[Any]:
        """Starlette routes this surface serves on the gateway's HTTP server (webhooks).
        Mounted before ``start``; until ``start`` the handlers answer 503."""
        ...

    async def check(self) -> Sequence[Check]:
        """Check the credentials and what the bot can see, live, without starting ingress
        (``gateway doctor``, ``gateway setup``): the identity call (getMe, auth.test,
        users/me), the permissions it reports, the settings this surface needs. Never
        raises for a platform failure: each one is a ``Check`` with ``ok=False`` and a fix.
        Opens and closes its own clients; call it on an adapter that is not started."""
        ...


# --- approvals in the thread -------------------------------------------------------
#
# A card asking to approve a tool call is delivered through the outbox like any reply, as an
# approval card part naming the request (``gateway.core.parts.ApprovalCardPart``; stored as
# a typed field, never in the target). Delivery hands it to ``CardSending.send_card`` with the
# request's opaque id, and a transport that can show buttons adds them to that one message
# (Telegram inline keyboard, web chat buttons, Slack buttons, Mattermost buttons and
# reactions); a transport without ``send_card`` gets the card's text through ``send``
# (``send_card`` below). Clicks come back through ``ApprovalDecider.click``; on any outcome the
# core retires the card through ``ApprovalCards.retire_card``.


@runtime_checkable
class CardSending(Protocol):
    """A transport that shows an approval card as one message with its decision buttons."""

    async def send_card(
        self, target: ReplyTarget, text: str, *, approval_id: str, idempotency_key: str
    ) -> SendResult:
        """Send ``text`` into the target's thread with Approve / Deny buttons that carry
        only ``approval_id`` (nothing else of the request). Raises ``DeliveryError`` like
        ``Transport.send``; the same idempotency rules hold."""
        ...


async def send_card(
    transport: Transport,
    target: ReplyTarget,
    text: str,
    *,
    approval_id: str,
    idempotency_key: str,
) -> SendResult:
    """Send an approval card through ``transport``: with its buttons where it has
    ``send_card``, else the card's text as a plain message (the default for transports
    without buttons; a request nobody decides expires as always)."""
    if isinstance(transport, CardSending):
        return await transport.send_card(
            target, text, approval_id=approval_id, idempotency_key=idempotency_key
        )
    return await transport.send(target, text, idempotency_key=idempotency_key)


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalClick:
    """Someone pressed a card's button (or reacted ✅/❌): checked against the request's
    chat, thread and card message before anything is decided."""

    platform: str
    #: the opaque id a button carries; empty for a reaction (found by ``message_id``)
    approval_id: str
    user_id: str
    approve: bool
    chat_id: str
    #: the thread as the platform reports it with the click; ``None``: not reported
    thread_id: str | None = None
    #: the card's platform message id as the click reports it; ``None``: not reported
    message_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ClickOutcome:
    #: approved | denied | already_decided | expired | not_allowed | unknown
    outcome: str
    #: a short, polite answer for the person who clicked
    message: str


class ApprovalDecider(Protocol):
    async def click(self, click: ApprovalClick) -> ClickOutcome: ...


@runtime_checkable
class ApprovalCards(Protocol):
    """A transport that can retire a card: remove its buttons and show the decision."""

    async def retire_card(
        self, target: ReplyTarget, platform_message_id: str, text: str
    ) -> None: ...


class HeldFiles(Protocol):
    """Files a surface keeps itself because its platform has nowhere to fetch them from later
    (the web chat's voice notes: the transcription job fetches them by id, as it fetches a
    platform's file). ``session_store.repos.held_files.HeldFileStore``."""

    async def keep(self, name: str, media_type: str | None, data: bytes) -> int: ...

    async def read(self, file_id: int, *, max_bytes: int) -> tuple[int, bytes | None] | None:
        """``(size, bytes)``, the bytes ``None`` past ``max_bytes``; ``None``: no such file."""
        ...


class WebSignIn(Protocol):
    """Who is using the web chat, as a surface serving it needs to know
    (``gateway.http.webauth.WebIdentity``, per GATEWAY_WEB_AUTH)."""

    @property
    def mode(self) -> str: ...

    @property
    def signs_in(self) -> bool:
        """The gateway signs people in and out itself (a signed-out browser goes to
        ``/login``)."""
        ...

    async def person(self, request: Request) -> str | None:
        """The signed-in person's name, or ``None`` (answer 401)."""
        ...

    def routes(self) -> list[Route]:
        """The sign-in routes (``/login``, ``/logout``, ...) a surface serves beside its page."""
        ...


class UploadLimits(Protocol):
    """The HTTP guard's body limits, as a surface taking uploads declares them
    (``gateway.http.guard.HttpPolicy``)."""

    def allow_upload(self, pattern: re.Pattern[str], limit: int) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class AdapterContext:
    """What the core lends the adapters it builds, besides the ``Intake`` they get at start:
    the live event hub (web chat streams) and read access to conversations (for surfaces that
    show them). Adapters reach PostgreSQL only through these ports."""

    live: Broadcast
    conversations: Conversations
    #: who is using the web chat (GATEWAY_WEB_AUTH); None where no web chat is served
    identity: WebSignIn | None = None
    #: the HTTP guard's policy: a route that takes uploads over GATEWAY_MAX_BODY_BYTES declares
    #: it with ``http_policy.allow_upload(pattern, limit)``
    http_policy: UploadLimits | None = None
    #: files uploaded into a thread join its documents (knowledge base)
    files: FileShare | None = None
    #: files a surface keeps itself (the web chat's voice notes)
    held_files: HeldFiles | None = None
    #: the places' own answer rule, from their profiles (``True`` answer every message,
    #: ``False`` mentions only, ``None`` not set): the core's ingress applies it
    place_answers_all: Callable[[SessionKey], bool | None] | None = None
    #: leadership and supervision of receive loops (the same as the ``Intake``'s at start)
    lifecycle: Lifecycle | None = None


#: how every surface package is built: ``create_adapter(settings, context)``
AdapterFactory = Callable[["Settings", AdapterContext], PlatformAdapter]
