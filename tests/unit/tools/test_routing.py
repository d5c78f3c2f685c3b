"""The routing table on real sample messages, and the schema budget of a bundle."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
import structlog

from gateway.agents.prompt import estimate_text
from gateway.tools.builtin import DEFAULT_POLICIES
from gateway.tools.catalog import (
    Tool,
    ToolCaller,
    ToolPolicy,
    ToolPolicyCatalog,
    ToolsFile,
    ToolSpec,
    parse_entry,
)
from gateway.tools.routing import READ_ONLY_BUNDLE, route, select_bundle

FILES_READ = parse_entry(
    "files.read_file",
    {"domains": ["files"], "operation": "read", "risk": "low", "aliases": ["open", "show file"]},
)
FILES_WRITE = parse_entry(
    "files.write_file",
    {
        "domains": ["files"],
        "operation": "write",
        "risk": "medium",
        "confirm": True,
        "aliases": ["save", "write to"],
    },
)
TICKETS = parse_entry(
    "jira.create_issue",
    {
        "domains": ["tickets"],
        "operation": "write",
        "risk": "medium",
        "confirm": True,
        "aliases": ["ticket", "jira", "file a bug"],
    },
)
POLICIES: list[ToolPolicy] = [*DEFAULT_POLICIES.values(), FILES_READ, FILES_WRITE, TICKETS]

# (message as people write them, expected domains, expected phase)
TABLE = [
    ("what time is it in Tokyo right now?", ("time",), "lookup"),
    ("what did Dana say earlier about the migration?", ("history",), "lookup"),
    ("can you search this thread for the staging password rotation", ("history",), "lookup"),
    ("summarise my other threads from this week", ("sessions",), "lookup"),
    ("what was decided in that thread about the Q3 budget?", ("sessions",), "lookup"),
    ("open config/settings.yaml and tell me the port", ("files",), "lookup"),
    ("please save this as notes/standup.md", ("files",), "act"),
    ("file a bug: login page 500s on Safari", ("tickets",), "act"),
    ("Create a JIRA ticket for the flaky test", ("tickets",), "act"),
    ("thanks, that's all", (), "explore"),
    ("hello there!", (), "explore"),
    ("Какая погода?", (), "explore"),
]


@pytest.mark.parametrize(("text", "domains", "phase"), TABLE, ids=[t[0][:30] for t in TABLE])
def test_routing_table_on_sample_messages(text: str, domains: tuple[str, ...], phase: str) -> None:
    decision = route(text, POLICIES)
    assert decision.phase == phase, decision
    if phase == "explore":
        assert decision.confidence < 0.5
    else:
        assert set(domains) <= set(decision.domains), decision
        assert decision.confidence >= 0.5


async def _noop(args: Mapping[str, Any], caller: ToolCaller) -> str:
    return ""


def _tool(name: str, description: str = "does a thing") -> Tool:
    params = {"type": "object", "properties": {"x": {"type": "string", "description": "x"}}}
    return Tool(spec=ToolSpec(name=name, description=description, parameters=params), handler=_noop)


CALLER = ToolCaller(
    session_id=1, platform="web", scope="local", chat_id="general", thread_id="t", user_id="u"
)


def catalog() -> ToolPolicyCatalog:
    names = [p.name for p in POLICIES]
    defaults = {p.name: p for p in POLICIES}
    return ToolPolicyCatalog([_tool(n) for n in names], defaults=defaults, tools_file=ToolsFile())


def test_low_confidence_offers_a_read_only_bundle_never_all_tools() -> None:
    bundle = select_bundle(
        catalog(), CALLER, "hello there!", max_tokens=10_000, count=estimate_text
    )
    assert bundle.decision.phase == "explore"
    assert bundle.names and len(bundle.names) <= READ_ONLY_BUNDLE
    assert len(bundle.names) < len(POLICIES)
    assert not {"files.write_file", "jira.create_issue"} & set(bundle.names)


def test_a_confident_turn_offers_its_domains_tools_only() -> None:
    bundle = select_bundle(
        catalog(), CALLER, "file a bug about the login page", max_tokens=10_000, count=estimate_text
    )
    assert bundle.names == ("jira.create_issue",)
    assert bundle.schemas[0]["function"]["name"] == "jira__create_issue"  # OpenAI-safe


def test_a_bundle_over_its_schema_budget_is_trimmed_by_priority_and_logged() -> None:
    policies = [
        parse_entry(
            f"kb.t{n}", {"domains": ["kb"], "operation": "read", "risk": "low", "priority": n}
        )
        for n in range(10)
    ]
    cat = ToolPolicyCatalog(
        [_tool(p.name, "x " * 40) for p in policies],
        defaults={p.name: p for p in policies},
        tools_file=ToolsFile(),
    )
    full = select_bundle(cat, CALLER, "look in the kb", max_tokens=100_000, count=estimate_text)
    per_tool = full.schema_tokens // len(full.names)
    with structlog.testing.capture_logs() as logs:
        bundle = select_bundle(
            cat, CALLER, "look in the kb", max_tokens=per_tool * 3 + 1, count=estimate_text
        )
    assert bundle.names == ("kb.t9", "kb.t8", "kb.t7")  # highest priority first
    assert bundle.schema_tokens <= per_tool * 3 + 1
    [trim] = [e for e in logs if e["event"] == "tool_bundle_trimmed"]
    assert trim["kept"] == list(bundle.names) and len(trim["trimmed"]) == 7
