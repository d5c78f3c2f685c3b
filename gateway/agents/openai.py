"""The ``openai`` agent: any OpenAI-compatible chat-completions server (OpenAI, vLLM,
llama.cpp, Ollama...), streamed or not, with tool calls.

The prompt is rendered by ``gateway.agents.prompt``, the same rendering the token estimate was
made on, so what the budget counted is what is sent.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import httpx
import structlog

from gateway.agents.base import (
    DocumentSummaryRequest,
    ProviderProgress,
    StreamSink,
    SummaryRequest,
    SummaryResult,
    ToolCall,
    Turn,
)
from gateway.agents.completions import (
    call_record,
    read_completion,
    read_events,
    read_tool_calls,
    read_usage,
    with_parts,
)
from gateway.agents.health import ModelHealth, NoHealth
from gateway.agents.prompt import render_prompt
from gateway.agents.retry import (
    HAND_OVER_AFTER,
    Budget,
    ProviderFailure,
    RetryPolicy,
    Waiting,
    failure_from_response,
    failure_from_transport,
    retried,
)
from gateway.agents.wire import _error_detail, _json_body
from gateway.core import tracing
from gateway.core.domain import Reply
from gateway.core.errors import AgentError
from gateway.core.settings import Settings

log = structlog.get_logger(__name__)

WHAT = "the model server"


class _Unannounced:
    """A model's progress while another is left to ask: only the start of an answer is
    told (the status line waits until no other model is left)."""

    def __init__(self, progress: ProviderProgress) -> None:
        self._progress = progress

    def asking(self, model: str) -> None:
        return None

    def waiting(self, cause: str, seconds: float) -> None:
        return None

    def answering(self) -> None:
        self._progress.answering()


class OpenAIAgent:
    """Any OpenAI-compatible ``POST {base}/chat/completions`` server."""

    name = "openai"
    #: sends exactly the prompt the context estimate was made on, so the server's
    #: ``usage.prompt_tokens`` calibrates the estimate
    calibrates = True
    #: tells the server who asks (``user``: an opaque id of the person, ``Turn.user``)
    sends_user = True

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None,
        model: str,
        timeout: float = 60.0,
        max_output_tokens: int = 1024,
        streams: bool = True,
        fallbacks: Sequence[str] = (),
        policy: RetryPolicy | None = None,
        health: ModelHealth | None = None,
    ) -> None:
        #: ``Streaming``: asks with ``stream: true`` when the turn has a stream
        self.streams = streams
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._api_key = api_key
        self.model = model
        self._timeout = timeout
        self._max_output_tokens = max_output_tokens
        #: ``AGENT_FALLBACK_MODELS``: asked in order once the chosen model's retries are spent
        self.fallbacks = tuple(fallbacks)
        self.policy = policy or RetryPolicy()
        #: the per-model breakers and metrics (``gateway.agents.breakers``; set by the gateway)
        self.health: ModelHealth = health or NoHealth()
        self._rng = random.Random()
        # OpenAI's newer models refuse ``max_tokens``; compatible servers (vLLM, llama.cpp,
        # Ollama) all read ``max_tokens`` and not all know the newer name
        host = urlsplit(base_url).hostname or ""
        self._limit_field = (
            "max_completion_tokens" if host.endswith("api.openai.com") else "max_tokens"
        )
        self._client: httpx.AsyncClient | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> OpenAIAgent:
        key = settings.openai_api_key
        return cls(
            base_url=settings.openai_base_url,
            api_key=key.get_secret_value() if key else None,
            model=settings.agent_model,
            timeout=settings.agent_timeout_seconds,
            max_output_tokens=settings.agent_max_output_tokens,
            fallbacks=settings.agent_fallback_models,
            policy=RetryPolicy(deadline=settings.agent_retry_deadline_seconds),
        )

    def _http(self) -> httpx.AsyncClient:
        # created on first use, inside the running loop (no I/O in constructors)
        if self._client is None or self._client.is_closed:
            headers = {"Content-Type": "application/json"}
            if self._api_key:
                headers["Authorization"] = f"Bearer {self._api_key}"
            self._client = httpx.AsyncClient(timeout=self._timeout, headers=headers)
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def respond(self, turn: Turn) -> Sequence[Reply]:
        """The tool loop: offer the turn's tools, run the calls the model makes
        (a step's calls in parallel, through the turn's toolbox), feed the results back, and
        repeat until the model answers in text. After ``max_steps`` steps of calls the model
        is asked once more with no tools offered, so the turn always ends in an answer.

        Each request goes through the retry policy (``gateway.agents.retry``) and, once the
        chosen model's share of the deadline is spent, to the fallbacks in order; the model
        that answered a step answers the rest of the turn."""
        chosen = turn.model or self.model
        route = _Route(turn, [chosen, *(m for m in self.fallbacks if m != chosen)])
        budget = Budget.start(self.policy)
        limit = turn.max_output_tokens or self._max_output_tokens
        toolbox = turn.toolbox if turn.tools else None
        steps = 0
        first_usage: dict[str, int] | None = None
        total = 0
        #: every request's usage, for the usage ledger (one row per model call); the turn's
        #: own list when it keeps one (a stopped turn is charged for what was made)
        made: list[dict[str, Any]] = turn.spent if turn.spent is not None else []
        while True:
            offer = turn.tools if toolbox is not None and steps < toolbox.max_steps else ()
            data, model = await self._ask_any(route, budget, limit, offer)
            usage = read_usage(data)
            if first_usage is None:
                first_usage = usage
            tokens = usage.get("total_tokens")
            if tokens is None:
                tokens = usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)
            total += tokens
            calls, content = read_tool_calls(data) if offer else ([], None)
            made.append(call_record(data, model, usage, tool_step=bool(calls and toolbox)))
            if calls and toolbox is not None:
                steps += 1
                if turn.stream is not None:
                    # what the model wrote before its calls is not the answer
                    turn.stream.restart()
                    turn.stream.status(tool_status(calls))
                results = await toolbox.run(calls, content=content or "")
                route.extra.append(
                    {
                        "role": "assistant",
                        "content": content or "",
                        "tool_calls": [c.to_chat() for c in calls],
                    }
                )
                route.extra.extend(
                    {"role": "tool", "tool_call_id": r.call_id, "content": r.content}
                    for r in results
                )
                continue
            text, _, finish = read_completion(data)
            fallback = {"fallback_from": chosen} if model != chosen else {}
            return [
                Reply(
                    text=text,
                    model=str(data.get("model") or model),
                    tokens_used=total or None,
                    metadata={
                        # the first request's usage: the prompt exactly as the estimate saw it
                        "usage": first_usage,
                        "finish_reason": finish,
                        "requested_model": chosen,
                        "calls": made,
                        **fallback,
                        **({"tool_steps": steps} if steps else {}),
                    },
                )
            ]

    async def _ask_any(
        self,
        route: _Route,
        budget: Budget,
        limit: int,
        offer: Sequence[Mapping[str, Any]],
    ) -> tuple[Mapping[str, Any], str]:
        """One completion from the route's current model, or from the next ones in turn
        (a model whose breaker is open is passed by while another is left to ask)."""
        failure: ProviderFailure | None = None
        while route.index < len(route.models):
            model = route.model
            left = len(route.models) - route.index
            available = await self.health.available(model)
            if not available and left > 1:
                self.health.skipped(model)
                log.info("model_breaker_open", model=model)
                route.index += 1
                continue
            try:
                # the last model left is asked whatever its breaker says, but only once
                # while it is open: a turn is always tried, a failing provider not hammered
                data = await self._ask_model(
                    route,
                    model,
                    until=budget.share(left),
                    limit=limit,
                    offer=offer,
                    single=not available,
                    fallback_left=left > 1,
                )
            except ProviderFailure as exc:
                exc.model = model
                failure = exc
                if not exc.retryable:
                    raise
                route.index += 1
                if route.turn.stream is not None:
                    route.turn.stream.restart()
                continue
            await self.health.succeeded(model)
            return data, model
        assert failure is not None  # the last model is always asked
        raise failure

    async def _ask_model(
        self,
        route: _Route,
        model: str,
        *,
        until: float,
        limit: int,
        offer: Sequence[Mapping[str, Any]],
        single: bool = False,
        fallback_left: bool = False,
    ) -> Mapping[str, Any]:
        """One completion from ``model``, retried until ``until`` (monotonic); ``single``: one
        attempt. ``fallback_left``: this one hands over early (``_hand_over``) and the thread
        hears nothing of its waits (the status line is for when no model can answer)."""
        progress: ProviderProgress = route.turn.progress or Waiting()
        progress = _Unannounced(progress) if fallback_left else progress
        sink = route.turn.stream
        user = route.turn.user
        messages = route.messages(model)

        async def once(timeout: float) -> Mapping[str, Any]:
            with tracing.span(
                "model.call",
                {
                    "gen_ai.system": "openai",
                    "gen_ai.request.model": model,
                    "gen_ai.request.streaming": sink is not None,
                    "gen_ai.request.tools": len(offer),
                },
            ):
                data = await ask(timeout)
                if tracing.enabled():
                    usage = read_usage(data)
                    tracing.annotate(
                        {
                            "gen_ai.response.model": data.get("model"),
                            "gen_ai.usage.input_tokens": usage.get("prompt_tokens"),
                            "gen_ai.usage.output_tokens": usage.get("completion_tokens"),
                        }
                    )
                return data

        async def ask(timeout: float) -> Mapping[str, Any]:
            progress.asking(model)
            if sink is not None:
                return await self._complete_streaming(
                    model,
                    messages,
                    limit,
                    tools=offer,
                    sink=sink,
                    timeout=timeout,
                    progress=progress,
                    user=user,
                )
            return await self._complete(
                model, messages, limit, tools=offer, timeout=timeout, progress=progress, user=user
            )

        async def failed(f: ProviderFailure, n: int) -> None:
            log.warning("model_request_failed", model=model, attempt=n, cause=f.cause, error=str(f))
            await self.health.failed(model, f)

        def waiting(f: ProviderFailure, seconds: float) -> None:
            self.health.waited(model, seconds)
            if sink is not None:
                sink.restart()  # a broken stream starts over in the same previews
            progress.waiting(f.cause, seconds)

        return await retried(
            once,
            policy=self.policy,
            until=until,
            rng=self._rng,
            sleep=asyncio.sleep,
            on_failure=failed,
            on_wait=waiting,
            once=single,
            hand_over=self._hand_over(model) if fallback_left else None,
        )

    def _hand_over(self, model: str) -> Callable[[ProviderFailure, int], Awaitable[bool]]:
        """Whether ``model`` gives up after a failure, while a fallback is left: after
        ``HAND_OVER_AFTER`` failures, or once its breaker is open."""

        async def hand_over(f: ProviderFailure, n: int) -> bool:
            if n >= HAND_OVER_AFTER or not await self.health.available(model):
                log.info("model_handed_over", model=model, attempts=n, cause=f.cause)
                return True
            return False

        return hand_over

    async def summarize(self, request: SummaryRequest) -> SummaryResult | None:
        return await self._summary(
            request.model, request.instructions, request.transcript, request.max_output_tokens
        )

    async def summarize_document(self, request: DocumentSummaryRequest) -> SummaryResult | None:
        return await self._summary(
            request.model, request.instructions, request.text, request.max_output_tokens
        )

    async def ask_once(
        self, model: str, instructions: str, text: str, *, max_output_tokens: int, timeout: float
    ) -> SummaryResult:
        """One short completion, not retried (a side query: the caller falls back)."""
        messages = _instructed(instructions, text)
        data = await self._complete(model, messages, max_output_tokens, timeout=timeout)
        return _summary_result(data, model)

    async def _summary(
        self, model: str, instructions: str, text: str, max_output_tokens: int
    ) -> SummaryResult:
        """One completion of ``instructions`` (system) over ``text`` (user), retried like
        an answer."""
        messages = _instructed(instructions, text)

        async def once(timeout: float) -> Mapping[str, Any]:
            return await self._complete(model, messages, max_output_tokens, timeout=timeout)

        data = await retried(
            once,
            policy=self.policy,
            until=time.monotonic() + self.policy.deadline,
            rng=self._rng,
            sleep=asyncio.sleep,
        )
        return _summary_result(data, model)

    def _body(
        self,
        model: str,
        messages: list[dict[str, Any]],
        max_output_tokens: int,
        tools: Sequence[Mapping[str, Any]],
        *,
        stream: bool,
        user: str | None = None,
    ) -> bytes:
        body: dict[str, Any] = {
            "model": model,
            "messages": messages,
            self._limit_field: max_output_tokens,
        }
        if user:
            body["user"] = user
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        if tools:
            body["tools"] = [dict(t) for t in tools]
        return json.dumps(body, ensure_ascii=False).encode()

    async def _complete(
        self,
        model: str,
        messages: list[dict[str, Any]],
        max_output_tokens: int,
        *,
        tools: Sequence[Mapping[str, Any]] = (),
        timeout: float | None = None,
        progress: ProviderProgress | None = None,
        user: str | None = None,
    ) -> Mapping[str, Any]:
        """One request, one answer: a failure is a ``ProviderFailure`` (the caller retries)."""
        content = self._body(model, messages, max_output_tokens, tools, stream=False, user=user)
        try:
            response = await self._http().post(
                self._url, content=content, timeout=self._attempt_timeout(timeout)
            )
        except httpx.HTTPError as exc:
            raise failure_from_transport(exc, what=WHAT) from exc
        if response.status_code >= 400:
            raise failure_from_response(response, what=WHAT, detail=_error_detail(response))
        if progress is not None:
            progress.answering()
        data = _json_body(response, WHAT)
        if not isinstance(data, Mapping):
            raise AgentError("the model server's answer is not a JSON object")
        return data

    def _attempt_timeout(self, timeout: float | None) -> httpx.Timeout:
        """The client's timeout, no longer than what the turn's deadline leaves (a stalled
        stream or a slow first token ends in time for a retry or a fallback)."""
        seconds = self._timeout if timeout is None else min(self._timeout, timeout)
        return httpx.Timeout(seconds)

    async def _complete_streaming(
        self,
        model: str,
        messages: list[dict[str, Any]],
        max_output_tokens: int,
        *,
        tools: Sequence[Mapping[str, Any]] = (),
        sink: StreamSink,
        timeout: float | None = None,
        progress: ProviderProgress | None = None,
        user: str | None = None,
    ) -> Mapping[str, Any]:
        """``stream: true``: text deltas go to ``sink`` as they arrive; returns the same shape
        as a plain completion (content, tool calls, finish reason, ``usage`` where the server
        sends it with ``stream_options.include_usage``). A server that answers with plain
        JSON instead of events is read as such. A stream that breaks off before its end is a
        ``ProviderFailure`` (retried: the sink starts over, in the same previews)."""
        content = self._body(model, messages, max_output_tokens, tools, stream=True, user=user)
        try:
            async with self._http().stream(
                "POST", self._url, content=content, timeout=self._attempt_timeout(timeout)
            ) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise failure_from_response(response, what=WHAT, detail=_error_detail(response))
                if "text/event-stream" not in response.headers.get("content-type", ""):
                    await response.aread()
                    data = _json_body(response, WHAT)
                    if not isinstance(data, Mapping):
                        raise AgentError("the model server's answer is not a JSON object")
                    return data
                return await read_events(response, sink, progress)
        except httpx.HTTPError as exc:
            raise failure_from_transport(exc, what=WHAT) from exc


class _Route:
    """The models one turn may ask, in order, and where it has got to; the prompt for each
    (sized for its window by ``Turn.refit``) followed by the turn's tool steps so far."""

    def __init__(self, turn: Turn, models: list[str]) -> None:
        self.turn = turn
        self.models = models
        self.index = 0
        self.extra: list[dict[str, Any]] = []
        self._base: dict[str, list[dict[str, Any]]] = {}

    @property
    def model(self) -> str:
        return self.models[self.index]

    def messages(self, model: str) -> list[dict[str, Any]]:
        if model not in self._base:
            turn = self.turn
            if self.index > 0 and turn.refit is not None:
                turn = turn.refit(turn, model)
            self._base[model] = with_parts(
                render_prompt(turn.system_prompt, turn.context), turn.attachments
            )
        return [*self._base[model], *self.extra]


