"""Run ``gateway`` as a real subprocess with a clean environment."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from testsupport.paths import REPO

_READY = re.compile(r"gateway ready: web chat at (http://\S+)")


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
