"""``gateway setup telegram|slack|mattermost`` against each platform fake: interactively through
a pty (secrets typed at a no-echo prompt never appear in the output) and without a terminal
(flags and stdin); the ``.env`` it writes starts a gateway that answers on that platform."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import pty
import select
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path

import pytest

from adapters.slack.scopes import BOT_SCOPES
from gateway.core.settings import env_file_path
from gateway.ops.setup import update_env_file
from testsupport.fakes.mattermost import FakeMattermost
from testsupport.fakes.slack import APP_TOKEN, BOT_TOKEN, SIGNING_SECRET, FakeSlack
from testsupport.fakes.telegram import FakeTelegram
from testsupport.harness import wait_for
from testsupport.process import clean_env, run_cli


class Pty:
    """A child process on a pseudo-terminal (its controlling tty), read with deadlines."""

    def __init__(self, args: list[str], *, cwd: Path, env: Mapping[str, str]) -> None:
        argv = [sys.executable, "-m", "gateway", *args]
        pid, fd = pty.fork()
        if pid == 0:  # the child: becomes the gateway command, nothing else runs here
            try:
                os.chdir(cwd)
                os.execve(sys.executable, argv, dict(env))
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        self.output = ""
        self.status: int | None = None

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return True
        try:
            chunk = os.read(self.fd, 4096)
        except OSError as exc:  # EIO: the child closed the terminal (exited)
            if exc.errno != errno.EIO:
                raise
            return False
        if not chunk:
            return False
        self.output += chunk.decode(errors="replace").replace("\r\n", "\n")
        return True

    def expect(self, text: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.output:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._read(min(remaining, 0.2)):
                if text in self.output:
                    return
                raise AssertionError(f"{text!r} not seen; output so far:\n{self.output}")

    def send(self, line: str) -> None:
        os.write(self.fd, (line + "\n").encode())

    def wait(self, timeout: float = 30) -> int:
        deadline = time.monotonic() + timeout
        while self.status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() > deadline:
                os.kill(self.pid, signal.SIGKILL)
                raise AssertionError(f"setup did not exit; output:\n{self.output}")
            self._read(0.05)
        while self._read(0.05) and time.monotonic() < deadline:
            pass
        os.close(self.fd)
        return self.status


async def interact(
    tmp_path: Path, args: list[str], dialogue: list[tuple[str, str]], *, timeout: float = 60
) -> tuple[int, str]:
    """Run ``gateway setup ...`` on a pty; for each (prompt, answer) wait for the prompt, then
    type the answer. Runs in a thread so the fakes (on this loop) keep answering."""

    def run() -> tuple[int, str]:
        child = Pty(["setup", *args], cwd=tmp_path, env=clean_env(user_config(tmp_path)))
        try:
            for prompt, answer in dialogue:
                child.expect(prompt, timeout)
                child.send(answer)
            return child.wait(timeout), child.output
        finally:
            if child.status is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signal.SIGKILL)
                    os.waitpid(child.pid, 0)

    return await asyncio.to_thread(run)


async def setup_piped(
    tmp_path: Path, args: list[str], stdin: str = "", env: Mapping[str, str] | None = None
) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        "setup",
        *args,
        cwd=tmp_path,
        env=clean_env({**user_config(tmp_path), **(env or {})}),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin.encode()), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def user_config(tmp_path: Path) -> dict[str, str]:
    """The test's own per-user config dir (``~/.config``), shared by its setup and run."""
    return {"XDG_CONFIG_HOME": str(tmp_path / "config")}


def setup_env(tmp_path: Path) -> Path:
    """The file setup writes and run reads (GATEWAY_ENV_FILE unset): ./.env if the directory
    has one, else the per-user one."""
    local = tmp_path / ".env"
    return local if local.exists() else tmp_path / "config" / "chat-gateway" / ".env"


def env_file(path: Path) -> dict[str, str]:
    values = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            values[key] = value
    return values


@contextlib.asynccontextmanager
async def gateway_from_env_file(tmp_path: Path, database_url: str) -> AsyncIterator[None]:
    """``gateway run`` in ``tmp_path``: its settings come from the ``.env`` there, plus the
    test database and a free port."""
    log = (tmp_path / "gateway.log").open("ab")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        "run",
        cwd=tmp_path,
        env=clean_env(
            {
                **user_config(tmp_path),
                "DATABASE_URL": database_url,
                "GATEWAY_HTTP_PORT": "0",
                "GATEWAY_WEB_CHAT": "false",
                "GATEWAY_POLL_SECONDS": "0.2",
            }
        ),
        stdout=asyncio.subprocess.PIPE,
        stderr=log,
    )
    assert proc.stdout is not None
    try:
        deadline = time.monotonic() + 60
        while True:
            line = await asyncio.wait_for(proc.stdout.readline(), deadline - time.monotonic())
            if not line:
                raise AssertionError(
                    f"gateway exited {await proc.wait()}:\n{(tmp_path / 'gateway.log').read_text()}"
                )
            if b"gateway ready" in line:
                break
        yield
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 20)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        log.close()


