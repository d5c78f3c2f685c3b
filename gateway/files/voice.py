"""Voice notes and audio shared in a chat, transcribed as jobs.

One job per message: it fetches the message's audio from the platform, transcribes it
(``Transcriber``, tried again on failures on the way) and stores the transcript on the
message (the first one wins: a job run twice, here or by another worker, stores one). A
message transcribed already is not sent again. Jobs run on their own tasks, never on the
ingest path: a turn waits for its job up to a bound; a job it stopped waiting for goes on,
stores its transcript, and then posts it as the person's message again (``late_message``,
deduplicated by the inbox: answered once, whichever worker finishes).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol

import structlog

from gateway.core.attachments import FileFetchError, FileSource
from gateway.core.domain import Attachment
from gateway.core.settings import Settings
from gateway.files.transcribe import Transcriber, TranscriptionFailed
from session_store.records import InboundMessage, MessageRecord
from session_store.repos.sessions import TranscriptStore
from session_store.store import Store
from session_store.values import ReplyTarget, SessionKey

log = structlog.get_logger(__name__)


class TranscriptRecords(Protocol):
    """Where transcripts are kept (``session_store.repos.sessions.TranscriptStore``)."""

    async def transcript(self, message_id: int) -> str | None: ...

    async def save(self, message_id: int, text: str) -> str: ...


class VoiceJobs:
    def __init__(
        self, transcriber: Transcriber, records: TranscriptRecords, *, max_bytes: int
    ) -> None:
        self.transcriber = transcriber
        self._records = records
        self._max_bytes = max_bytes
        self._running: dict[int, asyncio.Task[str]] = {}
        #: stores a late transcript as the person's message (and wakes the turns); set by the
        #: gateway
        self.on_late: Callable[[InboundMessage], Coroutine[Any, Any, None]] | None = None
        self._late: set[asyncio.Task[None]] = set()

    def start(
        self, message_id: int, audio: Sequence[Attachment], source: FileSource | None
    ) -> asyncio.Task[str]:
        """The job of ``message_id`` (the one already running, or a new one)."""
        task = self._running.get(message_id)
        if task is None:
            task = asyncio.create_task(self._job(message_id, tuple(audio), source))
            self._running[message_id] = task
            task.add_done_callback(lambda t: self._done(message_id, t))
        return task

    def answer_when_heard(
        self, message: MessageRecord, key: SessionKey, target: ReplyTarget
    ) -> None:
        """The turn stopped waiting for ``message``'s job: once it has the transcript, post it
        as the person's message so that it is answered."""
        task = self._running.get(message.id)
        if task is None or self.on_late is None:
            return
        post = self.on_late

        def heard(done: asyncio.Task[str]) -> None:
            if done.cancelled() or done.exception() is not None:
                return
            late = asyncio.create_task(post(late_message(message, key, target, done.result())))
            self._late.add(late)
            late.add_done_callback(self._late_done)

        task.add_done_callback(heard)

    def _late_done(self, task: asyncio.Task[None]) -> None:
        self._late.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("late_transcript_failed", error=str(task.exception()))

    def _done(self, message_id: int, task: asyncio.Task[str]) -> None:
        self._running.pop(message_id, None)
        if not task.cancelled() and task.exception() is not None:
            log.warning("transcription_failed", message_id=message_id, error=str(task.exception()))

    async def _job(
        self, message_id: int, audio: tuple[Attachment, ...], source: FileSource | None
    ) -> str:
        stored = await self._records.transcript(message_id)
        if stored is not None:
            return stored
        if source is None:
            raise TranscriptionFailed("this platform does not let me fetch the audio")
        texts: list[str] = []
        for a in audio:
            try:
                data = await source.fetch_file(a, max_bytes=self._max_bytes)
            except FileFetchError as exc:
                raise TranscriptionFailed(str(exc)) from exc
            name = a.name or f"{a.kind}.{_suffix(a.mime_type)}"
            texts.append(await self.transcriber.transcribe(data, name=name, mime_type=a.mime_type))
        text = "\n\n".join(t for t in texts if t)
        if not text:
            raise TranscriptionFailed("I heard no words in it")
        saved = await self._records.save(message_id, text)
        log.info("transcribed", message_id=message_id, chars=len(saved))
        return saved

    async def close(self) -> None:
        pending = [*self._running.values(), *self._late]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        await self.transcriber.close()


def late_message(
    message: MessageRecord, key: SessionKey, target: ReplyTarget, text: str
) -> InboundMessage:
    """A transcript that came after its turn gave up waiting, as the person's message (one
    event id per voice note: the inbox stores it once)."""
    return InboundMessage(
        key=key,
        target=message.reply_target or target,
        external_id=f"{message.external_id or message.id}:transcript",
        message_key=f"transcript:{message.session_id}:{message.id}",
        event_id=f"transcript:{message.session_id}:{message.id}",
        content=text,
        sender_id=message.sender_id or "unknown",
        sender_name=message.sender_name,
        turn_request="always",
        metadata={"transcribed": True, "transcript_of": message.seq_no},
    )


def _suffix(mime_type: str | None) -> str:
    kind = (mime_type or "").split(";", 1)[0].strip().lower()
    return {"audio/ogg": "ogg", "audio/mpeg": "mp3", "audio/mp4": "m4a", "audio/wav": "wav"}.get(
        kind, "ogg"
    )


def build_voice_jobs(settings: Settings, store: Store) -> VoiceJobs | None:
    """The transcription jobs, with ``TRANSCRIPTION_BASE_URL``; ``None`` without it."""
    if not settings.transcription_base_url:
        return None
    key = settings.transcription_api_key
    transcriber = Transcriber(
        settings.transcription_base_url,
        model=settings.transcription_model,
        api_key=key.get_secret_value() if key else None,
    )
    return VoiceJobs(
        transcriber, TranscriptStore(store.db), max_bytes=settings.gateway_max_file_bytes
    )
