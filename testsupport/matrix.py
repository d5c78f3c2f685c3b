"""A real Synapse homeserver for the Matrix tests, and people who talk to it.

Synapse (PyPI ``matrix-synapse``) runs from its own virtualenv, ``.venv-synapse`` at the
checkout's root (``SYNAPSE_PYTHON`` names another interpreter): its pins (Twisted, an older
``cryptography``) are not the gateway's business. ``.ci/run`` creates it; a developer's first
Matrix test creates it too when it is missing (PyPI once; offline afterwards).

``synapse()`` starts one homeserver per test process (127.0.0.1, a free port, SQLite in the
suite's scratch space, a registration shared secret, rate limits raised, no federation, no key
servers) the first time it is asked for, and stops it when the process exits. Accounts are
created with the shared-secret admin API (``POST /_synapse/admin/v1/register``: a nonce and an
HMAC-SHA1); ``Person`` drives the client-server API with plain httpx, as a Matrix client would.
"""

from __future__ import annotations

import atexit
import base64
import fcntl
import hashlib
import hmac
import itertools
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from testsupport.paths import REPO, scratch_dir

#: the homeserver's name (user ids are ``@name:localhost``)
SERVER_NAME = "localhost"
_VENV = REPO / ".venv-synapse"


def synapse_python() -> Path:
    """The interpreter Synapse runs with; creates ``.venv-synapse`` when there is none."""
    named = os.environ.get("SYNAPSE_PYTHON")
    if named:
        return Path(named)
    python = _VENV / "bin" / "python"
    lock_path = REPO / ".venv-synapse.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # xdist workers: one of them installs
        if not _has_synapse(python):
            subprocess.run([sys.executable, "-m", "venv", str(_VENV)], check=True)
            subprocess.run(
                [str(python), "-m", "pip", "install", "--quiet", "matrix-synapse"], check=True
            )
    return python


def synapse_installed() -> bool:
    """Synapse can start without installing anything first (a benchmark installs nothing)."""
    named = os.environ.get("SYNAPSE_PYTHON")
    return _has_synapse(Path(named) if named else _VENV / "bin" / "python")


def _has_synapse(python: Path) -> bool:
    if not python.exists():
        return False
    found = subprocess.run([str(python), "-c", "import synapse"], capture_output=True)
    return found.returncode == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _signing_key() -> str:
    """An ed25519 signing key in Synapse's file format (``ed25519 VERSION SEED``)."""
    seed = base64.b64encode(secrets.token_bytes(32)).decode().rstrip("=")
    return f"ed25519 a_test {seed}\n"


_UNLIMITED = {"per_second": 1000, "burst_count": 1000}


def _config(root: Path, port: int, shared_secret: str) -> str:
    config = {
        "server_name": SERVER_NAME,
        "pid_file": str(root / "homeserver.pid"),
        "listeners": [
            {
                "port": port,
                "bind_addresses": ["127.0.0.1"],
                "type": "http",
                "tls": False,
                "x_forwarded": False,
                "resources": [{"names": ["client"], "compress": False}],
            }
        ],
        "database": {"name": "sqlite3", "args": {"database": str(root / "homeserver.db")}},
        "log_config": str(root / "log.yaml"),
        "media_store_path": str(root / "media"),
        "registration_shared_secret": shared_secret,
        "report_stats": False,
        "macaroon_secret_key": secrets.token_hex(16),
        "form_secret": secrets.token_hex(16),
        "signing_key_path": str(root / "signing.key"),
        "trusted_key_servers": [],
        "suppress_key_server_warning": True,
        "federation_domain_whitelist": [],
        "presence": {"enabled": False},
        "url_preview_enabled": False,
        "enable_metrics": False,
        # passwords hashed quickly: registering an account is most of a test's setup
        "bcrypt_rounds": 4,
        "rc_message": _UNLIMITED,
        "rc_registration": _UNLIMITED,
        "rc_login": {k: _UNLIMITED for k in ("address", "account", "failed_attempts")},
        "rc_joins": {"local": _UNLIMITED, "remote": _UNLIMITED},
        "rc_invites": {k: _UNLIMITED for k in ("per_room", "per_user", "per_issuer")},
        "rc_admin_redaction": _UNLIMITED,
    }
    return json.dumps(config)  # JSON is YAML


_LOG_CONFIG = """\
version: 1
formatters:
  plain: {format: '%(asctime)s %(levelname)s %(name)s %(message)s'}
handlers:
  file: {class: logging.FileHandler, filename: LOGFILE, formatter: plain}
root: {level: WARNING, handlers: [file]}
disable_existing_loggers: false
"""


