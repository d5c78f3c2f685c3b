"""``gateway backup FILE`` and ``gateway restore FILE`` on the database ``gateway run`` uses
(here ``DATABASE_URL``): back up, lose data, restore, find it again. The restore into a new
machine's empty embedded server is the backup how-to's own test
(``tests/docs/test_examples.py``)."""

from __future__ import annotations

from pathlib import Path

from gateway.ops.backup import split_password
from session_store.store import Store
from testsupport.process import run_cli_in_process


async def _accounts(store: Store) -> list[str]:
    async with store.db.connection() as conn:
        rows = await conn.fetch("SELECT account FROM person_accounts ORDER BY account")
    return [r["account"] for r in rows]


async def test_backup_then_restore_brings_back_what_was_dropped(
    database_url: str, store: Store, tmp_path: Path
) -> None:
    env = {"DATABASE_URL": database_url}
    code, _out, err = await run_cli_in_process(
        ["people", "link", "telegram:bot:1", "web:local:ann"], env
    )
    assert code == 0, err
    dump = tmp_path / "gateway.dump"
    code, out, err = await run_cli_in_process(["backup", str(dump)], env)
    assert code == 0, err
    assert out.strip() == f"backed up to {dump}" and dump.stat().st_size > 0
    # lost: a row deleted, a table dropped
    async with store.db.connection() as conn:
        await conn.execute("DELETE FROM person_accounts WHERE account = 'web:local:ann'")
        await conn.execute("DROP TABLE budget_notices")
    code, out, err = await run_cli_in_process(["restore", str(dump)], env)
    assert code == 0, err
    assert out.strip() == f"restored from {dump}"
    assert await _accounts(store) == ["telegram:bot:1", "web:local:ann"]
    async with store.db.connection() as conn:
        assert await conn.fetchval("SELECT count(*) FROM budget_notices") == 0
    # a restore that fails changes nothing
    broken = tmp_path / "broken.dump"
    broken.write_bytes(dump.read_bytes()[:200])
    code, _out, err = await run_cli_in_process(["restore", str(broken)], env)
    assert code == 1 and "restore failed" in err
    assert await _accounts(store) == ["telegram:bot:1", "web:local:ann"]


async def test_a_missing_backup_file_is_refused(tmp_path: Path, database_url: str) -> None:
    code, _out, err = await run_cli_in_process(
        ["restore", str(tmp_path / "nothing.dump")], {"DATABASE_URL": database_url}
    )
    assert code == 1 and "no backup file" in err


def test_the_password_goes_to_the_environment_not_the_command_line() -> None:
    assert split_password("postgresql://gw:s%40cret@db:5432/gateway?sslmode=require") == (
        "postgresql://gw@db:5432/gateway?sslmode=require",
        "s@cret",
    )
    assert split_password("postgresql://gw@db/gateway") == ("postgresql://gw@db/gateway", None)
