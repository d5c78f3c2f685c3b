"""Price sets are stored as JSON objects (``prices->'model'`` works in SQL), and the rows
written before as a JSON string inside jsonb are repaired by their migration."""

from __future__ import annotations

import json
from decimal import Decimal

import asyncpg
import pytest

from gateway.usage.config import Price, PriceSet
from session_store.migrator import load_migrations, migrate
from session_store.store import Store

PRICES = {
    "small": {"input": "1.0", "output": "2.0"},
    "big": {"input": "10", "output": "30.5"},
}


async def test_a_price_set_written_by_the_store_reads_back_as_an_object(store: Store) -> None:
    version = await store.usage.price_version("d1", PRICES)
    async with store.db.connection() as conn:
        row = await conn.fetchrow(
            "SELECT prices, jsonb_typeof(prices) AS type, prices->'small'->>'output' AS out "
            "FROM price_sets WHERE version = $1",
            version,
        )
    assert row["type"] == "object"
    assert row["prices"] == PRICES  # a dict in Python, not the text of one
    assert row["out"] == "2.0"
    # the same digest is the same version; another digest is a new one, also an object
    assert await store.usage.price_version("d1", PRICES) == version
    newer = await store.usage.price_version("d2", {"small": {"input": "3", "output": "4"}})
    async with store.db.connection() as conn:
        assert (
            await conn.fetchval(
                "SELECT prices->'small'->>'input' FROM price_sets WHERE version = $1", newer
            )
            == "3"
        )


async def test_the_usage_config_prices_are_stored_per_model(store: Store) -> None:
    """What the usage service hands the store (the config's table as JSON)."""
    table = PriceSet(
        prices={
            m: Price(input=Decimal(p["input"]), output=Decimal(p["output"]))
            for m, p in PRICES.items()
        }
    )
    version = await store.usage.price_version(table.digest, table.as_json())
    async with store.db.connection() as conn:
        models = await conn.fetchval(
            "SELECT array_agg(m ORDER BY m) FROM price_sets, jsonb_object_keys(prices) AS m "
            "WHERE version = $1",
            version,
        )
        big = await conn.fetchval(
            "SELECT prices->'big' FROM price_sets WHERE version = $1", version
        )
    assert models == ["big", "small"]
    assert big is not None and big["output"] == "30.5"


async def test_a_string_is_refused_as_a_price_set(store: Store) -> None:
    async with store.db.connection() as conn:
        with pytest.raises(asyncpg.CheckViolationError, match="price_sets_prices_object"):
            await conn.execute(
                "INSERT INTO price_sets (digest, prices) VALUES ('x', $1)", json.dumps(PRICES)
            )


async def test_price_sets_written_double_encoded_are_repaired_by_the_migration(
    empty_database_url: str,
) -> None:
    migrations = load_migrations()
    repair = next(i for i, m in enumerate(migrations) if m.filename.startswith("0035_"))
    await migrate(empty_database_url, migrations[:repair])
    conn = await asyncpg.connect(empty_database_url)
    try:
        # as the code before wrote them: the text of the object, jsonb-encoded again
        await conn.execute(
            "INSERT INTO price_sets (digest, prices) VALUES ('old', to_jsonb($1::text))",
            json.dumps(PRICES),
        )
        await conn.execute(
            "INSERT INTO price_sets (digest, prices) VALUES ('fine', $1::jsonb)",
            json.dumps({"small": {"input": "5", "output": "6"}}),
        )
        before = await conn.fetch(
            "SELECT digest, jsonb_typeof(prices) AS type, prices->'small' AS small "
            "FROM price_sets ORDER BY version"
        )
        assert [(r["digest"], r["type"], r["small"]) for r in before] == [
            ("old", "string", None),
            ("fine", "object", '{"input": "5", "output": "6"}'),
        ]
        await conn.execute(migrations[repair].sql)  # the migration's own SQL on these rows
        after = await conn.fetch(
            "SELECT digest, jsonb_typeof(prices) AS type, prices->'small'->>'output' AS out, "
            "prices::text AS text FROM price_sets ORDER BY version"
        )
    finally:
        await conn.close()
    assert [(r["digest"], r["type"], r["out"]) for r in after] == [
        ("old", "object", "2.0"),
        ("fine", "object", "6"),
    ]
    assert json.loads(after[0]["text"]) == PRICES
