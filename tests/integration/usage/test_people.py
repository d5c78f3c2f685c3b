"""People and their accounts against a real PostgreSQL: first sight, /link codes, merges
(two at once), unlink."""

from __future__ import annotations

import asyncio

import pytest

from session_store.repos.people import LinkCodeInvalid
from session_store.store import Store


async def test_an_account_gets_its_person_on_first_sight_and_keeps_it(store: Store) -> None:
    first = await store.people.person_of("telegram:bot:1")
    assert await store.people.person_of("telegram:bot:1") == first
    assert await store.people.person_of("slack:T1:U1") != first


async def test_a_code_joins_two_accounts_once(store: Store) -> None:
    await store.people.save_code("ABCD2345", "telegram:bot:1", ttl_seconds=600)
    person = await store.people.redeem("ABCD2345", "slack:T1:U1")
    assert await store.people.accounts(person) == ("slack:T1:U1", "telegram:bot:1")
    assert await store.people.person_of("slack:T1:U1") == person
    with pytest.raises(LinkCodeInvalid):
        await store.people.redeem("ABCD2345", "web:local:ann")  # used once


async def test_an_expired_code_links_nothing(store: Store) -> None:
    await store.people.save_code("EXPIRED2", "telegram:bot:1", ttl_seconds=-1)
    with pytest.raises(LinkCodeInvalid):
        await store.people.redeem("EXPIRED2", "slack:T1:U1")
    assert await store.people.person_of("telegram:bot:1") != await store.people.person_of(
        "slack:T1:U1"
    )


async def test_merges_at_once_lose_no_account(store: Store) -> None:
    # a chain of merges racing on shared people: every account ends in one person
    accounts = [f"web:local:p{n}" for n in range(8)]
    for a in accounts:
        await store.people.person_of(a)
    pairs = [(accounts[n], accounts[n + 1]) for n in range(len(accounts) - 1)]
    pairs += [(accounts[0], accounts[-1]), (accounts[3], accounts[6])]
    await asyncio.gather(*(store.people.link(a, b) for a, b in pairs))
    people = {await store.people.person_of(a) for a in accounts}
    assert len(people) == 1
    [person] = people
    assert await store.people.accounts(person) == tuple(sorted(accounts))
    listed = await store.people.list_people()
    assert [p.accounts for p in listed] == [tuple(sorted(accounts))]


async def test_two_merges_of_the_same_pair_at_once_agree(store: Store) -> None:
    results = await asyncio.gather(
        store.people.link("telegram:bot:1", "slack:T1:U1"),
        store.people.link("slack:T1:U1", "telegram:bot:1"),
    )
    assert results[0] == results[1]


async def test_unlink_makes_the_account_a_person_of_its_own(store: Store) -> None:
    person = await store.people.link("telegram:bot:1", "slack:T1:U1")
    alone = await store.people.unlink("slack:T1:U1")
    assert alone != person
    assert await store.people.accounts(person) == ("telegram:bot:1",)
    assert await store.people.unlink("slack:T1:U1") == alone  # already alone: no change
