"""The tools file and the fail-closed catalog: parsing, layering, deny wins, left-out tools."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import structlog

from gateway.core.errors import ConfigError
from gateway.tools.builtin import DEFAULT_POLICIES
from gateway.tools.catalog import (
    Tool,
    ToolCaller,
    ToolPolicyCatalog,
    ToolSpec,
    load_tools_file,
    parse_tools_file,
)


async def _noop(args: Mapping[str, Any], caller: ToolCaller) -> str:
    return "ok"


def tool(name: str) -> Tool:
    return Tool(
        spec=ToolSpec(name=name, description=name, parameters={"type": "object"}, source="test"),
        handler=_noop,
    )


def caller(platform: str = "telegram", chat: str = "-100", user: str | None = "42") -> ToolCaller:
    return ToolCaller(
        session_id=1, platform=platform, scope="bot", chat_id=chat, thread_id="7", user_id=user
    )


FILE = """
[mcp.files]
command = ["python", "-m", "files_server"]
args = ["--root", "/srv"]
env = { FILES_MODE = "ro" }
include = ["read_*", "list_*", "delete_*"]
exclude = ["list_secrets"]
timeout = 5

[mcp.remote]
url = "http://127.0.0.1:9000/mcp"
headers = { Authorization = "Bearer x" }

[tools."files.read_file"]
domains = ["files"]
operation = "read"
risk = "low"
aliases = ["open", "show file"]

[tools."files.delete_file"]
domains = ["files"]
operation = "destructive"
risk = "high"
confirm = false            # destructive always confirms, whatever this says

[tools."files.broken"]
domains = "files"          # not a list: malformed, so the tool is left out
operation = "read"
risk = "low"

[tools."files.typo"]
domains = ["files"]
operation = "read"
risk = "low"
confirn = true             # unknown key: malformed

[tools.current_time]
surfaces = ["web"]         # overrides the built-in default's surfaces only

[access]
deny = ["files.delete_*"]

[access.chats."telegram:-100"]
allow = ["files.*", "search_thread"]

[access.users."telegram:666"]
deny = ["*"]

[settings]
max_steps = 3
timeout_seconds = 2.5

[approvers]
"telegram:-100" = ["telegram:7"]
"""


def test_the_tools_file_parses_servers_entries_access_and_settings() -> None:
    parsed = parse_tools_file(FILE)
    files, remote = parsed.servers
    assert files.command == ("python", "-m", "files_server", "--root", "/srv")
    assert files.env == {"FILES_MODE": "ro"} and files.call_timeout == 5.0
    assert files.wants("read_file") and not files.wants("list_secrets")
    assert not files.wants("write_file")
    assert remote.url == "http://127.0.0.1:9000/mcp" and remote.headers["Authorization"]
    assert parsed.max_steps == 3 and parsed.timeout_seconds == 2.5
    assert parsed.deny == ("files.delete_*",)
    assert parsed.chats["telegram:-100"].allow == ("files.*", "search_thread")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("[mcp.x]\n", "exactly one of command or url"),
        ('[mcp.x]\ncommand = "a"\nurl = "http://h"\n', "exactly one"),
        ('[mcp.x]\nurl = "ftp://h"\n', "http(s) URL"),
        ('[mcp.x]\nurl = "http://h"\nbogus = 1\n', "unknown keys"),
        ("[wat]\n", "unknown top-level"),
        ("[settings]\nmax_steps = 0\n", "positive"),
        ("not toml =", "not valid TOML"),
    ],
)
def test_a_structurally_bad_file_is_a_config_error_naming_the_setting(
    text: str, fragment: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_tools_file(text)
    assert info.value.setting == "GATEWAY_TOOLS_FILE" and fragment in str(info.value)


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_tools_file(tmp_path / "nope.toml")


def test_fail_closed_tools_without_a_valid_entry_are_left_out_and_logged() -> None:
    tools = [tool(n) for n in ("files.read_file", "files.broken", "files.typo", "files.nothing")]
    with structlog.testing.capture_logs() as logs:
        catalog = ToolPolicyCatalog(tools, defaults={}, tools_file=parse_tools_file(FILE))
    assert catalog.names == ["files.read_file"]
    reasons = {x.name: x.reason for x in catalog.left_out}
    assert reasons["files.nothing"] == "no policy entry"
    assert "domains must be a list" in reasons["files.broken"]
    assert "unknown keys ['confirn']" in reasons["files.typo"]
    logged = {e["tool"] for e in logs if e["event"] == "tool_left_out"}
    assert logged == {"files.broken", "files.typo", "files.nothing"}
    for name in ("files.broken", "files.typo", "files.nothing", "never.heard.of"):
        assert catalog.check(name, caller()) == "no valid policy entry"


def test_destructive_tools_always_confirm() -> None:
    catalog = ToolPolicyCatalog(
        [tool("files.delete_file")], defaults={}, tools_file=parse_tools_file(FILE)
    )
    policy = catalog.policy("files.delete_file")
    assert policy is not None and policy.confirm is True


def test_layers_defaults_then_file_then_chat_and_sender_lists_and_deny_always_wins() -> None:
    parsed = parse_tools_file(FILE)
    tools = [tool("files.read_file"), tool("files.delete_file"), tool("search_thread")]
    tools.append(tool("current_time"))
    catalog = ToolPolicyCatalog(tools, defaults=DEFAULT_POLICIES, tools_file=parsed)
    # the file overrode one field of a default and kept the rest
    current = catalog.policy("current_time")
    assert current is not None and current.surfaces == frozenset({"web"})
    assert current.domains == ("time",) and current.source == "file"
    # chat allow-list: only files.* and search_thread in telegram:-100
    assert catalog.available(caller()) == ["files.read_file", "search_thread"]
    # global deny beats the chat's allow of files.*
    assert catalog.check("files.delete_file", caller()) == "denied for everyone"
    # per-sender deny of everything beats the chat's allow
    assert catalog.available(caller(user="666")) == []
    # another chat: no allow-list; current_time is web-only by the file's override
    assert catalog.available(caller(chat="-200")) == ["files.read_file", "search_thread"]
    assert catalog.available(caller(platform="web", chat="general")) == [
        "current_time",
        "files.read_file",
        "search_thread",
    ]
    assert catalog.approvers_for("files.read_file", caller()) == ("telegram:7",)
    assert catalog.approvers_for("files.read_file", caller(chat="-200")) == ()


def test_built_in_tools_are_offered_under_their_defaults_without_a_file() -> None:
    from gateway.tools.catalog import ToolsFile

    names = ["search_thread", "list_my_sessions", "read_session", "current_time"]
    catalog = ToolPolicyCatalog(
        [tool(n) for n in names], defaults=DEFAULT_POLICIES, tools_file=ToolsFile()
    )
    assert catalog.available(caller()) == sorted(names) and catalog.left_out == []
    assert all(p.operation == "read" for n in names if (p := catalog.policy(n)))


def test_gateway_run_with_a_bad_tools_file_exits_2_naming_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from gateway.ops.cli import main

    bad = tmp_path / "tools.toml"
    bad.write_text("[mcp.files]\n# neither command nor url\n")
    monkeypatch.chdir(tmp_path)  # no .env from the developer's working directory
    monkeypatch.setenv("GATEWAY_TOOLS_FILE", str(bad))
    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody@127.0.0.1:9/never")
    assert main(["run"]) == 2
    err = capsys.readouterr().err
    assert "GATEWAY_TOOLS_FILE" in err and "exactly one of command or url" in err
