"""Each recorded action, done through its real surface (the admin API, /ops, MCP, sign-in,
an approval click, the command line) against a real gateway and database, leaves one audit
event naming who did it, to what, from where, and how it ended.

The actions of one configuration share a gateway and its database (starting one per action
was most of this file's time): each action works on objects of its own, and its audit event
is looked for among the events recorded after it began."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import pytest_asyncio
from mcp import Client

from gateway.core.domain import SessionKey
from gateway.core.ports import ApprovalClick
from gateway.http.webauth import hash_password
from gateway.runtime.gateway import Gateway
from session_store.repos.accounts import AccountStore
from session_store.repos.audit import AuditEvent, AuditStore
from session_store.repos.operator import OperatorStore
from session_store.repos.tools import ToolStore
from session_store.values import ReplyTarget
from testsupport.databases import fresh_database
from testsupport.harness import running_gateway
from testsupport.process import run_cli_in_process

TOKEN = "audit-token-0123456789abcdef0123456789"
PASSWORD = "correct horse battery"
Drive = Callable[[Gateway, httpx.AsyncClient], Awaitable[None]]


@dataclass(frozen=True)
class Case:
    action: str
    drive: Drive
    outcome: str = "ok"
    actor: str = "admin:token"
    surface: str = "api"
    object_type: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)


def _unique() -> str:
    return uuid.uuid4().hex[:12]


def _auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# --- the admin API and /ops --------------------------------------------------------------------


async def _retry_missing(gw: Gateway, c: httpx.AsyncClient) -> None:
    assert (await c.post("/api/v1/deliveries/999/retry", headers=_auth())).status_code == 404


async def _retry_from_ops(gw: Gateway, c: httpx.AsyncClient) -> None:
    headers = {**_auth(), "Referer": f"{gw.url}ops"}
    assert (await c.post("/api/v1/deliveries/999/retry", headers=headers)).status_code == 404


async def _wrong_token(gw: Gateway, c: httpx.AsyncClient) -> None:
    answer = await c.post("/api/v1/deliveries/1/retry", headers=_auth("not-the-token-at-all"))
    assert answer.status_code == 401


# --- the knowledge base (admin API) ------------------------------------------------------------


async def _upload(c: httpx.AsyncClient) -> int:
    answer = await c.post(
        "/api/v1/kb/documents",
        params={"name": "notes.md"},
        content=f"# Notes {_unique()}\n\nThe gateway keeps an audit log.\n".encode(),
        headers={**_auth(), "Content-Type": "application/octet-stream"},
    )
    assert answer.status_code == 200, answer.text
    return int(answer.json()["document"]["id"])


async def _kb_add(gw: Gateway, c: httpx.AsyncClient) -> None:
    await _upload(c)


async def _kb_reindex(gw: Gateway, c: httpx.AsyncClient) -> None:
    doc = await _upload(c)
    answer = await c.post(f"/api/v1/kb/documents/{doc}/reindex", headers=_auth())
    assert answer.status_code == 200


async def _kb_delete(gw: Gateway, c: httpx.AsyncClient) -> None:
    doc = await _upload(c)
    assert (await c.delete(f"/api/v1/kb/documents/{doc}", headers=_auth())).status_code == 204


async def _kb_delete_missing(gw: Gateway, c: httpx.AsyncClient) -> None:
    assert (await c.delete("/api/v1/kb/documents/999", headers=_auth())).status_code == 404


async def _assign(c: httpx.AsyncClient) -> str:
    kb = f"handbook-{_unique()}"
    body = {"kb": kb, "chat": "web:local:general"}
    answer = await c.post("/api/v1/kb/assignments", json=body, headers=_auth())
    assert answer.status_code == 200, answer.text
    return kb


async def _kb_assign(gw: Gateway, c: httpx.AsyncClient) -> None:
    await _assign(c)


async def _kb_unassign(gw: Gateway, c: httpx.AsyncClient) -> None:
    kb = await _assign(c)
    params = {"kb": kb, "chat": "web:local:general"}
    answer = await c.delete("/api/v1/kb/assignments", params=params, headers=_auth())
    assert answer.status_code == 204


# --- MCP writes (no token: loopback) -----------------------------------------------------------


def _key() -> dict[str, str]:
    """A session of the action's own (a thread of its own in the web chat's #general)."""
    return {"platform": "web", "scope": "local", "chat": "general", "thread": f"a-{_unique()}"}


async def _mcp(gw: Gateway, tool: str, **arguments: Any) -> dict[str, Any]:
    async with Client(f"{gw.url}mcp") as client:
        if tool == "create_session":
            arguments = {**_key(), **arguments}
        else:
            made = await client.call_tool("create_session", {**_key(), "participant": "bot"})
            arguments = {"session": made.structured_content["session_id"], **arguments}
            if tool == "create_session_summary":  # something to summarise
                note = {"session": arguments["session"], "participant": "bot", "content": "x"}
                await client.call_tool("append_session_message", note)
        result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    return dict(result.structured_content or {})


