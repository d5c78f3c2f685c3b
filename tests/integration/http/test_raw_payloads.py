"""What the inbox keeps of a raw payload: secrets stripped, unstorable text
made safe, large bodies cut; and lists leave payloads out. One mechanism for all of it:
``gateway.inbound.intake.clean_raw``, applied by ``CoreIntake.submit``."""

from __future__ import annotations

from typing import Any

import httpx

from gateway.inbound.intake import MAX_RAW_BYTES, RAW_HEAD_BYTES, clean_raw
from testsupport.harness import running_gateway


def clean(raw: dict[str, Any]) -> tuple[Any, set[str]]:
    notes: set[str] = set()
    return clean_raw(raw, notes), notes


def test_slack_token_and_credentials_are_stripped_at_any_depth() -> None:
    raw = {
        "token": "legacy-verification-token",
        "team_id": "T1",
        "event": {"text": "hi", "token": "x", "Authorization": "Bearer y"},
        "items": [{"password": "p", "ok": 1}],
        # a count, not a credential
        "tokens_used": 12,
    }
    kept, _ = clean(raw)
    assert kept == {
        "team_id": "T1",
        "event": {"text": "hi"},
        "items": [{"ok": 1}],
        "tokens_used": 12,
    }


def test_nul_surrogates_and_non_json_numbers_become_storable() -> None:
    kept, notes = clean({"a": "x\x00y", "b": "\ud800", "c": float("nan")})
    assert kept == {"a": "xy", "b": "\ufffd", "c": "nan"}
    assert {"nul_removed", "surrogates_replaced", "number_as_text"} <= notes


def test_large_payloads_are_cut() -> None:
    kept, notes = clean({"body": "x" * (MAX_RAW_BYTES + 10)})
    assert kept is not None and kept["truncated"] is True and "raw_truncated" in notes
    assert kept["bytes"] > MAX_RAW_BYTES and len(kept["head"]) == RAW_HEAD_BYTES


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
        assert len(one["payload"]["head"]) == RAW_HEAD_BYTES
