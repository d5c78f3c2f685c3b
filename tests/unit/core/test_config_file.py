"""The config file is read once and each capability gets its own sections."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.core.config_file import SETTING, load_config_file, parse_config_text
from gateway.core.errors import ConfigError


def test_sections_are_handed_out_and_absent_ones_are_empty() -> None:
    config = parse_config_text('[places]\n"*" = "default"\n[prices."m"]\ninput = 1.0\n')
    assert dict(config.section("places")) == {"*": "default"}
    assert dict(config.section("budgets")) == {}
    assert not config.has_tools_sections()


@pytest.mark.parametrize(
    ("text", "entry"),
    [("[profile.x]\nmodel = 'a'\n", "[profile]"), ("places = 3\n", "places"), ("[x", "TOML")],
)
def test_a_bad_file_names_the_entry(text: str, entry: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config_text(text)
    assert caught.value.setting == SETTING and entry in str(caught.value)


def test_unset_is_an_empty_file_and_an_unreadable_one_is_an_error(tmp_path: Path) -> None:
    assert load_config_file(None).tables == {}
    with pytest.raises(ConfigError, match="cannot read"):
        load_config_file(tmp_path / "missing.toml")
