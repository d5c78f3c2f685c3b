"""The Matrix surface against a real Synapse homeserver (testsupport.matrix): the bot and the
people are accounts on it, the people use the client-server API as a client does, and what the
test reads back is what the homeserver holds. The gateway runs in the test process."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.matrix.adapter import ENCRYPTED_NOTICE, MatrixAdapter, MatrixConfig
from adapters.matrix.extract import Context, RoomFacts, extract_event
from gateway.core.attachments import FileTooLarge
from gateway.core.domain import Envelope, OutgoingFile, ReplyTarget
from gateway.core.errors import DeliveryError
from gateway.runtime.gateway import Gateway
from testsupport.harness import RecordingIntake, running_gateway, wait_for
from testsupport.matrix import Account, Person, Synapse, texts_by, thread_of
from testsupport.process import clean_env


def adapter_for(server: Synapse, bot: Account, *, password: bool = False) -> MatrixAdapter:
    """The bot's adapter, with its token (or its user id and password: it signs in)."""
    credentials: dict[str, Any] = (
        {"user_id": bot.user_id, "password": bot.password}
        if password
        else {"access_token": bot.access_token}
    )
    return MatrixAdapter(
        MatrixConfig(
            homeserver_url=server.url,
            **credentials,
            sync_timeout_ms=500,
            backoff_initial=0.05,
            backoff_max=0.5,
            messages_per_second=100,
        )
    )


@asynccontextmanager
async def matrix_gateway(
    database_url: str, server: Synapse, bot: Account, *, password: bool = False, **settings: Any
) -> AsyncIterator[tuple[Gateway, MatrixAdapter]]:
    adapter = adapter_for(server, bot, password=password)
    async with running_gateway(database_url, adapters=[adapter], web_chat=False, **settings) as gw:
        await wait_for(lambda: adapter.batches > 0, timeout=20, message="first sync")
        yield gw, adapter


async def answers(person: Person, room: str, bot: Account, count: int) -> list[dict[str, Any]]:
    async def enough() -> list[dict[str, Any]] | None:
        got = texts_by(await person.messages(room), bot.user_id)
        return got if len(got) >= count else None

    return await wait_for(enough, timeout=20, interval=0.1, message=f"{count} answers")


async def joined(person: Person, room: str, user_id: str) -> None:
    async def inside() -> bool:
        return user_id in await person.joined(room)

    await wait_for(inside, timeout=20, interval=0.1, message=f"{user_id} joined {room}")


async def test_a_mention_in_a_room_is_answered_in_a_thread_rooted_at_it(
    database_url: str, homeserver: Synapse
) -> None:
    bot = homeserver.register("bot")
    ann = Person(homeserver, homeserver.register("ann"))
    bob = Person(homeserver, homeserver.register("bob"))
    async with matrix_gateway(database_url, homeserver, bot):
        room = await ann.create_room(invite=(bot.user_id, bob.user_id))
        await bob.join(room)
        await joined(ann, room, bot.user_id)
        first = await ann.say(room, "what is up?", mention=bot.user_id)
        [answer] = await answers(ann, room, bot, 1)
        assert thread_of(answer) == first
        assert answer["text"] == f"echo: {bot.user_id}: what is up?"
        assert answer["content"]["format"] == "org.matrix.custom.html"
        # a follow-up in the thread, without a mention, is that thread's session
        await ann.say(room, "and **then**?", thread=first)
        [_, follow] = await answers(ann, room, bot, 2)
        assert thread_of(follow) == first
        assert follow["text"] == "echo: and **then**?"
        assert "<strong>then</strong>" in follow["content"]["formatted_body"]
        # a second mention at the top level starts a thread of its own
        second = await bob.say(room, "another one", mention=bot.user_id)
        got = await answers(ann, room, bot, 3)
        assert thread_of(got[2]) == second
        # and an unaddressed top-level message in a group room is not answered
        await ann.say(room, "just chatting")
        await ann.say(room, "ping", mention=bot.user_id)
        got = await answers(ann, room, bot, 4)
        assert [a["text"] for a in got][3] == f"echo: {bot.user_id}: ping"
        assert all(thread_of(a) for a in got)  # nothing at the room's top level


async def test_a_two_person_room_is_a_direct_chat_answered_in_the_room(
    database_url: str, homeserver: Synapse
) -> None:
    bot = homeserver.register("bot")
    ann = Person(homeserver, homeserver.register("ann"))
    # signed in with MATRIX_USER_ID and MATRIX_PASSWORD instead of a token
    async with matrix_gateway(database_url, homeserver, bot, password=True):
        room = await ann.create_room(invite=(bot.user_id,), direct=True)
        await joined(ann, room, bot.user_id)  # the invite was joined
        await ann.say(room, "hello there")
        [answer] = await answers(ann, room, bot, 1)
        assert answer["text"] == "echo: hello there"
        assert thread_of(answer) is None


