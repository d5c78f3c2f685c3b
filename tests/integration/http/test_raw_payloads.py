"""What the inbox keeps of a raw payload: secrets stripped, unstorable text
made safe, large bodies cut; and lists leave payloads out. One mechanism for all of it:
``gateway.inbound.cleaning.clean_raw``, applied by ``CoreIntake.submit``."""

from __future__ import annotations

import json
from typing import Any

import httpx
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.inbound.cleaning import (
    MAX_RAW_BYTES,
    RAW_HEAD_BYTES,
    _already_clean,
    _without_secrets,
    clean_raw,
    clean_value,
)
from session_store.values import EncodedJson
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


def _full_cleaning(raw: dict[str, Any]) -> tuple[str, set[str]]:
    """What the full cleaning stores (the walk every payload took before the shortcut)."""
    notes: set[str] = set()
    cleaned = clean_value(_without_secrets(dict(raw)), notes)
    return json.dumps(cleaned, default=str, separators=(",", ":")), notes


@settings(max_examples=300, deadline=None)
@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats()
        | st.text(alphabet=st.characters(codec=None), max_size=12)
        | st.sampled_from(["token", "apİ_\u212aey", "x\x00y", "\ud800", "😀", "Cookie"]),
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(
                st.text(max_size=8) | st.sampled_from(["api_key", "AUTHORIZATION", "ok"]),
                inner,
                max_size=3,
            )
        ),
        max_leaves=12,
    )
)
def test_a_payload_encoded_once_is_what_the_full_cleaning_stores(value: Any) -> None:
    """Most payloads have nothing to clean and are encoded once, not walked twice; whenever
    that shortcut is taken, the text stored is exactly the full cleaning's, with no note."""
    raw = {"payload": value}
    notes: set[str] = set()
    kept = clean_raw(raw, notes)
    text, full_notes = _full_cleaning(raw)
    assert isinstance(kept, EncodedJson)
    assert kept.text == text
    assert notes == full_notes


def test_the_shortcut_is_taken_for_a_plain_payload_and_never_for_a_credential() -> None:
    plain = {"update_id": 1, "message": {"text": "héllo", "chat": {"id": -5}}}
    assert _already_clean(plain) is not None
    for secret in ({"token": "s3"}, {"a": [{"Api-Key": "s3"}]}, {"apİ_\u212aey": "s3"}):
        assert _already_clean(secret) is None
        kept, _ = clean(secret)
        assert isinstance(kept, EncodedJson)
        assert "s3" not in kept.text
