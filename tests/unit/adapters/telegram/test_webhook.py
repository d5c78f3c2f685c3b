"""Webhook mode: setWebhook with the secret at start, POST /telegram/webhook checks the
secret (403), answers 400 on bad JSON (recorded as Rejected) and 200 only after
``intake.submit`` returned, so Telegram retries anything not stored."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
from starlette.applications import Starlette

from adapters.telegram.adapter import TelegramAdapter
from gateway.core.commands import COMMANDS
from gateway.core.domain import Envelope, Ignored, Rejected
from gateway.core.errors import ConfigError
from testsupport.fakes.telegram import FakeTelegram
from testsupport.harness import RecordingIntake
from testsupport.telegram import serve_http, telegram_settings

SECRET = "s3cret_Token-42"


@dataclass
class Webhook:
    adapter: TelegramAdapter
    url: str
    client: httpx.AsyncClient


@pytest.fixture
async def http_app() -> AsyncIterator[tuple[Starlette, str]]:
    app = Starlette(routes=[])
    async with serve_http(app) as base:
        yield app, base


async def make_webhook_adapter(
    fake: FakeTelegram,
    app: Starlette,
    base: str,
    *,
    start: bool = True,
    intake: RecordingIntake,
    **overrides: str,
) -> TelegramAdapter:
    values = {
        "TELEGRAM_MODE": "webhook",
        "TELEGRAM_WEBHOOK_URL": f"{base}/telegram/webhook",
        "TELEGRAM_WEBHOOK_SECRET": SECRET,
    }
    values.update(overrides)
    adapter = TelegramAdapter(telegram_settings(fake, **values))
    app.router.routes.extend(adapter.http_routes())
    if start:
        await adapter.start(intake)
    return adapter


@pytest.fixture
async def webhook(
    fake: FakeTelegram, http_app: tuple[Starlette, str], intake: RecordingIntake
) -> AsyncIterator[Webhook]:
    app, base = http_app
    adapter = await make_webhook_adapter(fake, app, base, intake=intake)
    async with httpx.AsyncClient() as client:
        yield Webhook(adapter=adapter, url=f"{base}/telegram/webhook", client=client)
    await adapter.stop()


def update_body(text: str = "hi") -> dict[str, object]:
    return {
        "update_id": 77,
        "message": {
            "message_id": 5,
            "from": {"id": 42, "is_bot": False, "first_name": "Ann"},
            "chat": {"id": 42, "type": "private", "first_name": "Ann"},
            "date": 1700000000,
            "text": text,
        },
    }


async def test_start_registers_the_webhook_with_the_secret(
    fake: FakeTelegram, webhook: Webhook
) -> None:
    [call] = fake.calls("setWebhook")
    assert call.params["url"] == webhook.url
    assert call.params["secret_token"] == SECRET
    assert "drop_pending_updates" not in call.params
    assert fake.calls("deleteWebhook") == [] and fake.calls("getUpdates") == []
    assert [c["command"] for c in fake.commands] == list(COMMANDS)


async def test_updates_pushed_by_telegram_are_ingested(
    fake: FakeTelegram, webhook: Webhook, intake: RecordingIntake
) -> None:
    forum = fake.forum()
    topic = fake.create_topic(forum, "A")
    fake.user_says(forum, "hello @GatewayTestBot", topic=topic)
    # the fake records a push's status when its answer arrives, after the intake saw it
    await fake.wait_until(
        lambda: len(intake.submitted) == 2 and len(fake.webhook_pushes) == 2,
        what="two pushed updates, answered",
    )
    created, hello = intake.extracted
    assert isinstance(created, Ignored)
    assert isinstance(hello, Envelope) and hello.key.thread_id == str(topic)
    assert [status for _, status in fake.webhook_pushes] == [200, 200]
    assert fake.pending_update_ids() == []


@pytest.mark.parametrize("header", [None, "", "wrong", SECRET + "x", SECRET[:-1]])
async def test_wrong_or_missing_secret_is_403_and_nothing_is_stored(
    webhook: Webhook, intake: RecordingIntake, header: str | None
) -> None:
    headers = {} if header is None else {"X-Telegram-Bot-Api-Secret-Token": header}
    response = await webhook.client.post(webhook.url, json=update_body(), headers=headers)
    assert response.status_code == 403
    assert intake.attempts == 0


async def test_right_secret_is_200_after_submit(webhook: Webhook, intake: RecordingIntake) -> None:
    response = await webhook.client.post(
        webhook.url, json=update_body(), headers={"X-Telegram-Bot-Api-Secret-Token": SECRET}
    )
    assert response.status_code == 200
    [envelope] = intake.envelopes
    assert envelope.event_id == "77" and envelope.text == "hi"


@pytest.mark.parametrize("body", [b"{not json", b"[1, 2]", b"\xff\xfe", b""])
async def test_bad_json_is_400_and_recorded_as_rejected(
    webhook: Webhook, intake: RecordingIntake, body: bytes
) -> None:
    response = await webhook.client.post(
        webhook.url,
        content=body,
        headers={"X-Telegram-Bot-Api-Secret-Token": SECRET, "Content-Type": "application/json"},
    )
    assert response.status_code == 400
    [(rejected, raw)] = intake.submitted
    assert isinstance(rejected, Rejected) and "JSON" in rejected.reason
    assert raw is not None and "body" in raw


async def test_unknown_update_is_acknowledged_and_ignored(
    webhook: Webhook, intake: RecordingIntake
) -> None:
    response = await webhook.client.post(
        webhook.url,
        json={"update_id": 9, "managed_bot": {"x": 1}},
        headers={"X-Telegram-Bot-Api-Secret-Token": SECRET},
    )
    assert response.status_code == 200
    [ignored] = intake.extracted
    assert isinstance(ignored, Ignored) and "managed_bot" in ignored.reason


async def test_store_failure_answers_503_and_telegram_redelivers(
    fake: FakeTelegram, http_app: tuple[Starlette, str]
) -> None:
    app, base = http_app
    flaky = RecordingIntake(fail_next=1)
    adapter = await make_webhook_adapter(fake, app, base, intake=flaky)
    try:
        chat = fake.private(fake.user())
        fake.user_says(chat, "keep me")
        await fake.wait_until(lambda: len(flaky.submitted) == 1, what="the retried push")
        assert [status for _, status in fake.webhook_pushes] == [503, 200]
        assert flaky.envelopes[0].text == "keep me"
    finally:
        await adapter.stop()


async def test_not_started_answers_503(fake: FakeTelegram, http_app: tuple[Starlette, str]) -> None:
    app, base = http_app
    adapter = await make_webhook_adapter(fake, app, base, start=False, intake=RecordingIntake())
    async with httpx.AsyncClient() as client:
        response = await client.post(
            f"{base}/telegram/webhook",
            json=update_body(),
            headers={"X-Telegram-Bot-Api-Secret-Token": SECRET},
        )
    assert response.status_code == 503
    await adapter.stop()


@pytest.mark.parametrize(("secret", "problem"), [(None, "required"), ("has spaces!", "A-Z")])
async def test_webhook_mode_needs_a_valid_secret(
    fake: FakeTelegram, secret: str | None, problem: str
) -> None:
    overrides = {"TELEGRAM_MODE": "webhook", "TELEGRAM_WEBHOOK_URL": "https://example.org/x"}
    if secret is not None:
        overrides["TELEGRAM_WEBHOOK_SECRET"] = secret
    adapter = TelegramAdapter(telegram_settings(fake, **overrides))
    with pytest.raises(ConfigError) as caught:
        await adapter.start(RecordingIntake())
    assert caught.value.setting == "TELEGRAM_WEBHOOK_SECRET" and problem in str(caught.value)
    assert fake.calls("setWebhook") == []
    await adapter.stop()