def _mcp_case(tool: str, **arguments: Any) -> Drive:
    async def drive(gw: Gateway, c: httpx.AsyncClient) -> None:
        await _mcp(gw, tool, **arguments)

    return drive


# --- sign-in and sign-out ----------------------------------------------------------------------


async def _account(gw: Gateway) -> None:
    accounts = AccountStore(gw.store.db)
    if await accounts.get("ann") is None:  # an earlier action on this database may have added her
        await accounts.add("ann", hash_password(PASSWORD))


async def _sign_in(gw: Gateway, c: httpx.AsyncClient) -> None:
    await _account(gw)
    answer = await c.post("/login", json={"name": "ann", "password": PASSWORD})
    assert answer.status_code == 200, answer.text


async def _sign_in_wrong(gw: Gateway, c: httpx.AsyncClient) -> None:
    await _account(gw)
    answer = await c.post("/login", json={"name": "ann", "password": "not it at all"})
    assert answer.status_code == 401


async def _sign_out(gw: Gateway, c: httpx.AsyncClient) -> None:
    await _sign_in(gw, c)
    assert (await c.post("/logout", json={})).status_code == 200


# --- approval clicks ---------------------------------------------------------------------------


async def _approval(gw: Gateway) -> str:
    key = SessionKey(platform="web", scope="local", chat_id="general", thread_id="t")
    session, _ = await OperatorStore(gw.store).create_session(key, participant="ann")
    own = _unique()
    record, _ = await ToolStore(gw.store).open_approval(
        approval_id=f"appr-{own}",
        session_id=session.id,
        idempotency_key=f"k-{own}",
        tool_name="delete_everything",
        arguments={},
        owner="web:ann",
        approvers=(),
        target=ReplyTarget(platform="web", scope="local", chat_id="general", thread_id="t"),
        expires_in=600,
    )
    return record.id


def _click(user: str, approve: bool) -> Drive:
    async def drive(gw: Gateway, c: httpx.AsyncClient) -> None:
        assert gw.approvals is not None
        approval_id = await _approval(gw)
        await gw.approvals.click(
            ApprovalClick(
                platform="web",
                approval_id=approval_id,
                user_id=user,
                approve=approve,
                chat_id="general",
                thread_id="t",
            )
        )

    return drive


# --- the command line --------------------------------------------------------------------------


def _cli(*args: str, stdin: bytes | None = None) -> Drive:
    async def drive(gw: Gateway, c: httpx.AsyncClient) -> None:
        # the command's own main() on the test's database, in a thread (a new interpreter
        # costs about 2 s of imports; the process itself is another test's subject)
        env = {"DATABASE_URL": gw.settings.database_url or ""}
        code, _out, err = await run_cli_in_process(list(args), env, stdin=stdin)
        assert code == 0, err

    return drive


async def _cli_remove(gw: Gateway, c: httpx.AsyncClient) -> None:
    await _account(gw)
    await _cli("users", "remove", "ann")(gw, c)


async def _cli_kb_remove(gw: Gateway, c: httpx.AsyncClient) -> None:
    doc = await _upload(c)
    await _cli("kb", "remove", str(doc))(gw, c)


async def _schedule(gw: Gateway) -> int:
    made = await gw.schedule_room.service.create(
        "web:local:general", prompt="the weekly notes", at="2099-01-04 09:00"
    )
    return made.id


async def _cli_schedule_remove(gw: Gateway, c: httpx.AsyncClient) -> None:
    await _cli("schedule", "remove", str(await _schedule(gw)))(gw, c)


async def _cli_schedule_run(gw: Gateway, c: httpx.AsyncClient) -> None:
    await _cli("schedule", "run", str(await _schedule(gw)))(gw, c)


_TOKEN = {"GATEWAY_ADMIN_TOKEN": TOKEN}
_ACCOUNTS = {"GATEWAY_WEB_AUTH": "accounts"}
_LOCAL: dict[str, Any] = {"actor": "admin:local", "surface": "mcp", "object_type": "session"}
_PW = (PASSWORD + "\n").encode()

