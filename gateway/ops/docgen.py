"""The generated reference pages: configuration (from the settings classes), the CLI (from
the argparse parser), the metrics (from the registry) and the MCP tools (from the server).

``python -m gateway.ops.docgen`` writes them under ``docs/reference/``;
``python -m gateway.ops.docgen --check`` exits 1 when a committed page and the code disagree
(the docs tests run the same comparison).
"""

from __future__ import annotations

import argparse
import ast
import inspect
import re
import sys
import textwrap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from pydantic import SecretStr
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

from gateway.core.settings_groups import settings_groups

CONFIGURATION_PAGE = Path("docs/reference/configuration.md")
CLI_PAGE = Path("docs/reference/cli.md")
METRICS_PAGE = Path("docs/reference/metrics.md")
MCP_PAGE = Path("docs/reference/mcp.md")


def settings_classes() -> list[type[BaseSettings]]:
    """Every settings class whose fields are documented, in page order: the one list to extend
    when a surface brings its own settings."""
    from gateway.core.registry import all_settings_classes

    return all_settings_classes()


@dataclass(frozen=True)
class Setting:
    section: str
    name: str
    kind: str
    default: str
    meaning: str


_SECTION = re.compile(r"^\s*# -+ (.+?) -*$")


def _comments(cls: type[BaseSettings]) -> tuple[dict[str, str], dict[str, str]]:
    """From the class source: each field's ``#:`` comment, and the ``# --- name ---`` section
    it sits in."""
    lines, _ = inspect.getsourcelines(cls)
    tree = ast.parse(textwrap.dedent("".join(lines)))
    body = tree.body[0]
    assert isinstance(body, ast.ClassDef)
    comments: dict[str, str] = {}
    sections: dict[str, str] = {}
    title = _class_title(cls)
    markers = {i: m.group(1) for i, line in enumerate(lines, 1) if (m := _SECTION.match(line))}
    for node in body.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        name = node.target.id
        above = [markers[i] for i in markers if i < node.lineno]
        if above:
            title = re.sub(r"\s*\(.*\)$", "", above[-1]).strip()
        sections[name] = title
        collected: list[str] = []
        row = node.lineno - 2  # the line above, 0-based
        while row >= 0 and lines[row].strip().startswith("#:"):
            collected.insert(0, lines[row].strip()[2:].strip())
            row -= 1
        comments[name] = " ".join(collected)
    return comments, sections


def _class_title(cls: type) -> str:
    doc = (cls.__doc__ or cls.__name__).strip().splitlines()[0]
    return doc.rstrip(".")


def _kind(annotation: Any) -> str:
    args = [a for a in get_args(annotation) if a is not type(None)]
    if get_origin(annotation) is Literal:
        return " | ".join(f"`{a}`" for a in get_args(annotation))
    if get_origin(annotation) is list:
        return "comma-separated list"
    if args and len(args) < len(get_args(annotation)):  # X | None
        return _kind(args[0]) if len(args) == 1 else "value"
    if annotation is SecretStr:
        return "secret"
    names = {bool: "`true` | `false`", int: "integer", float: "number", str: "text"}
    if annotation in names:
        return names[annotation]
    if annotation is Path:
        return "path"
    return getattr(annotation, "__name__", str(annotation))


def _bounds(field: FieldInfo) -> str:
    signs = {
        "ge": ">=",
        "gt": ">",
        "le": "<=",
        "lt": "<",
        "min_length": "length >=",
        "max_length": "length <=",
    }
    parts = [
        f"{sign} {_number(getattr(item, attr))}"
        for item in field.metadata
        for attr, sign in signs.items()
        if getattr(item, attr, None) is not None
    ]
    return f" ({', '.join(parts)})" if parts else ""


def _number(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _default(field: FieldInfo) -> str:
    factory = field.default_factory
    if factory is not None:
        if factory is list:
            return "unset"
        doc = (factory.__doc__ or "").strip()
        return doc or f"computed by `{getattr(factory, '__name__', factory)}`"
    value = field.default
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, int | float):
        return f"`{_number(value)}`"
    return f"`{value}`"


def settings(classes: Sequence[type[BaseSettings]] | None = None) -> Iterator[Setting]:
    """Every documented setting, in the order the classes declare them."""
    for cls in settings_classes() if classes is None else classes:
        comments, sections = _comments(cls)
        # a settings group held as a field is a class of its own in the list
        groups = settings_groups(cls)
        for name, field in cls.model_fields.items():
            if name in groups:
                continue
            meaning = (field.description or comments.get(name, "")).replace("``", "`")
            yield Setting(
                section=sections.get(name, _class_title(cls)),
                name=field.alias or name.upper(),
                kind=_kind(field.annotation) + _bounds(field),
                default=_default(field),
                meaning=meaning,
            )


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_configuration(classes: Sequence[type[BaseSettings]] | None = None) -> str:
    out = [
        "# Configuration",
        "",
        "<!-- generated by `python -m gateway.ops.docgen` from the settings code: edit the",
        "     settings' comments, not this page -->",
        "",
        "Every setting is an environment variable, or a line in a `.env` file in the working",
        "directory. A bad or contradictory value stops start-up with exit code 2 and a message",
        "naming the setting. Lists are comma-separated; secrets are never logged.",
        "",
        "Tracing is configured by the standard OpenTelemetry variables (`OTEL_*`), read by",
        "the OpenTelemetry SDK rather than listed here: see",
        "[Trace messages with OpenTelemetry](../how-to/tracing.md).",
        "",
    ]
    section = None
    for item in settings(classes):
        if item.section != section:
            section = item.section
            out += ["", f"## {section[:1].upper()}{section[1:]}", ""]
            out += ["| variable | type | default | meaning |", "| --- | --- | --- | --- |"]
        cells = (f"`{item.name}`", item.kind, item.default, item.meaning)
        out.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(out).replace("\n\n\n", "\n\n") + "\n"


