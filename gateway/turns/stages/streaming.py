"""Streaming: the answer shows in the thread while a streaming agent writes it.

Before the agent: opens this turn's preview streamer (``gateway.outbox.streaming``), when the agent
streams and the platform shows previews, and gives it to the agent. On close: stops the
previews and tells the outbox which previews the answer is edited into.
"""

from __future__ import annotations

from typing import Protocol

from gateway.agents.base import Agent, StreamSink
from gateway.core.domain import ReplyTarget
from gateway.turns.stage import Answer, Slot, Stage, TurnRun


class OpenStream(StreamSink, Protocol):
    """One turn's previews (``gateway.outbox.streaming.PreviewStreamer``)."""

    @property
    def previews_after(self) -> int | None: ...

    @property
    def written(self) -> str: ...

    async def close(self) -> None: ...

    async def discard(self) -> None: ...


class StreamOpener(Protocol):
    """Decides per turn whether it streams (``gateway.outbox.streaming.Streams``)."""

    async def open(
        self, agent: Agent, *, session_id: int, after_seq: int, target: ReplyTarget
    ) -> OpenStream | None: ...


_STREAM: Slot[OpenStream] = Slot("stream")


class StreamingStage(Stage):
    name = "streaming"

    def __init__(self, streams: StreamOpener, agent: Agent) -> None:
        self._streams = streams
        self._agent = agent

    async def before(self, turn: TurnRun) -> Answer | None:
        if turn.profile is not None and turn.profile.streaming is False:
            return None  # the place's profile says no previews
        if turn.rewrites is not None:
            return None  # an answer written again replaces the old one in place, unstreamed
        stream = await self._streams.open(
            self._agent,
            session_id=turn.claim.session_id,
            after_seq=turn.claim.done_seq,
            target=turn.target,
        )
        if stream is not None:
            turn.put(_STREAM, stream)
            turn.request.stream = stream
            turn.streamed = lambda: stream.written
        return None

    async def close(self, turn: TurnRun) -> None:
        stream = turn.get(_STREAM)
        if stream is not None:
            await stream.close()
            if turn.discard_previews:
                # the question was deleted while its answer streamed: nothing of it stays
                await stream.discard()
            turn.previews_after = stream.previews_after