async def test_an_invite_is_joined_only_from_an_allowed_person(
    database_url: str, homeserver: Synapse
) -> None:
    bot = homeserver.register("bot")
    ann = Person(homeserver, homeserver.register("ann"))
    eve = Person(homeserver, homeserver.register("eve"))
    allowed = f"matrix:{ann.user_id}"
    async with matrix_gateway(database_url, homeserver, bot, GATEWAY_ALLOWED_PEOPLE=allowed):
        refused = await eve.create_room(invite=(bot.user_id,))
        welcome = await ann.create_room(invite=(bot.user_id,))
        await joined(ann, welcome, bot.user_id)

        async def declined() -> bool:
            events = await eve.messages(refused)
            return any(
                e["type"] == "m.room.member"
                and e["state_key"] == bot.user_id
                and e["content"]["membership"] == "leave"
                for e in events
            )

        await wait_for(declined, timeout=20, interval=0.1, message="invite declined")
        assert bot.user_id not in await eve.joined(refused)


async def test_a_restart_neither_misses_nor_repeats_an_event(
    database_url: str, homeserver: Synapse
) -> None:
    bot = homeserver.register("bot")
    ann = Person(homeserver, homeserver.register("ann"))
    async with matrix_gateway(database_url, homeserver, bot):
        room = await ann.create_room(invite=(bot.user_id,), direct=True)
        await joined(ann, room, bot.user_id)
        await ann.say(room, "before")
        await answers(ann, room, bot, 1)
    # the gateway is down: these wait on the homeserver
    await ann.say(room, "while down 1")
    await ann.say(room, "while down 2")
    async with matrix_gateway(database_url, homeserver, bot) as (gw, _):
        await answers(ann, room, bot, 2)
        await ann.say(room, "after")
        await answers(ann, room, bot, 3)

        async def settled() -> list[str] | None:
            texts = [a["text"] for a in texts_by(await ann.messages(room), bot.user_id)]
            return texts if len(texts) >= 3 and texts[-1] == "echo: after" else None

        texts = await wait_for(settled, timeout=20, interval=0.1)
        assert texts is not None
        async with gw.store.db.connection() as conn:
            stored = await conn.fetch(
                "SELECT content FROM messages WHERE role = 'user' ORDER BY id"
            )
    # each message stored once, the ones written while it was down too; nothing answered twice
    assert [r["content"] for r in stored] == ["before", "while down 1", "while down 2", "after"]
    assert len(texts) == len(set(texts))
    assert texts[0] == "echo: before" and texts[-1] == "echo: after"
    assert "echo: while down 2" in texts


async def test_an_edit_and_a_redaction_reach_the_core_as_edit_and_delete(
    database_url: str, homeserver: Synapse
) -> None:
    bot = homeserver.register("bot")
    ann = Person(homeserver, homeserver.register("ann"))
    async with matrix_gateway(database_url, homeserver, bot) as (gw, _):
        room = await ann.create_room(invite=(bot.user_id,), direct=True)
        await joined(ann, room, bot.user_id)
        original = await ann.say(room, "the first words")
        await answers(ann, room, bot, 1)
        await ann.edit(room, original, "the better words")
        await ann.redact(room, original)

        async def annotations() -> list[Any] | None:
            async with gw.store.db.connection() as conn:
                rows = await conn.fetch(
                    "SELECT a.kind, a.content FROM message_annotations a"
                    " JOIN messages m ON m.id = a.message_id"
                    " WHERE m.external_id = $1 ORDER BY a.id",
                    original,
                )
            return list(rows) if len(rows) == 2 else None

        rows = await wait_for(annotations, timeout=20, interval=0.1)
    assert [(r["kind"], r["content"]) for r in rows] == [
        ("edit", "the better words"),
        ("delete", ""),
    ]
    # neither was answered
    assert len(texts_by(await ann.messages(room), bot.user_id)) == 1


