"""Who is acting, and from where: set once where a request or command comes in, read by
every ``record`` below it (a context variable: each request, task and command has its own)."""

from __future__ import annotations

import contextvars
import getpass
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class Who:
    #: 'admin:token', 'admin:local', 'web:<name>', '<platform>:<user id>', 'cli:<os user>',
    #: 'system'
    actor: str = "system"
    #: 'api', 'ops', 'mcp', 'web', 'cli', a platform name, 'system'
    surface: str = "system"
    #: the client's address, when there is a client
    remote_addr: str | None = None


SYSTEM = Who()
_CURRENT: contextvars.ContextVar[Who] = contextvars.ContextVar("audit_who", default=SYSTEM)


def current() -> Who:
    """Who is acting here (``SYSTEM`` where nobody set it: a background loop)."""
    return _CURRENT.get()


@contextmanager
def acting(
    actor: str | None = None, *, surface: str | None = None, remote_addr: str | None = None
) -> Iterator[Who]:
    """Inside the block, events are recorded as done by ``actor`` from ``surface`` (what is
    not given is kept from the enclosing block)."""
    now = _CURRENT.get()
    who = replace(
        now,
        actor=actor if actor is not None else now.actor,
        surface=surface if surface is not None else now.surface,
        remote_addr=remote_addr if remote_addr is not None else now.remote_addr,
    )
    token = _CURRENT.set(who)
    try:
        yield who
    finally:
        _CURRENT.reset(token)


def set_for_request(who: Who) -> None:
    """Set who acts for the rest of this task (an ASGI request: its task ends with it)."""
    _CURRENT.set(who)


def cli_actor() -> str:
    """``cli:<the operating-system user>`` for commands run by hand."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli:unknown"
