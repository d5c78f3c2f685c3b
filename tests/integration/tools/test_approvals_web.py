"""Approvals in the web chat thread: the card and its statuses, only the asker (or a configured
approver) decides, expiry, a click on another replica, the card retired. A request waiting
across a SIGKILL of the process, on every surface, is tests/contract/test_approvals.py."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import structlog

from gateway.agents.openai import OpenAIAgent
from gateway.runtime.gateway import Gateway
from gateway.tools.catalog import Tool, ToolCaller, ToolSpec
from testsupport.fakes.openai import FakeOpenAI, Step
from testsupport.harness import running_gateway, wait_for

POLICY = """
[tools."ops.restart_service"]
domains = ["ops"]
operation = "write"
risk = "medium"
confirm = true
aliases = ["restart"]
"""

RESTART = {"name": "ops__restart_service", "arguments": {"service": "api"}, "id": "r1"}


class Ops:
    def __init__(self) -> None:
        self.runs: list[Mapping[str, Any]] = []

    def install(self, gw: Gateway) -> None:
        async def restart(args: Mapping[str, Any], caller: ToolCaller) -> str:
            self.runs.append(args)
            return f"restarted {args.get('service')}"

        assert gw.tools is not None
        spec = ToolSpec(
            name="ops.restart_service",
            description="Restart a service",
            parameters={"type": "object", "properties": {"service": {"type": "string"}}},
            source="test",
        )
        gw.tools.catalog.add(Tool(spec=spec, handler=restart), defaults={})


def tools_file(tmp_path: Path) -> str:
    path = tmp_path / "tools.toml"
    path.write_text(POLICY)
    return str(path)


#: who is signed in comes from a trusted reverse proxy's header: the tests run the
#: web chat with GATEWAY_WEB_AUTH=proxy and loopback trusted, so each request says who it is
#: the way oauth2-proxy would; a name in the body is refused
WEB_AUTH: dict[str, Any] = {"GATEWAY_WEB_AUTH": "proxy", "GATEWAY_TRUSTED_PROXIES": "127.0.0.0/8"}


def _as(user: str) -> dict[str, str]:
    return {"X-Forwarded-User": user}


async def post(gw: Gateway, path: str, body: dict[str, Any]) -> httpx.Response:
    """POST ``body`` as the person named by its ``user`` key (default ann)."""
    payload = dict(body)
    user = payload.pop("user", "ann")
    async with httpx.AsyncClient() as client:
        return await client.post(f"{gw.url}{path.lstrip('/')}", json=payload, headers=_as(user))


async def get(gw: Gateway, path: str, *, user: str = "ann") -> Any:
    async with httpx.AsyncClient() as client:
        return (await client.get(f"{gw.url}{path.lstrip('/')}", headers=_as(user))).json()


async def approvals(gw: Gateway) -> list[dict[str, Any]]:
    async with gw.store.db.connection() as conn:
        rows = await conn.fetch(
            "SELECT id, version, status, owner, decided_by, card_retired, card_message_id, "
            "expires_at FROM tool_approvals ORDER BY created_at"
        )
    return [dict(r) for r in rows]


async def history(gw: Gateway, thread: str) -> list[dict[str, Any]]:
    data = await get(gw, f"/web/api/channels/general/threads/{thread}/messages")
    return list(data["messages"])


def gateway(database_url: str, fake: FakeOpenAI, tmp_path: Path, **kw: Any) -> Any:
    return running_gateway(
        database_url,
        agent=OpenAIAgent(base_url=fake.base_url, api_key="k", model="small"),
        AGENT_MODEL="small",
        GATEWAY_TOOLS_FILE=tools_file(tmp_path),
        **WEB_AUTH,
        **kw,
    )


async def test_web_chat_approval_statuses_the_stored_request_and_what_the_thread_shows(
    database_url: str, fake: FakeOpenAI, tmp_path: Path
) -> None:
    """What is the web chat's own: the card in the thread's history (its status, its delivery),
    the HTTP statuses of a refused click (403 someone else, 404 another thread), the stored
    request's owner, decider and version, the metric and the tool result, and a history that
    shows the conversation, not the tool exchange. The request waiting across a restart and
    the one run are the contract suite's (tests/contract/test_approvals.py)."""
    ops = Ops()
    # the turn parks on the request; after the click it runs again and the model asks for
    # the same call, which finds the decided request
    fake.script.extend(
        [Step(tool_calls=[RESTART]), Step(tool_calls=[RESTART]), Step(text="Restarted the api.")]
    )
    thread = "t-approve"
    with structlog.testing.capture_logs() as logs:
        async with gateway(database_url, fake, tmp_path, prepare=ops.install) as gw:
            sent = await post(
                gw,
                "/web/api/channels/general/messages",
                {"text": "please restart the api", "client_msg_id": thread, "user": "ann"},
            )
            assert sent.status_code == 200

            async def card_shown() -> Any:
                # the card is in the history as soon as it is stored; its delivery is "sent" a
                # moment later, once the web chat published it
                cards = [m for m in await history(gw, thread) if m.get("approval")]
                return cards if cards and all(c["delivery"] == "sent" for c in cards) else None

            [card] = await wait_for(card_shown)
            approval = card["approval"]
            assert approval["status"] == "pending" and card["delivery"] == "sent"
            assert "ops.restart_service" in card["content"]
            url = f"/web/api/channels/general/threads/{thread}/approvals/{approval['id']}"
            # someone else's click: a polite refusal, nothing changes
            other = await post(gw, url, {"decision": "approve", "user": "mallory"})
            assert other.status_code == 403
            # the id is checked against the thread: the right person in another thread
            elsewhere = await post(
                gw,
                f"/web/api/channels/general/threads/other/approvals/{approval['id']}",
                {"decision": "approve", "user": "ann"},
            )
            assert elsewhere.status_code == 404
            [row] = await approvals(gw)
            assert row["status"] == "pending" and row["version"] == 1 and row["owner"] == "web:ann"
            first = await post(gw, url, {"decision": "approve", "user": "ann"})
            assert first.status_code == 200 and first.json()["outcome"] == "approved"

            async def answered() -> Any:
                found = [
                    m for m in await history(gw, thread) if m["content"] == "Restarted the api."
                ]
                return found and found[0]["delivery"] == "sent"

            await wait_for(answered, timeout=15)
            await wait_for(lambda: _retired(gw), timeout=10, message="card not retired")
            [row] = await approvals(gw)
            shown = [m for m in await history(gw, thread) if m.get("approval")]
            shown_all = await history(gw, thread)
            metrics = gw.metrics.render().decode()
            async with gw.store.db.connection() as conn:
                tool_results = await conn.fetch(
                    "SELECT metadata FROM messages WHERE role = 'tool' ORDER BY seq_no"
                )
    # the re-run after the click found the decided request by its idempotency key
    assert any(e["event"] == "approval_resumed" for e in logs)
    assert ops.runs == [{"service": "api"}]  # ran once, after approval
    assert row["status"] == "approved" and row["decided_by"] == "web:ann" and row["version"] == 2
    assert row["card_retired"] and shown[0]["approval"]["status"] == "approved"
    assert len(shown) == 1  # one card
    assert 'gateway_tool_approvals_total{outcome="approved"} 1.0' in metrics
    assert [r["metadata"]["outcome"] for r in tool_results] == ["ok"]
    # the web chat shows the conversation, not the tool exchange
    assert {m["role"] for m in shown_all} <= {"user", "assistant"}
    assert all(m["content"] for m in shown_all)  # no empty tool-call bubbles


