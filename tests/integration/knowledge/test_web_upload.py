"""The web chat's upload: a file joins the thread's documents, the thread is told when it is
read, and questions in the thread are answered from it."""

from __future__ import annotations

import httpx

from tests.integration.knowledge.test_answers import PAGES, CitingAgent
from testsupport.documents import make_pdf
from testsupport.harness import running_gateway, wait_for


async def test_a_file_uploaded_in_the_web_chat_is_announced_and_cited(
    database_url: str,
) -> None:
    async with (
        running_gateway(database_url, agent=CitingAgent()) as gw,
        httpx.AsyncClient(base_url=gw.url) as client,
    ):
        sent = await client.post(
            "/web/api/channels/general/messages",
            json={"text": "hello", "client_msg_id": "m1"},
        )
        thread = sent.json()["thread_id"]
        base = f"/web/api/channels/general/threads/{thread}"

        async def history() -> list[str]:
            r = await client.get(f"{base}/messages")
            return [m["content"] for m in r.json()["messages"] if m["role"] == "assistant"]

        await wait_for(history, timeout=20)
        up = await client.post(
            f"{base}/files",
            params={"name": "handbook.pdf", "type": "application/pdf"},
            content=make_pdf(PAGES),
            headers=OCTETS,
        )
        assert up.status_code == 200, up.text
        assert up.json()["note"] == "📎 handbook.pdf received; I will say here when it is ready."
        await wait_for(lambda: _has(history, "📄 handbook.pdf is ready (3 pages"), timeout=20)
        await client.post(
            "/web/api/channels/general/messages",
            json={
                "text": "How long do customers get refunds?",
                "client_msg_id": "m2",
                "thread_id": thread,
            },
        )
        await wait_for(lambda: _has(history, "[1] handbook.pdf, p. 3"), timeout=20)

        bad = await client.post(
            f"{base}/files", params={"name": "x.bin"}, content=bytes(256), headers=OCTETS
        )
        assert bad.status_code == 415 and "unsupported file type" in bad.json()["note"]
        empty = await client.post(f"{base}/files", params={"name": "a.txt"}, headers=OCTETS)
        assert empty.status_code == 400
        # anything but the file's bytes as application/octet-stream is refused before the
        # handler (a form post from another site could otherwise carry a file here)
        form = await client.post(
            f"{base}/files", params={"name": "a.txt"}, content=b"hi", headers=TEXT
        )
        assert form.status_code == 415


OCTETS = {"Content-Type": "application/octet-stream"}
TEXT = {"Content-Type": "text/plain"}


async def _has(history: object, text: str) -> bool:
    assert callable(history)
    return any(text in m for m in await history())


async def test_a_file_uploaded_into_an_empty_thread_is_announced_there(
    database_url: str,
) -> None:
    # a new thread nobody has written in: the upload is its first event, and the promise
    # "I will say here when it is ready" is kept in that thread
    async with (
        running_gateway(database_url, agent=CitingAgent()) as gw,
        httpx.AsyncClient(base_url=gw.url) as client,
    ):
        base = "/web/api/channels/general/threads/fresh-thread-1"

        async def history() -> list[str]:
            r = await client.get(f"{base}/messages")
            return [m["content"] for m in r.json()["messages"] if m["role"] == "assistant"]

        up = await client.post(
            f"{base}/files",
            params={"name": "handbook.pdf", "type": "application/pdf"},
            content=make_pdf(PAGES),
            headers=OCTETS,
        )
        assert up.status_code == 200, up.text
        assert up.json()["note"] == "📎 handbook.pdf received; I will say here when it is ready."
        await wait_for(lambda: _has(history, "📄 handbook.pdf is ready (3 pages"), timeout=20)
        # the thread goes on from there: a question is answered from the file
        await client.post(
            "/web/api/channels/general/messages",
            json={
                "text": "How long do refunds take?",
                "client_msg_id": "m1",
                "thread_id": "fresh-thread-1",
            },
        )
        await wait_for(lambda: _has(history, "[1] handbook.pdf, p. 3"), timeout=20)
