"""A profile's tool allow-list narrows the tools policy and never widens it; the tools file's
sections may live in the config file."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gateway.core.config_file import parse_config_text
from gateway.core.errors import ConfigError
from gateway.tools.builtin import DEFAULT_POLICIES
from gateway.tools.catalog import ToolPolicyCatalog, parse_tools_file, tools_file_for
from tests.unit.tools.test_catalog import FILE, caller, tool

NAMES = ["files.read_file", "files.delete_file", "search_thread", "current_time"]


def catalog() -> ToolPolicyCatalog:
    tools = [tool(n) for n in NAMES]
    return ToolPolicyCatalog(tools, defaults=DEFAULT_POLICIES, tools_file=parse_tools_file(FILE))


@pytest.mark.parametrize(
    ("patterns", "offered"),
    [
        # no profile limit: the policy alone (the chat's allow-list, the global deny)
        (None, ["files.read_file", "search_thread"]),
        # everything the profile could name: still never more than the policy
        (("*",), ["files.read_file", "search_thread"]),
        (("files.*",), ["files.read_file"]),
        # a tool the policy denies everyone, or keeps to the web: the profile cannot add it
        (("files.delete_file", "current_time"), []),
        ((), []),
    ],
)
def test_a_profile_narrows_the_policy_and_never_widens_it(
    patterns: tuple[str, ...] | None, offered: list[str]
) -> None:
    c = catalog()
    here = replace(caller(), profile_tools=patterns)
    assert c.available(here) == offered
    assert set(offered) <= set(c.available(caller()))
    # the per-call check says the same: a tool outside the profile is refused when called
    if patterns is not None and "files.*" not in patterns and "*" not in patterns:
        assert c.check("files.read_file", here) == "not in this place's profile"


def test_profile_limit_never_wins_over_the_policy_on_any_surface() -> None:
    c = catalog()
    for platform, chat in (("telegram", "-100"), ("telegram", "-200"), ("web", "general")):
        for patterns in (("*",), ("files.*",), ("current_time",), ()):
            here = replace(caller(platform=platform, chat=chat), profile_tools=patterns)
            assert set(c.available(here)) <= set(c.available(caller(platform=platform, chat=chat)))


def test_the_tools_sections_may_live_in_the_config_file(tmp_path: Path) -> None:
    config = parse_config_text(FILE + '\n[profiles.a]\ntools = ["files.*"]\n')
    from_config = tools_file_for(None, config)
    assert from_config == parse_tools_file(FILE)
    # GATEWAY_TOOLS_FILE keeps working when the config file has no tools sections
    path = tmp_path / "tools.toml"
    path.write_text(FILE)
    assert tools_file_for(path, parse_config_text("[profiles.a]\n")) == from_config
    # both at once: which would win is unclear, so it is refused
    with pytest.raises(ConfigError, match="GATEWAY_TOOLS_FILE: the config file has tools"):
        tools_file_for(path, config)


def test_a_bad_tools_section_in_the_config_file_names_the_config_file() -> None:
    config = parse_config_text('[access]\ndeny = "x"\n')
    with pytest.raises(ConfigError, match=r"GATEWAY_CONFIG_FILE: \[access\]\.deny"):
        tools_file_for(None, config)
