"""Run ``gateway`` as a real subprocess with a clean environment."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import re
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar, cast

from testsupport.paths import REPO

_READY = re.compile(r"gateway ready: web chat at (http://\S+)")


T = TypeVar("T")


def clean_env(extra: Mapping[str, str]) -> dict[str, str]:
    """Only what a process needs to run, plus the test's settings: never the developer's."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    env["PYTHONPATH"] = str(REPO)
    env["GATEWAY_LOG_FORMAT"] = "json"
    # an empty per-user config dir: the developer's ~/.config/chat-gateway/.env stays out
    env["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="gateway-test-config-")
    env.update(extra)
    return env


@dataclass
class GatewayProcess:
    proc: asyncio.subprocess.Process
    url: str
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)

    async def terminate(self, timeout: float = 20) -> int:
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        return await asyncio.wait_for(self.proc.wait(), timeout)


async def run_cli(
    args: list[str], env: Mapping[str, str], timeout: float = 60, *, stdin: bytes | None = None
) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        *args,
        env=clean_env(env),
        cwd=str(REPO),
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin), timeout)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def run_cli_in_process(
    args: list[str], env: Mapping[str, str], *, stdin: bytes | None = None
) -> tuple[int, str, str]:
    """``run_cli`` without a new interpreter (each costs its imports, about two seconds of
    CPU): ``gateway.ops.cli.main`` in a worker thread (it runs its own event loop), with
    ``env`` as its only settings, no settings file, and ``stdin`` as its standard input. For
    what a command does; a test of the process itself (its exit on a signal, what its
    interpreter imports) runs the real one with ``run_cli``. Not for two at once: the
    environment and the standard streams are the process's."""
    return await asyncio.to_thread(_cli_in_process, args, env, stdin)


_SETTINGS_PREFIXES = ("GATEWAY_", "TELEGRAM_", "SLACK_", "MATTERMOST_", "OPENAI_", "AGENT")


def _cli_in_process(
    args: list[str], env: Mapping[str, str], stdin: bytes | None
) -> tuple[int, str, str]:
    from gateway.ops.cli import main

    saved = dict(os.environ)
    out, err = io.StringIO(), io.StringIO()
    stdin_text = io.StringIO((stdin or b"").decode())
    try:
        for name in list(os.environ):
            if name.startswith(_SETTINGS_PREFIXES) or name == "DATABASE_URL":
                del os.environ[name]
        config = tempfile.mkdtemp(prefix="gateway-test-config-")
        os.environ.update(
            {
                "XDG_CONFIG_HOME": config,
                "GATEWAY_ENV_FILE": os.path.join(config, "none.env"),
                "GATEWAY_LOG_FORMAT": "json",
                **env,
            }
        )
        saved_stdin, sys.stdin = sys.stdin, stdin_text
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    code = main(args)
                except SystemExit as exc:  # argparse's usage errors
                    code = exc.code if isinstance(exc.code, int) else 1
        finally:
            sys.stdin = saved_stdin
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return code, out.getvalue(), err.getvalue()


@asynccontextmanager
async def gateway_process(
    env: Mapping[str, str], log_path: Path, *, ready_timeout: float = 90
) -> AsyncIterator[GatewayProcess]:
    log_file = log_path.open("ab")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        "run",
        env=clean_env({"GATEWAY_HTTP_PORT": "0", **env}),
        cwd=str(REPO),
        # no terminal on any of its fds, as under a service manager (SIGHUP then reloads)
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=log_file,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + ready_timeout
    url = None
    try:
        while url is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(
                    f"gateway not ready in {ready_timeout}s:\n{log_path.read_text()}"
                )
            try:
                line = await asyncio.wait_for(proc.stdout.readline(), remaining)
            except TimeoutError:
                continue
            if not line:
                await proc.wait()
                raise AssertionError(
                    f"gateway exited with {proc.returncode}:\n{log_path.read_text()}"
                )
            match = _READY.search(line.decode())
            if match:
                url = match.group(1).rstrip("/")
        yield GatewayProcess(proc, url, log_path)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 20)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        log_file.close()


async def enter_side_by_side(
    stack: AsyncExitStack, contexts: Iterable[AbstractAsyncContextManager[T]]
) -> list[T]:
    """Enter ``contexts`` on ``stack`` concurrently (gateway start-ups are seconds of imports
    each; here they overlap); their values in the order given. When one fails, its error is
    raised and the stack exits the ones that did start."""
    entered = await asyncio.gather(
        *(stack.enter_async_context(c) for c in contexts), return_exceptions=True
    )
    for result in entered:
        if isinstance(result, BaseException):
            raise result
    return cast(list[T], entered)


@asynccontextmanager
async def gateway_processes(
    *runs: tuple[Mapping[str, str], Path], ready_timeout: float = 90
) -> AsyncIterator[list[GatewayProcess]]:
    """``gateway_process`` for each ``(env, log_path)``, started side by side, in the order
    given; each stopped as there."""
    async with AsyncExitStack() as stack:
        yield await enter_side_by_side(
            stack,
            (gateway_process(env, log, ready_timeout=ready_timeout) for env, log in runs),
        )
