"""The composition root lists a turn's stages: a feature that is off is not in the list."""

from __future__ import annotations

from gateway.agents.base import EchoAgent, Turn
from gateway.core.domain import Reply
from gateway.runtime.gateway import Gateway
from session_store.store import Store
from testsupport.harness import make_settings


class ToolUser:
    """An agent that is offered tools (it does not say otherwise)."""

    name = "tool-user"

    async def respond(self, turn: Turn) -> list[Reply]:
        return [Reply(text="ok")]


def stage_names(database_url: str, store: Store, agent: object, **settings: object) -> list[str]:
    gateway = Gateway(
        make_settings(database_url, GATEWAY_WEB_CHAT=False, **settings),
        store=store,
        agent=agent,  # type: ignore[arg-type]
        adapters=[],
    )
    return [stage.name for stage in gateway.turns.stages]


async def test_tools_are_a_stage_only_when_configured_and_the_agent_calls_them(
    database_url: str, store: Store
) -> None:
    assert stage_names(database_url, store, ToolUser()) == [
        "profile",
        "commands",
        "streaming",
        "tools",
        "context",
        "knowledge",
        "typing",
    ]
    without = ["profile", "commands", "streaming", "context", "knowledge", "typing"]
    assert stage_names(database_url, store, EchoAgent()) == without  # uses_tools = False
    assert stage_names(database_url, store, ToolUser(), GATEWAY_TOOLS=False) == without
