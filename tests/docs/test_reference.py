"""The generated reference pages match the code they are generated from."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings

from gateway.ops import docgen
from testsupport.paths import REPO

ROOT = REPO


def test_committed_reference_pages_match_the_code() -> None:
    for page, text in docgen.pages().items():
        committed = (ROOT / page).read_text(encoding="utf-8")
        assert committed == text, f"{page} is out of date: run python -m gateway.ops.docgen"


def test_every_setting_has_a_meaning_and_appears_once() -> None:
    names = [s.name for s in docgen.settings()]
    assert len(names) == len(set(names))
    assert not [s.name for s in docgen.settings() if not s.meaning]
    page = (ROOT / docgen.CONFIGURATION_PAGE).read_text(encoding="utf-8")
    for name in names:
        assert f"| `{name}` |" in page


def test_the_check_fails_on_a_stale_page(tmp_path: Path) -> None:
    for page, text in docgen.pages().items():
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / page).write_text(text, encoding="utf-8")
    assert docgen.main(["--check", "--root", str(tmp_path)]) == 0
    stale = tmp_path / docgen.CONFIGURATION_PAGE
    stale.write_text(stale.read_text().replace("DATABASE_URL", "DB_URL"), encoding="utf-8")
    assert docgen.main(["--check", "--root", str(tmp_path)]) == 1


class _SurfaceSettings(BaseSettings):
    """A surface's own settings."""

    # --- a surface ----------------------------------------------------------------------
    #: the surface's token
    surface_token: str | None = Field(default=None, alias="SURFACE_TOKEN")
    surface_limit: int = Field(default=3, ge=1, alias="SURFACE_LIMIT", description="at most")


def test_a_settings_class_renders_its_section_types_defaults_and_meanings() -> None:
    text = docgen.render_configuration([_SurfaceSettings])
    assert "## A surface" in text
    assert "| `SURFACE_TOKEN` | text | unset | the surface's token |" in text
    assert "| `SURFACE_LIMIT` | integer (>= 1) | `3` | at most |" in text


def test_every_cli_command_is_documented() -> None:
    page = (ROOT / docgen.CLI_PAGE).read_text(encoding="utf-8")
    commands = docgen.cli_commands()
    assert ("sessions", "list") in commands and ("kb", "assign") in commands
    for path in commands:
        assert f"`gateway {' '.join(path)}`" in page


def test_every_metric_is_documented() -> None:
    page = (ROOT / docgen.METRICS_PAGE).read_text(encoding="utf-8")
    names = [name for name, *_ in docgen.metrics()]
    assert "gateway_turns_total" in names and "gateway_worker_up" in names
    for name in names:
        assert f"| `{name}` |" in page


def test_every_mcp_tool_is_documented() -> None:
    page = (ROOT / docgen.MCP_PAGE).read_text(encoding="utf-8")
    names = [name for name, *_ in docgen.mcp_tools()]
    assert "get_session_delta" in names and "kb_search" in names
    for name in names:
        assert f"| `{name}` |" in page


def test_the_tools_file_reference_names_every_key_and_default() -> None:
    from gateway.tools import catalog

    page = (ROOT / "docs/reference/tools-file.md").read_text(encoding="utf-8")
    for key in catalog._ENTRY_KEYS:
        assert f"`{key}`" in page, key
    defaults = {
        "max_steps": catalog.DEFAULT_MAX_STEPS,
        "timeout_seconds": catalog.DEFAULT_TIMEOUT,
        "max_output_chars": catalog.DEFAULT_MAX_OUTPUT_CHARS,
        "max_schema_tokens": catalog.DEFAULT_SCHEMA_TOKENS,
    }
    for key, value in defaults.items():
        assert f"| `{key}` |" in page and f"| `{value:g}` |" in page, key
