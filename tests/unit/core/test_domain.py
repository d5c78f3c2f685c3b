from __future__ import annotations

import pytest

from gateway.core.domain import SessionKey


@pytest.mark.parametrize(
    "key",
    [
        SessionKey(platform="web", scope="local", chat_id="general", thread_id="abc"),
        SessionKey(platform="telegram", scope="bot", chat_id="-1001234", thread_id=None),
        SessionKey(platform="slack", scope="T1", chat_id="C1", thread_id="1700000000.000100"),
        # a Mattermost scope is the server, which may carry a port and a path
        SessionKey(
            platform="mattermost", scope="chat.example.com:8065/mm", chat_id="ch1", thread_id="p1"
        ),
    ],
)
def test_session_key_text_round_trips(key: SessionKey) -> None:
    assert SessionKey.parse(str(key)) == key


@pytest.mark.parametrize("text", ["", "web", "web:local:general", ":s:c:t", "web::c:t", "w:s::t"])
def test_malformed_keys_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a session key"):
        SessionKey.parse(text)
