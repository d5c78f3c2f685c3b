"""The tools of a running gateway: the catalog (built-ins + MCP servers, under the file's
policy) and, per turn, the routed bundle and its toolbox."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from gateway.metrics import Metrics
from gateway.tools.builtin import DEFAULT_POLICIES, builtin_tools
from gateway.tools.catalog import (
    Tool,
    ToolCaller,
    ToolPolicyCatalog,
    ToolsFile,
    load_tools_file,
)
from gateway.tools.routing import Bundle, select_bundle
from gateway.tools.runner import Approvals, TurnToolbox
from session_store.store import Store

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class Prepared:
    bundle: Bundle
    toolbox: TurnToolbox | None


class ToolService:
    def __init__(
        self,
        store: Store,
        *,
        tools_file: ToolsFile,
        metrics: Metrics,
        extra: Sequence[Tool] = (),
    ) -> None:
        self.file = tools_file
        self.metrics = metrics
        self.catalog = ToolPolicyCatalog(
            [*builtin_tools(store), *extra], defaults=DEFAULT_POLICIES, tools_file=tools_file
        )
        self.approvals: Approvals | None = None

    @classmethod
    def from_path(cls, store: Store, path: Path | None, *, metrics: Metrics) -> ToolService:
        return cls(store, tools_file=load_tools_file(path), metrics=metrics)

    def log_catalog(self) -> None:
        log.info(
            "tool_catalog",
            offered=self.catalog.names,
            left_out=[f"{x.name} ({x.reason})" for x in self.catalog.left_out],
        )

    def prepare(
        self,
        caller: ToolCaller,
        text: str,
        *,
        count: Callable[[str], int],
        max_tokens: int | None = None,
    ) -> Prepared:
        limit = self.file.max_schema_tokens if max_tokens is None else max_tokens
        bundle = select_bundle(self.catalog, caller, text, max_tokens=limit, count=count)
        self.metrics.routing_decisions.labels(bundle.decision.phase).inc()
        log.info(
            "tool_routing",
            **bundle.decision.to_json(),
            offered=list(bundle.names),
            schema_tokens=bundle.schema_tokens,
        )
        if not bundle.names:
            return Prepared(bundle=bundle, toolbox=None)
        toolbox = TurnToolbox(
            catalog=self.catalog,
            caller=caller,
            offered=frozenset(bundle.names),
            metrics=self.metrics,
            max_steps=self.file.max_steps,
            approvals=self.approvals,
        )
        return Prepared(bundle=bundle, toolbox=toolbox)
