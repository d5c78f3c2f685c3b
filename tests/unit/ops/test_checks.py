"""``PlatformAdapter.check`` of each platform against its fake, and ``gateway doctor`` built
on them: every misconfiguration a newcomer meets is found and named with its fix."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from adapters.mattermost import create_adapter as create_mattermost
from adapters.slack import create_adapter as create_slack
from adapters.slack.scopes import BOT_SCOPES
from adapters.telegram import create_adapter as create_telegram
from gateway.core.conversations import Conversations
from gateway.core.hub import Broadcast
from gateway.core.ports import AdapterContext, Check
from gateway.core.settings import Settings
from gateway.ops.doctor import collect_checks, run_doctor
from testsupport.fakes.mattermost import FakeMattermost
from testsupport.fakes.openai import FakeOpenAI
from testsupport.fakes.slack import APP_TOKEN, BOT_TOKEN, SIGNING_SECRET, FakeSlack
from testsupport.fakes.telegram import FakeTelegram
from testsupport.paths import REPO


def settings(**values: Any) -> Settings:
    values.setdefault("GATEWAY_WEB_CHAT", False)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def context() -> AdapterContext:
    # platform adapters never touch conversations; doctor builds them the same way
    return AdapterContext(live=Broadcast(), conversations=Conversations.__new__(Conversations))


def named(checks: Sequence[Check], name: str) -> Check:
    found = [c for c in checks if c.name == name]
    assert found, f"no check {name!r} in {[c.name for c in checks]}"
    return found[0]


@pytest.fixture
async def telegram() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as fake:
        yield fake


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    fake = FakeSlack()
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


@pytest.fixture
async def mattermost() -> AsyncIterator[FakeMattermost]:
    async with FakeMattermost() as fake:
        yield fake


@pytest.fixture
async def openai() -> AsyncIterator[FakeOpenAI]:
    fake = FakeOpenAI()
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


# --- Telegram ---------------------------------------------------------------------------------


def telegram_settings(fake: FakeTelegram, **values: Any) -> Settings:
    return settings(
        TELEGRAM_BOT_TOKEN=values.pop("TELEGRAM_BOT_TOKEN", fake.token),
        TELEGRAM_API_BASE_URL=fake.base_url,
        **values,
    )


async def test_telegram_check_reports_privacy_mode_on_with_the_botfather_fix(
    telegram: FakeTelegram,
) -> None:
    checks = await create_telegram(telegram_settings(telegram), context()).check()
    me = named(checks, "telegram")
    assert me.ok and "@GatewayTestBot" in me.detail
    privacy = named(checks, "telegram privacy")
    assert privacy.ok and "privacy mode is on" in privacy.detail
    assert privacy.fix is not None and "/setprivacy" in privacy.fix
    assert [r.method for r in telegram.requests] == ["getMe"]


async def test_telegram_check_reports_privacy_mode_off(telegram: FakeTelegram) -> None:
    telegram.privacy_mode = False
    checks = await create_telegram(telegram_settings(telegram), context()).check()
    privacy = named(checks, "telegram privacy")
    assert "privacy mode is off" in privacy.detail and privacy.fix is None


async def test_telegram_check_names_the_token_when_getme_refuses_it(
    telegram: FakeTelegram,
) -> None:
    bad = telegram_settings(telegram, TELEGRAM_BOT_TOKEN="123:wrong")
    checks = await create_telegram(bad, context()).check()
    me = named(checks, "telegram")
    assert not me.ok and me.fix is not None and "TELEGRAM_BOT_TOKEN" in me.fix


async def test_telegram_webhook_mode_without_secret_is_a_failure_naming_the_secret(
    telegram: FakeTelegram,
) -> None:
    # doctor passed this, then `gateway run` exited 2 demanding the secret
    config = telegram_settings(
        telegram, TELEGRAM_MODE="webhook", TELEGRAM_WEBHOOK_URL="https://bot.example.com/x"
    )
    checks = await create_telegram(config, context()).check()
    webhook = named(checks, "telegram webhook")
    assert not webhook.ok and "TELEGRAM_WEBHOOK_SECRET" in webhook.detail
    assert webhook.fix is not None and webhook.fix.startswith("set TELEGRAM_WEBHOOK_SECRET")
    good = telegram_settings(
        telegram,
        TELEGRAM_MODE="webhook",
        TELEGRAM_WEBHOOK_URL="https://bot.example.com/x",
        TELEGRAM_WEBHOOK_SECRET="s3cret_value",
    )
    assert named(await create_telegram(good, context()).check(), "telegram webhook").ok


# --- Slack ------------------------------------------------------------------------------------


def slack_settings(fake: FakeSlack, **values: Any) -> Settings:
    values.setdefault("SLACK_BOT_TOKEN", BOT_TOKEN)
    if "SLACK_APP_TOKEN" not in values:
        values.setdefault("SLACK_SIGNING_SECRET", SIGNING_SECRET)
    return settings(SLACK_API_BASE_URL=fake.api_url, **values)


async def test_slack_check_compares_granted_scopes_with_those_the_code_needs(
    slack: FakeSlack,
) -> None:
    checks = await create_slack(slack_settings(slack), context()).check()
    assert named(checks, "slack").ok
    assert named(checks, "slack scopes").ok
    events = named(checks, "slack events")
    assert events.fix is not None and "/slack/events" in events.fix

    slack.granted_scopes = [s for s in BOT_SCOPES if s not in ("chat:write", "im:history")]
    scopes = named(await create_slack(slack_settings(slack), context()).check(), "slack scopes")
    assert not scopes.ok
    assert "missing bot scopes: chat:write, im:history" in scopes.detail
    assert scopes.fix is not None and "Install to Workspace again" in scopes.fix


async def test_slack_check_names_the_bot_token_on_invalid_auth(slack: FakeSlack) -> None:
    checks = await create_slack(
        slack_settings(slack, SLACK_BOT_TOKEN="xoxb-wrong"), context()
    ).check()
    assert len(checks) == 1 and not checks[0].ok
    assert "invalid_auth" in checks[0].detail
    assert checks[0].fix is not None and "SLACK_BOT_TOKEN" in checks[0].fix


async def test_slack_check_opens_socket_mode_with_the_app_token(slack: FakeSlack) -> None:
    good = await create_slack(slack_settings(slack, SLACK_APP_TOKEN=APP_TOKEN), context()).check()
    assert named(good, "slack socket mode").ok
    bad = await create_slack(
        slack_settings(slack, SLACK_APP_TOKEN="xapp-1-wrong"), context()
    ).check()
    socket = named(bad, "slack socket mode")
    assert not socket.ok and socket.fix is not None
    assert "SLACK_APP_TOKEN" in socket.fix and "connections:write" in socket.fix


# --- Mattermost -------------------------------------------------------------------------------


def mattermost_settings(fake: FakeMattermost, token: str = "bot-token") -> Settings:
    return settings(MATTERMOST_URL=fake.url, MATTERMOST_TOKEN=token)


async def test_mattermost_check_lists_the_teams_and_channels_the_bot_is_in(
    mattermost: FakeMattermost,
) -> None:
    checks = await create_mattermost(mattermost_settings(mattermost), context()).check()
    me = named(checks, "mattermost")
    assert me.ok and "@gatewaybot (bot account)" in me.detail
    channels = named(checks, "mattermost channels")
    assert channels.ok
    assert "1 team(s), 2 channel(s)" in channels.detail
    assert "Team: Secret, Town-Square" in channels.detail


async def test_mattermost_check_says_how_to_add_the_bot_to_channels(
    mattermost: FakeMattermost,
) -> None:
    for channel in (mattermost.town_square, mattermost.private):
        channel.members.discard(mattermost.bot.id)
    checks = await create_mattermost(mattermost_settings(mattermost), context()).check()
    channels = named(checks, "mattermost channels")
    assert not channels.ok
    assert channels.fix is not None and "/invite @gatewaybot" in channels.fix


async def test_mattermost_check_names_the_token_when_refused(
    mattermost: FakeMattermost,
) -> None:
    checks = await create_mattermost(mattermost_settings(mattermost, "nope"), context()).check()
    assert not checks[0].ok and checks[0].fix is not None
    assert "MATTERMOST_TOKEN" in checks[0].fix


# --- doctor -----------------------------------------------------------------------------------


async def test_doctor_runs_every_configured_platform_check(
    telegram: FakeTelegram,
    slack: FakeSlack,
    mattermost: FakeMattermost,
    database_url: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = settings(
        DATABASE_URL=database_url,
        TELEGRAM_BOT_TOKEN=telegram.token,
        TELEGRAM_API_BASE_URL=telegram.base_url,
        SLACK_BOT_TOKEN=BOT_TOKEN,
        SLACK_SIGNING_SECRET=SIGNING_SECRET,
        SLACK_API_BASE_URL=slack.api_url,
        MATTERMOST_URL=mattermost.url,
        MATTERMOST_TOKEN="bot-token",
        GATEWAY_WEB_CHAT=True,
        GATEWAY_HTTP_PORT=0,  # 8080 may be taken on a shared machine
    )
    assert await run_doctor(config) == 0
    out = capsys.readouterr().out
    for line in (
        "ok  database: DATABASE_URL reachable",
        "ok  http: can listen on a free port",
        "ok  telegram: getMe ok",
        "ok  slack scopes: all",
        "ok  mattermost channels: member of 1 team(s)",
        "ok  web chat",
        "    tip: to answer in forum topics without an @mention: BotFather",
    ):
        assert line in out, out
    assert telegram.calls("getMe") and slack.calls_to("auth.test")
    assert mattermost.requests_to("users_me") and mattermost.requests_to("team_channels")


async def test_doctor_fails_webhook_mode_without_secret(
    telegram: FakeTelegram, capsys: pytest.CaptureFixture[str]
) -> None:
    config = telegram_settings(
        telegram, TELEGRAM_MODE="webhook", TELEGRAM_WEBHOOK_URL="https://bot.example.com/x"
    )
    assert await run_doctor(config) == 1
    out = capsys.readouterr().out
    assert "BAD telegram webhook: TELEGRAM_WEBHOOK_SECRET: required" in out
    assert "    fix: set TELEGRAM_WEBHOOK_SECRET" in out


async def test_doctor_fails_openai_agent_without_a_key() -> None:
    # `AGENT=openai` with no key passed
    checks = await collect_checks(settings(AGENT="openai"))
    agent = named(checks, "agent")
    assert not agent.ok and agent.fix is not None and "OPENAI_API_KEY" in agent.fix


async def test_doctor_checks_the_openai_key_and_model_list(openai: FakeOpenAI) -> None:
    openai.api_key = "sk-right"
    openai.models = ["gpt-4o-mini", "local-7b"]

    async def agent(**values: Any) -> Check:
        config = settings(AGENT="openai", OPENAI_BASE_URL=openai.base_url, **values)
        return named(await collect_checks(config), "agent")

    wrong_key = await agent(OPENAI_API_KEY="sk-wrong")
    assert not wrong_key.ok and "refused" in wrong_key.detail
    assert wrong_key.fix == "set OPENAI_API_KEY to a valid key for this server"
    no_key = await agent()
    assert not no_key.ok and no_key.fix == "set OPENAI_API_KEY (this server requires a key)"
    wrong_model = await agent(OPENAI_API_KEY="sk-right", AGENT_MODEL="gpt-9")
    assert not wrong_model.ok and "does not offer gpt-9" in wrong_model.detail
    assert wrong_model.fix == "set AGENT_MODEL to models the server offers"
    good = await agent(OPENAI_API_KEY="sk-right", AGENT_MODEL="local-7b")
    assert good.ok and "offers local-7b" in good.detail


async def test_doctor_names_unreachable_openai_and_http_agent_urls() -> None:
    dead = "http://127.0.0.1:9/v1"
    openai_check = named(
        await collect_checks(settings(AGENT="openai", OPENAI_BASE_URL=dead)), "agent"
    )
    assert not openai_check.ok and openai_check.fix is not None
    assert openai_check.fix.startswith("set OPENAI_BASE_URL")
    http_check = named(
        await collect_checks(
            settings(AGENT="http", AGENT_HTTP_URL="http://127.0.0.1:9/turn", AGENT_HTTP_SECRET="x")
        ),
        "agent",
    )
    assert not http_check.ok and http_check.fix is not None
    assert http_check.fix.startswith("set AGENT_HTTP_URL")


async def test_doctor_names_an_unreachable_database() -> None:
    checks = await collect_checks(settings(DATABASE_URL="postgresql://x@127.0.0.1:9/none"))
    database = named(checks, "database")
    assert not database.ok and database.fix is not None and "DATABASE_URL" in database.fix


def test_doctor_holds_no_platform_code() -> None:
    # the identity calls live in the adapters' check(), not in the core
    source = (REPO / "gateway" / "ops" / "doctor.py").read_text()
    for call in ("getMe", "auth.test", "users/me", "adapters."):
        assert not re.search(re.escape(call), source), call


async def test_gateway_doctor_command_reports_a_bad_setting_with_its_fix() -> None:
    from testsupport.process import run_cli

    code, out, _ = await run_cli(["doctor"], {"AGENT": "http"})
    assert code == 2
    assert "BAD configuration: AGENT_HTTP_URL: required when AGENT=http" in out
    assert "    fix: correct or unset AGENT_HTTP_URL" in out


async def test_gateway_doctor_command_exits_1_for_webhook_mode_without_secret(
    telegram: FakeTelegram,
) -> None:
    from testsupport.process import run_cli

    code, out, _ = await run_cli(
        ["doctor"],
        {
            "TELEGRAM_BOT_TOKEN": telegram.token,
            "TELEGRAM_API_BASE_URL": telegram.base_url,
            "TELEGRAM_MODE": "webhook",
            "TELEGRAM_WEBHOOK_URL": "https://bot.example.com/telegram/webhook",
            "GATEWAY_HTTP_PORT": "0",
        },
    )
    assert code == 1, out
    assert "BAD telegram webhook: TELEGRAM_WEBHOOK_SECRET: required" in out
    assert "ok  telegram: getMe ok" in out
    assert telegram.token not in out


async def test_doctor_without_platforms_points_at_gateway_setup() -> None:
    checks = await collect_checks(settings(GATEWAY_HTTP_PORT=0))
    platforms = named(checks, "platforms")
    assert platforms.ok and platforms.fix is not None
    assert "gateway setup telegram|slack|mattermost" in platforms.fix


async def test_doctor_says_a_reverse_proxy_needs_gateway_allowed_hosts() -> None:
    # on a loopback bind only localhost names are answered: a reverse proxy on the same host
    # that passes the public name on gets 403 for every webhook until the name is listed
    hosts = named(await collect_checks(settings(GATEWAY_HTTP_PORT=0)), "allowed hosts")
    assert hosts.ok and "only localhost names" in hosts.detail
    assert hosts.fix is not None
    assert "reverse proxy" in hosts.fix and "GATEWAY_ALLOWED_HOSTS=bot.example.com" in hosts.fix
    listed = named(
        await collect_checks(
            settings(GATEWAY_HTTP_PORT=0, GATEWAY_ALLOWED_HOSTS="bot.example.com")
        ),
        "allowed hosts",
    )
    assert listed.ok and "bot.example.com" in listed.detail and listed.fix is None


def test_the_doctor_speaks_of_voice_and_recommends_the_ocr_extra_when_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gateway.files import health, ocr

    config = settings(AGENT="echo", TRANSCRIPTION_BASE_URL="http://stt.local/v1")
    voice, found = health.files_checks(config)
    assert (
        voice.detail
        == "voice notes transcribed by http://stt.local/v1/audio/transcriptions (whisper-1)"
    )
    assert found.ok and "read by OCR" in found.detail and found.fix is None
    monkeypatch.setattr(ocr, "available", lambda: False)
    voice, missing = health.files_checks(settings(AGENT="echo"))
    assert "TRANSCRIPTION_BASE_URL not set" in voice.detail
    assert missing.ok and missing.fix is not None and "chat-gateway[ocr]" in missing.fix
    # what the extra costs, in megabytes and seconds of install
    assert re.search(r"\d+ MB and \d+ s", missing.fix), missing.fix


async def test_every_page_the_doctor_points_at_exists(
    database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # no platform connected: the doctor names `gateway setup` and each platform's guide
    await run_doctor(settings(DATABASE_URL=database_url, GATEWAY_HTTP_PORT=0))
    out = capsys.readouterr().out
    pages = re.findall(r"docs/[\w./-]+\.md", out)
    assert len(pages) >= 3, out
    for page in pages:
        assert (REPO / page).is_file(), f"the doctor points at {page}, which does not exist"
