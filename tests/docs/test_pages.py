"""The README stays a short front page, and what the pages tell people to type is real: every
`gateway` command parses, every setting named in a snippet exists, every link resolves."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.core import tracing
from gateway.ops import docgen
from gateway.ops.cli import _parser
from testsupport.paths import REPO

ROOT = REPO
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").rglob("*.md"))
FRONT = [README, ROOT / "CONTRIBUTING.md", *PAGES]
HISTORY = ROOT / "CHANGELOG.md"
EXAMPLES = ROOT / "docs" / "examples"

# shell variables the snippets use that are not gateway settings
NOT_SETTINGS = {"PYTHONPATH", "PG_BIN", "TOKEN", "POSTGRES_PASSWORD", "GATEWAY_URL"}


def test_the_readme_is_a_short_front_page() -> None:
    text = README.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= 200
    assert "pip install -e . && gateway run" in lines[:6]
    assert "pip install -e '.[test]' && pytest" in lines[:6]
    assert "docs/assets/web-chat.png" in text and (ROOT / "docs/assets/web-chat.png").is_file()


@pytest.mark.parametrize("path", FRONT, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_history_in_the_pages(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert not re.search(r"\bissues? #?\d+", text, re.I), "history belongs in CHANGELOG.md"
    for row in (line for line in text.splitlines() if line.startswith("|")):
        cells = row.lower()
        assert not re.search(r"\|\s*(before|after)\b", cells), row
        assert not re.search(r"\b(second|third) pass\b", cells), row


def test_the_changelog_says_why_not_which_ticket() -> None:
    assert not re.search(r"\bissues? #?\d+", HISTORY.read_text(encoding="utf-8"), re.I)


def test_the_readme_shows_the_model_example_files() -> None:
    text = README.read_text(encoding="utf-8")
    for name in ("openai.env", "ollama.env"):
        assert (EXAMPLES / name).read_text(encoding="utf-8") in text


def test_the_readme_links_resolve() -> None:
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text(encoding="utf-8")):
        if "://" not in target:
            assert (ROOT / target).exists(), target


def _code_blocks(text: str) -> Iterator[tuple[str, str]]:
    for match in re.finditer(r"^ *```(\w*)\n(.*?)^ *```", text, re.S | re.M):
        yield match.group(1), match.group(2)


def _shell_lines() -> Iterator[tuple[Path, str]]:
    for path in FRONT:
        for language, body in _code_blocks(path.read_text(encoding="utf-8")):
            if language in ("bash", "sh", "console", ""):
                for line in body.splitlines():
                    yield path, line.split(" #", 1)[0].strip()


def test_every_gateway_command_in_the_pages_parses() -> None:
    parser = _parser()
    seen = 0
    for path, line in _shell_lines():
        for part in re.split(r"&&|\|\||;|\|", line):
            try:
                words = shlex.split(part)
            except ValueError:  # a quote opened in another part of the line
                words = part.split()
            words = [w.strip("'\"") for w in words if "=" not in w or w.startswith("-")]
            if not words or Path(words[0]).name != "gateway" or len(words) < 2:
                continue
            seen += 1
            try:
                parser.parse_args(words[1:])
            except SystemExit:
                pytest.fail(f"{path.relative_to(ROOT)}: `{part.strip()}` is not a gateway command")
    assert seen > 20


def test_every_setting_named_in_a_snippet_exists() -> None:
    known = {s.name for s in docgen.settings()}
    named: set[str] = set()
    for _, line in _shell_lines():
        named.update(re.findall(r"(?:^|\s)([A-Z][A-Z0-9_]{2,})=", line))
    for env in [*EXAMPLES.glob("*.env"), ROOT / "deploy" / "gateway.env.example"]:
        for line in env.read_text(encoding="utf-8").splitlines():
            if re.match(r"^#? ?[A-Z][A-Z0-9_]+=", line):
                named.add(line.lstrip("# ").split("=", 1)[0])
    # the OpenTelemetry variables are read by its SDK, not settings (docs/how-to/tracing.md)
    unknown = sorted(named - known - NOT_SETTINGS - set(tracing.VARIABLES))
    assert not unknown, f"not settings: {unknown}"
    assert "GATEWAY_ALLOWED_HOSTS" in named


def test_contributing_names_the_test_folders_that_exist() -> None:
    # every tests/... folder the guide names exists, and every folder of tests/ is named
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`(tests/[a-z0-9_]+)/", text))
    present = {
        f"tests/{p.name}" for p in (ROOT / "tests").iterdir() if (p / "__init__.py").exists()
    }
    assert named == present
    for folder in re.findall(r"`(tests/[a-z0-9_]+/[a-z0-9_]+)/`", text):
        assert (ROOT / folder).is_dir(), folder


def test_every_page_the_code_names_exists() -> None:
    """What the gateway prints (doctor's fixes, setup's guide, check messages) names pages by
    their path in the repository: each is a real page."""
    named = 0
    for source in [*(ROOT / "gateway").rglob("*.py"), *(ROOT / "adapters").rglob("*.py")]:
        for page in re.findall(r"docs/[\w/-]+\.md", source.read_text(encoding="utf-8")):
            named += 1
            assert (ROOT / page).is_file(), f"{source.relative_to(ROOT)} names {page}"
    assert named > 5


INCLUDE = re.compile(r'^ *--8<-- "([^"]+)"\s*$', re.M)


def _linked(page: Path) -> set[Path]:
    text = page.read_text(encoding="utf-8")
    return {
        (page.parent / target).resolve()
        for target in re.findall(r"\]\(([^)\s#]+)\)", text)
        if "://" not in target
    }


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_included_file_is_also_linked(page: Path) -> None:
    """A page read as a plain file (on a forge, in an editor) shows an include line, not the
    example: each ``--8<--`` include has a link to the same file in the same page."""
    linked = _linked(page)
    for included in INCLUDE.findall(page.read_text(encoding="utf-8")):
        assert (ROOT / included).is_file(), included
        assert (ROOT / included).resolve() in linked, (
            f"{page.relative_to(ROOT)} includes {included} without a link to it"
        )


def test_the_pages_include_examples() -> None:
    assert sum(len(INCLUDE.findall(p.read_text(encoding="utf-8"))) for p in PAGES) > 20
