"""Socket Mode through bolt's AsyncSocketModeHandler (slack_sdk's aiohttp client) against the
fake's WS endpoint."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from adapters.slack import SlackAdapter
from gateway.core.lifecycle.supervisor import Beat, Supervisor
from gateway.core.metrics import Metrics
from testsupport.fakes.slack import APP_TOKEN, FakeSlack, wait_until
from testsupport.harness import RecordingIntake
from testsupport.slack import running_adapter, slack_settings


async def test_envelopes_are_acked_only_after_submit_returned(
    fake: FakeSlack, intake: RecordingIntake
) -> None:
    intake.delay = 0.2  # a store that takes a moment
    async with running_adapter(fake, intake, socket_mode=True):
        posted = await fake.user_posts("C0GENERAL", "<@U0BOT> over the socket")
    assert [c.method for c in fake.calls_to("apps.connections.open")] == ["apps.connections.open"]
    assert (
        fake.calls_to("apps.connections.open")[0]
        .headers["Authorization"]
        .startswith("Bearer xapp-")
    )
    assert len(posted.deliveries) == 2
    by_event = {s.extracted.event_id: s for s in intake.submitted}
    for delivery in posted.deliveries:
        assert delivery.succeeded and delivery.ack_count == 1
        assert [a.retry_num for a in delivery.attempts] == [0]
        submitted = by_event[delivery.event_id]
        assert delivery.acked_at is not None and delivery.acked_at >= submitted.returned_at
    mention, message = intake.envelopes
    assert (mention.key, mention.message_id) == (message.key, message.message_id)
    assert mention.key.thread_id == posted.ts


async def test_unacked_envelope_is_redelivered_and_stored(
    fake: FakeSlack, intake: RecordingIntake
) -> None:
    fake.socket_ack_timeout = 0.5
    intake.fail_next = 1  # the store fails once: no ack, Slack redelivers
    async with running_adapter(fake, intake, socket_mode=True):
        (delivery,) = (await fake.user_posts("D0DM", "hello")).deliveries
    assert [(a.retry_num, a.status, a.reason) for a in delivery.attempts] == [
        (0, None, ""),
        (1, 200, "timeout"),
    ]
    (stored,) = intake.envelopes
    assert stored.event_id == delivery.event_id


async def test_slow_store_redelivery_carries_the_same_event_id(
    fake: FakeSlack, intake: RecordingIntake
) -> None:
    fake.socket_ack_timeout = 0.5
    intake.delays = [1.0]
    async with running_adapter(fake, intake, socket_mode=True):
        (delivery,) = (await fake.user_posts("D0DM", "hello")).deliveries
        await wait_until(lambda: len(intake.envelopes) == 2, what="the slow first submit")
        await wait_until(lambda: delivery.ack_count == 2, what="both acks")
    first, second = intake.envelopes
    assert first.event_id == second.event_id == delivery.event_id  # the core dedupes it


async def test_disconnect_reconnects_to_a_new_url_and_keeps_receiving(
    fake: FakeSlack, intake: RecordingIntake
) -> None:
    async with running_adapter(fake, intake, socket_mode=True):
        await fake.user_posts("D0DM", "before")
        await fake.disconnect_sockets("refresh_requested")
        await wait_until(lambda: fake.socket_connections == 2, what="a second connection")
        await wait_until(lambda: len(fake.open_sockets()) == 1, what="the old socket closed")
        (delivery,) = (await fake.user_posts("D0DM", "after")).deliveries
    assert delivery.succeeded
    assert [e.text for e in intake.envelopes] == ["before", "after"]
    assert len(fake.calls_to("apps.connections.open")) == 2


async def test_non_event_envelopes_are_acked_and_recorded(
    fake: FakeSlack, intake: RecordingIntake
) -> None:
    async with running_adapter(fake, intake, socket_mode=True):
        event = await fake.deliver(fake.wrap({"type": "reaction_added", "user": "U1"}))
        command = await fake.deliver(
            {"command": "/gateway", "text": "hi", "team_id": fake.team_id},
            envelope_type="slash_commands",
        )
    assert event.succeeded and command.succeeded
    assert [i.reason for i in intake.ignored] == [
        "event type reaction_added",
        "socket mode slash_commands",
    ]


class SupervisedIntake(RecordingIntake):
    """``Intake.supervise`` as the gateway's core runs it: the receive loop under a
    Supervisor (``gateway.inbound.intake.IngressLifecycle.supervise``)."""

    def __init__(self, supervisor: Supervisor) -> None:
        super().__init__()
        self.supervisor = supervisor

    async def supervise(
        self,
        name: str,
        body: Callable[[], Coroutine[Any, Any, None]],
        *,
        stopping: asyncio.Event | None = None,
    ) -> None:
        async def run(beat: Beat) -> None:
            await body()

        await self.supervisor.supervise(
            f"ingress:{name}", run, stopping=stopping, restart_on_return=False
        )


async def test_socket_mode_loop_is_supervised_and_replaced_when_it_stays_down(
    fake: FakeSlack,
) -> None:
    metrics = Metrics()
    supervisor = Supervisor(metrics, restart_initial=0.01, restart_max=0.05)
    intake = SupervisedIntake(supervisor)
    worker = f"ingress:slack-socket:{fake.team_id}"
    fake.mode = "socket"
    adapter = SlackAdapter(slack_settings(fake, SLACK_APP_TOKEN=APP_TOKEN))
    assert adapter.socket_mode is not None
    adapter.socket_mode.socket_down_after = 0.3
    await adapter.start(intake)
    try:
        await wait_until(lambda: fake.socket_connections == 1, what="the first connection")
        assert supervisor.down() == [] and worker in supervisor.loops
        # Slack goes away and refuses new connections for a while: slack_sdk's own
        # reconnect keeps failing, so the loop gives up on that client and is restarted
        fake.fail_next("apps.connections.open", error="internal_error", times=3)
        await fake.close_sockets()
        await wait_until(
            lambda: supervisor.loops[worker].restarts >= 1, within=10, what="a restart"
        )
        await wait_until(lambda: len(fake.open_sockets()) == 1, within=10, what="a reconnect")
        (delivery,) = (await fake.user_posts("D0DM", "after the outage")).deliveries
        assert delivery.succeeded
        assert [e.text for e in intake.envelopes] == ["after the outage"]
        text = metrics.render().decode()
        restarts = supervisor.loops[worker].restarts
        assert f'gateway_worker_restarts_total{{worker="{worker}"}} {restarts:.1f}' in text
        assert f'gateway_worker_up{{worker="{worker}"}} 1.0' in text
    finally:
        await adapter.stop()
    assert worker not in supervisor.loops  # stopped, neither down nor wedged
    assert f'gateway_worker_up{{worker="{worker}"}} 0.0' in metrics.render().decode()


async def test_one_bad_envelope_is_a_dead_letter_and_the_loop_goes_on(
    fake: FakeSlack, intake: RecordingIntake
) -> None:
    async with running_adapter(fake, intake, socket_mode=True):
        await fake.send_socket_frame('{"envelope_id": "e1", "type": "events_api", "payl')
        # a payload bolt cannot read (``authorizations`` must be a list): stored and acked
        odd = await fake.deliver(fake.wrap({"type": "message"}) | {"authorizations": "x"})
        # an ``event`` that is a number: bolt's dispatch raises before any listener
        odder = await fake.deliver(fake.wrap({"type": "message"}) | {"event": 5})
        (good,) = (await fake.user_posts("D0DM", "still here")).deliveries
        await wait_until(lambda: len(intake.rejected) == 3, what="the dead letters")
    assert odd.succeeded and odder.succeeded and good.succeeded
    assert sorted(r.reason for r in intake.rejected) == [
        "socket mode events_api: unreadable",
        "socket mode events_api: unreadable",
        "socket mode frame is not JSON",
    ]
    assert [e.text for e in intake.envelopes] == ["still here"]
