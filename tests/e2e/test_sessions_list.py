"""``gateway sessions list``: newest activity first, ``--limit`` and ``--json``."""

from __future__ import annotations

import json

from gateway.core.domain import Envelope, ReplyTarget, Sender, SessionKey
from gateway.inbound.intake import to_inbound
from session_store.store import Store
from testsupport.process import run_cli, run_cli_in_process


def _envelope(thread: str, n: int) -> Envelope:
    key = SessionKey(platform="web", scope="local", chat_id="general", thread_id=thread)
    target = ReplyTarget(
        platform="web",
        scope="local",
        chat_id="general",
        thread_id=thread,
        reply_to_message_id=f"{thread}-{n}",
    )
    return Envelope(
        key=key, target=target, message_id=f"{thread}-{n}", text="hi", sender=Sender(id="u")
    )


async def test_sessions_list_json_is_newest_activity_first_and_limited(
    store: Store, database_url: str
) -> None:
    # "b" is created first but talked to last: activity, not id, decides the order
    for thread, n in (("b", 0), ("a", 0), ("c", 0), ("b", 1)):
        await store.inbox.ingest(to_inbound(_envelope(thread, n)), raw=None)
    env = {"DATABASE_URL": database_url}

    code, out, err = await run_cli(["sessions", "list", "--json"], env)
    assert code == 0, err
    rows = json.loads(out)
    assert [r["thread_id"] for r in rows] == ["b", "c", "a"]
    assert rows[0]["message_count"] == 2 and rows[0]["key"] == "web:local:general:b"
    assert rows[0]["last_message_at"] >= rows[1]["last_message_at"]

    # the real command once, then the same main() in-process (no interpreter's imports)
    code, out, err = await run_cli_in_process(["sessions", "list", "--json", "--limit", "2"], env)
    assert code == 0, err
    assert [r["thread_id"] for r in json.loads(out)] == ["b", "c"]

    code, out, _ = await run_cli_in_process(["sessions", "list", "--limit", "1"], env)
    assert code == 0 and len(out.splitlines()) == 1 and "web:local:general:b" in out

    code, _, err = await run_cli_in_process(["sessions", "list", "--limit", "0"], env)
    assert code == 2 and "must be 1 or more" in err
