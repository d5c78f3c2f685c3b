"""Accounts and places typed by an operator are checked against the known platforms (the
installed surfaces, the running ones, and any a message came from): a typo such as
``telegarm:bot:1`` is refused naming it, on the command line (exit 2) and in the admin API
(422); a place the gateway has never seen is made with a warning, or refused with strict."""

from __future__ import annotations

import httpx

from session_store.store import Store
from testsupport.harness import running_gateway
from testsupport.process import run_cli_in_process

AT = "2099-01-04 09:00"


async def _seen(store: Store, platform: str, scope: str, chat: str, thread: str | None) -> None:
    async with store.db.connection() as conn:
        await conn.execute(
            "INSERT INTO sessions (platform, scope, chat_id, thread_id) VALUES ($1, $2, $3, $4)",
            platform,
            scope,
            chat,
            thread,
        )


async def _people(store: Store) -> dict[str, int]:
    async with store.db.connection() as conn:
        rows = await conn.fetch("SELECT account, person_id FROM person_accounts")
    return {r["account"]: r["person_id"] for r in rows}


async def test_people_link_refuses_an_account_on_an_unknown_platform(
    database_url: str, store: Store
) -> None:
    env = {"DATABASE_URL": database_url}
    code, out, err = await run_cli_in_process(
        ["people", "link", "telegarm:bot:1", "web:local:ann"], env
    )
    assert code == 2, (out, err)
    assert "telegarm:bot:1" in err and "'telegarm'" in err and "telegram" in err
    assert out == ""
    assert await _people(store) == {}, "nothing was linked"
    # a known platform: linked (the web chat and Telegram are installed surfaces)
    code, out, err = await run_cli_in_process(
        ["people", "link", "telegram:bot:1", "web:local:ann"], env
    )
    assert code == 0, err
    linked = await _people(store)
    assert linked["telegram:bot:1"] == linked["web:local:ann"]


async def test_a_platform_a_message_came_from_is_known(database_url: str, store: Store) -> None:
    """A surface added with GATEWAY_ADAPTERS has no plugin: once it has talked, its
    accounts may be linked."""
    await _seen(store, "sink", "test", "c1", None)
    code, _out, err = await run_cli_in_process(
        ["people", "link", "sink:test:ann", "web:local:ann"], {"DATABASE_URL": database_url}
    )
    assert code == 0, err


async def test_schedule_add_checks_the_platform_and_warns_about_an_unseen_place(
    database_url: str, store: Store
) -> None:
    env = {"DATABASE_URL": database_url}

    async def add(place: str, *more: str) -> tuple[int, str, str]:
        return await run_cli_in_process(
            ["schedule", "add", place, "--at", AT, "--prompt", "notes", *more], env
        )

    code, _out, err = await add("telegarm:bot:-1001")
    assert code == 2 and "telegarm:bot:-1001" in err and "no platform 'telegarm'" in err
    code, out, err = await add("slack:T1:C0NEVER")
    assert code == 0, err
    assert "warning:" in err and "never seen the place slack:T1:C0NEVER" in err
    assert out.startswith("slack:T1:C0NEVER ")
    code, _out, err = await add("slack:T1:C0NEVER", "--strict")
    assert code == 2 and "never seen" in err and "strict" in err
    await _seen(store, "slack", "T1", "C0SEEN", "1700000000.000100")
    code, _out, err = await add("slack:T1:C0SEEN:1700000000.000100", "--strict")
    assert code == 0 and "warning" not in err, err
    code, _out, err = await add("slack:T1:C0SEEN:1700000000.999999")
    assert code == 0 and "never seen thread 1700000000.999999" in err
    async with store.db.connection() as conn:
        made = await conn.fetch("SELECT chat_id FROM schedules ORDER BY id")
    assert [r["chat_id"] for r in made] == ["C0NEVER", "C0SEEN", "C0SEEN"]


async def test_the_admin_api_refuses_an_unknown_platform_and_warns_about_an_unseen_place(
    database_url: str,
) -> None:
    async with (
        running_gateway(database_url) as gw,
        httpx.AsyncClient(base_url=gw.url, timeout=30) as http,
    ):

        async def post(place: str, **more: object) -> httpx.Response:
            body = {"place": place, "prompt": "notes", "at": AT, **more}
            return await http.post("/api/v1/schedules", json=body)

        refused = await post("telegarm:bot:-1001")
        assert refused.status_code == 422, refused.text
        assert "telegarm:bot:-1001" in refused.text
        unseen = await post("web:local:nowhere")
        assert unseen.status_code == 201, unseen.text
        (warning,) = unseen.json()["warnings"]
        assert "never seen the place web:local:nowhere" in warning
        strict = await post("web:local:nowhere", strict=True)
        assert strict.status_code == 422, strict.text
        listed = (await http.get("/api/v1/schedules")).json()
    assert [s["place"] for s in listed] == ["web:local:nowhere"]
