"""The erasure job against a real PostgreSQL, without a running gateway: stopped after every
single batch and started again it still ends done, with the same result as one run; what
names the person beyond their messages (web account and its single sign-on subject, schedule,
ledger rows, model choice, budget notice, link code, raw payloads, dead letters) goes, and
what belongs to others stays."""

from __future__ import annotations

import json

from gateway.core.domain import Attachment, Envelope, ReplyTarget, Sender, SessionKey
from gateway.inbound.intake import to_inbound
from gateway.knowledge.places import thread_kb
from gateway.people.erasure import forget, start
from session_store.repos.erasure import ErasureStore
from session_store.store import Store

WORD = "xylophonic"


async def _say(store: Store, chat: str, sender: str, text: str, n: int) -> None:
    key = SessionKey(platform="web", scope="local", chat_id=chat, thread_id="t")
    target = ReplyTarget(
        platform="web", scope="local", chat_id=chat, thread_id="t", reply_to_message_id=f"m{n}"
    )
    await store.inbox.ingest(
        to_inbound(
            Envelope(
                key=key, target=target, message_id=f"m{n}", text=text, sender=Sender(id=sender)
            )
        ),
        raw={"user": sender, "text": text},
    )


async def _seed(store: Store) -> int:
    n = 0
    for chat in ("general", "random"):
        for sender, text in (("ann", f"{WORD} {chat}"), ("bob", f"bob in {chat}")) * 3:
            n += 1
            await _say(store, chat, sender, text, n)
    # a rolling summary of the general chat, which holds her words: kept in the transcript
    general = await store.sessions.find_session(
        SessionKey(platform="web", scope="local", chat_id="general", thread_id="t")
    )
    assert general is not None
    await store.summaries.add_summary(
        general.id, from_seq=1, to_seq=2, content=f"ann said {WORD}", model=None,
        model_written=False,
    )  # fmt: skip
    person = await store.people.link("web:local:ann", "telegram:bot:77")
    async with store.db.connection() as conn:
        await conn.execute(
            "INSERT INTO inbound_events (platform, event_id, status, reason, payload) "
            "VALUES ('telegram', 'dead-1', 'rejected', 'bad', $1)",
            {"message": {"from": {"id": 77}, "text": f"{WORD} dead letter"}},
        )
        account = await conn.fetchval(
            "INSERT INTO web_accounts (name, password_hash) VALUES ('ann', '!oidc') RETURNING id"
        )
        await conn.execute(
            "INSERT INTO web_oidc_subjects (issuer, subject, account_id) VALUES ('i', 's', $1)",
            account,
        )
        await conn.execute(
            "INSERT INTO schedules (platform, scope, chat_id, prompt, owner, fire_at) "
            "VALUES ('web', 'local', 'general', $1, 'web:local:ann', now())",
            f"{WORD} every day",
        )
        for who, pid in (("web:local:ann", person), ("web:local:bob", None)):
            await conn.execute(
                "INSERT INTO usage_ledger (account, person_id, place, model, kind, cost) "
                "VALUES ($1, $2, 'web:local:general', 'm', 'answer', 0.5)",
                who,
                pid,
            )
        await conn.execute(
            "INSERT INTO person_model_choices (person_id, model) VALUES ($1, 'big')", person
        )
        await conn.execute(
            "INSERT INTO budget_notices (limit_name, subject, place, period_start) "
            "VALUES ('person_per_day', $1, 'p', now())",
            f"person:{person}",
        )
    await store.people.save_code("CODE2345", "telegram:bot:77", ttl_seconds=600)
    return person


async def _dump(store: Store) -> str:
    tables = ("messages", "inbound_events", "web_accounts", "web_oidc_subjects", "schedules",
              "usage_ledger", "person_model_choices", "budget_notices", "link_codes",
              "person_accounts", "sessions")  # fmt: skip
    async with store.db.connection() as conn:
        rows = [await conn.fetch(f"SELECT x::text FROM {t} x") for t in tables]
    return json.dumps([[r[0] for r in rs] for rs in rows])


async def test_forget_stopped_after_every_batch_still_finishes(store: Store) -> None:
    person = await _seed(store)
    assert WORD in await _dump(store)
    job = await start(store, person)
    runs = 0
    while True:
        runs += 1
        done = await forget(store, await start(store, person), batch=1, max_batches=1)
        if done.finished:
            break
        assert runs < 200
    assert runs > 10, "one batch per run: many runs"
    left = await _dump(store)
    assert WORD not in left and "ann" not in left and ":77" not in left
    # bob's three messages in each chat and their raw payloads
    assert left.count("bob in general") == 6 and left.count("bob in random") == 6
    assert done.counts["messages"] == 6 and done.counts["accounts"] == 2
    assert done.counts["ledger_rows"] == 1 and done.counts["schedules"] == 1
    assert done.counts["web_accounts"] == 1 and done.counts["payloads"] >= 7
    assert done.counts["summaries"] == 2  # the summary, and its message of kind rolling
    async with store.db.connection() as conn:
        costs = await conn.fetch("SELECT account, cost::text FROM usage_ledger ORDER BY id")
        seqs = await conn.fetch(
            "SELECT session_id, array_agg(seq_no ORDER BY seq_no) AS s FROM messages GROUP BY 1"
        )
        finished = await conn.fetchrow("SELECT * FROM erasure_jobs WHERE id = $1", job.id)
    assert [tuple(r) for r in costs] == [(None, "0.5"), ("web:local:bob", "0.5")]
    assert all(list(r["s"]) == list(range(1, len(r["s"]) + 1)) for r in seqs)
    assert finished["step"] == "done" and finished["accounts"] == []
    # a job once done is not found again: the person is gone, a new one would be new
    assert await store.people.accounts(person) == ()