@dataclass
class Account:
    user_id: str
    access_token: str = field(repr=False)
    password: str = field(repr=False, default="")


class Synapse:
    """One running homeserver (``start``/``stop``); ``register`` makes accounts."""

    def __init__(self) -> None:
        self.root = scratch_dir("synapse-")  # its SQLite database syncs every commit
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._secret = secrets.token_hex(16)
        self._proc: subprocess.Popen[bytes] | None = None
        self._names = itertools.count(1)

    @property
    def log_file(self) -> Path:
        return self.root / "homeserver.log"

    def start(self, timeout: float = 60.0) -> None:
        python = synapse_python()
        (self.root / "hs.yaml").write_text(_config(self.root, self.port, self._secret))
        (self.root / "log.yaml").write_text(_LOG_CONFIG.replace("LOGFILE", str(self.log_file)))
        (self.root / "signing.key").write_text(_signing_key())
        with open(self.root / "stdout.log", "wb") as out:  # the child keeps its own copy
            self._proc = subprocess.Popen(
                [str(python), "-m", "synapse.app.homeserver", "-c", str(self.root / "hs.yaml")],
                cwd=self.root,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "SYNAPSE_CACHE_FACTOR": "0.5"},
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"synapse exited: {self.tail()}")
            try:
                if httpx.get(f"{self.url}/_matrix/client/versions", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"synapse did not answer within {timeout}s: {self.tail()}")

    def tail(self) -> str:
        parts = []
        for name in ("stdout.log", "homeserver.log"):
            path = self.root / name
            if path.exists():
                parts.append(path.read_text(errors="replace")[-3000:])
        return "\n".join(parts)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)

    def register(self, prefix: str, *, admin: bool = False) -> Account:
        """A new account (``@prefixN:localhost``) through the shared-secret admin API."""
        name = f"{prefix}{next(self._names)}"
        password = secrets.token_hex(8)
        endpoint = f"{self.url}/_synapse/admin/v1/register"
        nonce = httpx.get(endpoint, timeout=10).json()["nonce"]
        mac = hmac.new(self._secret.encode(), digestmod=hashlib.sha1)
        for part in (nonce, name, password, "admin" if admin else "notadmin"):
            if part != nonce:
                mac.update(b"\x00")
            mac.update(part.encode())
        body = {
            "nonce": nonce,
            "username": name,
            "password": password,
            "admin": admin,
            "mac": mac.hexdigest(),
        }
        answer = httpx.post(endpoint, json=body, timeout=30)
        answer.raise_for_status()
        got = answer.json()
        return Account(got["user_id"], got["access_token"], password)


_shared: Synapse | None = None
_shared_lock = threading.Lock()


def synapse() -> Synapse:
    """The test process's homeserver, started on first use and stopped at exit."""
    global _shared
    with _shared_lock:
        if _shared is None:
            server = Synapse()
            try:
                server.start()
            except BaseException:
                server.stop()
                raise
            atexit.register(server.stop)
            _shared = server
        return _shared


def _quote(value: str) -> str:
    return urllib.parse.quote(value, safe="")


