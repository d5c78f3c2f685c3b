"""The one boundary classifies what the fault campaign and poison inputs produced."""

from __future__ import annotations

import asyncpg
import pytest

from session_store.db import translate
from session_store.store import Store


def test_a_connection_left_mid_protocol_is_transient() -> None:
    error = translate(
        asyncpg.InternalClientError(
            "cannot switch to state 12; another operation (2) is in progress"
        )
    )
    assert error is not None and error.transient


def test_text_that_cannot_be_encoded_is_permanent() -> None:
    error = translate(UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed"))
    assert error is not None and not error.transient and error.sqlstate == "22021"


async def test_an_argument_asyncpg_cannot_encode_is_permanent_not_a_lost_connection(
    store: Store,
) -> None:
    from gateway.core.errors import StoreError

    with pytest.raises(StoreError) as caught:
        async with store.db.connection() as conn:
            await conn.fetchval("SELECT $1::int4", 2**40)  # out of range for int4
    assert not caught.value.transient
    await store.ping()  # the pool is fine