def _fixed_width(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=92)
    return parser


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    yield path, _fixed_width(parser)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _commands(child, (*path, name))


def cli_commands() -> list[tuple[str, ...]]:
    """Every command path the CLI accepts, e.g. ``("sessions", "list")``."""
    from gateway.ops.cli import _parser

    return [path for path, _ in _commands(_parser()) if path]


def render_cli() -> str:
    from gateway.ops.cli import _parser

    out = [
        "# Command line",
        "",
        "<!-- generated by `python -m gateway.ops.docgen` from the argparse parser -->",
        "",
        "Exit codes: 0 success, 2 bad configuration (the message names the setting),",
        "1 anything else. Every command reads the same settings as `gateway run`",
        "([configuration](configuration.md)).",
    ]
    for path, parser in _commands(_parser()):
        heading = "#" * min(len(path) + 1, 4)
        title = " ".join(("gateway", *path))
        out += ["", f"{heading} `{title}`" if path else "## Usage", ""]
        out += ["```text", parser.format_help().rstrip(), "```"]
    return "\n".join(out) + "\n"


def metrics() -> list[tuple[str, str, str, tuple[str, ...]]]:
    """(exposed name, type, help, labels) of every metric a gateway registers."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.metrics import MetricWrapperBase

    from gateway.core.metrics import Metrics
    from gateway.retention.service import RetentionMetrics
    from gateway.schedules.worker import ScheduleMetrics

    found: list[tuple[str, str, str, tuple[str, ...]]] = []
    groups = [
        Metrics(),
        ScheduleMetrics(CollectorRegistry()),
        RetentionMetrics(CollectorRegistry()),
    ]
    for value in [v for group in groups for v in vars(group).values()]:
        if isinstance(value, MetricWrapperBase):
            kind = str(value._type)
            name = value._name + ("_total" if kind == "counter" else "")
            labels = tuple(str(label) for label in value._labelnames)
            found.append((str(name), kind, str(value._documentation), labels))
    return sorted(found)


def render_metrics() -> str:
    out = [
        "# Metrics",
        "",
        "<!-- generated by `python -m gateway.ops.docgen` from gateway's metrics registry -->",
        "",
        "`GET /metrics` serves these in the Prometheus text format (behind the admin token",
        "when `GATEWAY_METRICS_AUTH=true`). Counters and histograms are per process: scrape",
        "every replica. Gauges that read the shared database (deliveries by status, the oldest",
        "pending delivery, active sessions) show the same value on every replica.",
        "",
        "| metric | type | labels | meaning |",
        "| --- | --- | --- | --- |",
    ]
    for name, kind, doc, labels in metrics():
        shown = ", ".join(f"`{label}`" for label in labels) or "-"
        out.append(f"| `{name}` | {kind} | {shown} | {_cell(doc)} |")
    return "\n".join(out) + "\n"


def mcp_tools() -> list[tuple[str, str, list[str]]]:
    """(name, description, argument names) of every MCP tool ``/mcp`` and ``gateway mcp``
    offer (one list: ``gateway.runtime.mcp.register_tools``). The tools are only registered
    here, never called, so nothing behind them is needed."""
    from types import SimpleNamespace

    from gateway.http.mcp import new_mcp_server
    from gateway.runtime.mcp import register_tools

    server = new_mcp_server()
    register_tools(
        server,
        sessions=SimpleNamespace(ops=None),  # type: ignore[arg-type]
        knowledge=SimpleNamespace(store=None),  # type: ignore[arg-type]
        profiles=SimpleNamespace(),  # type: ignore[arg-type]
        schedules=SimpleNamespace(),  # type: ignore[arg-type]
    )
    found = []
    for tool in server._tool_manager.list_tools():
        required = set(tool.parameters.get("required", ()))
        arguments = [
            f"`{name}`" if name in required else f"`{name}`?"
            for name in tool.parameters.get("properties", {})
        ]
        found.append((tool.name, " ".join((tool.description or "").split()), arguments))
    return found


def render_mcp() -> str:
    out = [
        "# MCP tools",
        "",
        "<!-- generated by `python -m gateway.ops.docgen` from the MCP server's tools -->",
        "",
        "Other agents follow and take part in sessions through MCP: `/mcp` (streamable HTTP,",
        "stateless, so any replica answers) or `gateway mcp` (stdio). `/mcp` needs",
        "`Authorization: Bearer $GATEWAY_ADMIN_TOKEN` (without a token: loopback clients only).",
        "A session is named by its id or its key (`platform:scope:chat:thread`). Arguments",
        "marked `?` are optional.",
        "",
        "| tool | arguments | what it does |",
        "| --- | --- | --- |",
    ]
    for name, description, arguments in mcp_tools():
        shown = ", ".join(arguments) or "-"
        out.append(f"| `{name}` | {shown} | {_cell(description)} |")
    return "\n".join(out) + "\n"


def pages() -> dict[Path, str]:
    return {
        CONFIGURATION_PAGE: render_configuration(),
        CLI_PAGE: render_cli(),
        METRICS_PAGE: render_metrics(),
        MCP_PAGE: render_mcp(),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway.ops.docgen", description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if a page is out of date")
    parser.add_argument("--root", type=Path, default=Path("."), help="the repository root")
    args = parser.parse_args(argv)
    stale: list[str] = []
    for page, text in pages().items():
        path = args.root / page
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(str(page))
        else:
            path.write_text(text, encoding="utf-8")
    for name in stale:
        print(f"{name} is out of date: run python -m gateway.ops.docgen", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
