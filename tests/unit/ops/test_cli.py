"""The ``gateway`` command as a person meets it: ``--version``, a command group run bare shows
its help, help text in plain words (no reStructuredText backticks), and commands other than
the servers keep JSON log lines off stderr unless asked."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Iterator
from importlib import metadata

import pytest

from gateway.ops.cli import _parser
from testsupport.databases import fresh_database
from testsupport.paths import REPO
from testsupport.process import clean_env


def _parsers(
    parser: argparse.ArgumentParser, name: str
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _parsers(sub, f"{name} {sub_name}")


PARSERS = dict(_parsers(_parser(), "gateway"))
GROUPS = [
    name
    for name, parser in PARSERS.items()
    if name != "gateway" and any(isinstance(a, argparse._SubParsersAction) for a in parser._actions)
]


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        _parser().parse_args(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"gateway {metadata.version('chat-gateway')}"


def test_there_are_command_groups() -> None:
    assert {"gateway sessions", "gateway profiles", "gateway kb", "gateway people"} <= set(GROUPS)


@pytest.mark.parametrize("group", ["gateway", *GROUPS])
def test_a_group_run_bare_prints_its_help(group: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        _parser().parse_args(group.split()[1:])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "arguments are required" not in err
    assert err.startswith(f"usage: {group}"), err
    assert "positional arguments:" in err and "-h, --help" in err


@pytest.mark.parametrize("name", PARSERS)
def test_help_is_plain_text(name: str) -> None:
    text = PARSERS[name].format_help()
    assert "`" not in text, f"{name} --help shows reStructuredText:\n{text}"


async def _migrate(dsn: str, **env: str) -> tuple[int, str, str]:
    environment = clean_env({"DATABASE_URL": dsn, **env})
    if "GATEWAY_LOG_FORMAT" not in env:
        del environment["GATEWAY_LOG_FORMAT"]  # as a person's shell has it: unset
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        "migrate",
        env=environment,
        cwd=str(REPO),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,  # not a terminal: where JSON logging is the default
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def _json_lines(text: str) -> list[dict[str, object]]:
    found = []
    for line in text.splitlines():
        try:
            found.append(json.loads(line))
        except ValueError:
            continue
    return found


async def test_a_command_keeps_json_logs_off_stderr_unless_asked(pg_server: str) -> None:
    # each run on an empty database: every migration is applied, and each logs at info
    async with fresh_database(pg_server, prefix="gw_cli_quiet") as dsn:
        code, out, err = await _migrate(dsn)
    assert code == 0, err
    assert out.startswith("applied ") and not out.startswith("applied 0")
    assert err == "", err  # the migrations applied are the output, not log lines
    # asked for (GATEWAY_LOG_FORMAT and GATEWAY_LOG_LEVEL set): the log lines are there
    async with fresh_database(pg_server, prefix="gw_cli_asked") as dsn:
        code, out, err = await _migrate(dsn, GATEWAY_LOG_FORMAT="json", GATEWAY_LOG_LEVEL="info")
    assert code == 0, err
    assert any(line.get("event") == "migration_applied" for line in _json_lines(err)), err