async def answered(condition: Callable[[], object], tmp_path: Path) -> None:
    try:
        await wait_for(condition, timeout=30, message="the gateway's answer")
    except AssertionError:
        print((tmp_path / "gateway.log").read_text())
        raise


# --- Telegram ---------------------------------------------------------------------------------


async def test_telegram_setup_on_a_terminal_then_the_gateway_answers(
    tmp_path: Path, database_url: str
) -> None:
    async with FakeTelegram() as fake:
        code, output = await interact(
            tmp_path,
            ["telegram", "--api-base-url", fake.base_url],
            [("Bot token from BotFather (not shown): ", fake.token), ("(polling): ", "")],
        )
        assert code == 0, output
        assert fake.token not in output  # typed at a no-echo prompt, never printed
        assert "ok  telegram: getMe ok: @GatewayTestBot" in output
        assert "privacy mode is on" in output and "/setprivacy" in output
        assert (
            "Wrote TELEGRAM_BOT_TOKEN, TELEGRAM_MODE, TELEGRAM_API_BASE_URL to "
            f"{setup_env(tmp_path)}" in output
        )
        written = env_file(setup_env(tmp_path))
        assert written["TELEGRAM_BOT_TOKEN"] == fake.token
        assert setup_env(tmp_path).stat().st_mode & 0o777 == 0o600

        async with gateway_from_env_file(tmp_path, database_url):
            chat = fake.private(fake.user("Alice"))
            fake.user_says(chat, "hello from telegram")
            await answered(lambda: fake.sent_to(chat), tmp_path)
        assert "hello from telegram" in fake.sent_to(chat)[0].text