async def test_an_encrypted_room_gets_one_notice_and_is_never_read(
    database_url: str, homeserver: Synapse
) -> None:
    bot = homeserver.register("bot")
    ann = Person(homeserver, homeserver.register("ann"))
    async with matrix_gateway(database_url, homeserver, bot) as (gw, adapter):
        room = await ann.create_room(invite=(bot.user_id,), direct=True, encrypted=True)
        await joined(ann, room, bot.user_id)
        await ann.send(
            room, {"algorithm": "m.megolm.v1.aes-sha2", "ciphertext": "xx"}, "m.room.encrypted"
        )
        # a client of a room that does not know it is encrypted could still send clear text
        await ann.say(room, "clear words")
        batches = adapter.batches
        await wait_for(lambda: adapter.batches >= batches + 2, timeout=20)

        async def notices() -> list[dict[str, Any]] | None:
            sent = [
                e
                for e in await ann.messages(room)
                if e["sender"] == bot.user_id and e["type"] == "m.room.message"
            ]
            return sent or None

        sent = await wait_for(notices, timeout=20, interval=0.1)
        async with gw.store.db.connection() as conn:
            stored = await conn.fetchval("SELECT count(*) FROM messages WHERE role = 'user'")
    assert [e["content"]["body"] for e in sent] == [ENCRYPTED_NOTICE]
    assert sent[0]["content"]["msgtype"] == "m.notice"
    assert stored == 0
    # a restart does not say it again
    async with matrix_gateway(database_url, homeserver, bot):
        await ann.say(room, "more words")
        await wait_for(lambda: True)
    sent = [
        e
        for e in await ann.messages(room)
        if e["sender"] == bot.user_id and e["type"] == "m.room.message"
    ]
    assert len(sent) == 1


async def test_a_redelivered_batch_is_deduped_by_event_id(
    database_url: str, homeserver: Synapse
) -> None:
    """A crash after the events were stored but before the sync token was saved: the next
    start syncs the same batch again, and the inbox keeps each event id once."""
    bot = homeserver.register("bot")
    ann = Person(homeserver, homeserver.register("ann"))
    async with matrix_gateway(database_url, homeserver, bot) as (gw, adapter):
        room = await ann.create_room(invite=(bot.user_id,), direct=True)
        await joined(ann, room, bot.user_id)
        cursor = f"matrix:{adapter.scope}:{bot.user_id}:sync"
        async with gw.store.db.connection() as conn:
            before = await conn.fetchval(
                "SELECT value FROM adapter_cursors WHERE name = $1", cursor
            )
        await ann.say(room, "only once")
        await answers(ann, room, bot, 1)
    # the crash: the token is the one from before the batch that held the message
    async with running_gateway(database_url, web_chat=False) as plain:
        async with plain.store.db.connection() as conn:
            await conn.execute(
                "UPDATE adapter_cursors SET value = $2 WHERE name = $1", cursor, before
            )
    async with matrix_gateway(database_url, homeserver, bot) as (gw, adapter):
        batches = adapter.batches
        await wait_for(lambda: adapter.batches >= batches + 3, timeout=20)
        async with gw.store.db.connection() as conn:
            stored = await conn.fetch("SELECT content FROM messages WHERE role = 'user'")
    assert [r["content"] for r in stored] == ["only once"]
    assert [a["text"] for a in texts_by(await ann.messages(room), bot.user_id)] == [
        "echo: only once"
    ]


async def test_m_limit_exceeded_comes_back_with_its_retry_after(homeserver: Synapse) -> None:
    """The homeserver's 429 (``M_LIMIT_EXCEEDED``, ``retry_after_ms``) becomes a transient
    ``DeliveryError`` carrying that wait, which the gateway's pacing honours."""
    bot = homeserver.register("bot")
    admin = Person(homeserver, homeserver.register("admin", admin=True))
    ann = Person(homeserver, homeserver.register("ann"))
    room = await ann.create_room(invite=(bot.user_id,), direct=True)
    await Person(homeserver, bot).join(room)
    async with httpx.AsyncClient(base_url=homeserver.url) as client:
        limited = await client.post(
            f"/_synapse/admin/v1/users/{bot.user_id}/override_ratelimit",
            json={"messages_per_second": 1, "burst_count": 1},
            headers={"Authorization": f"Bearer {admin.account.access_token}"},
        )
    assert limited.status_code == 200, limited.text
    adapter = adapter_for(homeserver, bot)
    target = ReplyTarget(platform="matrix", scope=adapter.scope, chat_id=room)
    try:
        with pytest.raises(DeliveryError) as caught:
            for n in range(5):
                await adapter.transport.send(target, f"hello {n}", idempotency_key=f"k{n}")
    finally:
        await adapter.stop()
    assert not caught.value.permanent
    assert caught.value.retry_after is not None and 0 < caught.value.retry_after <= 2
    assert "M_LIMIT_EXCEEDED" in str(caught.value)


