"""The chat-format prompt every model-backed agent sends: rendering, token counting and the
per-model context windows.

- **Token counting.** No tokenizer is available offline (tiktoken downloads its tables at run
  time), so ``TokenCounter`` estimates conservatively from the same pre-tokenization split
  byte-pair tokenizers use (a hex id or a base64 blob costs what it really costs, not
  chars/4), and scales the estimate per model by what the server reported in ``usage``.
- **Rendering.** ``render_prompt`` is the one chat-format transcript: the budget is estimated
  on it and the OpenAI-compatible client sends it.
"""

from __future__ import annotations

import math
import re
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from typing import Any

from gateway.agents.base import ContextMessage

# --- the per-model window table ----------------------------------------------------------

#: context windows in tokens by model-name prefix (longest prefix wins), from the providers'
#: model pages. Local servers (Ollama ``num_ctx``, llama.cpp ``-c``) often run a model with a
#: smaller window than it supports: set AGENT_CONTEXT_WINDOWS to what the server really uses.
WINDOWS: tuple[tuple[str, int], ...] = (
    ("gpt-5", 400_000),
    ("gpt-4.1", 1_047_576),
    ("gpt-4o", 128_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-4-32k", 32_768),
    ("gpt-4", 8_192),
    ("gpt-3.5-turbo", 16_385),
    ("o1", 200_000),
    ("o3", 200_000),
    ("o4", 200_000),
    ("claude", 200_000),
    ("gemini", 1_048_576),
    ("llama3.1", 131_072),
    ("llama3.2", 131_072),
    ("llama3.3", 131_072),
    ("llama-3.1", 131_072),
    ("llama-3.2", 131_072),
    ("llama-3.3", 131_072),
    ("llama3", 8_192),
    ("llama-3", 8_192),
    ("mistral", 32_768),
    ("mixtral", 32_768),
    ("qwen2.5", 32_768),
    ("qwen3", 32_768),
    ("gemma2", 8_192),
    ("gemma-2", 8_192),
    ("gemma3", 131_072),
    ("gemma-3", 131_072),
    ("phi3", 4_096),
    ("phi-3", 4_096),
    ("phi4", 16_384),
    ("phi-4", 16_384),
    ("deepseek", 65_536),
)


def normalize_model(name: str) -> str:
    """``openai/gpt-4o`` -> ``gpt-4o``; ``meta-llama/Llama-3.1-8B`` -> ``llama-3.1-8b``."""
    return name.strip().lower().rsplit("/", 1)[-1]


def context_window(model: str, *, overrides: Mapping[str, int], default: int) -> int:
    lowered = model.strip().lower()
    for candidate in (lowered, normalize_model(lowered)):
        if candidate in overrides:
            return overrides[candidate]
    name = normalize_model(lowered)
    best = max((p for p, _ in WINDOWS if name.startswith(p)), key=len, default=None)
    if best is None:
        return default
    return dict(WINDOWS)[best]


# --- token counting ------------------------------------------------------------------------

# The pre-tokenization split of cl100k/o200k-style tokenizers, in ``re`` syntax: contractions,
# letter runs (with one leading non-letter), digit groups of up to 3, punctuation runs,
# newlines, spaces. A byte-pair tokenizer never merges across these pieces, so counting
# pieces is a lower bound that makes random ids and base64 expensive, as they really are.
_PIECE = re.compile(
    r"'(?:[sdmt]|ll|ve|re)|[^\r\n\w]?[^\W\d_]+|\d{1,3}| ?[^\s\w]+[\r\n]*|_+|\s*[\r\n]+|\s+"
)
#: per-message framing of the chat format (role, separators) and the reply's priming
MESSAGE_OVERHEAD = 4
PROMPT_OVERHEAD = 3
#: margin before any usage has been observed for a model
UNCALIBRATED_FACTOR = 1.1
#: margin over the worst observed ratio
CALIBRATION_MARGIN = 1.05
MIN_FACTOR = 0.6
MAX_FACTOR = 4.0


def _is_cjk(ch: str) -> bool:
    code = ord(ch)
    return (
        0x2E80 <= code <= 0x9FFF
        or 0xAC00 <= code <= 0xD7AF
        or 0xF900 <= code <= 0xFAFF
        or 0xFF00 <= code <= 0xFFEF
    )


def _piece_tokens(piece: str) -> float:
    if piece.isspace():
        # runs of spaces merge; each newline run is about one token
        return 1.0 if ("\n" in piece or "\r" in piece) else math.ceil(len(piece) / 4)
    if piece.isascii():
        core = piece.lstrip(" ")
        if not core:
            return 1.0
        if core.isalpha():
            # common words are one token, long or rare ones several: ~4 letters per token
            return max(1.0, math.ceil(len(core) / 4))
        if len(core) > 1 and core[1:].isalpha():
            return 1.0 + max(1.0, math.ceil((len(core) - 1) / 4))  # "(word", "#tag"
        if core.isdigit():
            return 1.0
        return max(1.0, math.ceil(len(core) / 2))
    tokens = 0.0
    ascii_run = 0
    for ch in piece:
        if ch.isascii():
            ascii_run += 1
            continue
        if ord(ch) > 0xFFFF:
            tokens += 3.0  # emoji and other astral symbols: several byte tokens each
        elif _is_cjk(ch):
            tokens += 1.5
        elif ch.isalpha():
            tokens += 0.5  # Cyrillic, Greek, accented Latin...: ~2 letters per token
        else:
            tokens += 1.0
    return max(1.0, tokens + ascii_run / 4)


def estimate_text(text: str) -> int:
    """Raw (uncalibrated) token estimate of ``text``."""
    if not text:
        return 0
    return math.ceil(sum(_piece_tokens(p) for p in _PIECE.findall(text)))


class TokenCounter:
    """Conservative token estimates, calibrated per model from the server's ``usage``.

    ``factor(model)`` scales the raw estimate: ``UNCALIBRATED_FACTOR`` until a server has
    reported ``prompt_tokens`` for a prompt we estimated, then the worst recent ratio of
    reported to estimated with a margin. Memory is bounded (models and samples)."""

    def __init__(self, *, max_models: int = 64, samples: int = 20, cache_size: int = 50_000):
        self._ratios: OrderedDict[str, deque[float]] = OrderedDict()
        self._max_models = max_models
        self._samples = samples
        self._cache: OrderedDict[tuple[str, int, int, str | None], int] = OrderedDict()
        self._cache_size = cache_size

    def text(self, text: str) -> int:
        return estimate_text(text)

    def message(self, message: Mapping[str, Any]) -> int:
        """Raw tokens of one chat-format message, framing included. Remembered (bounded LRU)
        by content, so each turn of a long session estimates only its new messages."""
        key = None
        content = message.get("content")
        if isinstance(content, str) and not message.get("tool_calls"):
            key = (str(message.get("role")), len(content), hash(content), message.get("name"))
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        tokens = MESSAGE_OVERHEAD + estimate_text(_content_text(content))
        if message.get("name"):
            tokens += 1 + estimate_text(str(message["name"]))
        if message.get("tool_calls"):
            tokens += estimate_text(_json_text(message["tool_calls"]))
        if message.get("tool_call_id"):
            tokens += 1 + estimate_text(str(message["tool_call_id"]))
        if key is not None:
            self._cache[key] = tokens
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return tokens

    def prompt(self, messages: Sequence[Mapping[str, Any]]) -> int:
        return PROMPT_OVERHEAD + sum(self.message(m) for m in messages)

    def factor(self, model: str) -> float:
        ratios = self._ratios.get(model)
        if not ratios:
            return UNCALIBRATED_FACTOR
        return min(MAX_FACTOR, max(MIN_FACTOR, max(ratios) * CALIBRATION_MARGIN))

    def calibrated(self, model: str, raw: int) -> int:
        return math.ceil(raw * self.factor(model))

    def observe(self, model: str, *, raw: int, actual: int) -> None:
        """The server counted ``actual`` prompt tokens for a prompt we estimated at ``raw``."""
        if raw < 32 or actual <= 0:
            return  # tiny prompts are all framing: their ratio says nothing about text
        ratios = self._ratios.get(model)
        if ratios is None:
            ratios = self._ratios[model] = deque(maxlen=self._samples)
            if len(self._ratios) > self._max_models:
                self._ratios.popitem(last=False)
        else:
            self._ratios.move_to_end(model)
        ratios.append(actual / raw)


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return _json_text(content)


def _json_text(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# --- rendering: the one chat-format transcript both the estimate and the clients use --------

_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]+")


def render_message(m: ContextMessage) -> dict[str, Any]:
    if m.role == "tool":
        return {"role": "tool", "tool_call_id": m.tool_call_id or "", "content": m.content}
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.role == "user" and m.sender_name:
        # the chat format's way of telling several people apart (letters, digits, _ and -)
        name = _NAME_CHARS.sub("_", m.sender_name).strip("_")[:64]
        if name:
            out["name"] = name
    if m.role == "assistant" and m.tool_calls:
        out["tool_calls"] = [dict(c) for c in m.tool_calls]
    return out


def render_prompt(system_prompt: str, messages: Sequence[ContextMessage]) -> list[dict[str, Any]]:
    rendered = [{"role": "system", "content": system_prompt}] if system_prompt else []
    rendered.extend(render_message(m) for m in messages)
    return rendered