#: a Matrix homeserver with a port (the scope), and its people's ids, which hold ':' too
HOMESERVER = "matrix.example.org:8448"
ANN = "@ann:example.org:8448"
BOB = "@bob:example.org:8448"


#: a thread of a room on it (a room id holds ':'; an event id of an older room version too)
MATRIX_THREAD = SessionKey(
    platform="matrix", scope=HOMESERVER, chat_id="!room1:example.org:8448",
    thread_id="$root:example.org:8448",
)  # fmt: skip


async def _matrix_says(
    store: Store, sender: str, text: str, n: int, files: tuple[Attachment, ...] = ()
) -> None:
    key = MATRIX_THREAD
    room = key.chat_id
    target = ReplyTarget(
        platform="matrix", scope=HOMESERVER, chat_id=room, thread_id=key.thread_id,
        reply_to_message_id=f"$e{n}",
    )  # fmt: skip
    await store.inbox.ingest(
        to_inbound(
            Envelope(
                key=key,
                target=target,
                message_id=f"$e{n}",
                text=text,
                sender=Sender(id=sender),
                attachments=files,
            )
        ),
        raw={"type": "m.room.message", "sender": sender, "content": {"body": text}},
    )


async def test_a_matrix_person_is_forgotten_by_an_account_whose_id_holds_colons(
    store: Store,
) -> None:
    """Matrix accounts hold ':' in the scope and the user id both
    (``matrix:matrix.example.org:8448:@ann:example.org:8448``), its room and thread ids too:
    her messages, the file she shared (a document of the thread's knowledge base), raw events
    (a dead letter among them, named by its ``sender``), schedule and ledger rows go, and
    Bob's, beside her in the same thread, stay."""
    ann, bob = (f"matrix:{HOMESERVER}:{who}" for who in (ANN, BOB))
    for n, (sender, text) in enumerate([(ANN, f"{WORD} one"), (BOB, "bob here")] * 2, 1):
        await _matrix_says(store, sender, text, n)
    notes = Attachment(kind="document", name="ann-notes.md", file_id="mxc://example.org/a1")
    await _matrix_says(store, ANN, f"{WORD} notes", 5, files=(notes,))
    person = await store.people.link(ann, "web:local:ann")
    async with store.db.connection() as conn:
        # the file she shared became a document of the thread's knowledge base
        base = await conn.fetchval(
            "INSERT INTO kb_bases (name, embedding_model, embedding_dim)"
            " VALUES ($1, 'e', 3) RETURNING id",
            thread_kb(MATRIX_THREAD),
        )
        await conn.execute(
            "INSERT INTO kb_files (sha256, size_bytes, content) VALUES ('f1', 1, 'x')"
        )
        document = await conn.fetchval(
            "INSERT INTO kb_documents (kb_id, sha256, name, media_type)"
            " VALUES ($1, 'f1', 'ann-notes.md', 'text/markdown') RETURNING id",
            base,
        )
        # a dead letter of hers (no message points at it): found by its sender
        await conn.execute(
            "INSERT INTO inbound_events (platform, event_id, status, reason, payload) "
            "VALUES ('matrix', '$dead', 'rejected', 'bad', $1)",
            {"type": "m.room.message", "sender": ANN, "content": {"body": f"{WORD} dead"}},
        )
        for owner in (ann, bob):
            await conn.execute(
                "INSERT INTO schedules (platform, scope, chat_id, prompt, owner, fire_at) "
                "VALUES ('matrix', $1, '!room1:example.org:8448', $2, $3, now())",
                HOMESERVER,
                f"{owner} every day",
                owner,
            )
            await conn.execute(
                "INSERT INTO usage_ledger (account, person_id, place, model, kind, cost) "
                "VALUES ($1, $2, 'matrix:x:y', 'm', 'answer', 0.5)",
                owner,
                person if owner == ann else None,
            )
    job = await start(store, person)
    assert job.who.user_ids == [ANN, "ann"]
    shared = await ErasureStore(store.db).shared_files(job.who, 0, 1000)
    assert [(f.name, f.document_id) for f in shared] == [("ann-notes.md", document)]
    done = await forget(store, job)
    assert done.finished
    assert done.counts["messages"] == 3 and done.counts["schedules"] == 1
    assert done.counts["ledger_rows"] == 1 and done.counts["payloads"] >= 3
    left = await _dump(store)
    assert WORD not in left and "@ann" not in left
    assert left.count("bob here") == 4  # his two messages and their two raw events
    async with store.db.connection() as conn:
        owners = await conn.fetch("SELECT owner FROM schedules")
        ledger = await conn.fetch("SELECT account FROM usage_ledger ORDER BY id")
        documents = await conn.fetchval("SELECT count(*) FROM kb_documents")
    assert documents == 0
    assert [r["owner"] for r in owners] == [bob]
    assert [r["account"] for r in ledger] == [None, bob]