async def _retired(gw: Gateway) -> bool:
    return all(r["card_retired"] for r in await approvals(gw))


async def test_expiry_tells_the_model_not_approved_and_the_turn_goes_on(
    database_url: str, fake: FakeOpenAI, tmp_path: Path
) -> None:
    ops = Ops()
    # the turn parks on the request; after the decision it runs again and the model
    # asks for the same call, which finds the decided request
    fake.script.extend(
        [
            Step(tool_calls=[RESTART]),
            Step(tool_calls=[RESTART]),
            Step(text="Not approved, so I did nothing."),
        ]
    )
    thread = "t-expire"
    async with gateway(database_url, fake, tmp_path, GATEWAY_APPROVAL_SECONDS=1) as gw:
        ops.install(gw)
        await post(
            gw,
            "/web/api/channels/general/messages",
            {"text": "restart the api", "client_msg_id": thread, "user": "ann"},
        )

        async def answered() -> Any:
            return [m for m in await history(gw, thread) if m["content"].startswith("Not approved")]

        await wait_for(answered, timeout=15)
        await wait_for(lambda: _retired(gw), timeout=10, message="card not retired")
        [row] = await approvals(gw)
        late = await post(
            gw,
            f"/web/api/channels/general/threads/{thread}/approvals/{row['id']}",
            {"decision": "approve", "user": "ann"},
        )
    assert row["status"] == "expired" and ops.runs == []
    assert late.json()["outcome"] == "already_decided"
    follow = fake.turn_requests[-1].body["messages"][-1]
    assert follow["role"] == "tool" and follow["content"].startswith("not approved (expired)")


