"""Export and erasure of one person, end to end: a person with a Slack and a Telegram account
writes a distinctive word, shares a document (it lands in the thread's knowledge base) and a
voice note (transcribed); another person writes in the same thread. ``gateway people export``
holds all of it; ``gateway people forget``, interrupted after one batch and run again, leaves
the word nowhere: not in ``sessions show``, the admin API's full-text search and transcripts,
the knowledge base, nor any row of any table."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from adapters.slack import SlackAdapter
from adapters.telegram.adapter import TelegramAdapter
from gateway.agents.base import Turn
from gateway.core.domain import Reply
from gateway.runtime.gateway import Gateway
from testsupport.fakes.openai import FakeOpenAI
from testsupport.fakes.slack import FakeSlack
from testsupport.fakes.telegram import FakeTelegram
from testsupport.harness import running_gateway, wait_for
from testsupport.process import run_cli_in_process
from testsupport.slack import slack_settings
from testsupport.telegram import telegram_settings

WORD = "zanzibarite"
#: also the English stem the knowledge base indexes (``zanzibarit``)
STEM = "zanzibar"
NOTES = b"# Alice's notes\n\nThe zanzibarite recipe needs three eggs and patience.\n"
OGG = b"OggS\x00\x02" + bytes(range(200))


class NotedAgent:
    """Answers without quoting anyone: what is left after forgetting is only the person's."""

    name = "noted"

    async def respond(self, turn: Turn) -> Sequence[Reply]:
        return [Reply(text="noted", model="noted")]


async def _converse(gw: Gateway, slack: FakeSlack, telegram: FakeTelegram) -> dict[str, Any]:
    """Alice on two platforms, Bob beside her in the Slack thread; returns what names them."""
    root = await slack.user_posts("C0GENERAL", f"<@U0BOT> the {WORD} plan", user="U0ALICE")
    await wait_for(lambda: len(slack.bot_posts()) == 1, message="first reply")
    await slack.user_posts("C0GENERAL", "<@U0BOT> bob says quokka", user="U0BOB", thread_ts=root.ts)
    await wait_for(lambda: len(slack.bot_posts()) == 2, message="bob's reply")
    notes = slack.upload("alice-notes.md", NOTES, "text/markdown")
    await slack.user_posts(
        "C0GENERAL",
        f"<@U0BOT> my {WORD} notes",
        user="U0ALICE",
        thread_ts=root.ts,
        subtype="file_share",
        files=[notes],
    )
    await wait_for(lambda: len(slack.bot_posts()) == 3, timeout=30, message="the doc reply")
    alice = telegram.user("Alice")
    chat = telegram.private(alice)
    telegram.user_says(chat, f"{WORD} on telegram too", user=alice)
    await wait_for(lambda: len(telegram.sent_to(chat)) == 1, message="telegram reply")
    voice = telegram.upload("voice.ogg", OGG, "audio/ogg")
    telegram.user_says(
        chat,
        "",
        user=alice,
        extra={
            "voice": {
                "file_id": voice["file_id"],
                "file_unique_id": voice["file_unique_id"],
                "duration": 3,
                "mime_type": "audio/ogg",
                "file_size": len(OGG),
            }
        },
    )
    await wait_for(lambda: len(telegram.sent_to(chat)) == 2, timeout=20, message="voice reply")
    scopes = {s.key.platform: s.key.scope for s in await gw.store.sessions.list_sessions()}
    on_slack = f"slack:{scopes['slack']}:U0ALICE"
    on_telegram = f"telegram:{scopes['telegram']}:{alice.id}"
    person = await gw.store.people.link(on_slack, on_telegram)
    return {"person": person, "slack": on_slack, "telegram": on_telegram}


async def _rows_with(database_url: str, text: str) -> dict[str, int]:
    """Every table (partitions included) whose rows, read as text, hold ``text``."""
    conn = await asyncpg.connect(database_url)
    try:
        tables = await conn.fetch(
            "SELECT c.oid::regclass::text AS name FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public' AND c.relkind = 'r'"
        )
        found: dict[str, int] = {}
        for t in tables:
            n = await conn.fetchval(
                f"SELECT count(*) FROM {t['name']} x WHERE x::text ILIKE $1", f"%{text}%"
            )
            if n:
                found[t["name"]] = n
        return found
    finally:
        await conn.close()


