"""The migration runner against a real PostgreSQL."""

from __future__ import annotations

import asyncio
import base64
import json
from importlib import resources

import asyncpg
import pytest

from gateway.core.domain import OutgoingFile
from gateway.core.errors import MigrationError
from gateway.core.parts import ApprovalCardPart, FilePart, TextPart, part_of
from session_store.migrator import Migration, load_migrations, migrate
from session_store.store import Store

# Everything about the schema that matters to the code, read from the catalogs. Partitions are
# left out: which months exist depends on when the schema was made, and the inbox's old rows
# live in the one partition its migration made of the old table (0029).
_PARTITIONS = "(SELECT relname FROM pg_class WHERE relispartition)"
_CATALOG = {
    "columns": """
        SELECT table_name, column_name, data_type, is_nullable, column_default, is_generated,
               generation_expression
        FROM information_schema.columns
        WHERE table_schema = 'public' AND table_name <> 'schema_migrations'
          AND table_name NOT IN """
    + _PARTITIONS
    + """
        ORDER BY table_name, column_name""",
    "indexes": """
        SELECT tablename, indexname, indexdef FROM pg_indexes
        WHERE schemaname = 'public' AND tablename <> 'schema_migrations'
          AND tablename NOT IN """
    + _PARTITIONS
    + """
        ORDER BY tablename, indexname""",
    "constraints": """
        SELECT conrelid::regclass::text AS tbl, conname, pg_get_constraintdef(oid) AS def
        FROM pg_constraint
        WHERE connamespace = 'public'::regnamespace
          AND conrelid::regclass::text <> 'schema_migrations'
          AND conrelid::regclass::text NOT IN """
    + _PARTITIONS
    + """
        ORDER BY 1, 2""",
    "functions": """
        SELECT proname, pg_get_function_identity_arguments(oid) AS args,
               regexp_replace(prosrc, '\\s+', ' ', 'g') AS body
        FROM pg_proc WHERE pronamespace = 'public'::regnamespace
        ORDER BY 1, 2""",
    "partitioned": """
        SELECT c.relname, pg_get_partkeydef(c.oid) FROM pg_class AS c
        WHERE c.relkind = 'p' AND c.relnamespace = 'public'::regnamespace
        ORDER BY 1""",
}


async def _catalog(dsn: str) -> dict[str, list[tuple[object, ...]]]:
    conn = await asyncpg.connect(dsn)
    try:
        return {name: [tuple(r) for r in await conn.fetch(sql)] for name, sql in _CATALOG.items()}
    finally:
        await conn.close()


async def test_migrated_database_equals_the_declared_schema(
    empty_database_url: str, database_url: str
) -> None:
    declared = resources.files("session_store").joinpath("schema.sql").read_text()
    conn = await asyncpg.connect(empty_database_url)
    try:
        await conn.execute(declared)
    finally:
        await conn.close()
    from_schema = await _catalog(empty_database_url)
    from_migrations = await _catalog(database_url)  # built by running every migration
    assert from_schema["columns"], "the catalog query found nothing"
    for part in _CATALOG:
        assert from_migrations[part] == from_schema[part], f"{part} differ"


async def test_migrations_are_recorded_and_rerunning_applies_nothing(
    empty_database_url: str,
) -> None:
    first = await migrate(empty_database_url)
    assert first == [m.filename for m in load_migrations()]
    assert await migrate(empty_database_url) == []


async def test_a_changed_applied_migration_is_refused(empty_database_url: str) -> None:
    migrations = load_migrations()
    await migrate(empty_database_url, migrations)
    changed = [
        Migration(migrations[0].filename, migrations[0].sql + "\n-- edited\n"),
        *migrations[1:],
    ]
    with pytest.raises(MigrationError, match="changed after it was applied"):
        await migrate(empty_database_url, changed)


