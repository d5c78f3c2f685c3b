"""The stages every turn runs, in order, built from what the composition root wired
(``gateway.turns.stage``): a feature that is off is not in the list."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from gateway.people.links import LinkCommand
from gateway.profiles.stage import ProfileCommand, ProfileStage
from gateway.turns.stage import Stage
from gateway.turns.stages.commands import CommandsStage
from gateway.turns.stages.context import ContextStage
from gateway.turns.stages.files import ImagesStage, VoiceStage
from gateway.turns.stages.knowledge import KnowledgeStage
from gateway.turns.stages.provider import ProviderStatusStage
from gateway.turns.stages.streaming import StreamingStage
from gateway.turns.stages.tools import ToolsStage, offers_tools
from gateway.turns.stages.typing import TypingStage
from gateway.usage.budget_stage import BudgetStage
from gateway.usage.commands import UsageCommand
from gateway.usage.usage_stage import UsageStage

if TYPE_CHECKING:
    from gateway.agents.base import Agent
    from gateway.core.metrics import Metrics
    from gateway.core.ports import Transport
    from gateway.core.settings import Settings
    from gateway.files.voice import VoiceJobs
    from gateway.knowledge.service import Knowledge
    from gateway.outbox.streaming import Streams
    from gateway.profiles.service import Profiles
    from gateway.schedules.room import ScheduleRoom
    from gateway.tools.service import ToolService
    from gateway.turns.context import ContextAssembler
    from gateway.turns.summaries import SummaryWorker
    from gateway.usage.service import UsageService
    from session_store.store import Store


class Wired(Protocol):
    """What the stages are built from (``gateway.runtime.gateway.Gateway`` has it all)."""

    settings: Settings
    store: Store
    agent: Agent
    metrics: Metrics
    transports: dict[str, Transport]
    profiles: Profiles
    usage: UsageService
    schedule_room: ScheduleRoom
    voice: VoiceJobs | None
    streams: Streams
    tools: ToolService | None
    context: ContextAssembler
    summaries: SummaryWorker
    knowledge: Knowledge


def turn_stages(gw: Wired) -> list[Stage]:
    """Tools come before the context, which leaves room for their schemas; the knowledge
    base fills what the context left."""
    settings = gw.settings
    stages: list[Stage] = [
        ProfileStage(gw.profiles),
        CommandsStage(
            gw.store.turns,
            gw.context.policy,
            handlers=[
                ProfileCommand(gw.profiles, tools_on=gw.tools is not None),
                UsageCommand(gw.usage),
                LinkCommand(gw.usage),
                gw.schedule_room.command,
            ],
            lifecycle=gw.store.sessions,
        ),
        # charges every model call (its ``after`` runs last); budgets before any cost
        UsageStage(gw.usage, identify=getattr(gw.agent, "sends_user", False) is True),
        BudgetStage(gw.usage),
        VoiceStage(gw.voice, gw.transports, wait_seconds=settings.gateway_lease_seconds / 2),
        StreamingStage(gw.streams, gw.agent),
    ]
    if gw.tools is not None and offers_tools(gw.agent):
        stages.append(ToolsStage(gw.tools, count=gw.context.counter.text))
    stages += [
        ContextStage(gw.context, summaries=gw.summaries, metrics=gw.metrics, agent=gw.agent),
        KnowledgeStage(
            gw.knowledge.turns,
            gw.transports,
            wait_seconds=settings.gateway_lease_seconds / 2,
        ),
        TypingStage(gw.transports, budget=gw.streams.budget),
        ProviderStatusStage(gw.transports, after=settings.agent_status_after_seconds),
    ]
    if "images" not in settings.agent_inline_files:
        # images seen (or read by OCR) before the knowledge stage takes files in
        at = next(i for i, s in enumerate(stages) if isinstance(s, KnowledgeStage))
        stages.insert(at, images_stage(gw))
    return stages


def images_stage(gw: Wired) -> ImagesStage:
    return ImagesStage(
        gw.transports,
        gw.store.turns,
        vision_models=gw.settings.agent_vision_models,
        max_bytes=gw.settings.gateway_max_file_bytes,
        lease_seconds=gw.settings.gateway_lease_seconds,
    )
