"""Files in the web chat's history: an answer's file parts, once sent, come back
with the thread's history, so a reload shows them too (not only the live event)."""

from __future__ import annotations

import base64
from typing import Any

import httpx

from tests.integration.http.test_web_chat_layout import PIXEL, MarkdownAgent
from testsupport.harness import running_gateway, wait_for


async def test_history_carries_the_answer_files(database_url: str) -> None:
    async with (
        running_gateway(database_url, agent=MarkdownAgent()) as gw,
        httpx.AsyncClient(base_url=gw.url) as client,
    ):
        posted = await client.post(
            "/web/api/channels/general/messages",
            json={"text": "a picture please", "client_msg_id": "m1"},
        )
        assert posted.status_code < 300, posted.text
        thread = posted.json()["thread_id"]
        url = f"/web/api/channels/general/threads/{thread}/messages"

        async def answered() -> list[dict[str, Any]]:
            messages = (await client.get(url)).json()["messages"]
            return [m for m in messages if m["role"] == "assistant" and m["files"]]

        [answer] = await wait_for(answered, timeout=15)
    [file] = answer["files"]
    assert file["name"] == PIXEL.name and file["mime_type"] == PIXEL.mime_type
    assert file["caption"] == PIXEL.caption
    assert base64.b64decode(file["data"]) == PIXEL.data
    assert str(file["id"]).startswith("gw-")
