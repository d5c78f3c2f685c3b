"""The ingress steps every adapter shares (gateway/ingress.py): safe extraction, reaction
feedback, submit, and the dead letter of an unreadable webhook body."""

from __future__ import annotations

import json

import pytest
from starlette.responses import Response

from gateway.core.domain import Extracted, Ignored, Reaction, Rejected
from gateway.core.ports import IngestOutcome
from gateway.inbound.ingress import BODY_KEPT, JsonBody, ingest, json_body
from testsupport.harness import RecordingIntake

RAW = {"update_id": 7, "something": "new"}


def _ignored() -> Extracted:
    return Ignored(platform="test", reason="not a message", event_id="7")


def _buggy() -> Extracted:
    raise KeyError("chat")


async def test_an_extraction_bug_is_a_dead_letter_with_the_reason() -> None:
    intake = RecordingIntake()
    extracted, outcome = await ingest(
        intake, platform="test", raw=RAW, extract=_buggy, event_id="7"
    )
    assert extracted == Rejected(
        platform="test", reason="extraction failed: KeyError: 'chat'", event_id="7"
    )
    assert outcome.status == "rejected"
    [(stored, raw)] = intake.submitted
    assert stored == extracted and raw == RAW


async def test_the_extracted_event_is_submitted_with_its_raw_payload() -> None:
    intake = RecordingIntake()
    extracted, outcome = await ingest(intake, platform="test", raw=RAW, extract=_ignored)
    assert extracted == _ignored() and outcome.status == "ignored"
    assert [(s.extracted, s.raw) for s in intake.submitted] == [(_ignored(), RAW)]


async def test_a_reaction_is_recorded_as_feedback_and_the_event_still_submitted() -> None:
    intake = RecordingIntake()
    thumbs = Reaction(chat_id="C1", message_id="m9", user_id="U1", value=-1)
    await ingest(intake, platform="test", raw=RAW, extract=_ignored, reaction=lambda: thumbs)
    assert intake.feedback == [
        {"platform": "test", "chat_id": "C1", "message_id": "m9", "user_id": "U1", "value": -1}
    ]
    assert intake.extracted == [_ignored()]


async def test_a_bug_reading_the_reaction_loses_the_feedback_not_the_event() -> None:
    intake = RecordingIntake()

    def buggy_reaction() -> Reaction | None:
        raise TypeError("bad emoji")

    await ingest(intake, platform="test", raw=RAW, extract=_ignored, reaction=buggy_reaction)
    assert intake.feedback == []
    assert intake.extracted == [_ignored()]


async def test_not_stored_raises_so_the_adapter_answers_with_a_retry() -> None:
    intake = RecordingIntake(fail_next=1)
    with pytest.raises(RuntimeError):
        await ingest(intake, platform="test", raw=RAW, extract=_ignored)
    assert intake.submitted == [] and intake.attempts == 1


async def test_an_adapter_may_wrap_the_submit() -> None:
    intake = RecordingIntake()
    seen: list[Extracted] = []

    async def submit(extracted: Extracted) -> IngestOutcome:
        seen.append(extracted)  # e.g. Slack stores the thread's history first
        return await intake.submit(extracted, raw={"wrapped": True})

    await ingest(intake, platform="test", raw=RAW, extract=_ignored, submit=submit)
    assert seen == [_ignored()]
    assert [s.raw for s in intake.submitted] == [{"wrapped": True}]


# --- webhook bodies -----------------------------------------------------------------------


@pytest.mark.parametrize("body", [b'{"a": 1}', b"[1, 2]", b"null"])
async def test_json_is_parsed_and_nothing_is_stored(body: bytes) -> None:
    intake = RecordingIntake()
    parsed = await json_body(intake, body, platform="test", error={"error": "bad"})
    assert parsed == JsonBody(json.loads(body))
    assert intake.submitted == []


@pytest.mark.parametrize(
    ("body", "object_only", "reason"),
    [
        (b"{not json", False, "request body is not JSON"),
        (b"\xff\xfe", False, "request body is not JSON"),
        (b"", False, "request body is not JSON"),
        (b"[1, 2]", True, "request body is not a JSON object"),
    ],
)
async def test_a_body_that_is_not_json_is_a_dead_letter_answered_400(
    body: bytes, object_only: bool, reason: str
) -> None:
    intake = RecordingIntake()
    answer = await json_body(
        intake, body, platform="test", error={"ok": False}, object_only=object_only
    )
    assert isinstance(answer, Response) and answer.status_code == 400
    assert json.loads(bytes(answer.body)) == {"ok": False}
    [(rejected, raw)] = intake.submitted
    assert rejected == Rejected(platform="test", reason=reason)
    assert raw == {"body": body.decode("utf-8", errors="replace")}


async def test_the_dead_letter_keeps_only_the_start_of_a_huge_body() -> None:
    intake = RecordingIntake()
    await json_body(intake, b"x" * (BODY_KEPT + 10), platform="test", error={})
    [(_, raw)] = intake.submitted
    assert raw == {"body": "x" * BODY_KEPT}
