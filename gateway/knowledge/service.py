"""The knowledge base as the gateway uses it: add files (queued as durable ingest jobs), the
job worker (parse -> chunk -> embed -> ready, three tries with backoff, claimed across replicas
with a lease), hybrid search, and retrieval for a turn with citations frozen in the answer."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import os
import re
import socket
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import structlog

from gateway.agents.prompt import estimate_text
from gateway.core.domain import Attachment, Reply, ReplyTarget, SessionKey
from gateway.core.errors import GatewayError, LeaseLost, StoreError
from gateway.core.hub import Signal
from gateway.core.settings import Settings
from gateway.knowledge.attachments import FileFetchError, FileSource, FileTooLarge, too_large
from gateway.knowledge.chunk import chunk_blocks
from gateway.knowledge.embed import Embedder, EmbeddingError, LocalEmbedder, RemoteEmbedder
from gateway.knowledge.files import FileStorageError, S3Files
from gateway.knowledge.parse import MEDIA_TYPES, ParseError, detect_format, parse_document
from session_store.knowledge import (
    AddedDocument,
    DocumentRecord,
    DocumentState,
    IngestJob,
    KnowledgeBase,
    KnowledgeStore,
    NewChunk,
    PassageHit,
)
from session_store.records import MessageRecord

log = structlog.get_logger(__name__)

DEFAULT_KB = "default"
#: tells a thread (by its session key) something about a file shared there
Announce = Callable[[str, str], Awaitable[None]]
_BUSY = ("queued", "parsing", "embedding")


def thread_kb(key: SessionKey) -> str:
    """The knowledge base of one thread's own files."""
    return f"thread:{key}"


def chat_kb(key: SessionKey) -> str:
    """The knowledge base of a chat or channel (every thread in it)."""
    return f"chat:{key.platform}:{key.scope}:{key.chat_id}"


@dataclass(frozen=True, slots=True)
class Chat:
    """A chat or channel, as operators name it to assign knowledge bases:
    ``platform:scope:chat`` (the scope may itself hold ``:``, platform and chat never do)."""

    platform: str
    scope: str
    chat_id: str

    def __str__(self) -> str:
        return f"{self.platform}:{self.scope}:{self.chat_id}"

    @classmethod
    def of(cls, key: SessionKey) -> Chat:
        return cls(key.platform, key.scope, key.chat_id)

    @classmethod
    def parse(cls, text: str) -> Chat:
        check_name(text, "a chat")
        platform, _, rest = text.strip().partition(":")
        scope, _, chat_id = rest.rpartition(":")
        if not (platform and scope and chat_id) or len(text) > 600:
            raise ValueError(f"not a chat (platform:scope:chat, e.g. web:local:general): {text!r}")
        return cls(platform, scope, chat_id)


def check_name(text: str, what: str = "a knowledge base name") -> str:
    """``text`` if PostgreSQL can store it as a name: no control characters (NUL among them)
    and no lone surrogates; ``ValueError`` saying so otherwise."""
    if any(ord(ch) < 32 for ch in text):
        raise ValueError(f"{what} cannot hold control characters")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{what} is not valid Unicode text") from exc
    return text


class KnowledgeSearch(Protocol):
    """What the ``search_knowledge`` tool needs of the knowledge base: the turn's retriever
    over the turn's scope."""

    async def search_in(self, key: SessionKey, query: str, *, limit: int = 5) -> SearchResult: ...


#: how long "no knowledge base exists" is believed before it is asked again
NO_BASES_SECONDS = 2.0


def build_embedder(settings: Settings) -> Embedder:
    if settings.embedding_base_url:
        key = settings.embedding_api_key
        return RemoteEmbedder(
            settings.embedding_base_url,
            model=settings.embedding_model,
            api_key=key.get_secret_value() if key else None,
        )
    return LocalEmbedder()


class FileRejected(Exception):
    """A file that is too big or of a type the knowledge base cannot read; ``str`` says why."""


