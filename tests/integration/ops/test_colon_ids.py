"""Ids holding ':' (a Matrix room ``!opaque:server``, a Teams conversation ``19:abc@thread``)
through every door that reads a written session key or place: ``gateway sessions show`` and
``pause``, the operator's session lookup, a ``[places]`` entry of the config file and the
profiles API."""

from __future__ import annotations

from pathlib import Path

import httpx
from fastapi import FastAPI

from gateway.core.config_file import parse_config_text
from gateway.core.domain import SessionKey
from gateway.http.admin import AccessPolicy, install_problem_handlers
from gateway.http.operator import OperatorService
from gateway.profiles.api import profiles_router
from gateway.profiles.parse import KnownTools, parse_profiles
from gateway.profiles.service import Profiles
from gateway.turns.context import ContextPolicy
from session_store.repos.operator import OperatorStore
from session_store.repos.reloads import Reloads
from session_store.store import Store
from testsupport.process import run_cli_in_process

#: a Matrix room id before room version 12, on a homeserver with a port (the scope)
ROOM = SessionKey(
    platform="matrix",
    scope="matrix.example.org:8448",
    chat_id="!OGEhHVWSdvArJzumhm:matrix.example.org:8448",
)
WRITTEN = "matrix:matrix.example.org:8448:!OGEhHVWSdvArJzumhm%3Amatrix.example.org%3A8448:-"
#: another room of the same server whose id shares the first one's start
OTHER = SessionKey(platform="matrix", scope=ROOM.scope, chat_id="!OGEhHVWSdvArJzumhm:other.org")
TEAMS = SessionKey(
    platform="teams", scope="t1", chat_id="19:abc@thread.tacv2", thread_id="1700000000123"
)

CONFIG = """
[profiles.support]
system_prompt = "You are the support desk's assistant."

[profiles.teams]
system_prompt = "Teams."

[places]
"*" = "default"
"matrix:*:!OGEhHVWSdvArJzumhm%3Amatrix.example.org%3A8448" = "support"
"teams:t1:19%3Aabc@thread.tacv2:*" = "teams"
"""


async def test_sessions_show_and_pause_find_a_matrix_room_by_its_written_key(
    database_url: str, store: Store
) -> None:
    ops = OperatorStore(store)
    session, _ = await ops.create_session(ROOM, participant="ann", title="matrix room")
    other, _ = await ops.create_session(OTHER, participant="ann")
    assert str(session.key) == WRITTEN and session.key == ROOM
    env = {"DATABASE_URL": database_url}

    code, out, err = await run_cli_in_process(["sessions", "show", WRITTEN], env)
    assert code == 0, err
    assert out.splitlines()[0] == f"session {session.id} {WRITTEN} (active, 0 messages)"

    code, out, err = await run_cli_in_process(["sessions", "pause", WRITTEN], env)
    assert code == 0, err
    assert out.startswith(f"session {session.id} {WRITTEN}: paused")
    assert (await store.sessions.get_session(other.id)).status == "active"

    # the room id as Matrix writes it is not a key: it is refused, never another session
    code, _out, err = await run_cli_in_process(
        ["sessions", "show", f"matrix:{ROOM.scope}:{ROOM.chat_id}:-"], env
    )
    assert code == 1 and "no session for key" in err

    # the operator's lookup (the ops page, the HTTP API, MCP) reads the same form
    service = OperatorService(ops, transports={})
    assert (await service.resolve(WRITTEN)).id == session.id
    assert (await service.resolve(f" {OTHER!s} ")).id == other.id


async def test_a_place_in_the_config_file_names_a_room_with_colons(
    store: Store, tmp_path: Path
) -> None:
    book = parse_profiles(parse_config_text(CONFIG), models=["m"], tools=KnownTools())
    profiles = Profiles(book, ContextPolicy())
    assert profiles.resolve(ROOM).profile.name == "support"
    assert profiles.resolve(OTHER).profile.name == "default"
    assert profiles.resolve(TEAMS).profile.name == "teams"

    # the profiles API: a place and the session keys of the ops page's list
    app = FastAPI()
    install_problem_handlers(app)
    token = "t" * 32
    app.include_router(profiles_router(profiles, AccessPolicy(token), Reloads(store.db)))
    transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 1234))
    async with httpx.AsyncClient(
        transport=transport,
        base_url="http://127.0.0.1",
        headers={"Authorization": f"Bearer {token}"},
    ) as client:
        place = ROOM.chat_text.replace("org:8448", "org%3A8448", 1)
        found = await client.get("/api/v1/profiles/resolve", params={"place": place})
        assert found.status_code == 200, found.text
        assert found.json()["profile"]["name"] == "support"
        keys = [WRITTEN, str(OTHER), str(TEAMS)]
        listed = await client.get("/api/v1/profiles/sessions", params={"key": keys})
        assert listed.json() == {
            "profiles": {WRITTEN: "support", str(OTHER): "default", str(TEAMS): "teams"}
        }

    # `gateway profiles show` with the file
    config = tmp_path / "gateway.toml"
    config.write_text(CONFIG)
    env = {
        "GATEWAY_CONFIG_FILE": str(config),
        "AGENT_MODEL": "m",
        "GATEWAY_DATA_DIR": str(tmp_path),
    }
    code, out, err = await run_cli_in_process(["profiles", "show", place], env)
    assert code == 0, err
    assert "chosen by:     [places] " in out and '= "support"' in out