async def test_a_configured_approver_may_decide_for_the_asker(
    database_url: str, fake: FakeOpenAI, tmp_path: Path
) -> None:
    path = tmp_path / "tools.toml"
    path.write_text(POLICY + '\n[approvers]\n"web:general" = ["web:boss"]\n')
    ops = Ops()
    # the turn parks on the request; after the decision it runs again and the model
    # asks for the same call, which finds the decided request
    fake.script.extend([Step(tool_calls=[RESTART]), Step(tool_calls=[RESTART]), Step(text="Done.")])
    thread = "t-boss"
    async with running_gateway(
        database_url,
        agent=OpenAIAgent(base_url=fake.base_url, api_key="k", model="small"),
        AGENT_MODEL="small",
        GATEWAY_TOOLS_FILE=str(path),
        **WEB_AUTH,
    ) as gw:
        ops.install(gw)
        await post(
            gw,
            "/web/api/channels/general/messages",
            {"text": "restart the api", "client_msg_id": thread, "user": "ann"},
        )

        async def card_shown() -> Any:
            return [m for m in await history(gw, thread) if m.get("approval")]

        [card] = await wait_for(card_shown)
        assert "(or an approver)" in card["content"]
        url = f"/web/api/channels/general/threads/{thread}/approvals/{card['approval']['id']}"
        decided = await post(gw, url, {"decision": "approve", "user": "boss"})
        assert decided.json()["outcome"] == "approved"
        await wait_for(lambda: ops.runs, timeout=10)
        [row] = await approvals(gw)
    assert row["decided_by"] == "web:boss" and row["owner"] == "web:ann"


async def test_a_click_on_another_replica_decides_the_turn_waiting_on_this_one(
    database_url: str, fake: FakeOpenAI, tmp_path: Path
) -> None:
    ops = Ops()
    # the turn parks on the request; after the decision it runs again and the model
    # asks for the same call, which finds the decided request
    fake.script.extend(
        [
            Step(tool_calls=[RESTART]),
            Step(tool_calls=[RESTART]),
            Step(text="Restarted on one of the replicas."),
        ]
    )
    thread = "t-replicas"
    async with gateway(database_url, fake, tmp_path, prepare=ops.install) as one:
        await post(
            one,
            "/web/api/channels/general/messages",
            {"text": "restart the api", "client_msg_id": thread, "user": "ann"},
        )

        async def card_shown() -> Any:
            return [m for m in await history(one, thread) if m.get("approval")]

        [card] = await wait_for(card_shown)
        # the turn is parked; replica two starts only now and takes the click (every replica
        # has the same tools, as in production)
        async with gateway(database_url, fake, tmp_path, prepare=ops.install) as two:
            url = f"/web/api/channels/general/threads/{thread}/approvals/{card['approval']['id']}"
            decided = await post(two, url, {"decision": "approve", "user": "ann"})
            assert decided.json()["outcome"] == "approved"

            async def answered() -> Any:
                return [
                    m
                    for m in await history(one, thread)
                    if m["content"] == "Restarted on one of the replicas."
                ]

            await wait_for(answered, timeout=15)
    assert ops.runs == [{"service": "api"}]  # run once, by whichever replica resumed the turn
