"""When schedules fire: one-shot times in a time zone, cron next firings (croniter), the
missed-firing policy, places, and the /schedule command's grammar."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gateway.core.domain import SessionKey
from gateway.core.errors import RequestError
from gateway.schedules.command import _AT, _CRON, argument_of
from gateway.schedules.places import parse_place, place_text
from gateway.schedules.timing import MAX_LATE, check_cron, next_cron, parse_at, plan
from gateway.schedules.worker import Settled, outcome_of, place_gone
from session_store.repos.schedules import OpenFiring

NOW = datetime(2026, 12, 3, 22, 0, tzinfo=UTC)  # a Thursday


def test_a_one_shot_time_is_read_in_its_time_zone() -> None:
    assert parse_at("2026-12-04 09:00") == datetime(2026, 12, 4, 9, 0, tzinfo=UTC)
    assert parse_at("2026-12-04 09:00", "Europe/Berlin") == datetime(2026, 12, 4, 8, tzinfo=UTC)
    assert parse_at("2026-12-04T09:00:00+02:00", "Europe/Berlin") == datetime(
        2026, 12, 4, 7, tzinfo=UTC
    )


@pytest.mark.parametrize("bad", ["tomorrow", "2026-13-01 09:00", "09:00", ""])
def test_a_time_that_is_not_one_is_a_400(bad: str) -> None:
    with pytest.raises(RequestError, match="not a time"):
        parse_at(bad)


def test_an_unknown_time_zone_is_named() -> None:
    with pytest.raises(RequestError, match="Mars/Olympus"):
        parse_at("2026-12-04 09:00", "Mars/Olympus")


def test_cron_next_firing_is_in_the_time_zone_and_skips_weekends() -> None:
    # Friday 09:00 Berlin is 08:00 UTC; after it, the next weekday is Monday
    friday = next_cron("0 9 * * 1-5", "Europe/Berlin", NOW)
    assert friday == datetime(2026, 12, 4, 8, 0, tzinfo=UTC)
    assert next_cron("0 9 * * 1-5", "Europe/Berlin", friday) == datetime(
        2026, 12, 7, 8, 0, tzinfo=UTC
    )


def test_a_seconds_field_steps_in_seconds() -> None:
    assert next_cron("* * * * * */2", "UTC", NOW) == NOW + timedelta(seconds=2)


@pytest.mark.parametrize("bad", ["", "every day", "61 * * * *", "* * *"])
def test_a_bad_cron_expression_is_a_400(bad: str) -> None:
    with pytest.raises(RequestError, match="cron expression"):
        check_cron(bad)


def test_a_firing_less_than_an_hour_late_runs_once_and_the_next_is_after_now() -> None:
    due = NOW - timedelta(minutes=59)
    p = plan(cron="*/5 * * * *", tz="UTC", due=due, now=NOW)
    assert p.action == "fire"
    assert p.next_fire_at == NOW + timedelta(minutes=5)


def test_a_firing_an_hour_late_or_more_is_skipped() -> None:
    p = plan(cron=None, tz="UTC", due=NOW - MAX_LATE, now=NOW)
    assert p.action == "skip"
    assert p.next_fire_at is None  # a one-shot is done
    assert p.reason is not None and "1 h" in p.reason


def test_a_replica_down_a_week_does_not_fire_seven_times() -> None:
    """The next firing is computed from now, not from the missed one: one skip, then the
    next day's firing."""
    due = NOW - timedelta(days=7)
    p = plan(cron="0 9 * * *", tz="UTC", due=due, now=NOW)
    assert p.action == "skip"
    assert p.next_fire_at == datetime(2026, 12, 4, 9, 0, tzinfo=UTC)


def test_places_are_exact_and_keep_their_thread() -> None:
    assert parse_place("slack:T1:C1") == SessionKey(platform="slack", scope="T1", chat_id="C1")
    key = parse_place("slack:T1:C1:1700000000.000100")
    assert key.thread_id == "1700000000.000100"
    assert parse_place("telegram:bot:-1001:77").thread_id == "77"
    assert parse_place("mattermost:host:8065:chan:-") == SessionKey(
        platform="mattermost", scope="host:8065", chat_id="chan"
    )
    assert place_text(key) == "slack:T1:C1:1700000000.000100"
    for bad in ("slack", "slack:T1", "slack:*:C1", "slack::C1"):
        with pytest.raises(RequestError):
            parse_place(bad)


def test_the_schedule_command_grammar() -> None:
    assert argument_of("<@U1> /schedule list") == "list"
    at = _AT.match("at 2026-12-04 09:00 daily digest please")
    assert at is not None and at["when"] == "2026-12-04 09:00"
    assert at["text"] == "daily digest please"
    cron = _CRON.match("cron \u201c0 9 * * 1-5\u201d standup")  # Slack curls the quotes
    assert cron is not None and cron["expr"] == "0 9 * * 1-5" and cron["text"] == "standup"


def _firing(**kw: object) -> OpenFiring:
    values: dict[str, object] = dict(
        id=1,
        schedule_id=1,
        session_id=1,
        seq_no=3,
        answer_seq=3,
        parts=1,
        sent=1,
        failed=0,
        error=None,
        apology=False,
    )
    values.update(kw)
    return OpenFiring(**values)  # type: ignore[arg-type]


def test_a_firing_outcome_comes_from_its_answer_deliveries() -> None:
    assert outcome_of(_firing()) == Settled("sent", None)
    assert outcome_of(_firing(sent=0)) is None  # still on its way
    assert outcome_of(_firing(answer_seq=None)) == Settled("failed", "the turn gave no answer")
    failed = outcome_of(_firing(sent=0, failed=1, error="not_in_channel"))
    assert failed == Settled("failed", "not_in_channel")
    assert place_gone("Bad Request: chat not found") and place_gone("not_in_channel")
    assert not place_gone("rate limited")