async def test_a_failing_migration_is_rolled_back_and_reported(empty_database_url: str) -> None:
    migrations = [*load_migrations(), Migration("9999_broken.sql", "CREATE TABLE x (;")]
    with pytest.raises(MigrationError, match=r"9999_broken\.sql failed"):
        await migrate(empty_database_url, migrations)
    conn = await asyncpg.connect(empty_database_url)
    try:
        names = [r["filename"] for r in await conn.fetch("SELECT filename FROM schema_migrations")]
    finally:
        await conn.close()
    assert "9999_broken.sql" not in names and names  # earlier files stay applied


async def test_concurrent_runners_both_succeed_and_apply_each_file_once(
    empty_database_url: str,
) -> None:
    slow = [
        *load_migrations(),
        Migration("9000_slow.sql", "SELECT pg_sleep(0.5); CREATE TABLE slow_marker (id int);"),
    ]
    results = await asyncio.gather(
        migrate(empty_database_url, slow), migrate(empty_database_url, slow)
    )
    applied = sorted(results, key=len)
    assert applied[0] == [] and applied[1] == [m.filename for m in slow]
    conn = await asyncpg.connect(empty_database_url)
    try:
        count = await conn.fetchval("SELECT count(*) FROM schema_migrations")
    finally:
        await conn.close()
    assert count == len(slow)


async def test_outbox_rows_written_before_typed_parts_read_as_typed_parts(
    empty_database_url: str,
) -> None:
    """Rows of the release before typed parts (a file envelope in the text, the preview
    binding and an approval id in the target's extra, the tool exchange role in the message
    metadata) are converted by the migration and read back as their typed parts."""
    migrations = load_migrations()
    typed = next(i for i, m in enumerate(migrations) if m.filename.startswith("0016_"))
    await migrate(empty_database_url, migrations[:typed])
    png = OutgoingFile(name="c.png", mime_type="image/png", data=b"\x89PNG\x00", caption="Q3")
    envelope = "\x1egateway-file:" + json.dumps(
        {
            "name": png.name,
            "mime_type": png.mime_type,
            "caption": png.caption,
            "data": base64.b64encode(png.data).decode(),
        }
    )
    target = {"platform": "sink", "scope": "s", "chat_id": "c", "thread_id": None}
    rows = [
        (1, "hello", {**target, "extra": {"business_connection_id": "b"}}),
        (2, envelope, {**target, "extra": {}}),
        (3, "streamed", {**target, "extra": {"stream_previews": "1"}}),
        (4, "Approve?", {**target, "extra": {"approval_id": "apr-1"}}),
        (5, "\x1egateway-file:{not json", {**target, "extra": {}}),
    ]
    conn = await asyncpg.connect(empty_database_url)
    try:
        sid = await conn.fetchval(
            "INSERT INTO sessions (platform, scope, chat_id) VALUES ('sink', 's', 'c') RETURNING id"
        )
        mid = await conn.fetchval(
            """INSERT INTO messages (session_id, seq_no, role, content, metadata)
               VALUES ($1, 1, 'assistant', 'x', '{"tool_exchange_role": "tool", "k": 1}')
               RETURNING id""",
            sid,
        )
        for part_no, content, tgt in rows:
            await conn.execute(
                """INSERT INTO deliveries (message_id, session_id, seq_no, part_no, platform,
                                           target, content)
                   VALUES ($1, $2, 1, $3, 'sink', $4::jsonb, $5)""",
                mid,
                sid,
                part_no,
                json.dumps(tgt),
                content,
            )
    finally:
        await conn.close()
    await migrate(empty_database_url)
    store = await Store.connect(empty_database_url, min_size=1, max_size=2)
    try:
        read = await store.outbox.deliveries_for_session(sid)
        [message] = await store.sessions.recent(sid)
    finally:
        await store.close()
    assert [part_of(d) for d in read] == [
        TextPart(text="hello"),
        FilePart(file=png),
        TextPart(text="streamed", finishes_stream=True),
        ApprovalCardPart(text="Approve?", approval_id="apr-1"),
        TextPart(text="\x1egateway-file:{not json"),  # as the code before read it
    ]
    assert [dict(d.target.extra) for d in read] == [{"business_connection_id": "b"}] + [{}] * 4
    assert dict(message.metadata) == {"k": 1}
