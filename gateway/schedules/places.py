"""A schedule's place: ``platform:scope:chat[:thread]``, exact (no wildcards)."""

from __future__ import annotations

from gateway.core.domain import SessionKey, unescape_part
from gateway.core.errors import RequestError


def parse_place(text: str) -> SessionKey:
    """``slack:T1:C1``, ``slack:T1:C1:1700000000.000100``, ``telegram:bot:-1001:77``, or a
    session key (``-`` for no thread). A scope that itself holds ``:`` (a Mattermost server
    ``host:8065``) needs the thread part written out (``-`` for none). A chat or thread id
    that holds ``:`` or ``%`` is written escaped, as a session key writes it (``%3A``,
    ``%25``: a Matrix room ``matrix:example.org:!abc%3Aexample.org``)."""
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
        platform=unescape_part(platform),
        scope=unescape_part(scope),
        chat_id=unescape_part(chat),
        thread_id=None if thread in (None, "", "-") else unescape_part(thread),
    )


def place_text(key: SessionKey) -> str:
    """``parse_place``'s inverse (``SessionKey.place_text``)."""
    return key.place_text
