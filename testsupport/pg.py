"""A PostgreSQL of the test's own, that the test can stop and start (database outages).

The shared server of ``tests/conftest.py`` must never go down under other tests, so outage
tests get a dedicated embedded server: the fault campaign's own (``campaigns.faults``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from campaigns.faults import Postgres


@asynccontextmanager
async def own_postgres() -> AsyncIterator[Postgres]:
    pg = await asyncio.to_thread(Postgres, "gw_faults")
    try:
        await pg.create()
        yield pg
    finally:
        await asyncio.to_thread(pg.cleanup)
