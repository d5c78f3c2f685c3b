"""Voice and images shared with the question, heard and seen before it is answered.

Voice (``VoiceStage``):
Before the agent: each unanswered message with audio gets its transcription job
(``gateway.files.voice``); the turn waits for them up to a bound. A transcript becomes its
message's text (stored with it, marked ``transcribed``) and the turn goes on like text. Past
the bound the turn says it is still listening; the job goes on, and its transcript is posted
as the person's message and answered then, once.
Without ``TRANSCRIPTION_BASE_URL`` a voice note alone gets one short answer saying voice is not
set up; with a typed question beside it, the answer says the voice note was not heard.

Images (``ImagesStage``, after the context stage has chosen the model): a model declared to
accept images (``AGENT_VISION_MODELS``) gets them as images; any other model gets their text,
read by OCR (the ``ocr`` extra). They are not added to the knowledge base. With
``AGENT_INLINE_FILES=images`` the knowledge stage sends every image inline, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import replace
from typing import Protocol

import structlog

from gateway.agents.prompt import estimate_text
from gateway.core.attachments import FileSource
from gateway.core.domain import Attachment, Reply
from gateway.core.ports import Transport
from gateway.files.images import accepts_images, is_image, read_images
from gateway.files.transcribe import is_audio
from gateway.files.voice import VoiceJobs
from gateway.knowledge.inline import shared_files
from gateway.turns.stage import COMMAND_MODEL, Answer, Slot, Stage, TurnRun, as_context
from session_store.records import MessageRecord, TurnClaim

log = structlog.get_logger(__name__)

NOT_SET_UP = (
    "🎙️ Voice messages are not set up here, so I could not listen to that one. "
    "Please type your question."
)
NOT_HEARD = "🎙️ (Voice messages are not set up here: I answered what you typed.)"
LISTENING = "🎧 I am still listening to your voice note; I will answer here when I have heard it."

_NOTE: Slot[str] = Slot("voice_note")


def _voiced(pending: Sequence[MessageRecord]) -> list[tuple[MessageRecord, list[Attachment]]]:
    """The user messages with audio that were not transcribed yet, with their audio."""
    out: list[tuple[MessageRecord, list[Attachment]]] = []
    for m in pending:
        if m.role != "user" or m.metadata.get("transcribed"):
            continue
        audio = [a for a in shared_files([m]) if is_audio(a)]
        if audio:
            out.append((m, audio))
    return out


def _said(turn: TurnRun, reply: str, outcome: str) -> Answer:
    return Answer(outcome=outcome, replies=[Reply(text=reply, model=COMMAND_MODEL)])


class VoiceStage(Stage):
    name = "voice"

    def __init__(
        self,
        jobs: VoiceJobs | None,
        transports: Mapping[str, Transport],
        *,
        wait_seconds: float,
    ) -> None:
        self._jobs = jobs
        self._transports = transports
        #: how long a turn waits for its transcripts
        self._wait_seconds = wait_seconds

    async def before(self, turn: TurnRun) -> Answer | None:
        voiced = _voiced(turn.pending)
        if not voiced:
            return None
        typed = any(q.content.strip() for q in turn.questions)
        if self._jobs is None:
            if not typed:
                return _said(turn, NOT_SET_UP, "voice_not_set_up")
            turn.put(_NOTE, NOT_HEARD)
            return None
        transport = self._transports.get(turn.claim.key.platform)
        source = transport if isinstance(transport, FileSource) else None
        jobs = {m.id: self._jobs.start(m.id, audio, source) for m, audio in voiced}
        _, waiting = await asyncio.wait(jobs.values(), timeout=self._wait_seconds)
        if waiting:
            for m, _ in voiced:
                if jobs[m.id] in waiting:
                    self._jobs.answer_when_heard(m, turn.claim.key, turn.target)
            return _said(turn, LISTENING, "still_listening")
        heard: dict[int, str] = {}
        failed: list[str] = []
        for message_id, job in jobs.items():
            error = job.exception()
            if error is None:
                heard[message_id] = job.result()
            else:
                failed.append(str(error))
        if failed and not heard and not typed:
            return _said(
                turn, f"🎙️ I could not transcribe your voice note: {failed[0]}", "voice_failed"
            )
        if failed:
            turn.put(_NOTE, f"🎙️ (I could not transcribe a voice note: {failed[0]})")
        _hear(turn, heard)
        return None

    async def after(self, turn: TurnRun, replies: list[Reply]) -> list[Reply]:
        note = turn.get(_NOTE)
        if note is None or not replies:
            return replies
        first = replies[0]
        return [replace(first, text=f"{note}\n\n{first.text}"), *replies[1:]]


def _hear(turn: TurnRun, heard: Mapping[int, str]) -> None:
    """The transcripts become their messages' text for this turn (as stored)."""

    def heard_as(m: MessageRecord) -> MessageRecord:
        text = heard.get(m.id)
        if text is None:
            return m
        content = text if not m.content.strip() else f"{m.content}\n\n{text}"
        return replace(
            m, content=content, metadata={**m.metadata, "transcribed": True, "transcript": text}
        )

    turn.pending = [heard_as(m) for m in turn.pending]
    turn.asks = [heard_as(m) for m in turn.asks]
    turn.questions = [heard_as(m) for m in turn.questions]
    turn.request.new_messages = [
        as_context(m) for m in turn.pending if m.role == "user" and m.command is None
    ]


