"""Conversations as a surface that shows them reads them: the chats of a platform, the
threads of a chat, a thread's transcript with each reply's delivery state, and a person's vote
on an answer. The web chat uses this port; it never holds the store."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

from gateway.core.domain import SessionKey
from gateway.core.errors import SessionNotFound
from gateway.core.parts import FilePart, part_of
from session_store.records import MessageRecord
from session_store.repos.knowledge import CitationRecord, KnowledgeStore
from session_store.repos.tools import ToolStore
from session_store.store import Store
from session_store.values import DeliveryStatus, Role, SessionStatus

#: a thread's newest messages shown at once
TRANSCRIPT_LIMIT = 500
#: a thread's sessions before its current one (``/new`` started it) shown above it, and the
#: newest messages shown of each
EARLIER_SESSIONS = 5
EARLIER_LIMIT = 200


@dataclass(frozen=True, slots=True, kw_only=True)
class ThreadInfo:
    thread_id: str
    title: str | None
    session_id: int
    status: SessionStatus
    message_count: int
    last_message_at: datetime | None


@dataclass(frozen=True, slots=True, kw_only=True)
class TranscriptEntry:
    seq_no: int
    role: Role
    content: str
    sender: str | None
    model: str | None
    #: how the reply's delivery went (the worst state of its parts); None for user messages
    delivery: DeliveryStatus | None
    feedback: int | None
    #: an approval card: ``{"id", "status", "decided_by", "tool"}``
    approval: Mapping[str, Any] | None = None
    #: the numbers ``[n]`` the answer cites, each linking to its frozen passage
    citations: tuple[int, ...] = ()
    #: files the answer carried (its sent file parts), so a reload shows them too
    files: Sequence[TranscriptFile] = ()
    #: the person edited it (``content`` is the newest text)
    edited: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class SentByPerson:
    """A person's message of a thread: its platform id and who sent it."""

    message_id: str
    sender_id: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class TranscriptFile:
    #: the id the live stream used for it (``gw-<delivery id>``)
    id: str
    name: str
    mime_type: str
    caption: str | None
    data: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class Transcript:
    session_id: int
    status: SessionStatus
    messages: Sequence[TranscriptEntry]


