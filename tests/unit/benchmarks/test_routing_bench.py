"""The routing benchmark's labelled set and its scoring: known families only, about sixty
messages, and a side query that answers from the labels lifts recall over keywords alone."""

from __future__ import annotations

from benchmarks import routing


def test_the_labelled_set_names_known_families_only() -> None:
    rows = routing.load()
    assert 50 <= len(rows) <= 80
    known = set(routing.families_of(routing.POLICIES))
    assert {f for r in rows for f in r.families} == known
    assert any(not r.families for r in rows)  # messages that need no tool count too


async def test_a_noiseless_side_query_answers_every_asked_message_right() -> None:
    rows = routing.load()
    labels = {r.message: r.families for r in rows}
    exact = routing.ScriptedModel(
        labels, sorted(routing.families_of(routing.POLICIES)), miss=0.0, wrong=0.0
    )
    alone = routing.keywords_alone(rows)
    asked = await routing.with_side_query(rows, exact, name="exact", model="m", timeout=3)
    assert asked.asked > 0 and asked.failed == 0
    assert asked.recall > alone.recall
    # what keywords alone already chose is kept: nothing it got right is lost
    assert asked.right >= alone.right
    table = routing.render([alone.row(), asked.row()], len(rows))
    assert "keywords alone" in table and f"{asked.recall:.3f}" in table
