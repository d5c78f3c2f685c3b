"""A database outage under traffic: PostgreSQL (a server of the test's own) is stopped for
about 10 s while the web chat, Telegram (webhook) and Slack (Events API) keep sending.

While it is down, ingress answers 503 (the platforms retry), /readyz answers 503 with a
generic body, and nothing accepted is lost. Within 5 s of the server coming back every
accepted message is answered exactly once, in its own thread."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Sequence

import httpx
import pytest

from adapters.slack import SlackAdapter
from adapters.telegram.adapter import TelegramAdapter
from gateway.agents.base import Turn
from gateway.core.domain import Reply
from testsupport.fakes.slack import FakeSlack
from testsupport.fakes.telegram import FakeTelegram
from testsupport.harness import running_gateway, wait_for
from testsupport.pg import own_postgres
from testsupport.slack import slack_settings
from testsupport.telegram import telegram_settings

pytestmark = pytest.mark.slow

OUTAGE_SECONDS = 10.0
RECOVERY_BOUND = 5.0
BOT = "@GatewayTestBot"


class SlowEcho:
    """Echo after a short delay, so turns are in flight when the database goes away."""

    name = "slow-echo"

    async def respond(self, turn: Turn) -> Sequence[Reply]:
        await asyncio.sleep(0.3)
        return [Reply(text=f"echo: {turn.new_messages[-1].content}")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _web(client: httpx.AsyncClient, url: str, thread: str, text: str) -> httpx.Response:
    return await client.post(
        f"{url}web/api/channels/outage/messages",
        json={"text": text, "client_msg_id": thread},
    )


async def _web_answers(client: httpx.AsyncClient, url: str, thread: str) -> list[str]:
    response = await client.get(f"{url}web/api/channels/outage/threads/{thread}/messages")
    response.raise_for_status()
    return [
        m["content"]
        for m in response.json()["messages"]
        if m["role"] == "assistant" and m["delivery"] == "sent"
    ]


async def test_database_outage_under_traffic_loses_nothing_and_recovers_within_5s() -> None:
    port = _free_port()
    async with own_postgres() as pg, FakeTelegram() as tg, FakeSlack() as slack:
        tg.webhook_retry_delay = 0.3
        telegram = TelegramAdapter(
            telegram_settings(
                tg,
                TELEGRAM_MODE="webhook",
                TELEGRAM_WEBHOOK_URL=f"http://127.0.0.1:{port}/telegram/webhook",
                TELEGRAM_WEBHOOK_SECRET="outage-secret",
            ),
            poll_timeout=1,
            backoff_initial=0.05,
            pace=(0.01, 0.01),
        )
        slack.add_channel("C0GENERAL")
        slack_adapter = SlackAdapter(slack_settings(slack))
        async with (
            running_gateway(
                pg.dsn,
                adapters=[telegram, slack_adapter],
                agent=SlowEcho(),
                GATEWAY_HTTP_PORT=port,
            ) as gw,
            httpx.AsyncClient(timeout=10) as client,
        ):
            slack.events_url = f"{gw.url}slack/events"
            # Slack retries a non-2xx; here every 0.3 s so the outage is covered
            slack.http_retry_delays = (0.3,) * 100
            dm = tg.private(tg.user())

            warm = await _web(client, gw.url, "warm", "warm up")
            assert warm.status_code == 200
            await wait_for(lambda: _web_answers(client, gw.url, "warm"), timeout=10)

            # accepted just before the outage: their turns are in flight when it starts
            for n in range(4):
                assert (await _web(client, gw.url, f"pre{n}", f"before {n}")).status_code == 200
            await pg.stop()
            down_at = time.monotonic()

            # during the outage: ingress says 503 (retry later), readiness too, generically
            during = await _web(client, gw.url, "during", "during the outage")
            assert during.status_code == 503
            assert during.json() == {"error": "temporarily unavailable"}
            ready = await client.get(f"{gw.url}readyz")
            assert ready.status_code == 503
            assert ready.json() == {"status": "database unavailable"}
            tg.user_says(dm, "telegram during the outage")
            slack_post = asyncio.create_task(
                slack.user_posts("C0GENERAL", "<@U0BOT> slack during the outage")
            )
            # keep traffic and probes going through the outage (this loop is the outage)
            while time.monotonic() - down_at < OUTAGE_SECONDS:
                assert (await client.get(f"{gw.url}readyz")).status_code == 503
                assert (await client.get(f"{gw.url}healthz")).status_code == 200
                await asyncio.sleep(0.5)
            assert any(status == 503 for _, status in tg.webhook_pushes)

            await pg.start()
            up_at = time.monotonic()
            # the web chat's client retries its 503
            retried = await wait_for(
                lambda: _retry_web(client, gw.url), timeout=RECOVERY_BOUND, interval=0.1
            )
            assert retried

            async def all_answered() -> bool:
                for thread in ["pre0", "pre1", "pre2", "pre3", "during"]:
                    if not await _web_answers(client, gw.url, thread):
                        return False
                return bool(tg.sent_to(dm)) and bool(slack.bot_posts("C0GENERAL"))

            await wait_for(all_answered, timeout=RECOVERY_BOUND + 10, interval=0.05)
            recovered = time.monotonic() - up_at
            print(f"\nrecovered {recovered:.2f}s after the database returned")
            assert recovered <= RECOVERY_BOUND, f"recovered in {recovered:.2f}s"
            posted = await slack_post

            # settle, then: exactly once each, in its own thread
            async def settled() -> bool:
                counts = await gw.store.outbox.delivery_counts()
                return counts.get("pending", 0) == 0 and counts.get("sending", 0) == 0

            await wait_for(settled, timeout=10)
            assert (await client.get(f"{gw.url}readyz")).status_code == 200
            for n in range(4):
                assert await _web_answers(client, gw.url, f"pre{n}") == [f"echo: before {n}"]
            assert await _web_answers(client, gw.url, "during") == ["echo: during the outage"]
            assert [s.text for s in tg.sent_to(dm)] == ["echo: telegram during the outage"]
            replies = slack.bot_posts("C0GENERAL")
            assert [(m.text, m.thread_ts) for m in replies] == [
                ("echo: slack during the outage", posted.ts)
            ]
            counts = await gw.store.outbox.delivery_counts()
            assert counts.get("failed", 0) == 0
            metrics = gw.metrics.render().decode()
            assert 'gateway_worker_up{worker="turn-0"} 1.0' in metrics


async def _retry_web(client: httpx.AsyncClient, url: str) -> bool:
    response = await _web(client, url, "during", "during the outage")
    return response.status_code == 200


async def test_telegram_polling_pauses_without_moving_the_offset_during_an_outage() -> None:
    async with own_postgres() as pg, FakeTelegram() as tg:
        adapter = TelegramAdapter(
            telegram_settings(tg), poll_timeout=1, backoff_initial=0.05, pace=(0.01, 0.01)
        )
        dm = tg.private(tg.user())
        async with running_gateway(pg.dsn, adapters=[adapter], web_chat=False):
            tg.user_says(dm, "before")
            await tg.wait_until(lambda: len(tg.sent) == 1, within=10, what="the first reply")
            await pg.stop()
            tg.user_says(dm, "during")
            [update_id] = tg.pending_update_ids()
            # polling pauses (its leader lock went with the database) and never confirms
            # the update it cannot store: Telegram keeps it
            down_at = time.monotonic()
            while time.monotonic() - down_at < 4.0:
                assert tg.pending_update_ids() == [update_id]
                assert update_id not in tg.confirmed
                await asyncio.sleep(0.2)
            await pg.start()
            up_at = time.monotonic()
            await tg.wait_until(
                lambda: [s.text for s in tg.sent_to(dm)] == ["echo: before", "echo: during"],
                within=RECOVERY_BOUND + 5,
                what="the reply after the outage",
            )
            recovered = time.monotonic() - up_at
        print(f"\ntelegram polling answered {recovered:.2f}s after the database returned")
        assert recovered <= RECOVERY_BOUND
        assert update_id in tg.confirmed
