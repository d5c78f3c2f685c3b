"""A reload request reaches a replica through the database: the replica (a real liveness
lock, a real config file) answers with the file and its SHA-256, or says why it kept what it
had: a broken file, another file than the one meant, no file at all."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from gateway.core.config_watch import ConfigWatch
from gateway.profiles.reload import ReloadAnswers, request_reload
from session_store.repos.liveness import ProcessLiveness
from session_store.repos.reloads import Reloads
from session_store.store import Store

GOOD = '[profiles.support]\nsystem_prompt = "You help."\n[places]\n"*" = "support"\n'


@asynccontextmanager
async def replica(store: Store, watch: ConfigWatch) -> AsyncIterator[int]:
    """A live replica answering reload requests for ``watch``: its process id."""
    liveness = ProcessLiveness(store.dsn)
    process_id = await liveness.ensure()
    watch.subscribe("check", lambda config: config.section("places"), lambda _: None)
    answers = ReloadAnswers(
        Reloads(store.db), process_id=lambda: process_id, reload=watch.reload, path=watch.path
    )
    stopping = asyncio.Event()
    task = asyncio.create_task(answers.run(stopping, lambda: None))
    try:
        yield process_id
    finally:
        stopping.set()
        await task
        await liveness.close()


async def test_a_replica_reports_the_hash_of_what_it_loaded(store: Store, tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(GOOD)
    watch = ConfigWatch(config)
    reloads = Reloads(store.db)
    async with replica(store, watch) as process_id:
        config.write_text(GOOD.replace("You help.", "You help more."))
        outcome = await request_reload(reloads, path=str(config), wait=10)
        assert outcome.ok
        [report] = outcome.reports
        assert report.process_id == process_id and report.outcome == "reloaded"
        assert report.sha256 == hashlib.sha256(config.read_bytes()).hexdigest() == watch.sha256
        assert report.path == str(config.absolute())

        # a broken file: refused, the hash in force is still the last good one
        before = watch.sha256
        config.write_text("[places\n")
        outcome = await request_reload(reloads, path=None, wait=10)
        [report] = outcome.reports
        assert not outcome.ok and report.outcome == "failed"
        assert "not valid TOML" in (report.error or "")
        assert report.sha256 == before == watch.sha256

        # the requester means another file: nothing is reloaded, and the answer says which
        other = tmp_path / "other.toml"
        other.write_text(GOOD)
        outcome = await request_reload(reloads, path=str(other), wait=10)
        [report] = outcome.reports
        assert report.outcome == "failed" and watch.reloads == 1
        assert f"started with GATEWAY_CONFIG_FILE={config.absolute()}, not {other}" in (
            report.error or ""
        )


async def test_a_replica_without_a_config_file_says_it_has_none(store: Store) -> None:
    watch = ConfigWatch(None)
    async with replica(store, watch):
        outcome = await request_reload(Reloads(store.db), path=None, wait=10)
    [report] = outcome.reports
    assert report.outcome == "failed" and report.sha256 is None and report.path is None
    assert "started without GATEWAY_CONFIG_FILE" in (report.error or "")
    assert outcome.failures() and not outcome.ok


async def test_a_replica_that_died_is_reported_gone(store: Store) -> None:
    liveness = ProcessLiveness(store.dsn)
    await liveness.ensure()
    reloads = Reloads(store.db)
    reload_id, replicas = await reloads.request(actor="test", path=None)
    assert len(replicas) == 1
    [waiting] = await reloads.reports(reload_id)
    assert (waiting.outcome, waiting.alive) == (None, True)
    await liveness.close()
    # the server drops the lock with the connection, moments later
    for _ in range(100):
        [gone] = await reloads.reports(reload_id)
        if not gone.alive:
            break
        await asyncio.sleep(0.05)
    assert (gone.outcome, gone.alive) == (None, False)
