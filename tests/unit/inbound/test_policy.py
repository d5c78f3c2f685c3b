"""The one answer policy: ``decide`` over a table of facts x rules, the place patterns, and
every platform's older settings mapped into the one vocabulary (``rules_for``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from adapters.mattermost.settings import MattermostSettings
from adapters.slack.settings import SlackSettings
from adapters.telegram.settings import TelegramSettings
from gateway.core.domain import Facts, SessionKey, Trigger
from gateway.core.errors import ConfigError
from gateway.core.settings import Settings, load_settings
from gateway.inbound.policy import Action, AnswerRules, PlacePattern, decide
from testsupport.answering import mattermost_rules as mattermost_answer_rules
from testsupport.answering import slack_rules as slack_answer_rules
from testsupport.answering import telegram_rules as telegram_answer_rules

THREAD = SessionKey(platform="slack", scope="T1", chat_id="C1", thread_id="100.1")
PLAIN = Facts(place=THREAD, person="U1")
TOPIC = SessionKey(platform="telegram", scope="bot", chat_id="-1001234567890", thread_id="77")
ANY = AnswerRules()
ALLOW_C1 = AnswerRules(allowed_places=(PlacePattern.parse("slack:*:C1"),))
ALLOW_C2 = AnswerRules(allowed_places=(PlacePattern.parse("slack:*:C2"),), chat_word="channel")
ALLOW_U2 = AnswerRules(allowed_people=frozenset({"U2"}))
ALL_HERE = AnswerRules(answer_all_places=(PlacePattern.parse("slack:*:C1"),))
MENTIONS = AnswerRules(require_mention=True)
BOTS = AnswerRules(answer_bots=True)


def facts(**changes: Any) -> Facts:
    return replace(PLAIN, **changes)


#: (facts, rules, expected action, expected reason)
TABLE: list[tuple[Facts, AnswerRules, Action, str]] = [
    # the bot itself: never, whatever else is true
    (facts(from_self=True, mentioned=True), ANY, Action.IGNORE, "own message"),
    (facts(from_self=True, direct=True), BOTS, Action.IGNORE, "own message"),
    # allow-lists: the place, then the person; a DM or a mention does not pass them
    (facts(direct=True), ALLOW_C2, Action.IGNORE, "channel C1 is not in GATEWAY_ALLOWED_PLACES"),
    (facts(mentioned=True), ALLOW_U2, Action.IGNORE, "user U1 is not in GATEWAY_ALLOWED_PEOPLE"),
    (facts(mentioned=True), ALLOW_C1, Action.ANSWER, "mentioned"),
    (facts(mentioned=True, person="U2"), ALLOW_U2, Action.ANSWER, "mentioned"),
    # a deletion does not say who: the person list cannot refuse it, the place list can
    (facts(person=None), ALLOW_U2, Action.CONTEXT, "not addressed"),
    (facts(person=None), ALLOW_C2, Action.IGNORE, "channel C1 is not in GATEWAY_ALLOWED_PLACES"),
    # other bots: context, unless bots are answered
    (facts(from_bot=True, mentioned=True), ANY, Action.CONTEXT, "from a bot"),
    (facts(from_bot=True, mentioned=True), BOTS, Action.ANSWER, "mentioned"),
    (facts(from_bot=True, direct=True), ALL_HERE, Action.CONTEXT, "from a bot"),
    # posted by the platform itself: context even where everything is answered
    (facts(automatic=True, mentioned=True), ALL_HERE, Action.CONTEXT, "posted by the platform"),
    # a command addressed to the bot, even without content of its own
    (facts(command=True, content=False), ANY, Action.ANSWER, "command"),
    (facts(content=False, direct=True), ANY, Action.CONTEXT, "no content"),
    # addressed: direct, mention, reply to the bot
    (facts(direct=True), ANY, Action.ANSWER, "direct message"),
    (facts(direct=True, thread_reply=True), MENTIONS, Action.ANSWER, "direct message"),
    (facts(mentioned=True, thread_reply=True), MENTIONS, Action.ANSWER, "mentioned"),
    (facts(reply_to_bot=True), ANY, Action.ANSWER, "reply to the bot"),
    # a place that answers everything
    (PLAIN, ALL_HERE, Action.ANSWER, "every message is answered here"),
    (facts(place=replace(THREAD, chat_id="C9")), ALL_HERE, Action.CONTEXT, "not addressed"),
    # a follow-up in a thread: answered if the thread is engaged, unless mentions are required
    (facts(thread_reply=True), ANY, Action.IF_ENGAGED, "thread follow-up"),
    (facts(thread_reply=True), MENTIONS, Action.CONTEXT, "not addressed"),
    # top-level chatter
    (PLAIN, ANY, Action.CONTEXT, "not addressed"),
]


@pytest.mark.parametrize(("given", "rules", "action", "reason"), TABLE)
def test_decide(given: Facts, rules: AnswerRules, action: Action, reason: str) -> None:
    decision = decide(given, rules)
    assert (decision.action, decision.reason) == (action, reason)
    assert decision.ignored is (action is Action.IGNORE)


def test_each_action_has_the_trigger_the_store_understands() -> None:
    expected = {
        Action.ANSWER: Trigger.ALWAYS,
        Action.IF_ENGAGED: Trigger.IF_FOLLOWING,
        Action.CONTEXT: Trigger.NEVER,
        Action.IGNORE: Trigger.NEVER,
    }
    assert {action for _, _, action, _ in TABLE} == set(Action)  # the table reaches them all
    for given, rules, action, _ in TABLE:
        assert decide(given, rules).trigger is expected[action]


def test_a_places_own_answer_rule_is_one_more_input() -> None:
    # a profile's answer = "all" / "mentions", resolved for the place, beats the lists
    chatter = facts(place=replace(THREAD, chat_id="C9"))
    assert decide(chatter, ALL_HERE, answer_all=True).action is Action.ANSWER
    assert decide(PLAIN, ALL_HERE, answer_all=False).action is Action.CONTEXT
    profiles = {"C9": True, "C1": False}
    resolved = replace(ALL_HERE, place_answers_all=lambda key: profiles.get(key.chat_id))
    assert decide(chatter, resolved).action is Action.ANSWER
    assert decide(PLAIN, resolved).action is Action.CONTEXT
    elsewhere = facts(place=replace(THREAD, chat_id="C1", platform="mattermost"))
    unset = replace(ANY, place_answers_all=lambda key: None)
    assert decide(elsewhere, unset).action is Action.CONTEXT
    # the allow-lists and the bot itself still come first
    assert decide(facts(from_self=True), resolved, answer_all=True).ignored
    assert decide(chatter, replace(ALLOW_C1, place_answers_all=lambda k: True)).ignored


@pytest.mark.parametrize(
    ("pattern", "key", "matches"),
    [
        ("slack:*:C1", THREAD, True),
        ("slack:T1:C1", THREAD, True),
        ("slack:T2:C1", THREAD, False),
        ("slack:*:C1:100.1", THREAD, True),
        ("slack:*:C1:100.2", THREAD, False),
        ("*:*:C1", THREAD, True),
        ("telegram:*:C1", THREAD, False),
        ("slack:*:*", THREAD, True),
        (
            "telegram:*:-1001234567890:77",
            TOPIC,
            True,
        ),
        ("telegram:*:-1001234567890", replace(TOPIC, thread_id=None), True),
        ("telegram:*:-1001234567890:77", replace(TOPIC, thread_id=None), False),
    ],
)
def test_place_patterns(pattern: str, key: SessionKey, matches: bool) -> None:
    parsed = PlacePattern.parse(pattern)
    assert parsed.matches(key) is matches
    assert str(parsed) == pattern


@pytest.mark.parametrize("bad", ["slack", "slack:C1", "slack::C1", "a:b:c:d:e", ""])
def test_a_place_that_is_not_a_place_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="platform:scope:chat"):
        PlacePattern.parse(bad)


def settings(**values: Any) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


SLACK = SessionKey(platform="slack", scope="T1", chat_id="C1", thread_id="1.1")
MATTERMOST = SessionKey(platform="mattermost", scope="mm", chat_id="ch1", thread_id="p1")
TELEGRAM = SessionKey(platform="telegram", scope="bot", chat_id="-100", thread_id="7")
ELSEWHERE = {"slack": "C9", "mattermost": "ch9", "telegram": "-999"}


# each platform's rules from the core settings and its own, read from the same values
def telegram_rules(s: Settings) -> AnswerRules:
    return telegram_answer_rules(s.surface(TelegramSettings), s)


def slack_rules(s: Settings) -> AnswerRules:
    return slack_answer_rules(s.surface(SlackSettings), s)


def mattermost_rules(s: Settings) -> AnswerRules:
    return mattermost_answer_rules(s.surface(MattermostSettings), s)


#: platform, its rules builder, a place of it, and its older settings' names
PLATFORMS = [
    ("slack", slack_rules, SLACK, "SLACK_ALLOWED_CHANNELS", "SLACK_ALLOWED_USERS"),
    (
        "mattermost",
        mattermost_rules,
        MATTERMOST,
        "MATTERMOST_ALLOWED_CHANNELS",
        "MATTERMOST_ALLOWED_USERS",
    ),
    ("telegram", telegram_rules, TELEGRAM, "TELEGRAM_ALLOWED_CHATS", "TELEGRAM_ALLOWED_USERS"),
]
ANSWER_ALL = {
    "slack": "SLACK_ANSWER_ALL_CHANNELS",
    "mattermost": "MATTERMOST_ANSWER_ALL_CHANNELS",
    "telegram": "TELEGRAM_ANSWER_ALL_CHATS",
}


@pytest.mark.parametrize(("platform", "rules_of", "place", "chats", "users"), PLATFORMS)
def test_each_older_setting_is_a_shorthand_for_the_one_vocabulary(
    platform: str, rules_of: Any, place: SessionKey, chats: str, users: str
) -> None:
    """The older list and its ``GATEWAY_*`` form decide every fact alike."""
    chat, other = place.chat_id, ELSEWHERE[platform]
    pairs: list[tuple[dict[str, Any], dict[str, Any]]] = [
        ({chats: chat}, {"GATEWAY_ALLOWED_PLACES": f"{platform}:*:{chat}"}),
        ({chats: other}, {"GATEWAY_ALLOWED_PLACES": f"{platform}:*:{other}"}),
        ({users: "P1"}, {"GATEWAY_ALLOWED_PEOPLE": f"{platform}:P1"}),
        ({users: "P2"}, {"GATEWAY_ALLOWED_PEOPLE": f"{platform}:P2"}),
        ({ANSWER_ALL[platform]: chat}, {"GATEWAY_ANSWER_ALL_PLACES": f"{platform}:*:{chat}"}),
    ]
    if platform != "telegram":
        pairs.append(
            ({f"{platform.upper()}_REQUIRE_MENTION": True}, {"GATEWAY_REQUIRE_MENTION": True})
        )
    samples = [
        Facts(place=place, person="P1"),
        Facts(place=place, person="P1", mentioned=True),
        Facts(place=place, person="P1", thread_reply=True),
        Facts(place=place, person="P1", from_bot=True, mentioned=True),
    ]
    for older, one in pairs:
        old_rules, new_rules = rules_of(settings(**older)), rules_of(settings(**one))
        got = [decide(f, old_rules).action for f in samples]
        assert got == [decide(f, new_rules).action for f in samples], (older, one)
    # the refusal names the setting that refused
    refused = decide(samples[0], rules_of(settings(**{chats: other})))
    assert refused.ignored and refused.reason.endswith(f"is not in {chats}")
    both = rules_of(settings(**{chats: other, "GATEWAY_ALLOWED_PLACES": f"{platform}:*:{other}"}))
    assert decide(samples[0], both).reason.endswith(f"GATEWAY_ALLOWED_PLACES or {chats}")


@pytest.mark.parametrize(("platform", "rules_of", "place", "chats", "users"), PLATFORMS)
def test_a_list_restricts_only_the_platforms_it_names(
    platform: str, rules_of: Any, place: SessionKey, chats: str, users: str
) -> None:
    mentioned = Facts(place=place, person="P1", mentioned=True)
    others = "telegram" if platform != "telegram" else "slack"
    free = rules_of(
        settings(GATEWAY_ALLOWED_PLACES=f"{others}:*:X", GATEWAY_ALLOWED_PEOPLE=f"{others}:X")
    )
    assert decide(mentioned, free).action is Action.ANSWER
    everywhere = rules_of(settings(GATEWAY_ALLOWED_PLACES="*:*:X", GATEWAY_ALLOWED_PEOPLE="*:P1"))
    assert decide(mentioned, everywhere).ignored
    assert (
        decide(mentioned, rules_of(settings(GATEWAY_ALLOWED_PEOPLE="*:P1"))).action is Action.ANSWER
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("GATEWAY_ALLOWED_PLACES", "slack:C1"),
        ("GATEWAY_ANSWER_ALL_PLACES", "slack"),
        ("GATEWAY_ALLOWED_PEOPLE", "U1"),
        ("GATEWAY_ALLOWED_PEOPLE", ":U1"),
    ],
)
def test_settings_refuse_a_place_or_person_written_otherwise(name: str, value: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(_env_file=None, **{name: value})
    assert refused.value.setting == name