VoteOutcome = Literal["recorded", "no_such_message", "not_an_answer"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Vote:
    outcome: VoteOutcome
    #: the answer's feedback after the vote (sign of everyone's votes), when recorded
    feedback: int | None = None


class Conversations:
    def __init__(self, store: Store) -> None:
        self._store = store

    async def chats(self, platform: str, *, limit: int = 200) -> list[str]:
        """Chats with sessions on ``platform``, most recently active first."""
        return await self._store.sessions.list_chats(platform, limit)

    async def threads(self, platform: str, chat_id: str, *, limit: int = 200) -> list[ThreadInfo]:
        """The threads of a chat, newest activity first, each with its latest session."""
        sessions = await self._store.sessions.list_sessions(
            platform=platform, chat_id=chat_id, limit=limit
        )
        seen: dict[str, ThreadInfo] = {}
        for s in sessions:  # newest first: the first session seen per thread is its latest
            thread = s.key.thread_id or ""
            if thread not in seen:
                seen[thread] = ThreadInfo(
                    thread_id=thread,
                    title=s.title,
                    session_id=s.id,
                    status=s.status,
                    message_count=s.message_count,
                    last_message_at=s.last_message_at,
                )
        return list(seen.values())

    async def transcript(
        self, key: SessionKey, *, limit: int = TRANSCRIPT_LIMIT
    ) -> Transcript | None:
        """The newest ``limit`` messages of the place's current session, oldest first."""
        session = await self._store.sessions.find_session(key)
        if session is None:
            return None
        messages = await self._store.sessions.messages(
            session.id,
            before_seq=session.last_seq_no + 1,
            limit=limit,
            with_deliveries=True,
            as_now=True,
        )
        # approval cards show their request's current state
        cards = {m.seq_no: _approval_id(m) for m in messages}
        states = await ToolStore(self._store).approval_states(
            [a for a in cards.values() if a is not None]
        )
        return Transcript(
            session_id=session.id,
            status=session.status,
            messages=[
                replace(_entry(m), approval=states.get(cards[m.seq_no] or ""))
                for m in messages
                if _shown(m)
            ],
        )

    async def earlier(self, key: SessionKey, before_session: int) -> list[Transcript]:
        """The place's sessions before ``before_session``, oldest first, each with its newest
        messages: ``/new`` restarts the context, not what the person sees. Read-only (votes
        and citations are the current session's)."""
        sessions = await self._store.sessions.list_sessions(
            platform=key.platform,
            chat_id=key.chat_id,
            thread_id=key.thread_id,
            limit=EARLIER_SESSIONS + 1,
        )
        older = sorted(
            (s for s in sessions if s.key == key and s.id < before_session), key=lambda s: s.id
        )[-EARLIER_SESSIONS:]
        found: list[Transcript] = []
        for session in older:
            messages = await self._store.sessions.messages(
                session.id, before_seq=session.last_seq_no + 1, limit=EARLIER_LIMIT
            )
            found.append(
                Transcript(
                    session_id=session.id,
                    status=session.status,
                    messages=[_entry(m) for m in messages if _shown(m)],
                )
            )
        return found

    async def person_message(self, key: SessionKey, seq_no: int) -> SentByPerson | None:
        """The person's message at ``seq_no`` of the place's current session, as a surface
        names it for an edit or a deletion; ``None`` for no such message, or not a person's."""
        session = await self._store.sessions.find_session(key)
        if session is None or not 0 < seq_no <= session.last_seq_no:
            return None
        found = await self._store.sessions.messages(session.id, after_seq=seq_no - 1, limit=1)
        if not found or found[0].seq_no != seq_no:
            return None
        message = found[0]
        if message.role != "user" or message.external_id is None or message.command is not None:
            return None
        return SentByPerson(message_id=message.external_id, sender_id=message.sender_id)

    async def vote(self, key: SessionKey, seq_no: int, *, user_id: str, value: int) -> Vote:
        """One person's feedback on the answer at ``seq_no`` of the place's current session:
        +1, -1, or 0 to take it back."""
        session = await self._store.sessions.find_session(key)
        message_id = (
            None
            if session is None
            else await self._store.sessions.message_id_at(session.id, seq_no)
        )
        if message_id is None:
            return Vote(outcome="no_such_message")
        try:
            feedback = await self._store.sessions.set_feedback(
                message_id, user_id=user_id, value=value
            )
        except SessionNotFound:
            return Vote(outcome="not_an_answer")
        return Vote(outcome="recorded", feedback=feedback)

    async def citations(
        self, key: SessionKey, seq_no: int, *, opened: int | None = None
    ) -> list[CitationRecord] | None:
        """What the answer at ``seq_no`` of the place's current session cites, as frozen when
        it was written; ``None`` when there is no such message in that session, so
        a caller allowed into this place reads this place's answers only. ``opened``: the
        ``[n]`` a person opened from its link, counted as a read of that passage (the
        knowledge base's access counter)."""
        session = await self._store.sessions.find_session(key)
        message_id = (
            None
            if session is None
            else await self._store.sessions.message_id_at(session.id, seq_no)
        )
        if message_id is None:
            return None
        knowledge = KnowledgeStore(self._store.db)
        found = await knowledge.citations(message_id)
        hit = next((c for c in found if c.ordinal == opened), None)
        if hit is not None:
            await knowledge.count_access({hit.document_id: 1}, {hit.chunk_id: 1})
        return found


def _shown(m: MessageRecord) -> bool:
    """The tool exchange (calls and results) is the agent's working, not the chat; a deleted
    message (or an answer retracted or written again) is gone, and an edited question's
    request for its answer written again is no message of its own; nor is a rolling summary
    (what the context was folded into)."""
    return (
        m.role != "tool"
        and not m.metadata.get("tool_calls")
        and not m.deleted
        and "rewrites" not in m.metadata
        and m.kind != "rolling"
    )


def _approval_id(m: MessageRecord) -> str | None:
    card = m.metadata.get("approval")
    found = card.get("id") if isinstance(card, Mapping) else None
    return found if isinstance(found, str) else None


def _entry(m: MessageRecord) -> TranscriptEntry:
    return TranscriptEntry(
        seq_no=m.seq_no,
        role=m.role,
        content=m.content,
        sender=m.sender_name,
        model=m.model,
        delivery=_worst({d.status for d in m.deliveries}),
        feedback=m.feedback,
        citations=_cited(m),
        edited=m.edited_at is not None,
        files=[
            TranscriptFile(
                id=f"gw-{d.id}",
                name=p.file.name,
                mime_type=p.file.mime_type,
                caption=p.file.caption,
                data=p.file.data,
            )
            for d in m.deliveries
            if d.status == "sent" and d.kind == "file" and isinstance(p := part_of(d), FilePart)
        ],
    )


def _cited(m: MessageRecord) -> tuple[int, ...]:
    cited = m.metadata.get("citations") if m.role == "assistant" else None
    if not isinstance(cited, list):
        return ()
    return tuple(
        c["ordinal"] for c in cited if isinstance(c, Mapping) and isinstance(c.get("ordinal"), int)
    )


def _worst(statuses: set[DeliveryStatus]) -> DeliveryStatus | None:
    if not statuses:
        return None
    for status in ("failed", "sending", "pending"):
        if status in statuses:
            return status
    return "sent"
