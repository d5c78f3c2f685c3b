"""Web chat previews across replicas: while one gateway streams an answer, the live streams
of every gateway on the same database see the growing preview (LISTEN/NOTIFY), then the one
final reply with the preview's id."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from gateway.agents.openai import OpenAIAgent
from gateway.inbound.intake import live_topic
from session_store.values import SessionKey
from tests.integration.runtime.test_live import collecting
from testsupport.fakes.openai import FakeOpenAI, Step
from testsupport.harness import running_gateway, wait_for


async def test_previews_reach_the_streams_of_both_replicas(
    database_url: str, fake: FakeOpenAI
) -> None:
    answer = "Streamed to every replica: " + " ".join(f"t{n}" for n in range(40))
    fake.script.append(Step(text=answer, chunk_chars=10, chunk_delay=0.1))

    def replica() -> Any:
        return running_gateway(
            database_url,
            agent=OpenAIAgent(base_url=fake.base_url, api_key="k", model="small"),
            AGENT_MODEL="small",
            GATEWAY_TOOLS=False,
            GATEWAY_STREAM_EDIT_SECONDS=0.2,
        )

    async with replica() as a, replica() as b:
        topic = live_topic(
            SessionKey(platform="web", scope="local", chat_id="general", thread_id="th1")
        )
        async with collecting(a.live, topic) as at_a, collecting(b.live, topic) as at_b:
            await asyncio.sleep(0.2)
            async with httpx.AsyncClient(base_url=a.url) as client:
                sent = await client.post(
                    "/web/api/channels/general/messages",
                    json={"text": "stream it", "client_msg_id": "th1"},
                )
                assert sent.status_code == 200, sent.text

            def of(seen: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
                return [e for e in seen if e.get("type") == kind]

            await wait_for(lambda: of(at_a, "reply") and of(at_b, "reply"), timeout=20)
            await asyncio.sleep(0.5)
    for seen in (at_a, at_b):
        previews = of(seen, "preview")
        assert len(previews) >= 2, "the preview grew on this replica's stream"
        texts = [p["text"] for p in previews]
        assert all(answer.startswith(t) for t in texts) and texts[0] != answer
        [reply] = of(seen, "reply")
        assert reply["id"] == previews[0]["id"] and reply["text"] == answer
