"""``gateway kb add|list|remove|search|assign|unassign|assignments``: the knowledge base from
the command line.

``kb add`` stores the files and runs their ingest jobs itself (so it works with no gateway
running, on the zero-config embedded database); a running gateway may take some of the jobs,
which is fine: they are claimed, never run twice."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from gateway import audit
from gateway.core.settings import Settings
from gateway.core.text import counted
from gateway.knowledge.citations import source_label
from gateway.knowledge.config import KnowledgeSettings
from gateway.knowledge.files import FileStorageError, build_files
from gateway.knowledge.parse import FORMAT_BY_SUFFIX
from gateway.knowledge.places import DEFAULT_KB, Chat, check_name
from gateway.knowledge.service import FileRejected, Knowledge, build_embedder
from session_store.repos.knowledge import DocumentRecord, KnowledgeStore

_BUSY = ("queued", "parsing", "embedding")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    kb = sub.add_parser("kb", help="the knowledge base: add, list, remove, search documents")
    ksub = kb.add_subparsers(dest="kb_command", required=True)
    add = ksub.add_parser("add", help="add files or folders; one line per document")
    add.add_argument("paths", nargs="+", metavar="PATH")
    add.add_argument("--kb", default=DEFAULT_KB)
    add.add_argument("--no-wait", action="store_true", help="queue only; a gateway ingests")
    lst = ksub.add_parser("list", help="documents with their ingest state")
    lst.add_argument("--kb")
    rm = ksub.add_parser("remove", help="delete a document and its passages")
    rm.add_argument("document_id", metavar="DOC-ID", type=int)
    search = ksub.add_parser("search", help="the passages retrieval would give the model")
    search.add_argument("query", metavar="QUERY")
    search.add_argument("--kb", default=DEFAULT_KB)
    search.add_argument("--limit", type=int, default=5)
    chat_help = "the chat: platform:scope:chat, e.g. web:local:general or slack:T0123:C0456"
    assign = ksub.add_parser(
        "assign", help="search a knowledge base in every thread of a chat (created if new)"
    )
    assign.add_argument("kb", metavar="KB", type=_kb_name)
    assign.add_argument("--chat", required=True, type=_chat, help=chat_help)
    unassign = ksub.add_parser("unassign", help="stop searching a knowledge base in a chat")
    unassign.add_argument("kb", metavar="KB")
    unassign.add_argument("--chat", required=True, type=_chat, help=chat_help)
    assignments = ksub.add_parser("assignments", help="knowledge bases assigned to chats")
    assignments.add_argument("--kb")


def _kb_name(text: str) -> str:
    try:
        return check_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _chat(text: str) -> Chat:
    try:
        return Chat.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def expand(paths: Sequence[str]) -> Iterator[Path]:
    """Files as given; folders walked for the file types the knowledge base reads."""
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for found in sorted(path.rglob("*")):
                if found.is_file() and found.suffix.lower() in FORMAT_BY_SUFFIX:
                    yield found
        else:
            yield path


@asynccontextmanager
async def _knowledge(settings: Settings) -> AsyncIterator[Knowledge]:
    from gateway.core.lifecycle.database import database
    from session_store.migrator import migrate
    from session_store.store import Store

    async with database(settings) as dsn:
        await migrate(dsn)
        store = await Store.connect(dsn, min_size=1, max_size=3)
        k = Knowledge(
            KnowledgeStore(store.db),
            build_embedder(settings),
            KnowledgeSettings.from_settings(settings),
            files=build_files(settings),
        )
        try:
            if not await k.store.vector_enabled():
                print(
                    "note: this PostgreSQL has no pgvector: retrieval is full-text only",
                    file=sys.stderr,
                )
            yield k
        finally:
            await k.aclose()
            await store.close()


async def run(settings: Settings, args: argparse.Namespace) -> int:
    async with _knowledge(settings) as k:
        if args.kb_command == "add":
            return await _add(k, args.paths, kb=args.kb, wait=not args.no_wait)
        if args.kb_command == "list":
            docs = await k.store.list_documents(kb_name=args.kb)
            for d in docs:
                print(_line(d))
            if not docs:
                print("no documents", file=sys.stderr)
            return 0
        if args.kb_command == "assign":
            new = await k.catalog.assign(args.kb, args.chat)
            await audit.record(
                k.store, "kb.assign", ("kb", args.kb), details={"chat": str(args.chat), "new": new}
            )
            print(f"{args.kb} {'assigned to' if new else 'was already assigned to'} {args.chat}")
            return 0
        if args.kb_command == "unassign":
            gone = await k.catalog.unassign(args.kb, args.chat)
            await audit.record(
                k.store,
                "kb.unassign",
                ("kb", args.kb),
                outcome="ok" if gone else "failed",
                reason=None if gone else "not assigned",
                details={"chat": str(args.chat)},
            )
            if gone:
                print(f"{args.kb} unassigned from {args.chat}")
                return 0
            print(f"{args.kb} is not assigned to {args.chat}", file=sys.stderr)
            return 1
        if args.kb_command == "assignments":
            found = await k.store.assignments(kb_name=args.kb)
            for a in found:
                print(f"{a.kb_name}\t{a.chat}")
            if not found:
                print("no assignments", file=sys.stderr)
            return 0
        if args.kb_command == "remove":
            removed = await k.intake.remove(args.document_id)
            await audit.record(
                k.store,
                "kb.document.delete",
                ("kb.document", args.document_id),
                outcome="ok" if removed else "failed",
                reason=None if removed else "no such document",
            )
            if removed:
                print(f"removed document {args.document_id}")
                return 0
            print(f"no document {args.document_id}", file=sys.stderr)
            return 1
        result = await k.retrieval.search(args.query, kbs=[args.kb], limit=args.limit)
        for n, hit in enumerate(result.hits, start=1):
            label = source_label(
                {"document_name": hit.document_name, "page": hit.page, "section": hit.section}
            )
            print(f"[{n}] {hit.score:.4f}  doc {hit.document_id}  {label}")
            print("    " + " ".join(hit.content.split())[:300])
        if not result.hits:
            print("no passages found", file=sys.stderr)
        print(
            f"({result.mode} search, {result.timings_ms.get('total_ms', 0):.1f} ms)",
            file=sys.stderr,
        )
        return 0


def _line(d: DocumentRecord) -> str:
    return f"{d.id}\t{d.state_text}\t{d.kb_name}\t{counted(d.chunk_count, 'passage')}\t{d.name}"


async def _add(k: Knowledge, paths: Sequence[str], *, kb: str, wait: bool) -> int:
    failed = False
    ids: list[int] = []
    for path in expand(paths):
        try:
            data = path.read_bytes()
        except OSError as exc:
            print(f"-\tfailed: cannot read: {exc.strerror}\t{kb}\t-\t{path}")
            failed = True
            continue
        try:
            added = await k.add(path.name, data, kb=kb)
        except (FileRejected, FileStorageError) as exc:
            print(f"-\tfailed: {exc}\t{kb}\t-\t{path}")
            failed = True
            continue
        await audit.record(
            k.store,
            "kb.document.add",
            ("kb", kb),
            details={"name": path.name, "bytes": len(data), "document_id": added.document.id},
        )
        if added.document.id not in ids:
            ids.append(added.document.id)
    docs: list[DocumentRecord] = []
    while True:
        docs = [d for d in [await k.store.get_document(i) for i in ids] if d is not None]
        if not wait or all(d.state not in _BUSY for d in docs):
            break
        if not await k.process_one():
            await asyncio.sleep(0.2)
    # files found inside the ones added (an e-mail's attachments) are read now too
    while wait and await k.process_one():
        pass
    for d in docs:
        print(_line(d))
        failed = failed or d.state == "failed"
    return 1 if failed else 0
