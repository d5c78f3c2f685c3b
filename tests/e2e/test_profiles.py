"""Profiles end to end: one real ``gateway run``, the fake Slack and Telegram servers and the
fake model server. Two Slack channels and two topics of one Telegram forum each get their own
profile's system prompt and model, and only their own; the support channel answers a message
that does not mention the bot; ``/profile`` says which profile is here; a changed file is read
again with ``gateway reload``, and the admin API resolves a place."""

from __future__ import annotations

import hashlib
import json
import signal
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from testsupport.fakes import slack as slack_fake
from testsupport.fakes.openai import FakeOpenAI, Recorded
from testsupport.fakes.slack import FakeSlack
from testsupport.fakes.telegram import FakeTelegram
from testsupport.process import gateway_process, run_cli_in_process

pytestmark = pytest.mark.slow

MODELS = ["gpt-4o-mini", "gpt-4o", "gpt-4.1"]
TG_BOT = "@GatewayTestBot"
SLACK_BOT = f"<@{slack_fake.BOT_USER_ID}>"

#: the config file of this test (the forum's and topics' ids filled in when they exist)
CONFIG = """
[profiles.support]
system_prompt = "You are the support desk."
model = "gpt-4o-mini"
answer = "all"
tools = []

[profiles.sales]
system_prompt = "You are the sales desk."
model = "gpt-4o"

[profiles.releases]
system_prompt = "You talk about releases."
model = "gpt-4.1"

[profiles.incidents]
system_prompt = "You handle incidents."
model = "gpt-4o"
models = ["gpt-4o", "gpt-4.1"]

[places]
"*" = "default"
"slack:*:C0SUPPORT" = "support"
"slack:*:C0SALES" = "sales"
"telegram:*:{forum}:{releases}" = "releases"
"telegram:*:{forum}:{incidents}" = "incidents"
"""

#: each place's profile: what its requests must carry, and what they must not
PROMPTS = {
    "support": ("You are the support desk.", "gpt-4o-mini"),
    "sales": ("You are the sales desk.", "gpt-4o"),
    "releases": ("You talk about releases.", "gpt-4.1"),
    "incidents": ("You handle incidents.", "gpt-4o"),
}


def asked(model: FakeOpenAI, words: str) -> Recorded:
    found = [r for r in model.turn_requests if any(words in c for c in r.contents("user"))]
    assert len(found) == 1, [r.contents("user") for r in model.turn_requests]
    return found[0]


def assert_only_its_own(request: Recorded, profile: str) -> None:
    prompt, model = PROMPTS[profile]
    assert request.body["model"] == model
    assert request.system.startswith(prompt)
    for other, (other_prompt, _) in PROMPTS.items():
        if other != profile:
            assert other_prompt not in request.system


async def test_each_place_gets_its_own_profile(database_url: str, tmp_path: Path) -> None:
    async with FakeTelegram() as telegram, FakeSlack() as slack:
        model = await FakeOpenAI(models=MODELS).start()
        try:
            await _run(database_url, tmp_path, telegram, slack, model)
        finally:
            await model.stop()


