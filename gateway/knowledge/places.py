"""Where knowledge bases apply: a thread's own, a chat's, and named ones assigned to chats."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.core.domain import SessionKey, unescape_part

DEFAULT_KB = "default"


def thread_kb(key: SessionKey) -> str:
    """The knowledge base of one thread's own files."""
    return f"thread:{key}"


def chat_kb(key: SessionKey) -> str:
    """The knowledge base of a chat or channel (every thread in it)."""
    return f"chat:{key.chat_text}"


@dataclass(frozen=True, slots=True)
class Chat:
    """A chat or channel, as operators name it to assign knowledge bases:
    ``platform:scope:chat`` as a session key writes it (``SessionKey.chat_text``): the scope
    may itself hold ``:``; a ``:`` or ``%`` in the chat is written ``%3A``, ``%25``."""

    platform: str
    scope: str
    chat_id: str

    def __str__(self) -> str:
        return SessionKey(platform=self.platform, scope=self.scope, chat_id=self.chat_id).chat_text

    @classmethod
    def of(cls, key: SessionKey) -> Chat:
        return cls(key.platform, key.scope, key.chat_id)

    @classmethod
    def parse(cls, text: str) -> Chat:
        check_name(text, "a chat")
        platform, _, rest = text.strip().partition(":")
        scope, _, chat_id = rest.rpartition(":")
        if not (platform and scope and chat_id) or len(text) > 600:
            raise ValueError(f"not a chat (platform:scope:chat, e.g. web:local:general): {text!r}")
        return cls(unescape_part(platform), unescape_part(scope), unescape_part(chat_id))


def check_name(text: str, what: str = "a knowledge base name") -> str:
    """``text`` if PostgreSQL can store it as a name: no control characters (NUL among them)
    and no lone surrogates; ``ValueError`` saying so otherwise."""
    if any(ord(ch) < 32 for ch in text):
        raise ValueError(f"{what} cannot hold control characters")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{what} is not valid Unicode text") from exc
    return text
