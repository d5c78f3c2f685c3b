"""Reading OpenAI-compatible chat completions: streamed chunks folded into one completion,
tool calls, usage, and the answer's text. Shared by the ``openai`` agent and the HTTP agent's
tool loop (``read_tool_calls``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from gateway.agents.base import ProviderProgress, StreamSink, ToolCall
from gateway.agents.retry import ProviderFailure
from gateway.core.errors import AgentError


async def read_events(
    response: httpx.Response, sink: StreamSink, progress: ProviderProgress | None = None
) -> Mapping[str, Any]:
    """Fold chat-completion chunks (``data: {...}`` lines, ``data: [DONE]``) into one
    completion, passing text deltas to ``sink``. Events that end before ``[DONE]`` or a
    finish reason are a broken stream (``ProviderFailure``, retried)."""
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish: str | None = None
    usage: Any = None
    model: Any = None
    done = False
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue
        if progress is not None and not text and not calls:
            progress.answering()
        payload = line[5:].strip()
        if payload == "[DONE]":
            done = True
            break
        try:
            chunk = json.loads(payload)
        except ValueError as exc:
            raise AgentError("the model server sent an event that is not JSON") from exc
        if not isinstance(chunk, Mapping):
            continue
        model = chunk.get("model") or model
        if isinstance(chunk.get("usage"), Mapping):
            usage = chunk["usage"]
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
            continue
        choice = choices[0]
        if isinstance(choice.get("finish_reason"), str):
            finish = choice["finish_reason"]
        delta = choice.get("delta")
        if not isinstance(delta, Mapping):
            continue
        piece = delta.get("content")
        if isinstance(piece, str) and piece:
            text.append(piece)
            sink.text(piece)
        for item in delta.get("tool_calls") or ():
            if not isinstance(item, Mapping):
                continue
            raw_index = item.get("index")
            index = raw_index if isinstance(raw_index, int) else len(calls)
            call = calls.setdefault(index, {"id": None, "function": {"name": "", "arguments": ""}})
            if isinstance(item.get("id"), str):
                call["id"] = item["id"]
            fn = item.get("function")
            if isinstance(fn, Mapping):
                if isinstance(fn.get("name"), str):
                    call["function"]["name"] += fn["name"]
                if isinstance(fn.get("arguments"), str):
                    call["function"]["arguments"] += fn["arguments"]
    if not done and finish is None:
        raise ProviderFailure("the model server's stream broke off", cause="unavailable")
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text)}
    if calls:
        message["tool_calls"] = [
            {"type": "function", **({"id": c["id"]} if c["id"] else {}), "function": c["function"]}
            for _, c in sorted(calls.items())
            if c["function"]["name"]
        ]
    data: dict[str, Any] = {"choices": [{"message": message, "finish_reason": finish}]}
    if model is not None:
        data["model"] = model
    if usage is not None:
        data["usage"] = usage
    return data


def with_parts(
    messages: list[dict[str, Any]], parts: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Files shared with the question, straight to the model: the newest user
    message's text becomes the first of its content parts, the files follow."""
    if not parts:
        return messages
    for m in reversed(messages):
        if m.get("role") == "user" and isinstance(m.get("content"), str):
            m["content"] = [{"type": "text", "text": m["content"]}, *(dict(p) for p in parts)]
            break
    return messages


def read_tool_calls(data: Mapping[str, Any]) -> tuple[list[ToolCall], str | None]:
    """The tool calls of a completion (OpenAI format), with the text that came with them.
    A call without an id gets one (some local servers omit it); one without a name is
    skipped (nothing could answer it)."""
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        return [], None
    message = choices[0].get("message")
    if not isinstance(message, Mapping):
        return [], None
    raw = message.get("tool_calls")
    content = message.get("content") if isinstance(message.get("content"), str) else None
    if not isinstance(raw, list):
        return [], content
    calls: list[ToolCall] = []
    for n, item in enumerate(raw):
        fn = item.get("function") if isinstance(item, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            continue
        args = fn.get("arguments")
        if isinstance(args, Mapping):
            args = json.dumps(args)
        call_id = item.get("id") if isinstance(item.get("id"), str) and item.get("id") else None
        calls.append(
            ToolCall(
                id=call_id or f"call_{n}",
                name=fn["name"],
                arguments=args if isinstance(args, str) else "{}",
            )
        )
    return calls, content


def call_record(
    data: Mapping[str, Any], model: str, usage: Mapping[str, int], *, tool_step: bool
) -> dict[str, Any]:
    """One model call as the usage ledger records it."""
    return {
        "model": str(data.get("model") or model),
        "kind": "tool_step" if tool_step else "answer",
        "prompt_tokens": usage.get("prompt_tokens", 0),
        "completion_tokens": usage.get("completion_tokens", 0),
    }


def read_usage(data: Mapping[str, Any]) -> dict[str, int]:
    raw_usage = data.get("usage")
    usage: dict[str, int] = {}
    if isinstance(raw_usage, Mapping):
        for name in ("prompt_tokens", "completion_tokens", "total_tokens"):
            value = raw_usage.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                usage[name] = value
    return usage


def read_completion(data: Mapping[str, Any]) -> tuple[str, dict[str, int], str | None]:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        raise AgentError("the model server's answer has no choices")
    choice = choices[0]
    raw_message = choice.get("message")
    message: Mapping[str, Any] = raw_message if isinstance(raw_message, Mapping) else {}
    content = message.get("content")
    if isinstance(content, list):  # content parts, as some servers answer
        content = "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    if not isinstance(content, str) or not content.strip():
        content = message.get("refusal") if isinstance(message.get("refusal"), str) else None
    finish = choice.get("finish_reason")
    if not content or not content.strip():
        raise AgentError(f"the model returned no text (finish_reason: {finish})")
    return content, read_usage(data), finish if isinstance(finish, str) else None
