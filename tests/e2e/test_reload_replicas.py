"""One reload for every replica, against real ``gateway run`` processes sharing a database: one
``gateway reload`` (and one ``POST /api/v1/reload``) reaches both replicas, each reports the
SHA-256 of the file it loaded, and each serves the new profiles; a broken file is refused by
both, which keep what they had; a gateway started without a config file says it has none."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from testsupport.process import gateway_process, gateway_processes, run_cli_in_process

pytestmark = pytest.mark.slow

CONFIG = """
[profiles.support]
system_prompt = "{prompt}"

[places]
"web:*:general" = "support"
"""


def profiles_of(url: str) -> dict[str, Any]:
    answer = httpx.get(f"{url}/api/v1/profiles", timeout=10)
    assert answer.status_code == 200, answer.text
    return answer.json()


def prompt_of(url: str) -> str:
    [support] = [p for p in profiles_of(url)["profiles"] if p["name"] == "support"]
    return str(support["system_prompt"])


def reported(out: str) -> dict[int, tuple[str, str]]:
    """``gateway reload``'s lines: replica id -> (status, what it says)."""
    found: dict[int, tuple[str, str]] = {}
    for line in out.splitlines():
        match = re.fullmatch(r"replica (\d+) \(\S+\)\t([a-z ]+)\t(.*)", line)
        assert match, line
        found[int(match[1])] = (match[2], match[3])
    return found


async def test_one_reload_reaches_both_replicas_with_the_same_hash(
    database_url: str, tmp_path: Path
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(CONFIG.format(prompt="You help."))
    env = {"DATABASE_URL": database_url, "GATEWAY_CONFIG_FILE": str(config)}
    async with gateway_processes((env, tmp_path / "a.log"), (env, tmp_path / "b.log")) as (a, b):
        assert prompt_of(a.url) == prompt_of(b.url) == "You help."

        config.write_text(CONFIG.format(prompt="You help kindly."))
        digest = hashlib.sha256(config.read_bytes()).hexdigest()
        code, out, err = await run_cli_in_process(["reload"], env)
        assert code == 0, err
        replicas = reported(out)
        assert len(replicas) == 2, out
        for status, says in replicas.values():
            assert status == "reloaded"
            assert says == f"reloaded {config.absolute()} sha256={digest}"
        # both serve the new profile at once: the command returned after both reports
        assert prompt_of(a.url) == prompt_of(b.url) == "You help kindly."

        # the admin API's reload, asked of one replica, reaches the other too
        config.write_text(CONFIG.format(prompt="You help briefly."))
        digest = hashlib.sha256(config.read_bytes()).hexdigest()
        async with httpx.AsyncClient(timeout=30) as http:
            answer = await http.post(f"{b.url}/api/v1/reload", json={})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["reloaded"] is True and body["error"] is None
        assert [r["status"] for r in body["replicas"]] == ["reloaded", "reloaded"]
        assert {r["sha256"] for r in body["replicas"]} == {digest}
        assert prompt_of(a.url) == prompt_of(b.url) == "You help briefly."

        # a broken file: each replica says why and keeps the profiles it had
        config.write_text(CONFIG.format(prompt="x").replace('= "support"', '= "nobody"'))
        code, out, err = await run_cli_in_process(["reload", "--json"], env)
        assert code == 2, err
        body = json.loads(out)
        assert body["reloaded"] is False
        assert [r["status"] for r in body["replicas"]] == ["failed", "failed"]
        for r in body["replicas"]:
            assert "unknown profile 'nobody'" in r["error"]
            assert r["sha256"] == digest  # the file still in force
        assert "unknown profile 'nobody'" in err
        assert prompt_of(a.url) == prompt_of(b.url) == "You help briefly."

    # the audit log names each reload and who asked
    conn_answer = await _audit(database_url)
    assert [(o, a.split(":")[0]) for o, a in conn_answer] == [
        ("ok", "cli"),
        ("ok", "admin"),
        ("failed", "cli"),
    ]


async def test_reload_fails_where_the_gateway_runs_without_a_config_file(
    database_url: str, tmp_path: Path
) -> None:
    env = {"DATABASE_URL": database_url}
    async with gateway_process(env, tmp_path / "gateway.log"):
        code, out, err = await run_cli_in_process(["reload"], env)
    assert code == 2, (out, err)
    assert "\tfailed\t" in out
    assert "started without GATEWAY_CONFIG_FILE" in err


async def _audit(database_url: str) -> list[tuple[str, str]]:
    import asyncpg

    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            "SELECT outcome, actor FROM audit_events WHERE action = 'config.reload' ORDER BY id"
        )
    finally:
        await conn.close()
    return [(r["outcome"], r["actor"]) for r in rows]