CASES = {
    "retry-missing": Case(
        "delivery.retry", _retry_missing, "failed", object_type="delivery", settings=_TOKEN
    ),
    "retry-from-ops": Case(
        "delivery.retry", _retry_from_ops, "failed", surface="ops", settings=_TOKEN
    ),
    "wrong-token": Case("admin.access", _wrong_token, "denied", settings=_TOKEN),
    "kb-add": Case("kb.document.add", _kb_add, object_type="kb", settings=_TOKEN),
    "kb-reindex": Case("kb.document.reindex", _kb_reindex, settings=_TOKEN),
    "kb-delete": Case("kb.document.delete", _kb_delete, object_type="kb.document", settings=_TOKEN),
    "kb-delete-missing": Case("kb.document.delete", _kb_delete_missing, "failed", settings=_TOKEN),
    "kb-assign": Case("kb.assign", _kb_assign, object_type="kb", settings=_TOKEN),
    "kb-unassign": Case("kb.unassign", _kb_unassign, settings=_TOKEN),
    "mcp-create": Case("session.create", _mcp_case("create_session", participant="b"), **_LOCAL),
    "mcp-append": Case(
        "session.message.append",
        _mcp_case("append_session_message", participant="b", content="a note"),
        **_LOCAL,
    ),
    "mcp-append-batch": Case(
        "session.messages.append",
        _mcp_case("append_session_messages", participant="b", messages=[{"content": "x"}]),
        **_LOCAL,
    ),
    "mcp-close": Case("session.close", _mcp_case("close_session"), **_LOCAL),
    "mcp-checkpoint": Case(
        "session.checkpoint.update",
        _mcp_case("update_checkpoint", name="review", status="open"),
        **_LOCAL,
    ),
    "mcp-summary": Case(
        "session.summary.create",
        _mcp_case("create_session_summary", from_seq=1, to_seq=1, content="gist"),
        **_LOCAL,
    ),
    "mcp-artifact": Case(
        "session.artifact.link",
        _mcp_case("link_session_artifact", kind="pr", name="PR 1", uri="https://example.org/1"),
        **_LOCAL,
    ),
    "sign-in": Case("web.sign_in", _sign_in, actor="web:ann", surface="web", settings=_ACCOUNTS),
    "sign-in-wrong": Case(
        "web.sign_in", _sign_in_wrong, "denied", "web:ann", "web", "web.account", _ACCOUNTS
    ),
    "sign-out": Case("web.sign_out", _sign_out, actor="web:ann", surface="web", settings=_ACCOUNTS),
    "approve": Case("tool.approval.approve", _click("ann", True), actor="web:ann", surface="web"),
    "deny": Case("tool.approval.deny", _click("ann", False), actor="web:ann", surface="web"),
    "click-refused": Case(
        "tool.approval.approve", _click("mallory", True), "denied", "web:mallory", "web"
    ),
    "cli-user-add": Case(
        "web.account.add", _cli("users", "add", "bob", stdin=_PW), actor="cli:", surface="cli"
    ),
    "cli-user-remove": Case("web.account.remove", _cli_remove, actor="cli:", surface="cli"),
    # schedules from the command line are the operating-system user's, like the others
    "cli-schedule-add": Case(
        "schedule.create",
        _cli("schedule", "add", "web:local:general", "--at", "2099-01-04 09:00", "--prompt", "x"),
        actor="cli:",
        surface="cli",
    ),
    "cli-schedule-remove": Case(
        "schedule.delete", _cli_schedule_remove, actor="cli:", surface="cli"
    ),
    "cli-schedule-run": Case("schedule.run", _cli_schedule_run, actor="cli:", surface="cli"),
    "cli-kb-remove": Case(
        "kb.document.delete", _cli_kb_remove, actor="cli:", surface="cli", settings=_TOKEN
    ),
}


def _matching(events: list[AuditEvent], case: Case) -> list[AuditEvent]:
    return [e for e in events if e.action == case.action and e.outcome == case.outcome]


# every action of this module on the module's event loop: the gateways outlive one test
pytestmark = pytest.mark.asyncio(loop_scope="module")

Gateways = Callable[[dict[str, Any]], Awaitable[Gateway]]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def gateways(pg_server: str, template_db: str) -> AsyncIterator[Gateways]:
    """A running gateway for a configuration, on a fresh database of its own, started the
    first time an action asks for it and stopped after the module (then its database)."""
    started: dict[frozenset[tuple[str, Any]], Gateway] = {}
    async with AsyncExitStack() as stack:

        async def gateway_for(settings: dict[str, Any]) -> Gateway:
            key = frozenset(settings.items())
            if key not in started:
                dsn = await stack.enter_async_context(
                    fresh_database(pg_server, prefix="gw_audit", template=template_db)
                )
                started[key] = await stack.enter_async_context(running_gateway(dsn, **settings))
            return started[key]

        yield gateway_for


@pytest.mark.parametrize("name", list(CASES))
async def test_the_action_is_recorded(gateways: Gateways, name: str) -> None:
    case = CASES[name]
    gw = await gateways(case.settings)
    # the events recorded before this action (by earlier ones on this gateway) are not its own
    async with gw.store.db.connection() as conn:
        before = await conn.fetchval("SELECT coalesce(max(id), 0) FROM audit_events")
    async with httpx.AsyncClient(base_url=gw.url, timeout=30) as c:
        await case.drive(gw, c)
    events = [e for e in await AuditStore(gw.store.db).page(limit=100) if e.id > before]
    found = _matching(events, case)
    assert len(found) == 1, [(e.action, e.outcome, e.actor) for e in events]
    event = found[0]
    assert (
        event.actor.startswith(case.actor)
        if case.actor.endswith(":")
        else (event.actor == case.actor)
    ), event
    assert event.surface == case.surface, event
    if case.object_type is not None:
        assert event.object_type == case.object_type, event
    if case.outcome != "ok":
        assert event.reason, event
    if case.surface not in ("cli",) and not case.action.startswith("tool."):
        assert event.remote_addr == "127.0.0.1", event
