"""What the inbox keeps of a raw payload (issue 13): secrets stripped, unstorable text made
safe, large bodies cut; and lists leave payloads out."""

from __future__ import annotations

import httpx

from gateway.security import MAX_RAW_CHARS, scrub_raw
from tests.support import running_gateway


def test_slack_token_and_credentials_are_stripped_at_any_depth() -> None:
    raw = {
        "token": "legacy-verification-token",
        "team_id": "T1",
        "event": {"text": "hi", "token": "x", "Authorization": "Bearer y"},
        "items": [{"password": "p", "ok": 1}],
    }
    assert scrub_raw(raw) == {"team_id": "T1", "event": {"text": "hi"}, "items": [{"ok": 1}]}


def test_nul_surrogates_and_non_json_values_become_storable() -> None:
    clean = scrub_raw({"a": "x\x00y", "b": "\ud800", "c": float("nan"), "d": b"bytes"})
    assert clean == {"a": "x\ufffdy", "b": "?", "c": None, "d": "b'bytes'"}


def test_large_payloads_are_cut() -> None:
    clean = scrub_raw({"body": "x" * 200_000})
    assert clean is not None and clean["truncated"] is True
    assert clean["chars"] > 200_000 and len(clean["head"]) == MAX_RAW_CHARS


async def test_a_large_rejected_web_post_is_stored_cut(database_url: str) -> None:
    async with running_gateway(database_url) as gw, httpx.AsyncClient(base_url=gw.url) as c:
        big = await c.post(
            "/web/api/channels/general/messages",
            json={"text": "y" * 900_000, "client_msg_id": "big1"},
        )
        assert big.status_code == 422
        listed = (await c.get("/api/v1/inbound-events")).json()["items"]
        assert listed[0]["payload"] is None  # lists never carry payloads
        one = (await c.get(f"/api/v1/inbound-events/{listed[0]['id']}")).json()
        assert one["payload"]["truncated"] is True
        assert len(one["payload"]["head"]) == MAX_RAW_CHARS
