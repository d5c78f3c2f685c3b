"""A voice note shared in the web chat: the audio is kept by the gateway, the transcription job
fetches it like a platform's file, and the transcript is answered in the same thread; without
TRANSCRIPTION_BASE_URL the thread is told that voice is not set up."""

from __future__ import annotations

import httpx

from gateway.turns.stages.files import NOT_SET_UP
from testsupport.fakes.openai import FakeOpenAI
from testsupport.harness import running_gateway, wait_for

WAV = b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(range(100))
OCTETS = {"Content-Type": "application/octet-stream"}


async def _start_thread(client: httpx.AsyncClient) -> str:
    sent = await client.post(
        "/web/api/channels/general/messages", json={"text": "hello", "client_msg_id": "m1"}
    )
    assert sent.status_code == 200, sent.text
    return str(sent.json()["thread_id"])


async def _answers(client: httpx.AsyncClient, thread: str) -> list[str]:
    r = await client.get(f"/web/api/channels/general/threads/{thread}/messages")
    return [m["content"] for m in r.json()["messages"] if m["role"] == "assistant"]


async def test_a_voice_note_uploaded_in_the_web_chat_is_transcribed_and_answered_there(
    database_url: str, speech: FakeOpenAI
) -> None:
    speech.transcript = "what is on the menu on friday"
    speech.transcription_failures = 1  # the job tries again
    async with (
        running_gateway(
            database_url, TRANSCRIPTION_BASE_URL=speech.base_url, TRANSCRIPTION_API_KEY="sk-v"
        ) as gw,
        httpx.AsyncClient(base_url=gw.url, timeout=30) as client,
    ):
        thread = await _start_thread(client)
        await wait_for(lambda: _answers(client, thread), timeout=20)
        other = await _start_thread_named(client, "m9")
        up = await client.post(
            f"/web/api/channels/general/threads/{thread}/files",
            params={"name": "note.wav", "type": "audio/wav"},
            content=WAV,
            headers=OCTETS,
        )
        assert up.status_code == 200, up.text
        assert up.json()["note"] == "🎙️ note.wav received."
        heard = "echo: what is on the menu on friday"
        await wait_for(lambda: _has(client, thread, heard), timeout=30)
        assert speech.transcriptions[-1]["bytes"] == WAV, "the kept bytes were transcribed"
        assert (await _answers(client, thread)).count(heard) == 1, "answered once"
        r = await client.get(f"/web/api/channels/general/threads/{thread}/messages")
        asked = [m["content"] for m in r.json()["messages"] if m["role"] == "user"]
        assert asked[-1] == "what is on the menu on friday", "the note shows as its transcript"
        assert heard not in await _answers(client, other), "only in its own thread"


async def test_a_web_voice_note_without_transcription_is_told_voice_is_not_set_up(
    database_url: str,
) -> None:
    async with (
        running_gateway(database_url) as gw,
        httpx.AsyncClient(base_url=gw.url, timeout=30) as client,
    ):
        thread = await _start_thread(client)
        # the greeting answered first: a voice note in the same turn as typed text is
        # answered for the text, with a note that it was not heard (NOT_HEARD)
        await wait_for(lambda: _answers(client, thread), timeout=20)
        up = await client.post(
            f"/web/api/channels/general/threads/{thread}/files",
            params={"name": "voice.ogg"},
            content=b"OggS\x00\x02" + bytes(50),
            headers=OCTETS,
        )
        assert up.status_code == 200, up.text
        await wait_for(lambda: _has(client, thread, NOT_SET_UP), timeout=30)


async def _start_thread_named(client: httpx.AsyncClient, msg_id: str) -> str:
    sent = await client.post(
        "/web/api/channels/general/messages", json={"text": "another", "client_msg_id": msg_id}
    )
    return str(sent.json()["thread_id"])


async def _has(client: httpx.AsyncClient, thread: str, text: str) -> bool:
    return any(text in m for m in await _answers(client, thread))
