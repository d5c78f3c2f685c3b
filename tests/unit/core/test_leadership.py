"""Leader election across a database outage: single-connection ingress (Telegram
polling, the Mattermost websocket) runs on the lock's holder, so after the database returns
a replica must take the lock promptly, not one election interval (5 s by default) later."""

from __future__ import annotations

import asyncio

import pytest

from gateway.core.lifecycle.leadership import RETRY_AFTER_ERROR, LeaderElection
from testsupport.pg import own_postgres

pytestmark = pytest.mark.slow

#: far longer than the test waits: an election that only retries every interval fails it
INTERVAL = 120.0


async def test_lock_taken_soon_after_the_database_returns() -> None:
    async with own_postgres() as pg:
        await pg.stop()
        started = asyncio.Event()
        stopping = asyncio.Event()

        async def body() -> None:
            started.set()
            await stopping.wait()

        election = LeaderElection(pg.dsn, interval=INTERVAL)
        task = asyncio.create_task(election.run("test-ingress", body, stopping=stopping))
        try:
            # a few attempts fail while the server is down
            await asyncio.sleep(RETRY_AFTER_ERROR * 4)
            assert not started.is_set()
            await pg.start()
            # within a small fraction of the interval (the server's start is included)
            await asyncio.wait_for(started.wait(), INTERVAL / 4)
        finally:
            stopping.set()
            await asyncio.wait_for(task, 30)
