"""Questions about whole documents get whole documents: every passage in reading order when
it fits what is left of the prompt, else the openings and the best matches; ordinary
questions keep the handful of best passages."""

from __future__ import annotations

from gateway.core.domain import SessionKey
from gateway.knowledge.service import Knowledge
from gateway.knowledge.whole import asks_whole, whole_documents
from testsupport.knowledge import drain

KEY = SessionKey(platform="p", scope="s", chat_id="c", thread_id="t")

TOPICS = [
    ("Purpose", "The travel policy covers trips taken for the company."),
    ("Booking", "Book flights through the travel desk at least two weeks ahead."),
    ("Hotels", "Hotels up to 150 euros a night are approved without asking."),
    ("Meals", "Meals are paid up to 40 euros a day with receipts."),
    ("Trains", "Trains are preferred over flights for trips under four hours."),
    ("Claims", "Expense claims are filed within thirty days of the trip."),
    ("Insurance", "Travel insurance is provided by the company for every trip."),
]
HANDBOOK = "# Travel policy\n\n" + "\n\n".join(
    f"## {title}\n\n{text} " + "More detail follows here. " * 30 for title, text in TOPICS
)


async def handbook(k: Knowledge) -> None:
    await k.add("travel.md", HANDBOOK.encode())
    await k.add("menu.md", b"# Canteen\n\nSoup is served on Fridays.")
    await drain(k)


def test_which_questions_ask_for_whole_documents() -> None:
    assert asks_whole("Can you summarise the travel policy?")
    assert asks_whole("compare the two contracts") and asks_whole("TL;DR of this file")
    assert not asks_whole("how much is a hotel night?")
    assert whole_documents("how much is a hotel night?", []) == []


async def test_a_summary_request_gets_the_whole_document_in_reading_order(
    knowledge: Knowledge,
) -> None:
    await handbook(knowledge)
    found = await knowledge.turns.for_turn(KEY, "Summarise the travel policy", token_budget=20_000)
    assert found is not None
    assert found.trace["whole"]["mode"] == "whole"
    assert {p.document_name for p in found.passages} == {"travel.md"}
    ordinals = [p.ordinal for p in found.passages]
    assert ordinals == sorted(ordinals) and len(ordinals) > 5, "every passage, in order"
    text = found.prompt
    assert all(t in text for _, t in TOPICS), "nothing of the document is left out"
    assert text.startswith("The whole document(s) the question is about")
    assert f"[{len(ordinals)}] travel.md" in text


async def test_a_document_too_big_for_the_budget_gets_its_opening_and_best_passages(
    knowledge: Knowledge,
) -> None:
    await handbook(knowledge)
    found = await knowledge.turns.for_turn(
        KEY, "Give me an overview of the travel policy on meals", token_budget=700
    )
    assert found is not None and found.trace["whole"]["mode"] == "partial"
    assert found.passages[0].ordinal == 0, "the opening comes first"
    assert found.prompt.startswith("The document(s) the question is about do not fit whole")
    assert len(found.passages) < 7


async def test_an_ordinary_question_gets_the_best_passages_only(knowledge: Knowledge) -> None:
    await handbook(knowledge)
    found = await knowledge.turns.for_turn(KEY, "when is soup served?", token_budget=20_000)
    assert found is not None and "whole" not in found.trace
    assert found.passages[0].document_name == "menu.md"