class Person:
    """Someone with a Matrix client: every call is one client-server API request."""

    def __init__(self, server: Synapse, account: Account) -> None:
        self.server = server
        self.account = account
        self.user_id = account.user_id
        self._txn = itertools.count(1)
        self._prefix = secrets.token_hex(4)

    async def call(
        self, method: str, path: str, body: dict[str, Any] | None = None, **params: Any
    ) -> Any:
        async with httpx.AsyncClient(base_url=self.server.url, timeout=30) as client:
            # the body as JSON with every non-ASCII character escaped, as the person's client
            # would send it (a lone surrogate included: the homeserver judges it)
            answer = await client.request(
                method,
                f"/_matrix/client/v3{path}",
                content=None if body is None else json.dumps(body).encode(),
                params=params or None,
                headers={
                    "Authorization": f"Bearer {self.account.access_token}",
                    "Content-Type": "application/json",
                },
            )
        if answer.status_code >= 400:
            raise RuntimeError(f"{method} {path}: {answer.status_code} {answer.text}")
        return answer.json()

    async def create_room(
        self, *, invite: tuple[str, ...] = (), direct: bool = False, encrypted: bool = False
    ) -> str:
        body: dict[str, Any] = {"preset": "private_chat", "invite": list(invite)}
        if direct:
            body["is_direct"] = True
        if encrypted:
            body["initial_state"] = [
                {
                    "type": "m.room.encryption",
                    "state_key": "",
                    "content": {"algorithm": "m.megolm.v1.aes-sha2"},
                }
            ]
        return str((await self.call("POST", "/createRoom", body))["room_id"])

    async def invite(self, room_id: str, user_id: str) -> None:
        await self.call("POST", f"/rooms/{_quote(room_id)}/invite", {"user_id": user_id})

    async def join(self, room_id: str) -> None:
        await self.call("POST", f"/join/{_quote(room_id)}", {})

    async def send(
        self, room_id: str, content: dict[str, Any], kind: str = "m.room.message"
    ) -> str:
        txn = f"{self._prefix}-{next(self._txn)}"
        path = f"/rooms/{_quote(room_id)}/send/{kind}/{txn}"
        return str((await self.call("PUT", path, content))["event_id"])

    async def say(
        self, room_id: str, text: str, *, mention: str | None = None, thread: str | None = None
    ) -> str:
        """A text message; ``mention`` names a user (in ``m.mentions`` and the text), ``thread``
        the root of the thread it is posted in."""
        content: dict[str, Any] = {"msgtype": "m.text", "body": text}
        if mention:
            content["body"] = f"{mention}: {text}"
            content["m.mentions"] = {"user_ids": [mention]}
        if thread:
            content["m.relates_to"] = {
                "rel_type": "m.thread",
                "event_id": thread,
                "is_falling_back": True,
                "m.in_reply_to": {"event_id": thread},
            }
        return await self.send(room_id, content)

    async def edit(self, room_id: str, event_id: str, text: str) -> str:
        content = {
            "msgtype": "m.text",
            "body": f"* {text}",
            "m.new_content": {"msgtype": "m.text", "body": text},
            "m.relates_to": {"rel_type": "m.replace", "event_id": event_id},
        }
        return await self.send(room_id, content)

    async def redact(self, room_id: str, event_id: str) -> str:
        txn = f"{self._prefix}-{next(self._txn)}"
        path = f"/rooms/{_quote(room_id)}/redact/{_quote(event_id)}/{txn}"
        return str((await self.call("PUT", path, {}))["event_id"])

    async def react(self, room_id: str, event_id: str, key: str) -> str:
        content = {"m.relates_to": {"rel_type": "m.annotation", "event_id": event_id, "key": key}}
        return await self.send(room_id, content, kind="m.reaction")

    async def messages(self, room_id: str, limit: int = 200) -> list[dict[str, Any]]:
        """The room's events, oldest first (``/messages`` backwards, reversed)."""
        got = await self.call(
            "GET", f"/rooms/{_quote(room_id)}/messages", dir="b", limit=str(limit)
        )
        return list(reversed(got["chunk"]))

    async def joined(self, room_id: str) -> list[str]:
        got = await self.call("GET", f"/rooms/{_quote(room_id)}/joined_members")
        return sorted(got["joined"])


def thread_of(event: dict[str, Any]) -> str | None:
    """The thread root an event was posted in (its ``m.thread`` relation)."""
    relation = event.get("content", {}).get("m.relates_to") or {}
    return relation.get("event_id") if relation.get("rel_type") == "m.thread" else None


def texts_by(events: list[dict[str, Any]], sender: str) -> list[dict[str, Any]]:
    """``sender``'s messages among ``events`` that are not edits (each once, with its latest
    text: the ``m.new_content`` of the newest edit, a redacted one as "")."""
    edits: dict[str, str] = {}
    for e in events:
        relation = e.get("content", {}).get("m.relates_to") or {}
        if e["sender"] == sender and relation.get("rel_type") == "m.replace":
            edits[relation["event_id"]] = e["content"]["m.new_content"].get("body", "")
    out = []
    for e in events:
        if e["sender"] != sender or e["type"] != "m.room.message" or redacted(e):
            continue
        relation = e.get("content", {}).get("m.relates_to") or {}
        if relation.get("rel_type") == "m.replace":
            continue
        body = e.get("content", {}).get("body", "")
        out.append({**e, "text": edits.get(e["event_id"], body)})
    return out


def read_room(server: Synapse, account: Account, room_id: str) -> list[dict[str, Any]]:
    """The room's events as ``account`` sees them, oldest first (a blocking read, for drivers
    whose reads are plain calls)."""
    answer = httpx.get(
        f"{server.url}/_matrix/client/v3/rooms/{_quote(room_id)}/messages",
        params={"dir": "b", "limit": "500"},
        headers={"Authorization": f"Bearer {account.access_token}"},
        timeout=30,
    )
    answer.raise_for_status()
    return list(reversed(answer.json()["chunk"]))


def redacted(event: dict[str, Any]) -> bool:
    return "redacted_because" in (event.get("unsigned") or {})