_SEEN: Slot[list[str]] = Slot("image_notes")


class LeaseRenewal(Protocol):
    """Renews a turn's lease (``session_store.repos.turns.Turns``)."""

    async def renew_turn(self, claim: TurnClaim, *, lease_seconds: float) -> None: ...


@contextlib.asynccontextmanager
async def _leased(store: LeaseRenewal, claim: TurnClaim, seconds: float) -> AsyncIterator[None]:
    """The turn's lease renewed while the body runs (OCR takes seconds on a busy CPU): a
    lost lease ends the renewal, and the turn's fenced finish then refuses its answer."""

    async def renew() -> None:
        while True:
            await asyncio.sleep(seconds / 3)
            await store.renew_turn(claim, lease_seconds=seconds)

    task = asyncio.create_task(renew(), name="images-lease-renewal")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task


class ImagesStage(Stage):
    name = "images"

    def __init__(
        self,
        transports: Mapping[str, Transport],
        store: LeaseRenewal,
        *,
        vision_models: Sequence[str],
        max_bytes: int,
        lease_seconds: float,
    ) -> None:
        self._transports = transports
        self._store = store
        self._vision = tuple(vision_models)
        self._max_bytes = max_bytes
        self._lease_seconds = lease_seconds

    async def before(self, turn: TurnRun) -> Answer | None:
        images = [
            a for m in turn.pending if m.role == "user" for a in shared_files([m]) if is_image(a)
        ]
        if not images:
            return None
        transport = self._transports.get(turn.claim.key.platform)
        source = transport if isinstance(transport, FileSource) else None
        vision = accepts_images(turn.request.model, self._vision)
        async with _leased(self._store, turn.claim, self._lease_seconds):
            read = await read_images(images, source, vision=vision, max_bytes=self._max_bytes)
        turn.request.attachments = (*turn.request.attachments, *read.parts)
        if read.text_chars and turn.request.estimated_prompt_tokens is not None:
            text = "".join(str(p.get("text", "")) for p in read.parts)
            turn.request.estimated_prompt_tokens += estimate_text(text)
        if read.notes:
            turn.put(_SEEN, read.notes)
        # seen here: the knowledge stage does not take them into the thread's documents
        turn.pending = [_without_images(m) for m in turn.pending]
        log.info("images_shared", count=len(images), vision=vision, parts=len(read.parts))
        return None

    async def after(self, turn: TurnRun, replies: list[Reply]) -> list[Reply]:
        notes = turn.get(_SEEN)
        if not notes or not replies:
            return replies
        first = replies[0]
        return [replace(first, text="\n".join(notes) + "\n\n" + first.text), *replies[1:]]


def _without_images(m: MessageRecord) -> MessageRecord:
    files = m.metadata.get("attachments")
    if m.role != "user" or not files:
        return m
    kept = [f for f in files if not any(is_image(a) for a in shared_files([_only(m, f)]))]
    return replace(m, metadata={**m.metadata, "attachments": kept})


def _only(m: MessageRecord, item: object) -> MessageRecord:
    return replace(m, metadata={"attachments": [item]})
