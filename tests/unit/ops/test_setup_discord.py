"""``gateway setup discord`` and ``gateway doctor`` against the fake Discord: the token is
asked for unechoed and checked live, the ``.env`` it writes starts a gateway that answers on
Discord, and a missing message-content intent is explained with where to turn it on."""

from __future__ import annotations

from pathlib import Path

from tests.unit.ops.test_setup import (
    answered,
    env_file,
    gateway_from_env_file,
    interact,
    setup_env,
    setup_piped,
    user_config,
)
from testsupport.fakes.discord import FakeDiscord
from testsupport.process import run_cli


async def test_discord_setup_on_a_terminal_then_the_gateway_answers(
    tmp_path: Path, database_url: str
) -> None:
    async with FakeDiscord() as fake:
        code, output = await interact(
            tmp_path,
            ["discord", "--api-base-url", fake.api_url],
            [("Bot token (Developer Portal > your application > Bot; not shown): ", fake.token)],
        )
        assert code == 0, output
        assert fake.token not in output
        assert "ok  discord message content intent" in output
        assert env_file(setup_env(tmp_path)) == {
            "DISCORD_BOT_TOKEN": fake.token,
            "DISCORD_API_BASE_URL": fake.api_url,
        }
        async with gateway_from_env_file(tmp_path, database_url):
            await answered(lambda: fake.live, tmp_path)
            dm = fake.dm(fake.alice)
            await fake.user_posts(dm, "hello from discord")
            await answered(lambda: fake.in_channel(dm.id, by=fake.bot), tmp_path)
        assert fake.in_channel(dm.id, by=fake.bot)[0]["content"] == "echo: hello from discord"


async def test_discord_setup_refuses_a_bad_token(tmp_path: Path) -> None:
    async with FakeDiscord() as fake:
        code, out, _ = await setup_piped(
            tmp_path, ["discord", "--api-base-url", fake.api_url, "--token", "MTIz.wrong.token"]
        )
    assert code == 1
    assert "BAD discord: Discord refused DISCORD_BOT_TOKEN (401)" in out
    assert not setup_env(tmp_path).exists()


async def test_setup_and_doctor_explain_the_missing_message_content_intent(
    tmp_path: Path,
) -> None:
    async with FakeDiscord(content_intent=False) as fake:
        code, out, _ = await setup_piped(
            tmp_path, ["discord", "--api-base-url", fake.api_url, "--token", fake.token]
        )
        assert code == 0, out  # written: the token works, the intent is a switch away
        assert "BAD discord message content intent" in out
        assert "Fix the BAD lines above next (docs/how-to/discord.md)" in out
        assert "Privileged Gateway Intents -> MESSAGE CONTENT INTENT" in out
        code, doctor, err = await run_cli(
            ["doctor"],
            {
                **user_config(tmp_path),
                "DISCORD_BOT_TOKEN": fake.token,
                "DISCORD_API_BASE_URL": fake.api_url,
            },
            timeout=120,
        )
    assert "BAD discord message content intent" in doctor, doctor + err
    assert "MESSAGE CONTENT INTENT" in doctor