async def test_a_forgotten_person_leaves_nothing_of_their_text_findable(
    database_url: str,
    slack: FakeSlack,
    telegram: FakeTelegram,
    speech: FakeOpenAI,
    tmp_path: Path,
) -> None:
    speech.transcript = f"{WORD} spoken aloud"
    env = {"DATABASE_URL": database_url}
    async with running_gateway(
        database_url,
        adapters=[
            SlackAdapter(slack_settings(slack)),
            TelegramAdapter(telegram_settings(telegram), poll_timeout=1, backoff_initial=0.05),
        ],
        agent=NotedAgent(),
        web_chat=False,
        TRANSCRIPTION_BASE_URL=speech.base_url,
        TRANSCRIPTION_API_KEY="sk-voice",
    ) as gw:
        slack.events_url = f"{gw.url}slack/events"
        alice = await _converse(gw, slack, telegram)
        assert await _rows_with(database_url, STEM), "the word is stored before"

        # export: their messages on both platforms and the file they shared
        code, out, err = await run_cli_in_process(
            ["people", "export", alice["telegram"], "--out", str(tmp_path / "export")], env
        )
        assert code == 0, err
        exported = json.loads((tmp_path / "export" / "person.json").read_text("utf-8"))
        assert exported["accounts"] == sorted([alice["slack"], alice["telegram"]])
        said = [m["content"] for m in exported["messages"]]
        assert f"the {WORD} plan" in said[0] and f"{WORD} on telegram too" in said
        assert f"{WORD} spoken aloud" in said, "the voice note's transcript"
        assert "quokka" not in json.dumps(exported), "bob is not in alice's export"
        [shared] = [f for f in exported["files"] if f["document_id"] is not None]
        assert (tmp_path / "export" / shared["path"]).read_bytes() == NOTES
        assert {m["place"]["platform"] for m in exported["messages"]} == {"slack", "telegram"}

        # forget, stopped after its first batch: not finished, the word still there
        forget = ["people", "forget", alice["slack"], "--yes", "--batch", "1"]
        code, out, err = await run_cli_in_process([*forget, "--max-batches", "1"], env)
        assert code == 1 and "run forget again" in err
        assert await _rows_with(database_url, STEM)
        # run again (by the person's other account): it finishes the same job
        code, out, err = await run_cli_in_process(
            ["people", "forget", alice["telegram"], "--yes"], env
        )
        assert code == 0, err
        assert f"person:{alice['person']}\tforgotten" in out
        code, out, err = await run_cli_in_process(
            ["people", "forget", f"person:{alice['person']}", "--yes"], env
        )
        assert code == 1 and "forgotten, or merged" in err

        assert await _rows_with(database_url, STEM) == {}
        sessions = await gw.store.sessions.list_sessions()
        for s in sessions:
            code, shown, err = await run_cli_in_process(["sessions", "show", str(s.id)], env)
            assert code == 0 and STEM not in shown.lower()
            seqs = [m.seq_no for m in await gw.store.sessions.delta(s.id, 0)]
            assert seqs == list(range(1, len(seqs) + 1)), "history stays dense"
        async with httpx.AsyncClient(base_url=f"{gw.url}api/v1/") as api:
            found = await api.get("search", params={"q": WORD})
            assert found.status_code == 200 and STEM not in found.text.lower()
            bob = await api.get("search", params={"q": "quokka"})
            assert "quokka" in bob.text, "other people's messages are untouched"
            for s in sessions:
                listed = await api.get(f"sessions/{s.id}/messages")
                assert listed.status_code == 200 and STEM not in listed.text.lower()
        assert await gw.knowledge.store.list_documents() == []
        assert await gw.store.people.accounts(alice["person"]) == ()
        code, out, err = await run_cli_in_process(["kb", "search", WORD], env)
        assert STEM not in out.lower()
        # the audit log says it happened, without the text
        events = await _audit(database_url)
        assert ("people.export", str(alice["person"])) in events
        assert ("people.forget", str(alice["person"])) in events


async def _audit(database_url: str) -> list[tuple[str, str]]:
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch("SELECT action, object_id FROM audit_events ORDER BY id")
    finally:
        await conn.close()
    return [(r["action"], r["object_id"]) for r in rows]