@dataclass(frozen=True, slots=True, kw_only=True)
class KnowledgeSettings:
    lease_seconds: float = 60.0
    poll_seconds: float = 1.0
    #: delay before try n+1 is ``backoff_seconds * 4**(n-1)``
    backoff_seconds: float = 5.0
    max_attempts: int = 3
    max_file_bytes: int = 20 * 1024 * 1024
    #: candidates per ranking before fusion, and passages offered to the model
    candidates: int = 40
    passages: int = 5
    #: most tokens of passages in one prompt (less when the budget is tighter)
    max_prompt_tokens: int = 2000
    #: how often access counts are written (off the hot path)
    flush_seconds: float = 2.0
    #: a passage only the embeddings found goes into a prompt only this similar (cosine):
    #: vector search always returns its nearest rows, relevant or not
    min_vector_score: float = 0.3
    #: ``default`` is searched in every chat (``GATEWAY_KB_DEFAULT=everywhere``), or only in
    #: chats it is assigned to
    default_everywhere: bool = True
    #: shared files that go straight to the model as content parts: ``images``, ``text``
    inline_files: frozenset[str] = frozenset()

    @classmethod
    def from_settings(cls, settings: Settings) -> KnowledgeSettings:
        return cls(
            poll_seconds=max(settings.gateway_poll_seconds, 0.05),
            lease_seconds=max(settings.gateway_lease_seconds * 4, 10.0),
            max_file_bytes=settings.gateway_max_file_bytes,
            default_everywhere=settings.gateway_kb_default == "everywhere",
            inline_files=frozenset(settings.agent_inline_files),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchResult:
    query: str
    hits: tuple[PassageHit, ...]
    #: which bases were searched, and how: ``lexical`` alone or ``hybrid``
    mode: str
    timings_ms: Mapping[str, float]


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnKnowledge:
    """Passages chosen for one turn: the prompt section that numbers them, and the trace."""

    passages: tuple[PassageHit, ...]
    prompt: str
    trace: Mapping[str, Any]
    #: what became of files shared with the question (ready, failed, too big...)
    notes: tuple[str, ...] = ()
    #: files shared with the question that go straight to the model (OpenAI content parts:
    #: ``image_url`` with a data URL, ``text``), with ``AGENT_INLINE_FILES``
    parts: tuple[Mapping[str, Any], ...] = ()

    def cite(self, replies: Sequence[Reply]) -> list[Reply]:
        """Attach the trace to the answer, and to each reply that cites ``[n]`` its frozen
        citations (metadata ``citations``, written to ``answer_citations`` with the message)
        and footnotes naming the document and page."""
        out: list[Reply] = []
        for index, reply in enumerate(replies):
            metadata: dict[str, Any] = dict(reply.metadata)
            if index == 0 and self.trace:
                metadata["retrieval_trace"] = dict(self.trace)
            cited = sorted(
                {int(n) for n in re.findall(r"\[(\d{1,3})\]", reply.text)}
                & set(range(1, len(self.passages) + 1))
            )
            text = reply.text
            if index == 0 and self.notes:
                text = "\n".join(self.notes) + "\n\n" + text
            if cited:
                citations = [_citation(n, self.passages[n - 1]) for n in cited]
                metadata["citations"] = citations
                text = (
                    text.rstrip()
                    + "\n\nSources:\n"
                    + "\n".join(f"[{c['ordinal']}] {source_label(c)}" for c in citations)
                )
            out.append(replace(reply, text=text, metadata=metadata))
        return out


def shared_files(messages: Sequence[MessageRecord]) -> list[Attachment]:
    """The files people shared in ``messages`` (user messages' stored attachment metadata)."""
    out: list[Attachment] = []
    for m in messages:
        if m.role != "user":
            continue
        for item in m.metadata.get("attachments") or ():
            if isinstance(item, Mapping) and isinstance(item.get("kind"), str):
                size = item.get("size")
                out.append(
                    Attachment(
                        kind=item["kind"],
                        name=item.get("name") if isinstance(item.get("name"), str) else None,
                        url=item.get("url") if isinstance(item.get("url"), str) else None,
                        mime_type=item.get("mime_type")
                        if isinstance(item.get("mime_type"), str)
                        else None,
                        size=size if isinstance(size, int) else None,
                        file_id=item.get("file_id")
                        if isinstance(item.get("file_id"), str)
                        else None,
                    )
                )
    return out


def document_note(doc: DocumentRecord) -> str:
    if doc.state == "ready":
        pages = f"{doc.pages} pages, " if doc.pages else ""
        return f"📄 {doc.name} is ready ({pages}{doc.chunk_count} passages): ask me about it."
    return f"⚠️ I could not read {doc.name}: {doc.error}"


def source_label(citation: Mapping[str, Any]) -> str:
    """``name, p. 3 — Section > Sub`` (page and section where known)."""
    parts = [str(citation["document_name"])]
    if citation.get("page") is not None:
        parts.append(f"p. {citation['page']}")
    label = ", ".join(parts)
    if citation.get("section"):
        label += f" — {citation['section']}"
    return label


def _citation(ordinal: int, hit: PassageHit) -> dict[str, Any]:
    return {
        "ordinal": ordinal,
        "document_id": hit.document_id,
        "chunk_id": hit.chunk_id,
        "document_name": hit.document_name,
        "page": hit.page,
        "section": hit.section,
        "passage": hit.content,
        "score": hit.score,
    }


PROMPT_HEADER = (
    "Passages from the knowledge base that may answer the question. Use them when they are "
    "relevant and cite each one you use by its number in square brackets, like [1]. Do not "
    "invent sources."
)


class Knowledge:
    def __init__(
        self,
        store: KnowledgeStore,
        embedder: Embedder,
        settings: KnowledgeSettings | None = None,
        *,
        wake: Signal | None = None,
        announce: Announce | None = None,
        files: S3Files | None = None,
    ) -> None:
        self.announce = announce
        #: the S3-compatible file store, when configured (else the bytes are in PostgreSQL)
        self.files = files
        self.store = store
        self.embedder = embedder
        self.settings = settings or KnowledgeSettings()
        self.wake = wake or Signal()
        #: while no knowledge base exists anywhere, turns skip the lookup (issue 17: it was a
        #: database transaction per message); rechecked every NO_BASES_SECONDS, and at once
        #: after this replica creates one (another replica's shows within that interval,
        #: sooner than its first document is read)
        self._no_bases_until = 0.0
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._kbs: dict[str, KnowledgeBase] = {}
        self._doc_access: Counter[int] = Counter()
        self._chunk_access: Counter[int] = Counter()

    async def aclose(self) -> None:
        with contextlib.suppress(StoreError):
            await self.flush_access()
        await self.embedder.aclose()

    # --- adding ----------------------------------------------------------------------------

    async def kb(self, name: str) -> KnowledgeBase:
        """The knowledge base ``name``, built with this gateway's embedding model."""
        cached = self._kbs.get(name)
        if cached is not None and cached.embedding_model == self.embedder.model:
            return cached
        kb = await self.store.ensure_kb(
            name, model=self.embedder.model, dim=await self.embedder.dimension()
        )
        self._kbs[name] = kb
        self._no_bases_until = 0.0
        return kb

    async def adopt_model(self) -> list[str]:
        """At start: every knowledge base built with another embedding model switches to this
        gateway's (its documents are re-embedded by the jobs). Returns the bases switched."""
        switched = []
        for base in await self.store.kbs():
            if base.embedding_model != self.embedder.model:
                await self.kb(base.name)
                switched.append(base.name)
        if switched:
            self.wake.set()
            log.info("kb_model_changed", kbs=switched, model=self.embedder.model)
        return switched

    async def add(
        self,
        name: str,
        data: bytes,
        *,
        kb: str = DEFAULT_KB,
        media_type: str | None = None,
        notify_target: ReplyTarget | None = None,
    ) -> AddedDocument:
        """Store a file and queue its ingest; raises ``FileRejected`` for a file too big or
        of a type that cannot be read."""
        if len(data) > self.settings.max_file_bytes:
            raise FileRejected(
                f"{name} is {len(data):,} bytes; the limit is "
                f"{self.settings.max_file_bytes:,} (GATEWAY_MAX_FILE_BYTES)"
            )
        try:
            fmt = detect_format(name, data, media_type)
        except ParseError as exc:
            raise FileRejected(str(exc)) from exc
        base = await self.kb(kb)
        if self.files is not None:  # the object first: a job never finds its file missing
            await self.files.put(hashlib.sha256(data).hexdigest(), data)
        added = await self.store.add_document(
            base,
            name=name,
            content=data,
            media_type=MEDIA_TYPES[fmt],
            notify_target=notify_target,
            storage="postgres" if self.files is None else "s3",
        )
        self.wake.set()
        log.info(
            "kb_document_added",
            document_id=added.document.id,
            kb=kb,
            created=added.created,
            state=added.document.state,
        )
        return added

    # --- the job worker --------------------------------------------------------------------

    async def run(self, stopping: asyncio.Event) -> None:
        """Claim and run ingest jobs until ``stopping``; survives failures of one job and of
        the database."""
        last_flush = time.monotonic()
        while not stopping.is_set():
            try:
                busy = await self.process_one()
            except StoreError as exc:
                log.warning("kb_job_store_error", error=str(exc))
                busy = False
            except Exception:
                log.exception("kb_job_crashed")
                busy = False
            if time.monotonic() - last_flush >= self.settings.flush_seconds:
                last_flush = time.monotonic()
                try:
                    await self.flush_access()
                except StoreError as exc:
                    log.warning("kb_access_flush_failed", error=str(exc))
            if not busy:
                await self.wake.wait(self.settings.poll_seconds)

    async def process_one(self) -> bool:
        """Run one due job; ``False`` when there was none."""
        s = self.settings
        job = await self.store.claim_job(owner=self.owner, lease_seconds=s.lease_seconds)
        if job is None:
            return False
        doc = job.document
        structlog.contextvars.bind_contextvars(document_id=doc.id, attempt=doc.attempts)
        try:
            if doc.attempts > s.max_attempts:
                reason = doc.error or "the worker stopped mid-job"
                await self.store.fail_job(
                    job, f"gave up after {s.max_attempts} tries: {reason}", retry_in=None
                )
                log.warning("kb_job_gave_up", error=reason)
                return True
            if job.embedding_model != self.embedder.model:
                # the base was built with another model: switch it (every document is queued
                # again, this one included) rather than mix two models in one index
                self._kbs.pop(doc.kb_name, None)
                await self.kb(doc.kb_name)
                log.info("kb_model_switched", kb=doc.kb_name, model=self.embedder.model)
                return True
            await self._ingest(job)
            log.info("kb_document_ready", name=doc.name)
            await self._tell(doc.id)
        except ParseError as exc:
            await self.store.fail_job(job, str(exc), retry_in=None)
            log.info("kb_document_failed", error=str(exc))
            await self._tell(doc.id)
        except LeaseLost:
            log.warning("kb_job_lease_lost")
        except (EmbeddingError, FileStorageError) as exc:
            await self._retry_or_fail(job, str(exc), transient=exc.transient)
        except StoreError:
            raise  # the lease runs out and the job is tried again
        except Exception as exc:
            log.exception("kb_job_failed")
            await self._retry_or_fail(job, f"{type(exc).__name__}: {exc}", transient=True)
        finally:
            structlog.contextvars.unbind_contextvars("document_id", "attempt")
        return True

    async def _retry_or_fail(self, job: IngestJob, error: str, *, transient: bool) -> None:
        attempts = job.document.attempts
        if transient and attempts < self.settings.max_attempts:
            delay = self.settings.backoff_seconds * 4 ** (attempts - 1)
            await self.store.fail_job(job, error, retry_in=delay)
            log.warning("kb_job_retry", error=error, retry_in=delay)
        else:
            if transient:
                error = f"gave up after {attempts} tries: {error}"
            await self.store.fail_job(job, error, retry_in=None)
            log.warning("kb_document_failed", error=error)
            await self._tell(job.document.id)

    async def _tell(self, document_id: int) -> None:
        """Tell the thread that shared the document how it went (if no turn told it)."""
        if self.announce is None or document_id < 0:
            return
        doc = await self.store.get_document(document_id)
        if doc is None or not doc.kb_name.startswith("thread:"):
            return
        if await self.store.take_notify(doc.id) is None:
            return
        try:
            await self.announce(doc.kb_name.removeprefix("thread:"), document_note(doc))
        except GatewayError as exc:  # a closed session, a platform gone: logged, not retried
            log.warning("kb_announce_failed", document_id=doc.id, error=str(exc))

    async def _ingest(self, job: IngestJob) -> None:
        doc = job.document
        state: list[DocumentState] = ["parsing"]

        async def keep_lease() -> None:
            while True:
                await asyncio.sleep(self.settings.lease_seconds / 3)
                await self.store.job_progress(
                    job, state[0], lease_seconds=self.settings.lease_seconds
                )

        renew = asyncio.create_task(keep_lease(), name="kb-job-lease")
        try:
            parsed = await asyncio.to_thread(
                parse_document, doc.name, await self._bytes(job), doc.media_type
            )
            chunks = chunk_blocks(parsed.blocks)
            state[0] = "embedding"
            await self.store.job_progress(
                job, "embedding", lease_seconds=self.settings.lease_seconds
            )
            vectors: list[list[float]] | None = None
            if await self.store.vector_enabled():
                vectors = await self.embedder.embed(
                    [f"{c.section}\n{c.text}" if c.section else c.text for c in chunks]
                )
            rows = [
                NewChunk(
                    ordinal=c.ordinal,
                    page=c.page,
                    section=c.section,
                    content=c.text,
                    tokens=c.tokens,
                    embedding=None if vectors is None else vectors[i],
                )
                for i, c in enumerate(chunks)
            ]
            if renew.done():
                renew.result()  # LeaseLost
            await self.store.finish_job(job, rows, pages=parsed.pages)
        finally:
            renew.cancel()
            with contextlib.suppress(asyncio.CancelledError, LeaseLost, StoreError):
                await renew

    async def _bytes(self, job: IngestJob) -> bytes:
        if job.content is not None:
            return job.content
        if self.files is None:
            raise FileStorageError(
                "the file is in S3-compatible storage but GATEWAY_FILES_S3_URL is not set",
                transient=False,
            )
        return await self.files.get(job.document.sha256)

    async def remove(self, document_id: int) -> bool:
        """Delete a document and its passages (citations stay frozen); its file's bytes go
        too once no document uses them (from the bucket as well). ``False``: no such one."""
        removed = await self.store.remove_document(document_id)
        if removed is None:
            return False
        if removed.file_removed == "s3" and self.files is not None:
            try:
                await self.files.delete(removed.sha256)
            except FileStorageError as exc:  # an orphan object, by hash: harmless, logged
                log.warning("kb_file_delete_failed", sha256=removed.sha256, error=str(exc))
        return True

    # --- files shared in a thread ----------------------------------------------------------

    async def share(
        self,
        key: SessionKey,
        target: ReplyTarget,
        name: str,
        data: bytes,
        media_type: str | None,
    ) -> tuple[bool, str]:
        """A file uploaded into a thread (the web chat): it joins the thread's documents and
        the thread is told when it is ready (``FileShare``)."""
        try:
            added = await self.add(
                name, data, kb=thread_kb(key), media_type=media_type, notify_target=target
            )
        except FileRejected as exc:
            return False, f"⚠️ {exc}"
        except FileStorageError as exc:
            log.warning("kb_file_store_failed", error=str(exc))
            return False, f"⚠️ I could not store {name} just now; please try again."
        doc = added.document
        if doc.state not in _BUSY:  # already read (the same file again)
            return True, document_note(doc)
        return True, f"📎 {doc.name} received; I will say here when it is ready."

    async def inline_files(
        self, attachments: Sequence[Attachment], source: FileSource | None
    ) -> tuple[list[dict[str, Any]], list[str], list[Attachment]]:
        """Shared files that go straight to the model (``AGENT_INLINE_FILES``): images as
        ``image_url`` parts (a data URL), small text files as ``text`` parts. Returns the
        parts, what to tell the thread, and the files left for the knowledge base."""
        parts: list[dict[str, Any]] = []
        notes: list[str] = []
        rest: list[Attachment] = []
        limit = self.settings.max_file_bytes
        for a in attachments:
            kind = _inline_kind(a) if source is not None else None
            if kind not in self.settings.inline_files or source is None:
                rest.append(a)
                continue
            name = a.name or a.file_id or a.kind
            cap = limit if kind == "images" else min(limit, INLINE_TEXT_BYTES)
            if a.size is not None and a.size > cap:
                rest.append(a)  # too big to inline: the knowledge base says what it can
                continue
            try:
                data = await source.fetch_file(a, max_bytes=cap)
            except FileTooLarge:
                rest.append(a)
                continue
            except FileFetchError as exc:
                notes.append(f"⚠️ {exc}")
                continue
            if kind == "images":
                mime = image_type(data)
                if mime is None:
                    notes.append(f"⚠️ {name} is not a PNG, JPEG, GIF or WebP image.")
                    continue
                url = f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
                parts.append({"type": "image_url", "image_url": {"url": url}})
                continue
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                rest.append(a)
                continue
            parts.append({"type": "text", "text": f"File {name}:\n{text}"})
        return parts, notes, rest

    async def take_attachments(
        self,
        key: SessionKey,
        target: ReplyTarget,
        attachments: Sequence[Attachment],
        source: FileSource | None,
        *,
        wait_seconds: float,
    ) -> list[str]:
        """Fetch files shared with a question into the thread's knowledge base and wait (a
        bounded time) for them to be read. Returns what to tell the thread: ready, failed,
        too big, unsupported, or still being read (then the job worker tells it later)."""
        notes: list[str] = []
        added: list[int] = []
        limit = self.settings.max_file_bytes
        for a in attachments:
            name = a.name or a.file_id or a.kind
            if a.size is not None and a.size > limit:
                notes.append(f"⚠️ {too_large(name, a.size, limit)} (GATEWAY_MAX_FILE_BYTES).")
                continue
            if source is None:
                notes.append(f"⚠️ I cannot fetch files from {key.platform} here ({name}).")
                continue
            try:
                data = await source.fetch_file(a, max_bytes=limit)
                # the waiting turn tells the thread; the job worker only if it stops waiting
                new = await self.add(
                    a.name or f"{a.kind}-{a.file_id or 'file'}",
                    data,
                    kb=thread_kb(key),
                    media_type=a.mime_type,
                )
            except (FileFetchError, FileRejected) as exc:
                notes.append(f"⚠️ {exc}")
                continue
            except FileStorageError as exc:
                log.warning("kb_file_store_failed", error=str(exc))
                notes.append(f"⚠️ I could not store {name} just now; please share it again.")
                continue
            added.append(new.document.id)
        deadline = time.monotonic() + wait_seconds
        docs: list[DocumentRecord] = []
        while added:
            docs = [d for d in [await self.store.get_document(i) for i in added] if d]
            if all(d.state not in _BUSY for d in docs) or time.monotonic() >= deadline:
                break
            self.wake.set()
            await asyncio.sleep(0.1)
        for doc in docs:
            if doc.state in _BUSY:
                # hand the news to the job worker; if it finished meanwhile, tell it here
                await self.store.set_notify(doc.id, target)
                now = await self.store.get_document(doc.id)
                if now is not None and now.state not in _BUSY:
                    if await self.store.take_notify(doc.id) is not None:
                        notes.append(document_note(now))
                    continue
                notes.append(f"⏳ {doc.name} is still being read; I will say here when it is.")
            else:
                notes.append(document_note(doc))
        return notes

    # --- retrieval -------------------------------------------------------------------------

    # --- scope: which knowledge bases a chat searches --------------------------------------

    async def scope(self, key: SessionKey) -> list[KnowledgeBase]:
        """What a turn in ``key`` searches: the thread's documents, the chat's, every
        operator base assigned to the chat, and ``default`` (unless it applies only where
        assigned). Never another chat's or thread's."""
        names = [thread_kb(key), chat_kb(key)]
        if self.settings.default_everywhere:
            names.append(DEFAULT_KB)
        chat = Chat.of(key)
        return await self.store.scope_kbs(
            names, platform=chat.platform, scope=chat.scope, chat_id=chat.chat_id
        )

    async def assign(self, kb: str, chat: Chat) -> bool:
        """Assign the knowledge base ``kb`` (created if new) to ``chat``; ``False`` when it
        already was."""
        base = await self.kb(kb)
        return await self.store.assign(
            base, platform=chat.platform, scope=chat.scope, chat_id=chat.chat_id
        )

    async def unassign(self, kb: str, chat: Chat) -> bool:
        return await self.store.unassign(
            kb, platform=chat.platform, scope=chat.scope, chat_id=chat.chat_id
        )

    async def search(self, query: str, *, kbs: Sequence[str], limit: int = 5) -> SearchResult:
        """Search the knowledge bases named ``kbs`` (operators' search)."""
        started = time.perf_counter()
        return await self._search(
            query, await self._known(lambda: self.store.kbs(kbs)), limit, started
        )

    async def search_in(self, key: SessionKey, query: str, *, limit: int = 5) -> SearchResult:
        """Search what a turn in ``key`` may read (``scope``): the retriever of turns and of
        the ``search_knowledge`` tool."""
        started = time.perf_counter()
        return await self._search(query, await self._known(lambda: self.scope(key)), limit, started)

    async def _known(
        self, load: Callable[[], Awaitable[list[KnowledgeBase]]]
    ) -> list[KnowledgeBase]:
        """``load()``, skipped while no knowledge base exists at all (issue 17: no lookup per
        turn on a gateway without documents; believed for ``NO_BASES_SECONDS``)."""
        if time.monotonic() < self._no_bases_until:
            return []
        found = await load()
        if not found and not await self.store.any_kb():
            self._no_bases_until = time.monotonic() + NO_BASES_SECONDS
        return found

    async def _search(
        self, query: str, bases: Sequence[KnowledgeBase], limit: int, started: float
    ) -> SearchResult:
        timings: dict[str, float] = {}
        vector: list[float] | None = None
        same_model = [b.id for b in bases if b.embedding_model == self.embedder.model]
        if same_model and await self.store.vector_enabled():
            t = time.perf_counter()
            vector = (await self.embedder.embed([query]))[0]
            timings["embed_ms"] = round((time.perf_counter() - t) * 1000, 2)
        t = time.perf_counter()
        hits = await self.store.search(
            query,
            kb_ids=[b.id for b in bases],
            vector=vector,
            vector_kb_ids=same_model,
            candidates=self.settings.candidates,
            limit=limit,
        )
        timings["search_ms"] = round((time.perf_counter() - t) * 1000, 2)
        timings["total_ms"] = round((time.perf_counter() - started) * 1000, 2)
        return SearchResult(
            query=query,
            hits=tuple(hits),
            mode="hybrid" if vector is not None else "lexical",
            timings_ms=timings,
        )

    async def prepare_turn(
        self,
        key: SessionKey,
        target: ReplyTarget,
        question: MessageRecord,
        pending: Sequence[MessageRecord],
        *,
        transport: object,
        token_budget: int,
        wait_seconds: float,
    ) -> TurnKnowledge | None:
        """The turn scheduler's one call: files shared with these messages go into the
        thread's knowledge base (a bounded wait for them to be read), then passages for the
        question within ``token_budget``. A failure here never fails the turn: it is answered
        without them."""
        try:
            notes: list[str] = []
            parts: list[dict[str, Any]] = []
            shared = shared_files(pending)
            # a runtime protocol check is slow: only when files were shared (issue 17)
            source = transport if shared and isinstance(transport, FileSource) else None
            if shared and self.settings.inline_files:
                parts, notes, shared = await self.inline_files(shared, source)
            if shared:
                notes += await self.take_attachments(
                    key, target, shared, source, wait_seconds=wait_seconds
                )
            found = await self.for_turn(
                key, question.content, token_budget=token_budget, notes=notes
            )
            if not parts:
                return found
            if found is None:
                return TurnKnowledge(passages=(), prompt="", trace={}, parts=tuple(parts))
            return replace(found, parts=tuple(parts))
        except (StoreError, EmbeddingError) as exc:
            log.warning("kb_retrieval_failed", error=str(exc))
            return None

    async def for_turn(
        self,
        key: SessionKey,
        question: str,
        *,
        token_budget: int,
        notes: Sequence[str] = (),
    ) -> TurnKnowledge | None:
        """Passages for a question asked in ``key``, within ``token_budget`` tokens; ``None``
        when nothing relevant is found (or nothing fits) and there is nothing to tell."""
        if not question.strip():
            return (
                TurnKnowledge(passages=(), prompt="", trace={}, notes=tuple(notes))
                if notes
                else None
            )
        bases = await self._known(lambda: self.scope(key))
        if not bases and not notes:
            return None  # nothing to search and nothing to tell (issue 17: no estimates)
        result = await self._search(
            question, bases, max(self.settings.passages * 2, 10), time.perf_counter()
        )
        s = self.settings
        budget = min(token_budget, s.max_prompt_tokens)
        chosen: list[PassageHit] = []
        lines = [PROMPT_HEADER]
        used = estimate_text(PROMPT_HEADER)
        for hit in result.hits:
            if len(chosen) >= self.settings.passages:
                break
            if hit.lexical_rank is None and (hit.vector_score or 0.0) < s.min_vector_score:
                continue
            label = source_label({"document_name": hit.document_name, **_loc(hit)})
            block = f"[{len(chosen) + 1}] {label}\n{hit.content}"
            cost = estimate_text(block) + 2
            if used + cost > budget:
                continue
            chosen.append(hit)
            lines.append(block)
            used += cost
        trace = {
            "query": question,
            "mode": result.mode,
            "scopes": [b.name for b in bases],
            "candidates": [_trace_hit(h) for h in result.hits],
            "chosen": [h.chunk_id for h in chosen],
            "prompt_tokens": used if chosen else 0,
            "timings_ms": dict(result.timings_ms),
        }
        if not chosen:
            if notes:
                return TurnKnowledge(passages=(), prompt="", trace=trace, notes=tuple(notes))
            return None
        self.count_access(chosen)
        return TurnKnowledge(
            passages=tuple(chosen), prompt="\n\n".join(lines), trace=trace, notes=tuple(notes)
        )

    # --- access counters (off the hot path) ------------------------------------------------

    def count_access(self, hits: Sequence[PassageHit]) -> None:
        for hit in hits:
            self._doc_access[hit.document_id] += 1
            self._chunk_access[hit.chunk_id] += 1

    async def flush_access(self) -> None:
        if not self._doc_access and not self._chunk_access:
            return
        docs, chunks = dict(self._doc_access), dict(self._chunk_access)
        self._doc_access.clear()
        self._chunk_access.clear()
        try:
            await self.store.count_access(docs, chunks)
        except StoreError:
            self._doc_access.update(docs)
            self._chunk_access.update(chunks)
            raise


#: the largest text file that goes straight to the model (``AGENT_INLINE_FILES=text``)
INLINE_TEXT_BYTES = 32 * 1024
_IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp")
_TEXT_SUFFIXES = (".txt", ".md", ".markdown", ".csv")


def _inline_kind(a: Attachment) -> str | None:
    """``images`` or ``text`` for a file that could go straight to the model, by its
    declared type or name (the bytes are checked once fetched)."""
    mime = (a.mime_type or "").split(";", 1)[0].strip().lower()
    name = (a.name or "").lower()
    if a.kind in ("photo", "image") or mime.startswith("image/") or name.endswith(_IMAGE_SUFFIXES):
        return "images"
    if mime in ("text/plain", "text/markdown", "text/csv") or name.endswith(_TEXT_SUFFIXES):
        return "text"
    return None


def image_type(data: bytes) -> str | None:
    """The media type of a PNG, JPEG, GIF or WebP image, from its first bytes."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def _loc(hit: PassageHit) -> dict[str, Any]:
    return {"page": hit.page, "section": hit.section}


def _trace_hit(hit: PassageHit) -> dict[str, Any]:
    return {
        "chunk_id": hit.chunk_id,
        "document_id": hit.document_id,
        "document": hit.document_name,
        "page": hit.page,
        "score": round(hit.score, 6),
        "lexical_rank": hit.lexical_rank,
        "lexical_score": None if hit.lexical_score is None else round(hit.lexical_score, 6),
        "vector_rank": hit.vector_rank,
        "vector_score": None if hit.vector_score is None else round(hit.vector_score, 6),
    }


__all__ = [
    "DEFAULT_KB",
    "Chat",
    "FileRejected",
    "Knowledge",
    "KnowledgeSettings",
    "SearchResult",
    "TurnKnowledge",
    "build_embedder",
]
