"""A schedule's place: ``platform:scope:chat[:thread]``, exact (no wildcards)."""

from __future__ import annotations

from gateway.core.domain import SessionKey
from gateway.core.errors import RequestError


def parse_place(text: str) -> SessionKey:
    """``slack:T1:C1``, ``slack:T1:C1:1700000000.000100``, ``telegram:bot:-1001:77``, or a
    session key (``-`` for no thread). A scope that itself holds ``:`` (a Mattermost server
    ``host:8065``) needs the thread part written out (``-`` for none)."""
    text = text.strip()
    platform, _, rest = text.partition(":")
    parts = rest.split(":") if rest else []
    if not platform or len(parts) < 2 or "*" in text:
        raise RequestError(
            f"{text!r} is not a place: write platform:scope:chat[:thread] "
            "(slack:T0123:C0456, telegram:bot:-1001234567890:77)"
        )
    if len(parts) == 2:
        scope, chat, thread = parts[0], parts[1], None
    else:
        scope, chat, thread = ":".join(parts[:-2]), parts[-2], parts[-1]
    if not scope or not chat:
        raise RequestError(f"{text!r} is not a place: its scope and chat must not be empty")
    return SessionKey(
        platform=platform,
        scope=scope,
        chat_id=chat,
        thread_id=None if thread in ("", "-") else thread,
    )


def place_text(key: SessionKey) -> str:
    base = f"{key.platform}:{key.scope}:{key.chat_id}"
    return base if key.thread_id is None else f"{base}:{key.thread_id}"
