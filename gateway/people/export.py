"""``gateway people export``: everything the gateway keeps of one person, into a directory.

``person.json`` holds the person and its accounts (web accounts and single sign-on subjects
too), every message they sent with its session's place, the files they shared (with the
document each became), their usage ledger rows, the schedules they own and the audit events
about them or done by them. ``files/`` holds the bytes of those files that the gateway keeps:
knowledge-base documents built from them and web voice notes."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from gateway.knowledge.files import S3Files
from session_store.repos.erasure import ErasureStore, SharedFile, Who
from session_store.store import Store

EXPORT_FILE = "person.json"
BATCH = 5000


async def export(
    store: Store, person_id: int, out: Path, *, files: S3Files | None = None
) -> dict[str, Any]:
    """Write the person's data under ``out`` (made if missing); returns what ``person.json``
    holds."""
    erasure = ErasureStore(store.db)
    people = await erasure.people_of(person_id)
    accounts: list[str] = []
    for p in people:
        accounts += await store.people.accounts(p)
    who = Who(tuple(sorted(set(accounts))), people)
    messages, shared = await _messages(erasure, who)
    (out / "files").mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {
        "person": {"id": person_id, "merged": [p for p in people if p != person_id]},
        "accounts": list(who.accounts),
        "web_accounts": await erasure.rows("web_accounts", who.web_names),
        "messages": messages,
        "files": await _files(erasure, shared, out / "files", files),
        "usage": await erasure.rows("ledger_rows", list(who.accounts), list(who.people)),
        "schedules": await erasure.rows("schedules", list(who.accounts)),
        "audit_events": await erasure.rows("audit_events", [str(p) for p in people], _actors(who)),
    }
    (out / EXPORT_FILE).write_text(
        json.dumps(data, default=_json, ensure_ascii=False, indent=1), encoding="utf-8"
    )
    return data


def _actors(who: Who) -> list[str]:
    """How the audit log names them as actor: an account, ``platform:user_id`` or
    ``web:NAME``."""
    pairs = [f"{p}:{u}" for p, u in zip(who.platforms, who.user_ids, strict=True)]
    return [*who.accounts, *pairs, *(f"web:{n}" for n in who.web_names)]


async def _messages(erasure: ErasureStore, who: Who) -> tuple[list[Any], list[SharedFile]]:
    last = await erasure.last_id("messages")
    messages: list[dict[str, Any]] = []
    shared: list[SharedFile] = []
    for low in range(0, last, BATCH):
        for m in await erasure.messages(who, low, low + BATCH):
            place = {k: m.pop(k) for k in ("platform", "scope", "chat_id", "thread_id")}
            messages.append({"place": place} | m)
        shared += await erasure.shared_files(who, low, low + BATCH)
    return messages, shared


async def _files(
    erasure: ErasureStore, shared: list[SharedFile], into: Path, bucket: S3Files | None
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for f in shared:
        entry: dict[str, Any] = {
            "message_id": f.message_id,
            "name": f.name,
            "kind": f.kind,
            "document_id": f.document_id,
        }
        data: bytes | None = None
        if f.document_id is not None:
            doc = await erasure.document(f.document_id)
            if doc is not None:
                entry |= {"knowledge_base": doc["kb"], "media_type": doc["media_type"]}
                data = doc["content"]
                if data is None and doc["storage"] == "s3" and bucket is not None:
                    data = await bucket.get(doc["sha256"])
        elif f.held_file_id is not None:
            held = await erasure.held_file(f.held_file_id)
            if held is not None:
                entry["media_type"] = held["media_type"]
                data = held["content"]
        if data is not None:
            path = into / f"{f.message_id}-{_safe(f.name or f.kind or 'file')}"
            path.write_bytes(bytes(data))
            entry["path"] = f"files/{path.name}"
        out.append(entry)
    return out


def _safe(name: str) -> str:
    return re.sub(r"[^\w.\- ]", "_", name)[:120] or "file"


def _json(value: object) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return None
    return str(value)
