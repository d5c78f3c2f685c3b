"""File intake, a part of ``Knowledge`` (``gateway.knowledge.service``): one file added
(stored, its ingest queued) or removed, and files shared in a thread: an upload joins the
thread's documents, a question's attachments are read (waiting a bounded time) or go straight
to the model (``AGENT_INLINE_FILES``)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import time
from collections.abc import Sequence
from typing import Any

import structlog

from gateway.core.attachments import (
    FileFetchError,
    FileSource,
    FileTooLarge,
    image_type,
    inline_kind,
    too_large,
)
from gateway.core.domain import Attachment, ReplyTarget, SessionKey
from gateway.core.hub import Signal
from gateway.knowledge.catalog import Catalog
from gateway.knowledge.citations import document_note
from gateway.knowledge.config import FileRejected, KnowledgeSettings
from gateway.knowledge.files import FileStorageError, S3Files
from gateway.knowledge.inline import INLINE_TEXT_BYTES
from gateway.knowledge.parse import MEDIA_TYPES, ParseError, detect_format
from gateway.knowledge.places import DEFAULT_KB, thread_kb
from session_store.repos.knowledge import AddedDocument, DocumentRecord, KnowledgeStore

log = structlog.get_logger(__name__)

#: document states that are still being read
BUSY = ("queued", "parsing", "embedding")


class FileIntake:
    """Files into the knowledge bases, and out again; it holds no state of its own (the
    bytes are in the store or the S3 bucket it is given)."""

    def __init__(
        self,
        store: KnowledgeStore,
        settings: KnowledgeSettings,
        *,
        catalog: Catalog,
        wake: Signal,
        files: S3Files | None,
    ) -> None:
        self._store = store
        self._settings = settings
        self._catalog = catalog
        self._wake = wake
        self._files = files

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
        if len(data) > self._settings.max_file_bytes:
            raise FileRejected(
                f"{name} is {len(data):,} bytes; the limit is "
                f"{self._settings.max_file_bytes:,} (GATEWAY_MAX_FILE_BYTES)"
            )
        try:
            fmt = detect_format(name, data, media_type)
        except ParseError as exc:
            raise FileRejected(str(exc)) from exc
        base = await self._catalog.kb(kb)
        if self._files is not None:  # the object first: a job never finds its file missing
            await self._files.put(hashlib.sha256(data).hexdigest(), data)
        added = await self._store.add_document(
            base,
            name=name,
            content=data,
            media_type=MEDIA_TYPES[fmt],
            notify_target=notify_target,
            storage="postgres" if self._files is None else "s3",
        )
        self._wake.set()
        log.info(
            "kb_document_added",
            document_id=added.document.id,
            kb=kb,
            created=added.created,
            state=added.document.state,
        )
        return added

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
        if doc.state not in BUSY:  # already read (the same file again)
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
        limit = self._settings.max_file_bytes
        for a in attachments:
            kind = inline_kind(a) if source is not None else None
            if kind not in self._settings.inline_files or source is None:
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
        limit = self._settings.max_file_bytes
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
            docs = [d for d in [await self._store.get_document(i) for i in added] if d]
            if all(d.state not in BUSY for d in docs) or time.monotonic() >= deadline:
                break
            self._wake.set()
            await asyncio.sleep(0.1)
        for doc in docs:
            if doc.state in BUSY:
                # hand the news to the job worker; if it finished meanwhile, tell it here
                await self._store.set_notify(doc.id, target)
                now = await self._store.get_document(doc.id)
                if now is not None and now.state not in BUSY:
                    if await self._store.take_notify(doc.id) is not None:
                        notes.append(document_note(now))
                    continue
                notes.append(f"⏳ {doc.name} is still being read; I will say here when it is.")
            else:
                notes.append(document_note(doc))
        return notes

    async def remove(self, document_id: int) -> bool:
        """Delete a document and its passages (citations stay frozen); its file's bytes go
        too once no document uses them (from the bucket as well). ``False``: no such one."""
        removed = await self._store.remove_document(document_id)
        if removed is None:
            return False
        if removed.file_removed == "s3" and self._files is not None:
            try:
                await self._files.delete(removed.sha256)
            except FileStorageError as exc:  # an orphan object, by hash: harmless, logged
                log.warning("kb_file_delete_failed", sha256=removed.sha256, error=str(exc))
        return True