async def _run(
    database_url: str, tmp_path: Path, telegram: FakeTelegram, slack: FakeSlack, model: FakeOpenAI
) -> None:
    for channel in ("C0SUPPORT", "C0SALES"):
        slack.add_channel(channel)
    forum = telegram.forum()
    releases = telegram.create_topic(forum, "Releases")
    incidents = telegram.create_topic(forum, "Incidents")
    config = tmp_path / "gateway.toml"
    text = CONFIG.format(forum=forum.id, releases=releases, incidents=incidents)
    config.write_text(text)
    env = {
        "DATABASE_URL": database_url,
        "GATEWAY_CONFIG_FILE": str(config),
        "AGENT": "openai",
        "OPENAI_BASE_URL": model.base_url,
        "OPENAI_API_KEY": "sk-test",
        "AGENT_MODEL": "gpt-4o-mini",
        "AGENT_MODELS": ",".join(MODELS),
        "AGENT_SYSTEM_PROMPT": "You are the built-in assistant.",
        "GATEWAY_STREAMING": "false",
        "GATEWAY_WEB_CHAT": "false",
        "GATEWAY_POLL_SECONDS": "0.2",
        "TELEGRAM_BOT_TOKEN": telegram.token,
        "TELEGRAM_API_BASE_URL": telegram.base_url,
        "SLACK_BOT_TOKEN": slack_fake.BOT_TOKEN,
        "SLACK_SIGNING_SECRET": slack_fake.SIGNING_SECRET,
        "SLACK_API_BASE_URL": slack.api_url,
    }
    async with gateway_process(env, tmp_path / "gateway.log") as gw:
        slack.events_url = f"{gw.url}/slack/events"
        await slack.user_posts("C0SUPPORT", "my printer is on fire")  # no mention: answer=all
        await slack.user_posts("C0SALES", f"{SLACK_BOT} what does the big plan cost")
        await slack.user_posts("C0SALES", "nobody asked the bot this")  # mentions only here
        telegram.user_says(forum, f"{TG_BOT} when is the next release", topic=releases)
        telegram.user_says(forum, f"{TG_BOT} the site is down", topic=incidents)
        await telegram.wait_until(
            lambda: len(model.turn_requests) >= 4, within=60, what="four questions asked"
        )
        await telegram.wait_until(
            lambda: len(telegram.sent) >= 2 and len(slack.bot_posts()) >= 2,
            within=60,
            what="four answers",
        )
        assert_only_its_own(asked(model, "my printer is on fire"), "support")
        assert_only_its_own(asked(model, "what does the big plan cost"), "sales")
        assert_only_its_own(asked(model, "when is the next release"), "releases")
        assert_only_its_own(asked(model, "the site is down"), "incidents")
        # the support profile offers no tools; the others follow the tools policy
        assert asked(model, "my printer is on fire").tool_names == []
        assert asked(model, "the site is down").tool_names != []
        # each answer landed in its own place
        assert [p.channel for p in slack.bot_posts()] == ["C0SUPPORT", "C0SALES"]
        assert len(telegram.sent_to(forum, releases)) == len(telegram.sent_to(forum, incidents))

        # /profile says what the assistant is in that topic
        telegram.user_says(forum, "/profile", topic=incidents)
        await telegram.wait_until(
            lambda: len(telegram.sent_to(forum, incidents)) == 2, within=30, what="/profile"
        )
        profile_answer = telegram.sent_to(forum, incidents)[-1].text
        assert profile_answer.startswith("Profile: incidents\nModel: gpt-4o\n"), profile_answer

        # the admin API resolves a place from memory
        place = f"telegram:bot:{forum.id}:{releases}"
        shown = resolve(gw.url, place)
        assert shown["profile"]["name"] == "releases"
        assert shown["entry"]["place"] == f"telegram:*:{forum.id}:{releases}"

        # a changed file is read again without a restart; a broken one keeps it
        port = gw.url.rsplit(":", 1)[1]
        config.write_text(text.replace("You talk about releases.", "You ship releases."))
        # the reload command asks the running process through the database, and prints the
        # file and the hash of the bytes it loaded
        code, out, err = await run_cli_in_process(["reload"], {**env, "GATEWAY_HTTP_PORT": port})
        digest = hashlib.sha256(config.read_bytes()).hexdigest()
        assert code == 0, err
        [line] = out.splitlines()
        assert "\treloaded\t" in line and f"{config.absolute()} sha256={digest}" in line
        config.write_text(text.replace('= "releases"', '= "nobody"'))
        code, out, err = await run_cli_in_process(["reload"], {**env, "GATEWAY_HTTP_PORT": port})
        assert code == 2 and "unknown profile 'nobody'" in err and "\tfailed\t" in out
        # a command pointed at another file than the running gateway's reloads nothing
        other = config.with_name("other.toml")
        other.write_text(text)
        code, out, err = await run_cli_in_process(
            ["reload"], {**env, "GATEWAY_HTTP_PORT": port, "GATEWAY_CONFIG_FILE": str(other)}
        )
        assert code == 2 and f"started with GATEWAY_CONFIG_FILE={config.absolute()}" in err
        config.write_text(text.replace("You talk about releases.", "You ship releases."))
        code, out, err = await run_cli_in_process(["reload"], {**env, "GATEWAY_HTTP_PORT": port})
        assert code == 0, err
        telegram.user_says(forum, f"{TG_BOT} and the one after", topic=releases)
        await telegram.wait_until(
            lambda: len(model.turn_requests) >= 5, within=30, what="the question after reload"
        )
        after = asked(model, "and the one after")
        assert after.system.startswith("You ship releases.") and after.body["model"] == "gpt-4.1"
        assert "config_reload_refused" in gw.log()

        # a service manager's reload: SIGHUP to a run without a terminal reads the file again
        config.write_text(text.replace('= "releases"', '= "sales"'))
        gw.proc.send_signal(signal.SIGHUP)
        await telegram.wait_until(
            lambda: resolve(gw.url, place)["profile"]["name"] == "sales",
            within=30,
            what="the reload on SIGHUP",
        )
        assert gw.proc.returncode is None  # still running
        assert await gw.terminate() == 0


def resolve(url: str, place: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/api/v1/profiles/resolve?place={place}") as response:
        return json.loads(response.read())