#: status lines for the built-in tools while they run (others: "using NAME…")
TOOL_STATUS = {
    "search_knowledge": "searching the knowledge base…",
    "search_thread": "searching this thread…",
    "list_my_sessions": "looking through your conversations…",
    "read_session": "reading a conversation…",
    "current_time": "checking the time…",
}


def tool_status(calls: Sequence[ToolCall]) -> str:
    names = list(dict.fromkeys(c.name for c in calls))
    lines = [TOOL_STATUS.get(n, f"using {n}…") for n in names]
    return lines[0] if len(lines) == 1 else "; ".join(lines)


# --- http ------------------------------------------------------------------------------------


def _instructed(instructions: str, text: str) -> list[dict[str, Any]]:
    """A side query's or a summary's messages: ``instructions`` (system) over ``text`` (user)."""
    return [{"role": "system", "content": instructions}, {"role": "user", "content": text}]


def _summary_result(data: Mapping[str, Any], model: str) -> SummaryResult:
    """A completion read as a summary: its text, the model that wrote it, the tokens used."""
    answer, usage, _ = read_completion(data)
    return SummaryResult(
        text=answer,
        model=str(data.get("model") or model),
        prompt_tokens=usage.get("prompt_tokens"),
        completion_tokens=usage.get("completion_tokens"),
    )
