"""The shapes of the operator API's text parameters, as patterns its OpenAPI document declares
(so a client, or schemathesis, knows what the server accepts before it asks). Each pattern
says exactly what its parser takes: no control characters (NUL among them), no white space
where the parser strips it, and the parts a place or key needs."""

from __future__ import annotations

import re
from datetime import date, datetime
from typing import Annotated, Any

from pydantic import BeforeValidator

#: a character of a name or an id: anything but control characters
_C = r"[^\u0000-\u001f\u007f]"
#: one part of a place or key: no ':' (and no white space, which the parsers strip or refuse)
_PART = r"[^:\s\u0000-\u001f\u007f]"

#: a knowledge base's name
NAME = rf"^{_C}+$"
#: ``platform:scope:chat`` (the scope may hold ':', a Mattermost server ``host:8065``)
CHAT = rf"^{_PART}+:{_C}+:{_PART}+$"
#: ``platform:scope:chat:thread``, ``-`` or nothing for no thread
SESSION_KEY = rf"^{_PART}+:{_C}+:{_PART}+:{_PART}*$"
#: a session key in printable ASCII (what every platform's ids are): a page asks for up to 50
#: at once in one URL, which stays within what the server reads of a request line
ASCII_KEY = r"^[!-9;-~]+:[!-~]+:[!-9;-~]+:[!-9;-~]*$"
#: in a URL path a key has no ``%`` either, not even a key's own escapes (``%3A``): a client
#: that sends it without percent-encoding it (schemathesis does) has the server decode
#: ``%3A`` to ``:`` and ``%0E`` to a control character; a session whose key holds one (a Matrix
#: room ``!x%3Aserver``, a Teams conversation) is addressed by its id there
_PATH_C = r"[^%\u0000-\u001f\u007f]"
_PATH_PART = r"[^%:\s\u0000-\u001f\u007f]"
#: a session's id, or its key
SESSION_REF = rf"^([0-9]{{1,19}}|{_PATH_PART}+:{_PATH_C}+:{_PATH_PART}+:{_PATH_PART}*)$"
#: ``platform:scope:chat[:thread]`` with no ``*``, as ``[places]`` writes a place
PLACE = r"^[^:*\s\u0000-\u001f\u007f]+(:[^:*\s\u0000-\u001f\u007f]+){2,3}$"
#: a schedule's place: ``platform:scope:chat[:thread]``, a scope may hold ':'
SCHEDULE_PLACE = r"^[^:*\s\u0000-\u001f\u007f]+(:[^:*\s\u0000-\u001f\u007f]+){2,}:?$"
#: any text but NUL (which no path or query may carry: gateway.http.guard refuses it)
TEXT = r"^[^\u0000]*$"
#: a character a search can find: an ASCII letter, digit or ``_``, or any character past ASCII.
#: Written as a class every regex dialect reads alike (``\w`` is ASCII in JSON Schema's
#: ECMA-262 and Unicode in Python and pydantic, so the schema and the server disagreed on "é")
WORD_CHARACTER = r"[^\u0000-\u002f\u003a-\u0040\u005b-\u005e\u0060\u007b-\u007f]"
#: search words: at least one character a search can find, no NUL
SEARCH = rf"^[^\u0000]*{WORD_CHARACTER}[^\u0000]*$"
#: a listing's ``next_cursor``: a keyset position, the last row's sort key written plainly,
#: so every value of the shape is a position (``gateway.http.operator``). By one id (or seq),
#: newest first: the rows before that id
CURSOR = r"^[0-9]{1,19}$"
#: the sessions' position: the last activity (microseconds since 1970, UTC; empty for none)
#: and the id, joined by ``_``
SESSION_CURSOR = r"^(-?[0-9]{1,18})?_[0-9]{1,19}$"
#: the audit log's position: the time (microseconds since 1970, UTC) and the id
AUDIT_CURSOR = r"^-?[0-9]{1,18}_[0-9]{1,19}$"


_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
_INSTANT = re.compile(
    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})", re.I
)


def _written(shape: re.Pattern[str], what: str) -> Any:
    def check(value: Any) -> Any:
        # pydantic would also take a number (seconds since 1970) for a date or a time
        if isinstance(value, str) and not shape.fullmatch(value.strip()):
            raise ValueError(f"write {what}")
        return value

    return BeforeValidator(check)


#: a day written ``YYYY-MM-DD`` (OpenAPI ``format: date``)
Day = Annotated[date, _written(_DAY, "a day as YYYY-MM-DD")]
#: an instant written as RFC 3339, with its offset (OpenAPI ``format: date-time``)
Instant = Annotated[
    datetime, _written(_INSTANT, "a time with its time zone, as 2026-01-31T12:00:00Z")
]