async def test_telegram_setup_from_stdin_keeps_the_rest_of_the_env_file(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("# mine\nAGENT=echo\nTELEGRAM_BOT_TOKEN=old\n")
    async with FakeTelegram() as fake:
        code, out, err = await setup_piped(
            tmp_path, ["telegram", "--api-base-url", fake.base_url], stdin=fake.token + "\n"
        )
        assert code == 0, err
        assert fake.token not in out + err
        assert (
            (tmp_path / ".env")
            .read_text()
            .startswith(f"# mine\nAGENT=echo\nTELEGRAM_BOT_TOKEN={fake.token}\n")
        )


async def test_telegram_setup_with_a_bad_token_writes_nothing(tmp_path: Path) -> None:
    async with FakeTelegram() as fake:
        code, out, err = await setup_piped(
            tmp_path, ["telegram", "--api-base-url", fake.base_url, "--token", "1:bad"]
        )
    assert code == 1
    assert "BAD telegram: the Bot API rejected TELEGRAM_BOT_TOKEN" in out
    assert "Nothing written" in err and not setup_env(tmp_path).exists()


async def test_telegram_webhook_setup_writes_the_required_secret(tmp_path: Path) -> None:
    async with FakeTelegram() as fake:
        code, out, err = await setup_piped(
            tmp_path,
            [
                "telegram",
                "--api-base-url",
                fake.base_url,
                "--mode",
                "webhook",
                "--webhook-url",
                "https://bot.example.com/telegram/webhook",
            ],
            stdin=fake.token + "\n",
        )
    assert code == 0, err
    written = env_file(setup_env(tmp_path))
    assert written["TELEGRAM_MODE"] == "webhook"
    assert len(written["TELEGRAM_WEBHOOK_SECRET"]) == 64
    assert written["TELEGRAM_WEBHOOK_SECRET"] not in out


async def test_setup_without_a_terminal_and_without_the_token_names_it(tmp_path: Path) -> None:
    code, _, err = await setup_piped(tmp_path, ["telegram"], stdin="")
    assert code == 2
    assert "TELEGRAM_BOT_TOKEN: not given: pass --token, or one line on stdin" in err


# --- Slack ------------------------------------------------------------------------------------


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    fake = FakeSlack()
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


async def test_slack_socket_mode_setup_on_a_terminal_then_the_gateway_answers(
    tmp_path: Path, database_url: str, slack: FakeSlack
) -> None:
    code, output = await interact(
        tmp_path,
        ["slack", "--api-base-url", slack.api_url],
        [
            ("xoxb-... (not shown): ", BOT_TOKEN),
            ("[socket/events] (socket): ", "socket"),
            ("xapp-... (not shown): ", APP_TOKEN),
        ],
    )
    assert code == 0, output
    assert BOT_TOKEN not in output and APP_TOKEN not in output
    assert f"ok  slack scopes: all {len(BOT_SCOPES)} bot scopes granted" in output
    assert "ok  slack socket mode" in output
    written = env_file(setup_env(tmp_path))
    assert written["SLACK_BOT_TOKEN"] == BOT_TOKEN and written["SLACK_APP_TOKEN"] == APP_TOKEN

    slack.mode = "socket"
    slack.add_channel("D0DM", kind="im")
    async with gateway_from_env_file(tmp_path, database_url):
        await answered(lambda: slack.open_sockets(), tmp_path)
        await slack.user_posts("D0DM", "hello from slack")
        await answered(lambda: slack.bot_posts("D0DM"), tmp_path)
    assert slack.bot_posts("D0DM")[0].text == "echo: hello from slack"


async def test_slack_events_setup_with_flags_and_stdin(tmp_path: Path, slack: FakeSlack) -> None:
    code, out, err = await setup_piped(
        tmp_path,
        ["slack", "--api-base-url", slack.api_url, "--mode", "events"],
        stdin=f"{BOT_TOKEN}\n{SIGNING_SECRET}\n",
    )
    assert code == 0, err
    assert BOT_TOKEN not in out and SIGNING_SECRET not in out
    assert "tip: Event Subscriptions -> Request URL" in out
    written = env_file(setup_env(tmp_path))
    assert written["SLACK_SIGNING_SECRET"] == SIGNING_SECRET
    assert "SLACK_APP_TOKEN" not in written


async def test_slack_setup_reports_missing_scopes_but_saves_working_tokens(
    tmp_path: Path, slack: FakeSlack
) -> None:
    slack.granted_scopes = ["chat:write"]
    code, out, _ = await setup_piped(
        tmp_path,
        ["slack", "--api-base-url", slack.api_url, "--bot-token", BOT_TOKEN],
        stdin=APP_TOKEN + "\n",
    )
    assert code == 0
    assert "BAD slack scopes: missing bot scopes: app_mentions:read" in out
    assert "Fix the BAD lines above next (docs/how-to/slack.md)" in out


# --- Mattermost -------------------------------------------------------------------------------


async def test_mattermost_setup_on_a_terminal_then_the_gateway_answers(
    tmp_path: Path, database_url: str
) -> None:
    async with FakeMattermost() as fake:
        code, output = await interact(
            tmp_path,
            ["mattermost"],
            [("open Mattermost at): ", fake.url), ("Bot access token (not shown): ", "bot-token")],
        )
        assert code == 0, output
        assert "bot-token" not in output
        assert "ok  mattermost channels: member of 1 team(s), 2 channel(s)" in output
        assert env_file(setup_env(tmp_path)) == {
            "MATTERMOST_URL": fake.url,
            "MATTERMOST_TOKEN": "bot-token",
        }
        async with gateway_from_env_file(tmp_path, database_url):
            await answered(lambda: fake.live_connections, tmp_path)
            await fake.user_posts(fake.dm_alice, "hello from mattermost")
            await answered(lambda: fake.bot_posts(), tmp_path)
        assert fake.bot_posts()[0]["message"] == "echo: hello from mattermost"


async def test_mattermost_setup_with_flags_refuses_a_bad_token(tmp_path: Path) -> None:
    async with FakeMattermost() as fake:
        code, out, _ = await setup_piped(
            tmp_path, ["mattermost", "--url", fake.url, "--token", "wrong"]
        )
    assert code == 1
    assert "BAD mattermost: the server refused MATTERMOST_TOKEN" in out
    assert not setup_env(tmp_path).exists()


async def test_setup_checks_only_the_platform_being_set_up(tmp_path: Path) -> None:
    # another platform half-configured in the environment neither fails nor gets called
    async with FakeMattermost() as fake:
        code, out, err = await setup_piped(
            tmp_path,
            ["mattermost", "--url", fake.url, "--token", "bot-token"],
            env={"TELEGRAM_BOT_TOKEN": "1:elsewhere", "SLACK_BOT_TOKEN": "xoxb-elsewhere"},
        )
    assert code == 0, err
    assert "telegram" not in out and "slack" not in out


# --- the .env writer --------------------------------------------------------------------------


def test_env_file_update_replaces_in_place_drops_duplicates_and_quotes(tmp_path: Path) -> None:
    path = tmp_path / "gateway.env"
    path.write_text("A=1\nexport SLACK_BOT_TOKEN=old\n# note\nSLACK_BOT_TOKEN=older\nB=2")
    update_env_file(
        path, {"SLACK_BOT_TOKEN": "xoxb-new", "NAME": 'two words "q"'}, comment="gateway setup"
    )
    assert path.read_text() == (
        'A=1\nSLACK_BOT_TOKEN=xoxb-new\n# note\nB=2\n\n# gateway setup\nNAME="two words \\"q\\""\n'
    )


# --- one settings file for setup and every other command --------------------------------------


async def test_setup_writes_the_file_every_command_then_reads(
    tmp_path: Path, database_url: str
) -> None:
    # no ./.env where setup runs: it writes the per-user file, and a command run from another
    # directory (the repository) reads it (doctor on the test's database: no embedded one to
    # initialise per command)
    db = {"DATABASE_URL": database_url, "GATEWAY_HTTP_PORT": "0"}
    async with FakeTelegram() as fake:
        # the two ways to name the file, each in a directory of its own: side by side
        await asyncio.gather(
            _per_user_file_then_doctor(tmp_path / "user", fake, db),
            _named_file_then_doctor(tmp_path / "service", fake, db),
        )


async def _per_user_file_then_doctor(
    tmp_path: Path, fake: FakeTelegram, db: dict[str, str]
) -> None:
    tmp_path.mkdir()
    code, out, err = await setup_piped(
        tmp_path, ["telegram", "--api-base-url", fake.base_url, "--token", fake.token]
    )
    assert code == 0, err
    user_file = tmp_path / "config" / "chat-gateway" / ".env"
    assert f"to {user_file}." in out and not (tmp_path / ".env").exists()
    code, out, _ = await run_cli(["doctor"], {**user_config(tmp_path), **db})
    assert f"ok  configuration: settings from {user_file}" in out, out
    assert "ok  telegram: getMe ok" in out, out


async def _named_file_then_doctor(tmp_path: Path, fake: FakeTelegram, db: dict[str, str]) -> None:
    # GATEWAY_ENV_FILE (a service's /etc/chat-gateway/gateway.env) names it for both, over
    # a per-user file that is there too (as the other half's setup leaves it)
    per_user = tmp_path / "config" / "chat-gateway" / ".env"
    per_user.parent.mkdir(parents=True)
    per_user.write_text(f"TELEGRAM_BOT_TOKEN={fake.token}\nTELEGRAM_API_BASE_URL={fake.base_url}\n")
    service = {**user_config(tmp_path), "GATEWAY_ENV_FILE": str(tmp_path / "etc" / "gw.env")}
    code, out, err = await setup_piped(
        tmp_path,
        ["telegram", "--api-base-url", fake.base_url, "--token", fake.token],
        env=service,
    )
    assert code == 0, err
    assert f"to {tmp_path / 'etc' / 'gw.env'}." in out
    code, out, _ = await run_cli(["doctor"], {**service, **db})
    assert f"settings from {tmp_path / 'etc' / 'gw.env'}" in out, out


def test_the_settings_file_search_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GATEWAY_ENV_FILE", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    assert env_file_path() == tmp_path / "config" / "chat-gateway" / ".env"
    (tmp_path / ".env").write_text("AGENT=echo\n")
    assert env_file_path() == Path(".env")
    monkeypatch.setenv("GATEWAY_ENV_FILE", "~/gw.env")
    assert env_file_path() == Path("~/gw.env").expanduser()


def test_the_start_up_line_names_the_file_read_or_where_it_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gateway.core.settings import settings_source

    monkeypatch.delenv("GATEWAY_ENV_FILE", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    user = tmp_path / "config" / "chat-gateway" / ".env"
    # none yet: both places the gateway looks, the working directory first
    assert settings_source() == f"the environment only (no {tmp_path / '.env'}, no {user})"
    user.parent.mkdir(parents=True)
    user.write_text("AGENT=echo\n")
    assert settings_source() == str(user)
    (tmp_path / ".env").write_text("AGENT=echo\n")
    assert settings_source() == str(tmp_path / ".env")
    monkeypatch.setenv("GATEWAY_ENV_FILE", str(tmp_path / "etc" / "gw.env"))
    assert settings_source() == (
        f"the environment only (no {tmp_path / 'etc' / 'gw.env'}, named by GATEWAY_ENV_FILE)"
    )
