"""Teams extraction never raises: activities as the fake Bot Framework sends them (a channel
post, a reply in its chain, a chat message, an edit, a deletion, a card press, a reaction),
with up to four fields removed or replaced by hostile values, go through the adapter's path
(the SDK's model, then extraction, the door's verdict, the feedback and press readers) to a
value the store takes, or to a ``ValueError`` the adapter keeps as a dead letter."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from adapters.teams.extract import card_press, extract_activity, parse_activity, reaction_of
from gateway.inbound.ingress import admit
from gateway.inbound.policy import AnswerRules
from tests.unit.adapters.test_fuzz_extract import FUZZ, NASTY, _check, _paths
from testsupport.fakes.teams import ANN, FakeTeams

_FAKE = FakeTeams()


def _seeds() -> list[dict[str, Any]]:
    fake = _FAKE
    post = fake.user_message(fake.channel, "hello")
    reply = fake.user_message(fake.channel, "more", thread=post["id"], mention=False)
    chat = fake.user_message(fake.personal_chat(), "hi", mention=False)
    edit = dict(post, type="messageUpdate")
    delete = {k: v for k, v in post.items() if k not in ("text", "entities")}
    delete["type"] = "messageDelete"
    press = fake._activity("invoke", fake.channel, person=ANN, root=post["id"])
    press.update(
        name="adaptiveCard/action",
        replyToId="1",
        value={
            "action": {"type": "Action.Execute", "verb": "approve", "data": {"approval_id": "a"}}
        },
    )
    reaction = fake._activity("messageReaction", fake.channel, person=ANN, root=post["id"])
    reaction.update(replyToId="1", reactionsAdded=[{"type": "like"}])
    return [post, reply, chat, edit, delete, press, reaction]


SEEDS = _seeds()


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    base = copy.deepcopy(draw(st.sampled_from(SEEDS)))
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
            continue
    return base


@FUZZ
@given(mutated())
def test_teams_extract_never_raises(payload: dict[str, Any]) -> None:
    try:
        activity = parse_activity(payload)
    except ValueError:
        return  # the adapter stores it as a dead letter, answered 400
    _check(admit(extract_activity(activity), AnswerRules()), payload)
    card_press(activity)
    reaction_of(activity)
