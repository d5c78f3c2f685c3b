"""Supervised loops: one failed item never stops a worker, a crashed loop is restarted and
counted, /readyz and /healthz tell the truth, and shutdown never raises for a dead task."""

from __future__ import annotations

import asyncio

import httpx

from gateway.core.domain import ReplyTarget
from gateway.core.lifecycle.supervisor import Beat, Supervisor
from gateway.core.metrics import Metrics
from gateway.core.ports import SendResult
from testsupport.fakes.sink import SinkAdapter, SinkTransport
from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import running_gateway, wait_for


class BuggyTransport(SinkTransport):
    """A sink whose code has bugs on some texts: ``format`` crashes (inside the turn) and
    ``send`` crashes with something that is not a ``DeliveryError``."""

    def format(self, text: str) -> str:
        if "boom-format" in text:
            raise ValueError("formatter bug")
        return text

    async def send(self, target: ReplyTarget, text: str, *, idempotency_key: str) -> SendResult:
        if "boom-send" in text:
            raise RuntimeError("transport bug")
        return await super().send(target, text, idempotency_key=idempotency_key)


class BuggyAdapter(SinkAdapter):
    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.transport = BuggyTransport(url)


async def test_a_crashed_loop_is_restarted_with_backoff_and_counted() -> None:
    metrics = Metrics()
    supervisor = Supervisor(metrics, restart_initial=0.01, restart_max=0.05)
    stopping = asyncio.Event()
    runs: list[int] = []

    async def body(beat: Beat) -> None:
        runs.append(len(runs))
        if len(runs) <= 2:
            raise RuntimeError(f"crash {len(runs)}")
        await stopping.wait()

    task = asyncio.create_task(supervisor.supervise("probe", body, stopping=stopping))
    await wait_for(lambda: len(runs) == 3, timeout=5)
    text = metrics.render().decode()
    assert 'gateway_worker_restarts_total{worker="probe"} 2.0' in text
    assert 'gateway_worker_up{worker="probe"} 1.0' in text
    assert supervisor.down() == []
    stopping.set()
    await asyncio.wait_for(task, 5)
    assert 'gateway_worker_up{worker="probe"} 0.0' in metrics.render().decode()


async def test_one_failed_item_never_stops_the_workers(database_url: str, sink: SinkServer) -> None:
    adapter = BuggyAdapter(sink.url)
    async with running_gateway(database_url, adapters=[adapter], web_chat=False) as gw:
        await adapter.submit({"chat": "c", "thread": "A", "id": "1", "text": "boom-format"})
        await adapter.submit({"chat": "c", "thread": "B", "id": "2", "text": "boom-send"})
        await adapter.submit({"chat": "c", "thread": "C", "id": "3", "text": "fine"})
        await wait_for(lambda: sink.texts_in("c", "C") == ["echo: fine"], timeout=10)

        async def send_recorded() -> bool:
            rows = await gw.store.outbox.deliveries_for_session(2)
            return bool(rows) and rows[0].status == "failed"

        await wait_for(send_recorded, timeout=10)
        [bug] = await gw.store.outbox.deliveries_for_session(2)
        async with httpx.AsyncClient(base_url=gw.url) as client:
            listed = (await client.get("/api/v1/deliveries", params={"status": "failed"})).json()
        assert [(d["id"], d["ambiguous"]) for d in listed["items"]] == [(bug.id, True)]
        metrics = gw.metrics.render().decode()
        # the loops survived item by item: nothing had to be restarted
        assert gw.supervisor.down() == []
        for n in range(4):
            assert f'gateway_worker_restarts_total{{worker="turn-{n}"}} 0.0' in metrics
            assert f'gateway_worker_restarts_total{{worker="delivery-{n}"}} 0.0' in metrics
        assert 'gateway_turns_total{outcome="crashed",platform="sink"}' in metrics
        # after the bug, the next message of the same threads is answered as usual
        await adapter.submit({"chat": "c", "thread": "B", "id": "4", "text": "again"})
        await wait_for(lambda: sink.texts_in("c", "B") == ["echo: again"], timeout=10)
    # an unknown exception from a transport without idempotency: it may have been posted,
    # so it is failed as ambiguous and never resent blindly
    assert bug.ambiguous and bug.last_error is not None
    assert bug.last_error.startswith("ambiguous: RuntimeError: transport bug")
    assert sink.texts_in("c", "A") == []


async def test_readyz_and_healthz_report_a_down_or_wedged_loop(database_url: str) -> None:
    async with running_gateway(database_url) as gw, httpx.AsyncClient() as client:
        assert (await client.get(f"{gw.url}readyz")).json() == {"status": "ready"}
        stopping = asyncio.Event()
        release = asyncio.Event()

        async def always_crashes(beat: Beat) -> None:
            raise RuntimeError("secret detail that must not leak")

        async def wedged(beat: Beat) -> None:
            await release.wait()  # no beat: no progress

        gw.supervisor.min_stall = 0.1
        crash = asyncio.create_task(
            gw.supervisor.supervise("crashy", always_crashes, stopping=stopping)
        )
        await wait_for(lambda: gw.supervisor.down() == ["crashy"], timeout=5)
        ready = await client.get(f"{gw.url}readyz")
        assert ready.status_code == 503
        assert ready.json() == {"status": "degraded"} and "secret" not in ready.text
        stopping.set()
        await asyncio.wait_for(crash, 5)
        assert (await client.get(f"{gw.url}readyz")).status_code == 200

        assert (await client.get(f"{gw.url}healthz")).status_code == 200
        stuck = asyncio.create_task(
            gw.supervisor.supervise(
                "stuck", wedged, stall_after=0.2, required=False, restart_on_return=False
            )
        )
        await wait_for(lambda: gw.supervisor.wedged() == ["stuck"], timeout=5)
        health = await client.get(f"{gw.url}healthz")
        assert health.status_code == 503 and health.json() == {"status": "wedged"}
        release.set()
        await asyncio.wait_for(stuck, 5)
        assert (await client.get(f"{gw.url}healthz")).status_code == 200


async def test_stop_does_not_raise_because_a_task_died_earlier(database_url: str) -> None:
    async def died() -> None:
        raise RuntimeError("died long ago")

    async with running_gateway(database_url) as gw:
        # a loop task that died with an exception before stop (as a TaskGroup did)
        assert gw._summary_task is not None
        gw._summary_task.cancel()
        gw._summary_task = asyncio.create_task(died())
        await asyncio.sleep(0)
        assert gw._summary_task.done()
    # leaving the block ran Gateway.stop(): it did not raise


async def test_an_adapter_receive_loop_that_crashes_is_restarted_on_the_leader(
    database_url: str,
) -> None:
    async with running_gateway(database_url) as gw:
        gw.supervisor._restart_initial = 0.01
        stopping = asyncio.Event()
        runs: list[int] = []

        async def receive_loop() -> None:
            runs.append(len(runs))
            if len(runs) <= 2:
                raise RuntimeError("socket handler bug")
            await stopping.wait()

        led = asyncio.create_task(
            gw.lifecycle.lead("probe-ingress", receive_loop, stopping=stopping)
        )
        await wait_for(lambda: len(runs) == 3, timeout=10)
        metrics = gw.metrics.render().decode()
        assert 'gateway_worker_restarts_total{worker="ingress:probe-ingress"} 2.0' in metrics
        assert 'gateway_worker_up{worker="ingress:probe-ingress"} 1.0' in metrics
        stopping.set()
        await asyncio.wait_for(led, 10)
