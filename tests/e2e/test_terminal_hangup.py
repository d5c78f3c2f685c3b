"""A foreground ``gateway run`` and the embedded PostgreSQL it starts: closing the terminal
(SIGHUP) stops both cleanly, and a server left running by a killed run is found at the next
start, reused, and stopped when that run ends. Real processes on a real pseudo-terminal."""

from __future__ import annotations

import os
import pty
import select
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from session_store.embedded import _alive
from testsupport.paths import REPO
from testsupport.process import clean_env, gateway_process

READY = b"gateway ready: web chat at"
START_SECONDS = 120.0
STOP_SECONDS = 60.0


def _postmaster(data_dir: Path) -> int | None:
    """The pid of the embedded server of ``data_dir``, while one runs."""
    pid_file = data_dir / "pgdata" / "postmaster.pid"
    try:
        pid = int(pid_file.read_text().splitlines()[0])
    except (FileNotFoundError, IndexError, ValueError):
        return None
    return pid if _alive(pid) else None


def _gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        select.select([], [], [], 0.1)  # a short wait between looks at the process
    return True


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A data directory whose server never outlives the test, whatever the test found. Not
    under pytest's own temporary root: that one is pruned by other pytest sessions, and, run
    as root, the wheel's server runs as its own user, who must reach the directory."""
    with tempfile.TemporaryDirectory(prefix="gateway-hangup-") as name:
        path = Path(name)
        path.chmod(0o755)
        try:
            yield path
        finally:
            left = _postmaster(path)
            if left is not None:
                os.kill(left, signal.SIGQUIT)
                _gone(left, 20)


def _run_on_a_terminal(env: dict[str, str]) -> tuple[int, int]:
    """``gateway run`` as a session leader whose controlling terminal is a new pty."""
    pid, master = pty.fork()
    if pid == 0:  # the child: nothing but exec
        os.chdir(REPO)
        os.execve(sys.executable, [sys.executable, "-m", "gateway", "run"], env)
    return pid, master


def _read_until(master: int, needle: bytes, timeout: float) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout
    while needle not in seen:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"not seen in {timeout}s: {needle!r}\n{seen.decode(errors='replace')}"
        ready, _, _ = select.select([master], [], [], remaining)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed its end
                chunk = b""
            assert chunk, f"the terminal closed early:\n{seen.decode(errors='replace')}"
            seen += chunk
    return seen


def _exit_status(pid: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise AssertionError(f"gateway run still running {timeout}s after the hangup")
        select.select([], [], [], 0.1)  # a short wait between polls of the child


def test_closing_the_terminal_stops_the_run_and_its_embedded_postgres(data_dir: Path) -> None:
    env = clean_env(
        {
            "GATEWAY_DATA_DIR": str(data_dir),
            "GATEWAY_HTTP_PORT": "0",
            "GATEWAY_LOG_FORMAT": "console",
        }
    )
    pid, master = _run_on_a_terminal(env)
    try:
        _read_until(master, READY, START_SECONDS)
    except BaseException:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    server = _postmaster(data_dir)
    assert server is not None
    os.close(master)  # the window closes: the kernel hangs up the session (SIGHUP)
    status = _exit_status(pid, STOP_SECONDS)
    assert os.WIFEXITED(status), f"killed by signal {os.WTERMSIG(status)}, no clean stop"
    assert os.WEXITSTATUS(status) == 0
    assert _gone(server, STOP_SECONDS), "the embedded PostgreSQL outlived the run"


async def test_a_server_left_by_a_killed_run_is_reused_and_stopped(
    data_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    logs = tmp_path_factory.mktemp("logs")
    env = {"GATEWAY_DATA_DIR": str(data_dir)}
    async with gateway_process(env, logs / "first.log", ready_timeout=START_SECONDS) as first:
        left = _postmaster(data_dir)
        assert left is not None
        first.kill()
        await first.proc.wait()
    assert _postmaster(data_dir) == left, "the precondition: a killed run leaves its server"
    async with gateway_process(env, logs / "second.log", ready_timeout=START_SECONDS) as second:
        assert _postmaster(data_dir) == left  # found and reused
        assert await second.terminate(STOP_SECONDS) == 0
    assert _gone(left, STOP_SECONDS), "the reused server outlived the run that reused it"
    assert "embedded_postgres_left_over" in second.log()
