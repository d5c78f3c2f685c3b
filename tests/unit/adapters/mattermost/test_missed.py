"""What one post fetched by reconciliation yields since the channel's cursor
(``missed_since``, pure): the table of create / edit / delete times against the cursor."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from adapters.mattermost.extract import missed_since, post_order
from gateway.core.domain import Envelope, EventKind
from tests.unit.adapters.mattermost.test_extract import CTX
from testsupport.mattermost import load_payload

CURSOR = 1_000


def fetched(*, create_at: int, edit_at: int = 0, delete_at: int = 0) -> dict[str, Any]:
    """The captured post as the REST API returns it, with its times set."""
    frame = load_payload("mattermost_ws_posted_root_post.capture.json")
    post: dict[str, Any] = json.loads(frame["data"]["post"])
    post.update(create_at=create_at, edit_at=edit_at, delete_at=delete_at)
    return post


@pytest.mark.parametrize(
    ("times", "kinds", "new"),
    [
        ({"create_at": 1_500}, [EventKind.MESSAGE], True),
        ({"create_at": CURSOR}, [EventKind.MESSAGE], True),  # the cursor's own millisecond
        ({"create_at": 1_500, "edit_at": 1_600}, [EventKind.MESSAGE, EventKind.EDIT], True),
        ({"create_at": 500, "edit_at": 1_600}, [EventKind.EDIT], False),
        ({"create_at": 500, "delete_at": 1_600}, [EventKind.DELETE], False),
        # created and deleted while away: only the deletion, never answered
        ({"create_at": 1_500, "edit_at": 1_550, "delete_at": 1_600}, [EventKind.DELETE], True),
        ({"create_at": 500, "delete_at": 900}, [], False),  # deleted before: nothing new
        ({"create_at": 500, "edit_at": 900}, [], False),  # a thread root sent for context
        ({"create_at": 500}, [], False),
    ],
)
def test_what_a_missed_post_yields(
    times: dict[str, int], kinds: list[EventKind], new: bool
) -> None:
    missed = missed_since(
        fetched(**times), cursor=CURSOR, ctx=CTX, channel_type="O", team_id="team1"
    )
    assert missed.new is new
    events = [e for e in missed.events if isinstance(e, Envelope)]
    assert len(events) == len(missed.events)  # all of them envelopes
    assert [e.kind for e in events] == kinds
    assert all(e.metadata["source"] == "reconcile" for e in events)
    # the team is known for the message itself (the websocket path has it too)
    assert [e.metadata.get("team_id") for e in events] == [
        "team1" if k is EventKind.MESSAGE else None for k in kinds
    ]


def test_posts_are_handled_in_creation_order_then_by_id() -> None:
    posts: list[Mapping[str, Any]] = [
        {"id": "b", "create_at": 2},
        {"id": "a", "create_at": 2},
        {"id": "c", "create_at": 1},
        {"id": "d"},
    ]
    assert [p["id"] for p in sorted(posts, key=post_order)] == ["d", "c", "a", "b"]
