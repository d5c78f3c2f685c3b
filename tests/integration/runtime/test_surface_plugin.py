"""A surface added beside the gateway, through a real entry point and the public plugin API
alone (tests/integration/runtime/memo_surface), with no edit to gateway/: the registry finds
it, its own settings are read and named when bad, ``gateway setup`` and doctor take it, and a
message goes in through its route, gets its turn, and the answer is delivered back through its
transport."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.agents.base import EchoAgent
from gateway.core.domain import SessionKey
from gateway.core.errors import ConfigError
from gateway.core.registry import (
    all_settings_classes,
    check_settings,
    streaming_overrides,
    surface_plugins,
)
from gateway.core.settings import load_settings
from gateway.ops.doctor import check_surfaces
from gateway.ops.setup import Prompter, add_parser, run_setup
from gateway.runtime.gateway import Gateway
from session_store.store import Store
from tests.integration.runtime.memo_surface.plugin import MemoSettings, MemoTransport
from testsupport.harness import make_settings, wait_for
from testsupport.paths import REPO
from testsupport.process import run_cli

TOKEN = "memo-token-0123456789"
ENTRY = "memo = tests.integration.runtime.memo_surface.plugin:plugin"


def install(where: Path) -> Path:
    """What ``pip install`` of a package with this entry point leaves on ``sys.path``."""
    dist = where / "memo_surface-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: memo-surface\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[chat_gateway.surfaces]\n{ENTRY}\n")
    return where


@pytest.fixture
def memo_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    surface_plugins.cache_clear()
    monkeypatch.syspath_prepend(str(install(tmp_path / "site")))
    yield tmp_path / "site"
    surface_plugins.cache_clear()


def names() -> list[str]:
    return [p.name for p in surface_plugins()]


def test_the_registry_finds_the_surface_only_once_it_is_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    surface_plugins.cache_clear()
    assert "memo" not in names()  # nothing of it is in the core
    monkeypatch.syspath_prepend(str(install(tmp_path / "site")))
    surface_plugins.cache_clear()
    try:
        found = names()
        assert "memo" in found
        # our own surfaces first, the web chat (built beside any others) last
        assert found[-1] == "web" and found.index("memo") > found.index("telegram")
        assert MemoSettings in all_settings_classes()
    finally:
        surface_plugins.cache_clear()


@pytest.mark.usefixtures("memo_installed")
def test_its_settings_are_read_from_the_core_sources_and_named_when_bad() -> None:
    settings = load_settings(_env_file=None, MEMO_TOKEN=TOKEN, MEMO_STREAMING="false")
    assert settings.surface(MemoSettings).memo_board == "main"
    assert streaming_overrides(settings) == {"memo": False}
    # its answer settings, in the answer policy's one vocabulary
    with pytest.raises(ConfigError) as info:
        check_settings(load_settings(_env_file=None, MEMO_TOKEN="short"))
    assert info.value.setting == "MEMO_TOKEN"


@pytest.mark.usefixtures("memo_installed")
async def test_setup_writes_its_settings_and_doctor_runs_its_checks(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser(prog="gateway")
    add_parser(parser.add_subparsers(dest="command"))
    env_file = tmp_path / "memo.env"
    args = parser.parse_args(["setup", "memo", "--memo-token", TOKEN, "--env-file", str(env_file)])
    prompter = Prompter(False, lambda: "", input, input)
    assert await run_setup(args, prompter) == 0
    assert f"MEMO_TOKEN={TOKEN}" in env_file.read_text()
    settings = load_settings(_env_file=env_file, GATEWAY_WEB_CHAT=False)
    checks = await check_surfaces(settings)
    assert [(c.name, c.ok, c.detail) for c in checks] == [("memo", True, "board main")]


@pytest.mark.usefixtures("memo_installed")
async def test_a_message_goes_in_gets_its_turn_and_comes_back_through_the_surface(
    database_url: str,
) -> None:
    settings = make_settings(database_url, GATEWAY_WEB_CHAT=False, MEMO_TOKEN=TOKEN)
    store = await Store.connect(database_url, min_size=1, max_size=10)
    try:
        # no adapters given: the gateway builds what its registry finds enabled
        gateway = Gateway(settings, store=store, agent=EchoAgent())
        assert sorted(gateway.transports) == ["memo"]
        transport = gateway.transports["memo"]
        assert isinstance(transport, MemoTransport)
        await gateway.start()
        try:
            async with httpx.AsyncClient(base_url=gateway.url, timeout=10) as client:
                message = {
                    "id": "1",
                    "place": "kitchen",
                    "thread": "t1",
                    "person": "ann",
                    "mention": True,
                }
                refused = await client.post(
                    "/memo/inbound", json={**message, "text": "hello"}, headers={}
                )
                assert refused.status_code == 401
                # a webhook prefix the plugin declares: not held to the JSON content type
                answered = await client.post(
                    "/memo/inbound",
                    content=json.dumps({**message, "text": "hello"}),
                    headers={"X-Memo-Token": TOKEN, "Content-Type": "text/plain"},
                )
                assert answered.status_code == 200, answered.text
                assert answered.json()["status"] == "accepted"
            await wait_for(lambda: transport.sent, timeout=20, message="no reply delivered")
            assert transport.sent == [("kitchen", "t1", "echo: hello")]
        finally:
            await gateway.stop()
    finally:
        await store.close()


@pytest.mark.usefixtures("memo_installed")
async def test_the_core_decides_who_is_answered_for_a_surface_that_does_nothing_about_it(
    database_url: str,
) -> None:
    """The memo surface asks for every memo to be answered and only reports facts: the
    core's door applies the answer rules to it all the same, with the allow-list its plugin
    declares. Were the door to skip the policy, every memo below would be answered."""
    settings = make_settings(
        database_url, GATEWAY_WEB_CHAT=False, MEMO_TOKEN=TOKEN, MEMO_ALLOWED_PLACES=["kitchen"]
    )
    store = await Store.connect(database_url, min_size=1, max_size=10)
    try:
        gateway = Gateway(settings, store=store, agent=EchoAgent())
        transport = gateway.transports["memo"]
        assert isinstance(transport, MemoTransport)
        await gateway.start()
        try:
            async with httpx.AsyncClient(
                base_url=gateway.url, timeout=10, headers={"X-Memo-Token": TOKEN}
            ) as client:

                async def memo(n: int, place: str, text: str, **facts: bool) -> str:
                    body = {"id": str(n), "place": place, "thread": f"t{n}", "person": "ann"}
                    answer = await client.post(
                        "/memo/inbound", json={**body, **facts, "text": text}
                    )
                    assert answer.status_code == 200, answer.text
                    return str(answer.json()["status"])

                statuses = [
                    await memo(1, "kitchen", "beep", bot=True, mention=True),
                    await memo(2, "kitchen", "chatter"),
                    await memo(3, "cellar", "anyone?", mention=True),
                    await memo(4, "kitchen", "lunch?", mention=True),
                ]
            assert statuses == ["accepted", "accepted", "ignored", "accepted"]
            await wait_for(lambda: transport.sent, timeout=20, message="no reply delivered")
            stored = {}
            for n in (1, 2, 4):
                key = SessionKey(
                    platform="memo", scope="main", chat_id="kitchen", thread_id=f"t{n}"
                )
                session = await store.sessions.find_session(key)
                assert session is not None, key
                stored[n] = [
                    (m.content, m.trigger) for m in await store.sessions.recent(session.id, 10)
                ]
            # a bot's memo, even naming the bot, and an unaddressed one: context, never answered
            assert stored[1] == [("beep", "context")]
            assert stored[2] == [("chatter", "context")]
            assert stored[4][0] == ("lunch?", "answer")
            assert transport.sent == [("kitchen", "t4", "echo: lunch?")]
            ignored = await gateway.operator.ops.inbound_events(status="ignored", platform="memo")
            assert [e.reason for e in ignored] == ["place cellar is not in MEMO_ALLOWED_PLACES"]
        finally:
            await gateway.stop()
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("env", "setting"),
    [({"MEMO_TOKEN": "short"}, "MEMO_TOKEN"), ({"TELEGRAM_MODE": "pigeon"}, "TELEGRAM_MODE")],
)
async def test_gateway_run_exits_2_naming_a_bad_surface_setting(
    tmp_path: Path, env: dict[str, str], setting: str
) -> None:
    site = install(tmp_path / "site")
    path = os.pathsep.join([str(REPO), str(site)])
    code, _, err = await run_cli(["run"], {**env, "PYTHONPATH": path}, timeout=120)
    assert code == 2, err
    assert f"configuration error: {setting}" in err


def test_the_built_in_surfaces_come_from_metadata_or_from_the_source_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gateway.core import registry

    declared = registry._declared(registry.PYPROJECT)
    assert [name for name, _ in declared] == [
        "telegram",
        "slack",
        "mattermost",
        "discord",
        "teams",
        "web",
        "matrix",
    ]
    other = tmp_path / "pyproject.toml"
    other.write_text('[project]\nname = "someone-else"\n[project.entry-points."x"]\na = "b:c"\n')
    assert registry._declared(other) == []
    # an installed gateway: no source tree beside it, its own metadata lists the surfaces
    monkeypatch.setattr(registry, "PYPROJECT", tmp_path / "absent.toml")
    site = tmp_path / "site"
    dist = site / "chat_gateway-9.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: chat-gateway\nVersion: 9\n")
    lines = "".join(f"{name} = {value}\n" for name, value in reversed(declared))
    (dist / "entry_points.txt").write_text(f"[chat_gateway.surfaces]\n{lines}")
    monkeypatch.syspath_prepend(str(site))
    found = dict(registry._entries())
    assert found == dict(declared)
