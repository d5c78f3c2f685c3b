"""The chat commands the gateway answers itself, written once for every surface.

Each adapter finds a command at the start of a message addressed to the bot (after taking off
its own mention syntax) with :func:`command_name`; the turn's commands stage answers it
(``gateway.turns.stages.commands``). A capability that adds a command adds it here and its
answer as a :class:`~gateway.turns.stages.commands.CommandHandler`: the adapters need no change.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "COMMANDS",
    "Command",
    "ParsedCommand",
    "command_name",
    "decision_text",
    "parse_command",
]


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    #: one line for ``/help`` and Telegram's command menu (3-256 characters)
    summary: str


#: in the order ``/help`` lists them
COMMANDS: Mapping[str, Command] = {
    c.name: c
    for c in (
        Command("new", "Start a fresh session here (this thread only)"),
        Command("model", "List the models, or pick one for this thread: /model NAME"),
        Command("profile", "What the assistant is here: profile, model, tools, knowledge"),
        Command("usage", "Your spend and tokens today and this month, and your limits"),
        Command("link", "Join your accounts on other platforms: /link, then /link CODE there"),
        Command("schedule", "Questions asked here on a schedule: /schedule at|cron|list|cancel"),
        Command("pause", "Pause this session: messages are kept, nothing is answered"),
        Command("resume", "Resume a paused session and answer what arrived meanwhile"),
        Command("decision", "Record a decision of this session: /decision TEXT"),
        Command("stop", "Stop the answer being written in this thread"),
        Command("help", "Show what this bot can do"),
    )
}

# "/name" or "/name@addressee" (Telegram), then the end or white space
_LEADING = re.compile(r"^/([A-Za-z0-9_]{1,32})(?:@([A-Za-z0-9_.\-]{1,64}))?(?=\s|$)")


@dataclass(frozen=True, slots=True)
class ParsedCommand:
    name: str
    #: ``/new@SomeBot``: the bot the command was sent to (``None``: any)
    addressee: str | None
    #: the text after the command word, stripped (``/model gpt-4o`` -> ``gpt-4o``)
    argument: str


def parse_command(text: str) -> ParsedCommand | None:
    """The command a message starts with (its mention already taken off), if it is one of
    :data:`COMMANDS`; ``/newer``, ``/unknown`` and ``hello /new`` are text."""
    body = text.strip()
    match = _LEADING.match(body)
    if match is None:
        return None
    name = match.group(1).lower()
    if name not in COMMANDS:
        return None
    return ParsedCommand(name=name, addressee=match.group(2), argument=body[match.end() :].strip())


def command_name(text: str, *, bot_username: str | None = None) -> str | None:
    """The command's name, or ``None``; a command addressed to another bot
    (``/new@OtherBot``) is not ours when ``bot_username`` is given."""
    parsed = parse_command(text)
    if parsed is None:
        return None
    if parsed.addressee and bot_username and parsed.addressee.lower() != bot_username.lower():
        return None
    return parsed.name


_DECISION = re.compile(r"/decision(?:@\S*)?\s+", re.IGNORECASE)


def decision_text(content: str) -> str:
    """The decision of a ``/decision TEXT`` message (its content as typed, a mention
    included); other content as it is."""
    match = _DECISION.search(content)
    return content[match.end() :].strip() if match else content.strip()
