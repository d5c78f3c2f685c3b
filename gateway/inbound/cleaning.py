"""Poison-proof intake: what PostgreSQL cannot store is cleaned here, once for every surface.
NUL characters are removed and lone surrogates replaced (text and jsonb refuse both),
non-finite floats and integers too long to print become text, credentials are stripped from
raw payloads, and an oversized raw payload is truncated. What was changed is noted in the
message's metadata (``sanitized``)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import fields, is_dataclass, replace
from typing import Any, TypeVar

from gateway.core.logs import is_secret_key
from session_store.values import EncodedJson

#: raw payloads bigger than this (as JSON) are stored truncated
MAX_RAW_BYTES = 256 * 1024
#: how much of a truncated payload is kept
RAW_HEAD_BYTES = 16 * 1024
_SURROGATES = re.compile("[\ud800-\udfff]")
T = TypeVar("T")


def clean_text(text: str, notes: set[str]) -> str:
    """``text`` as PostgreSQL can store it: NUL removed, lone surrogates replaced by U+FFFD."""
    if "\x00" in text:
        notes.add("nul_removed")
        text = text.replace("\x00", "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        notes.add("surrogates_replaced")
        text = _SURROGATES.sub("\ufffd", text)
    return text


def clean_value(value: T, notes: set[str]) -> T:
    """``value`` (text, numbers, mappings, sequences, frozen records) with everything
    PostgreSQL cannot store cleaned, recursively."""
    out: Any = value
    if isinstance(value, str):
        out = clean_text(value, notes)
    elif isinstance(value, bool) or value is None:
        out = value
    elif isinstance(value, float) and not math.isfinite(value):
        notes.add("number_as_text")
        out = repr(value)
    elif isinstance(value, int) and value.bit_length() > 1000:
        # Python refuses to print integers of more than 4300 digits; no id is that long
        notes.add("number_as_text")
        out = f"<integer of {value.bit_length()} bits>"
    elif isinstance(value, Mapping):
        cleaned = {clean_text(str(k), notes): clean_value(v, notes) for k, v in value.items()}
        # nothing to clean (the rule): the value itself, not a copy per message
        same = (
            isinstance(value, dict)
            and len(cleaned) == len(value)
            and all(k in value and value[k] is v for k, v in cleaned.items())
        )
        out = value if same else cleaned
    elif isinstance(value, list | tuple):
        items = [clean_value(v, notes) for v in value]
        same = all(a is b for a, b in zip(items, value, strict=True))
        out = value if same else type(value)(items)
    elif is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for name in _init_fields(type(value)):
            old = getattr(value, name)
            new = clean_value(old, notes)
            if new is not old:
                changes[name] = new
        out = replace(value, **changes) if changes else value
    return out  # type: ignore[no-any-return]


_INIT_FIELDS: dict[type, tuple[str, ...]] = {}


def _init_fields(cls: type) -> tuple[str, ...]:
    """The fields of dataclass ``cls`` its ``__init__`` takes (looked up once per class)."""
    names = _INIT_FIELDS.get(cls)
    if names is None:
        names = _INIT_FIELDS[cls] = tuple(f.name for f in fields(cls) if f.init)
    return names


def clean_raw(raw: Mapping[str, Any] | None, notes: set[str]) -> Mapping[str, Any] | None:
    """The raw payload as the inbox can keep it: credentials stripped at any depth (Slack's
    legacy ``token``, an ``Authorization``, a ``password``), cleaned, and truncated when
    oversized."""
    if raw is None:
        return None
    clean = _already_clean(raw)
    if clean is not None:
        return clean
    cleaned: dict[str, Any] = clean_value(_without_secrets(dict(raw)), notes)
    try:
        text = json.dumps(cleaned, default=str, separators=(",", ":"))
    except (TypeError, ValueError):  # a value no JSON encoder takes, or nested too deep
        notes.add("raw_unencodable")
        return {"unencodable": True, "repr": repr(cleaned)[:RAW_HEAD_BYTES]}
    size = len(text)
    if size > MAX_RAW_BYTES:
        notes.add("raw_truncated")
        head = json.dumps(cleaned, default=str)[:RAW_HEAD_BYTES]
        return {"truncated": True, "bytes": size, "head": head}
    # the encoding just made is the one stored: the payload is encoded once per event
    return EncodedJson(cleaned, text)


#: what, in a payload's JSON text, may stand for something ``clean_raw`` changes: a word
#: every credential's key holds (``is_secret_key``: token, secret, password or passwd,
#: authorization, cookie, and every "key"), the two characters whose lower case has an ASCII
#: letter (U+0130, U+212A: "apİ_Key" is a secret key too), NUL, and a surrogate (a lone one
#: is cleaned; an emoji's pair is only found too)
_MAYBE_UNCLEAN = re.compile(
    r"token|secret|passw|authorization|cookie|key|\\u0130|\\u212a|\\u0000|\\ud[89a-f]"
)
#: a non-finite float (``NaN``, ``Infinity``) or an integer too long to print (``clean_value``)
_ODD_NUMBER = re.compile(r"[:,\[]-?(?:NaN|Infinity)\b|\d{302}")


def _refuse(value: Any) -> Any:
    raise TypeError(type(value).__name__)


def _already_clean(raw: Mapping[str, Any]) -> EncodedJson | None:
    """``raw`` encoded once, when that text shows nothing ``clean_raw`` would change (no
    credential's key, nothing PostgreSQL refuses, no value JSON lacks, not oversized): most
    payloads, spared walking them twice. ``None``: the full cleaning decides."""
    try:
        text = json.dumps(raw, separators=(",", ":"), default=_refuse)
    except (TypeError, ValueError, RecursionError):
        return None
    if len(text) > MAX_RAW_BYTES or _MAYBE_UNCLEAN.search(text.lower()) or _ODD_NUMBER.search(text):
        return None
    return EncodedJson(raw, text)


def _without_secrets(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _without_secrets(v) for k, v in value.items() if not is_secret_key(str(k))}
    if isinstance(value, list | tuple):
        return [_without_secrets(v) for v in value]
    return value
