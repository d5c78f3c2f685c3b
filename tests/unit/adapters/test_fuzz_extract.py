"""Fuzzing every platform's extract with mutations of the real payloads in
``../shared/payloads`` (testsupport/payloads): no exception escapes, every input becomes an
Envelope, Ignored or Rejected, and what intake makes of it is storable (no NUL, no lone
surrogate)."""

from __future__ import annotations

import copy
import json
from dataclasses import fields, is_dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.mattermost.extract import BotIdentity as MmBot
from adapters.mattermost.extract import ExtractContext
from adapters.mattermost.extract import extract_event as mattermost_extract
from adapters.slack.extract import BotIdentity as SlackBot
from adapters.slack.extract import extract_event as slack_extract
from adapters.telegram.extract import BotIdentity as TgBot
from adapters.telegram.extract import extract_update
from adapters.web.extract import extract as web_extract
from gateway.core.domain import Envelope, Ignored, Rejected
from gateway.inbound.cleaning import clean_raw
from gateway.inbound.ingress import admit
from gateway.inbound.intake import to_inbound
from gateway.inbound.policy import AnswerRules
from testsupport.paths import PAYLOADS

EXAMPLES = 150

#: values a hostile or broken platform might put anywhere
NASTY = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    # json.loads refuses integers over 4300 digits, so none longer ever reaches extract
    st.sampled_from([10**4000, float("nan"), float("inf"), -0.0, 2**63, -(2**63) - 1]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(["\u0000", "a\u0000b", "\ud800", "x\udfffy", "", " ", "@GatewayTestBot"]),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3),
)


def _payload(prefix: str) -> list[dict[str, Any]]:
    out = []
    for path in sorted(PAYLOADS.glob(f"{prefix}*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict):
            out.append(data)
    return out


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            found.extend(_paths(item, (*prefix, key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found.extend(_paths(item, (*prefix, index)))
    return found


@st.composite
def mutated(draw: st.DrawFn, prefix: str) -> dict[str, Any]:
    base = copy.deepcopy(draw(st.sampled_from(_payload(prefix))))
    paths = _paths(base)
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        path = draw(st.sampled_from(paths))
        parent: Any = base
        try:
            for key in path[:-1]:
                parent = parent[key]
            if draw(st.booleans()) and isinstance(parent, dict):
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = draw(NASTY)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation replaced the way there
    return base


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(value, list | tuple):
        return [s for v in value for s in _strings(v)]
    if is_dataclass(value) and not isinstance(value, type):
        return [s for f in fields(value) for s in _strings(getattr(value, f.name))]
    return []


def _check(result: object, raw: dict[str, Any]) -> None:
    assert isinstance(result, Envelope | Ignored | Rejected)
    item = to_inbound(result)
    stored_raw = clean_raw(raw, set())
    for text in (*_strings(item), *_strings(stored_raw)):
        assert "\x00" not in text
        text.encode("utf-8")  # no lone surrogate
    json.dumps(stored_raw, allow_nan=False)  # jsonb takes it


FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(mutated("telegram_update"))
def test_telegram_extract_never_raises(update: dict[str, Any]) -> None:
    bot = TgBot(id=5550001, username="GatewayTestBot")
    _check(admit(extract_update(update, bot=bot), AnswerRules()), update)


@FUZZ
@given(mutated("slack_"))
def test_slack_extract_never_raises(payload: dict[str, Any]) -> None:
    me = SlackBot(user_id="UBOT", bot_id="BBOT", team_id="T1")
    _check(admit(slack_extract(payload, me=me), AnswerRules()), payload)


@FUZZ
@given(mutated("mattermost_"))
def test_mattermost_extract_never_raises(event: dict[str, Any]) -> None:
    ctx = ExtractContext(scope="team", bot=MmBot(user_id="b0t", username="gatewaybot"))
    _check(mattermost_extract(event, ctx=ctx), event)


@FUZZ
@given(
    st.dictionaries(
        st.sampled_from(["text", "client_msg_id", "thread_id", "user", "other"]),
        NASTY,
        max_size=5,
    )
)
def test_web_extract_never_raises(body: dict[str, Any]) -> None:
    _check(web_extract("general", body, sender="local"), body)
