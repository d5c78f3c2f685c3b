"""How tool calls, results and routing read in a transcript (``gateway sessions show``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def tool_lines(role: str, metadata: Mapping[str, Any]) -> list[str]:
    """Extra lines under a message: the calls an assistant message made, a result's call id
    and outcome, and the routing decision and offered tools of an answer."""
    lines: list[str] = []
    calls = metadata.get("tool_calls")
    if role == "assistant" and isinstance(calls, list):
        for c in calls:
            fn = c.get("function") if isinstance(c, Mapping) else None
            if isinstance(fn, Mapping):
                args = _short(str(fn.get("arguments", "")), 120)
                lines.append(f"    -> call {c.get('id')}: {fn.get('name')}({args})")
    if role == "tool" and metadata.get("tool_call_id"):
        lines.append(
            f"    <- result of {metadata.get('tool_call_id')} ({metadata.get('tool_name')}): "
            f"{metadata.get('outcome')}, {metadata.get('duration_ms')} ms"
        )
    routing = metadata.get("routing")
    if isinstance(routing, Mapping):
        domains = ",".join(str(d) for d in routing.get("domains", [])) or "-"
        lines.append(
            f"    routing: phase={routing.get('phase')} domains={domains} "
            f"confidence={routing.get('confidence')}"
        )
        offered = metadata.get("offered_tools")
        if isinstance(offered, list):
            lines.append(f"    offered tools: {', '.join(map(str, offered)) or '(none)'}")
    approval = metadata.get("approval")
    if isinstance(approval, Mapping):
        # the card message; the request's state lives in tool_approvals (see /ops)
        lines.append(f"    approval card {approval.get('id')} for {approval.get('tool')}")
    return lines