async def _setup(tmp_path: Path, args: list[str], stdin: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        "setup",
        "matrix",
        *args,
        cwd=tmp_path,
        env=clean_env({"XDG_CONFIG_HOME": str(tmp_path / "config")}),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(stdin.encode()), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_setup_checks_the_token_live_and_writes_it(
    tmp_path: Path, homeserver: Synapse
) -> None:
    bot = homeserver.register("bot")
    code, out = await _setup(tmp_path, ["--homeserver", homeserver.url], "wrong-token\n")
    assert code == 1, out
    assert "BAD matrix: the homeserver refused the credentials" in out
    code, out = await _setup(tmp_path, ["--homeserver", homeserver.url], f"{bot.access_token}\n")
    assert code == 0, out
    assert f"ok  matrix: signed in as {bot.user_id}" in out
    written = (tmp_path / "config" / "chat-gateway" / ".env").read_text()
    assert f"MATRIX_HOMESERVER_URL={homeserver.url}" in written
    assert f"MATRIX_ACCESS_TOKEN={bot.access_token}" in written
    assert bot.access_token not in out  # never echoed


async def test_reactions_decide_approval_cards_and_give_feedback(homeserver: Synapse) -> None:
    """An approval card says how to decide it; ✅/❌ on it reach the core as the card's
    click (by its event id), 👍 on an answer as that answer's feedback."""
    bot = homeserver.register("bot")
    ann = Person(homeserver, homeserver.register("ann"))
    intake = RecordingIntake()
    adapter = adapter_for(homeserver, bot)
    await adapter.start(intake)
    try:
        await wait_for(lambda: adapter.batches > 0, timeout=20)
        room = await ann.create_room(invite=(bot.user_id,), direct=True)
        await joined(ann, room, bot.user_id)
        target = ReplyTarget(platform="matrix", scope=adapter.scope, chat_id=room)
        card = await adapter.transport.send_card(
            target, "Run `restart`?", approval_id="a1", idempotency_key="card-1"
        )
        answer = await adapter.transport.send(target, "Done.", idempotency_key="answer-1")
        assert card.platform_message_id and answer.platform_message_id
        [shown] = [e for e in await ann.messages(room) if e["event_id"] == card.platform_message_id]
        assert "React with ✅ to approve or ❌ to deny." in shown["content"]["body"]
        await ann.react(room, card.platform_message_id, "✅")
        await ann.react(room, answer.platform_message_id, "👍")
        await wait_for(lambda: intake.clicks and intake.feedback, timeout=20)
    finally:
        await adapter.stop()
    click = intake.clicks[0]
    assert (click.approve, click.user_id, click.chat_id, click.message_id, click.approval_id) == (
        True,
        ann.user_id,
        room,
        card.platform_message_id,
        "",
    )
    assert intake.feedback[0]["message_id"] == answer.platform_message_id
    assert intake.feedback[0]["value"] == 1


async def test_a_file_goes_out_into_the_thread_and_comes_back_in(homeserver: Synapse) -> None:
    """A file of an answer is uploaded to the homeserver's media store and posted in the
    thread; a file a person posts is fetched back from it by its mxc:// address."""
    bot = homeserver.register("bot")
    ann = Person(homeserver, homeserver.register("ann"))
    adapter = adapter_for(homeserver, bot)
    room = await ann.create_room(invite=(bot.user_id,))
    await Person(homeserver, bot).join(room)
    root = await ann.say(room, "draw me something", mention=bot.user_id)
    target = ReplyTarget(platform="matrix", scope=adapter.scope, chat_id=room, thread_id=root)
    picture = b"\x89PNG\r\n\x1a\n" + bytes(range(256))
    try:
        sent = await adapter.transport.send_file(
            target,
            OutgoingFile(name="pic.png", mime_type="image/png", data=picture, caption="here"),
            idempotency_key="file-1",
        )
        [event] = [e for e in await ann.messages(room) if e["event_id"] == sent.platform_message_id]
        assert thread_of(event) == root
        content = event["content"]
        assert (content["msgtype"], content["filename"], content["body"]) == (
            "m.image",
            "pic.png",
            "here",
        )
        extracted = extract_event(
            {**event, "sender": ann.user_id},
            ctx=Context(scope=adapter.scope, bot_user_id=bot.user_id),
            room=RoomFacts(room_id=room, direct=False),
        )
        assert isinstance(extracted, Envelope)
        [attachment] = extracted.attachments
        assert await adapter.transport.fetch_file(attachment, max_bytes=10_000) == picture
        with pytest.raises(FileTooLarge):
            await adapter.transport.fetch_file(attachment, max_bytes=100)
    finally:
        await adapter.stop()
