"""The operator surface on the gateway's HTTP server: the admin API (``/api/v1``, at
``/openapi.json``), the MCP session tools (``/mcp``) and the operator pages (``/ops``).

Access: with ``GATEWAY_ADMIN_TOKEN`` set, ``/api/v1`` and ``/mcp`` need
``Authorization: Bearer <token>`` (compared in constant time). Without it they answer only
clients on loopback that address the server by a loopback name — so binding
``GATEWAY_HTTP_HOST=0.0.0.0`` without a token still keeps them local, and a web page that
rebinds its DNS name to 127.0.0.1 cannot reach them. Behind a local proxy set a token.

Errors are RFC 9457 problem documents (``application/problem+json``); invalid input is a
4xx with a message saying what to change, never a 500.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping
from types import UnionType
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, get_args, get_origin

import structlog
from fastapi import APIRouter, Depends, FastAPI, Path, Query
from fastapi.dependencies.utils import get_flat_params
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field
from starlette.requests import Request
from starlette.routing import Route

from gateway import audit
from gateway.core.errors import RequestError
from gateway.core.hub import Signal
from gateway.core.ports import Transport
from gateway.http import params
from gateway.http.access import API_PREFIX as API_PREFIX
from gateway.http.access import MCP_PATH, PROBLEM_JSON, GuardedASGI
from gateway.http.access import AccessPolicy as AccessPolicy
from gateway.http.access import install_problem_handlers as install_problem_handlers
from gateway.http.mcp_endpoint import McpEndpoint
from gateway.http.operator import MAX_PAGE, OperatorService, Page, paginate
from gateway.http.opsauth import OpsSignIn
from session_store.records import (
    Checkpoint,
    Counts,
    DeliveryRecord,
    InboundEvent,
    Link,
    MessageRecord,
    SearchHit,
    SessionDetail,
    SessionRecord,
)
from session_store.repos.operator import LinkRelation, LinkType, OperatorStore
from session_store.store import Store
from session_store.values import SessionStatus

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

log = structlog.get_logger(__name__)

MAX_ID = 2**63 - 1

SessionRef = Annotated[
    str,
    Path(
        description="session id, or key platform:scope:chat:thread ('-' for no thread)",
        max_length=600,
        pattern=params.SESSION_REF,
    ),
]
Limit = Annotated[int, Query(ge=1, le=MAX_PAGE, description="page size")]
Cursor = Annotated[
    str | None,
    Query(
        max_length=19,
        pattern=params.CURSOR,
        description="next_cursor of the previous page: the rows before that id",
    ),
]
SessionCursor = Annotated[
    str | None,
    Query(
        max_length=40,
        pattern=params.SESSION_CURSOR,
        description="next_cursor of the previous page: the sessions after that last activity "
        "(microseconds since 1970, UTC; empty: none) and id",
    ),
]
SearchText = Annotated[
    str,
    Query(
        min_length=1,
        max_length=500,
        pattern=params.SEARCH,
        description='words, "a phrase", -excluded, a or b (websearch syntax)',
    ),
]


# --- the admin API ----------------------------------------------------------------------


# documents the bearer scheme in the OpenAPI schema; the check itself is AccessPolicy's
_BEARER = HTTPBearer(auto_error=False, description="GATEWAY_ADMIN_TOKEN")


_PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "errors": {"type": "array", "items": {"type": "object"}},
    },
}
#: every admin call can answer these, as RFC 9457 problem documents (documented so clients
#: and schemathesis know them)
PROBLEMS: dict[int | str, dict[str, Any]] = {
    status: {
        "description": description,
        "content": {PROBLEM_JSON: {"schema": _PROBLEM_SCHEMA}},
    }
    for status, description in {
        400: "malformed request (a bad cursor, contradictory parameters, NUL in the URL)",
        401: "GATEWAY_ADMIN_TOKEN is set and the bearer token is missing or wrong",
        403: "no token set and the caller is not local, a foreign Host, or a cross-site request",
        404: "no such session, delivery or event",
        413: "the body is over GATEWAY_MAX_BODY_BYTES",
        415: "a state-changing request whose body is not application/json (an upload: not "
        "application/octet-stream), or a file of a type the knowledge base cannot read",
        422: "invalid parameters",
        503: "the database is unavailable; retry later",
    }.items()
}


class NewLink(BaseModel):
    """A link from a session to what it used, produced or relates to."""

    link_type: LinkType
    #: the target's id, path or URL, in its type's terms
    target_ref: Annotated[str, Field(min_length=1, max_length=2000)]
    relation: LinkRelation


TAG = r"^[^\s,\u0000]{1,64}$"


class SessionChange(BaseModel):
    """What ``PATCH /sessions/{session}`` sets; what is left out is kept."""

    topic: Annotated[str | None, Field(max_length=200, pattern=params.TEXT)] = None
    priority: Annotated[int | None, Field(ge=-32768, le=32767)] = None
    #: replaces the session's tags
    tags: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=64, pattern=TAG)]] | None,
        Field(max_length=20),
    ] = None


class Decisions(BaseModel):
    """A session's decisions, oldest first, and its unresolved checkpoints."""

    session_id: int
    decisions: list[MessageRecord]
    open_checkpoints: list[Checkpoint]


class MessagesPage(BaseModel):
    session_id: int
    last_seq_no: int
    items: list[MessageRecord]
    #: pass as after_seq to read on (the last seq returned, or the after_seq given)
    next_after_seq: int
    #: pass as before_seq to read further back; null at the start of the session
    prev_before_seq: int | None
    has_more_after: bool


def admin_api_router(policy: AccessPolicy, *, prefix: str, tag: str) -> APIRouter:
    """A router under ``/api/v1``: every route behind the access policy (the bearer scheme
    documented in OpenAPI) and answering the admin API's problem documents."""

    async def guard(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)],
    ) -> None:
        await policy.admit_request(request)

    return APIRouter(
        prefix=prefix,
        dependencies=[Depends(guard), Depends(_one_value_each)],
        tags=[tag],
        responses=PROBLEMS,
    )


async def _one_value_each(request: Request) -> None:
    """A query parameter of one value given twice is refused, not read as its last value
    (``?min_priority=x&min_priority=0`` is not ``min_priority=0``); a list (``tag``) repeats."""
    given = Counter(name for name, _ in request.query_params.multi_items())
    repeated = {name for name, n in given.items() if n > 1}
    route = request.scope.get("route")
    if not repeated or not isinstance(route, APIRoute):
        return
    lists = {
        field.alias
        for field in get_flat_params(route.dependant)
        if _takes_a_list(field.field_info.annotation)
    }
    if once := sorted(repeated - lists):
        raise RequestError(
            f"the query parameter {once[0]!r} takes one value and was given more than one",
            title="Invalid query",
        )


def _takes_a_list(annotation: object) -> bool:
    """``list[str]``, ``list[str] | None``, ``Annotated[list[...], ...]``: a repeatable one."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _takes_a_list(get_args(annotation)[0])
    if origin in (Union, UnionType):
        return any(_takes_a_list(arg) for arg in get_args(annotation))
    return origin in (list, tuple, set, frozenset)


def admin_router(
    service: OperatorService, policy: AccessPolicy, wake_delivery: Callable[[], None]
) -> APIRouter:
    router = admin_api_router(policy, prefix=API_PREFIX, tag="admin")

    _session_routes(router, service, wake_delivery)
    _lifecycle_routes(router, service)
    _link_routes(router, service)
    _search_routes(router, service)
    _outbox_routes(router, service, wake_delivery)
    _inbox_routes(router, service, wake_delivery)

    return router


def _session_routes(
    router: APIRouter, service: OperatorService, wake_delivery: Callable[[], None]
) -> None:
    """Sessions: the list, one with what is recorded about it, its transcript."""
    ops = service.ops

    @router.get("/sessions", response_model=Page[SessionRecord], summary="List sessions")
    async def list_sessions(
        limit: Limit = 50,
        cursor: SessionCursor = None,
        platform: Annotated[str | None, Query(max_length=64, pattern=params.TEXT)] = None,
        chat: Annotated[
            str | None, Query(max_length=256, pattern=params.TEXT, description="chat id")
        ] = None,
        thread: Annotated[
            str | None, Query(max_length=256, pattern=params.TEXT, description="thread id")
        ] = None,
        status: SessionStatus | None = None,
        q: Annotated[
            str | None, Query(max_length=200, pattern=params.TEXT, description="text in the title")
        ] = None,
        topic: Annotated[
            str | None, Query(max_length=200, pattern=params.TEXT, description="text in the topic")
        ] = None,
        min_priority: Annotated[int | None, Query(ge=-32768, le=32767)] = None,
        tag: Annotated[
            list[Annotated[str, Field(min_length=1, max_length=64, pattern=TAG)]] | None,
            Query(max_length=20, description="sessions carrying every tag given"),
        ] = None,
    ) -> Page[SessionRecord]:
        """Newest activity first; filter by platform, chat, thread, status, title or topic
        text, minimum priority, tags."""
        return await service.list_sessions(
            platform=platform,
            chat_id=chat,
            thread_id=thread,
            status=status,
            title_contains=q,
            topic_contains=topic,
            min_priority=min_priority,
            tags=tag,
            cursor=cursor,
            limit=limit,
        )

    @router.get("/sessions/{session}", response_model=SessionDetail, summary="One session")
    async def get_session(session: SessionRef) -> SessionDetail:
        """The session with its participants, checkpoints, links, summaries, artifacts and
        delivery counts by status."""
        found = await service.resolve(session)
        return await ops.session_detail(found.id)

    @router.get(
        "/sessions/{session}/messages", response_model=MessagesPage, summary="Transcript page"
    )
    async def messages(
        session: SessionRef,
        after_seq: Annotated[int | None, Query(ge=0, le=MAX_ID)] = None,
        before_seq: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    ) -> MessagesPage:
        """Messages in seq order: the first `limit` after `after_seq` (default: from the
        start), or the last `limit` before `before_seq` (after `after_seq` when both are
        given). Each assistant message carries its deliveries: status, attempts, stored
        target, last error, platform message id."""
        found = await service.resolve(session)
        items = await ops.store.sessions.messages(
            found.id, after_seq=after_seq, before_seq=before_seq, limit=limit, with_deliveries=True
        )
        last = items[-1].seq_no if items else (after_seq or 0)
        return MessagesPage(
            session_id=found.id,
            last_seq_no=found.last_seq_no,
            items=items,
            next_after_seq=last,
            prev_before_seq=items[0].seq_no if items and items[0].seq_no > 1 else None,
            has_more_after=last < found.last_seq_no,
        )


def _lifecycle_routes(router: APIRouter, service: OperatorService) -> None:
    """A session's lifecycle and what it carries: topic, priority and tags; pause, resume,
    archive; its decisions."""
    ops = service.ops

    @router.patch(
        "/sessions/{session}",
        response_model=SessionRecord,
        summary="Set a session's topic, priority or tags",
        responses={409: {"description": "the session is archived (read-only)"}},
    )
    async def update_session(session: SessionRef, change: SessionChange) -> SessionRecord:
        """Fields left out are kept; `tags` replaces the set. Archived sessions are read-only."""
        found = await service.resolve(session)
        async with audit.attempt(ops.store, "session.update", ("session", found.id)) as seen:
            updated = await service.set_attributes(
                found.id, topic=change.topic, priority=change.priority, tags=change.tags
            )
            seen.update(change.model_dump(exclude_none=True))
        return updated

    for step, to, doc in (
        ("pause", "paused", "what arrives is stored, nothing is answered until resumed"),
        ("resume", "active", "what arrived while paused is answered (one turn)"),
        ("archive", "archived", "a closed session becomes read-only"),
    ):
        _lifecycle_route(router, service, step, to, doc)

    @router.get(
        "/sessions/{session}/decisions",
        response_model=Decisions,
        summary="A session's decisions and unresolved checkpoints",
    )
    async def decisions(
        session: SessionRef, limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 200
    ) -> Decisions:
        """Messages of kind `decision`, oldest first, and checkpoints neither done nor
        cancelled; both read from partial indexes."""
        found, rows, checkpoints = await service.decisions(session, limit=limit)
        return Decisions(session_id=found.id, decisions=rows, open_checkpoints=checkpoints)


def _link_routes(router: APIRouter, service: OperatorService) -> None:
    """A session's links: what it relates to, written here or by MCP `link_session`."""
    ops = service.ops

    @router.post(
        "/sessions/{session}/links",
        response_model=Link,
        status_code=201,
        summary="Link a session",
        responses={404: {"description": "no such session"}},
    )
    async def add_link(session: SessionRef, body: NewLink) -> Link:
        """Link the session to a law, document, task, collection, issue, report or artifact
        (`target_ref`: its id, path or URL) as its input, evidence or output, as related, or
        as what it supersedes. The links are listed by `GET /sessions/{session}`."""
        found = await service.resolve(session)
        async with audit.attempt(
            ops.store, "session.link.add", ("session", found.id), details=body.model_dump()
        ):
            return await ops.add_link(
                found.id,
                link_type=body.link_type,
                target_ref=body.target_ref,
                relation=body.relation,
            )


def _search_routes(router: APIRouter, service: OperatorService) -> None:
    """Full-text search, in one session or across all."""

    def search_words(q: str) -> str:
        if not re.search(params.WORD_CHARACTER, q):
            raise RequestError("the query has no words to search for", title="Invalid query")
        return q

    @router.get(
        "/sessions/{session}/search", response_model=Page[SearchHit], summary="Search a session"
    )
    async def search_session(
        session: SessionRef, q: SearchText, limit: Limit = 20, cursor: Cursor = None
    ) -> Page[SearchHit]:
        """Full-text search inside one session, newest first; «» mark the matches."""
        found = await service.resolve(session)
        return await service.search(
            search_words(q), session_id=found.id, cursor=cursor, limit=limit
        )

    @router.get("/search", response_model=Page[SearchHit], summary="Search every session")
    async def search_all(
        q: SearchText,
        limit: Limit = 20,
        cursor: Cursor = None,
        platform: Annotated[str | None, Query(max_length=64, pattern=params.TEXT)] = None,
    ) -> Page[SearchHit]:
        """Full-text search across sessions, newest first; each hit names its session."""
        return await service.search(search_words(q), platform=platform, cursor=cursor, limit=limit)


def _lifecycle_route(
    router: APIRouter, service: OperatorService, step: str, to: str, doc: str
) -> None:
    """``POST /sessions/{session}/<step>``: one lifecycle step, 409 when the session's status
    does not allow it."""

    async def move(session: SessionRef) -> SessionRecord:
        found = await service.resolve(session)
        async with audit.attempt(service.ops.store, f"session.{step}", ("session", found.id)):
            moved = await service.move(found.id, step)
        log.info("session_moved", session_id=moved.id, status=moved.status)
        return moved

    move.__doc__ = f"The session becomes {to}: {doc}. 409 if its status does not allow it."
    router.post(
        f"/sessions/{{session}}/{step}",
        response_model=SessionRecord,
        summary=f"{step.capitalize()} a session",
        responses={409: {"description": f"the session's status does not allow {step}"}},
        name=f"{step}_session",
    )(move)


def _outbox_routes(
    router: APIRouter, service: OperatorService, wake_delivery: Callable[[], None]
) -> None:
    ops = service.ops

    @router.get("/deliveries", response_model=Page[DeliveryRecord], summary="The outbox")
    async def deliveries(
        limit: Limit = 50,
        cursor: Cursor = None,
        status: Literal["pending", "sending", "sent", "failed"] | None = None,
        platform: Annotated[str | None, Query(max_length=64, pattern=params.TEXT)] = None,
        session_id: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
    ) -> Page[DeliveryRecord]:
        """Delivery rows, newest first, with the stored target and the last error."""

        async def fetch(before: int | None, n: int) -> list[DeliveryRecord]:
            return await ops.list_deliveries(
                status=status, platform=platform, session_id=session_id, before_id=before, limit=n
            )

        return await paginate("deliveries", cursor, limit, fetch, lambda d: [d.id])

    @router.get("/deliveries/{delivery_id}", response_model=DeliveryRecord, summary="One delivery")
    async def delivery(delivery_id: Annotated[int, Path(ge=1, le=MAX_ID)]) -> DeliveryRecord:
        return await ops.get_delivery(delivery_id)

    @router.post(
        "/deliveries/{delivery_id}/retry",
        response_model=DeliveryRecord,
        summary="Retry a failed delivery",
        responses={409: {"description": "the delivery is not failed"}},
    )
    async def retry(delivery_id: Annotated[int, Path(ge=1, le=MAX_ID)]) -> DeliveryRecord:
        """Put a failed delivery back in the outbox: same row, same stored target, attempts
        reset. 409 if it is not failed."""
        async with audit.attempt(ops.store, "delivery.retry", ("delivery", delivery_id)) as seen:
            row = await ops.retry_delivery(delivery_id)
            seen.update(session_id=row.session_id, seq_no=row.seq_no, platform=row.platform)
        log.info(
            "delivery_retry_requested",
            delivery_id=delivery_id,
            session_id=row.session_id,
            seq_no=row.seq_no,
            platform=row.platform,
        )
        wake_delivery()
        return row


def _inbox_routes(
    router: APIRouter, service: OperatorService, wake_delivery: Callable[[], None]
) -> None:
    ops = service.ops

    @router.get(
        "/inbound-events", response_model=Page[InboundEvent], summary="Rejected inbound events"
    )
    async def inbound_events(
        limit: Limit = 50,
        cursor: Cursor = None,
        status: Literal["rejected", "ignored"] = "rejected",
        platform: Annotated[str | None, Query(max_length=64, pattern=params.TEXT)] = None,
    ) -> Page[InboundEvent]:
        """Inbound events that did not become messages (the dead-letter store), newest first,
        with the reason; the raw payload is left out (read one event for it)."""

        async def fetch(before: int | None, n: int) -> list[InboundEvent]:
            return await ops.inbound_events(
                status=status, platform=platform, before_id=before, limit=n
            )

        return await paginate("inbound", cursor, limit, fetch, lambda e: [e.id])

    @router.get(
        "/inbound-events/{event_id}",
        response_model=InboundEvent,
        summary="One rejected inbound event, with its raw payload",
    )
    async def inbound_event(event_id: Annotated[int, Path(ge=1, le=MAX_ID)]) -> InboundEvent:
        found = await ops.inbound_event(event_id)
        if found is None:
            raise RequestError(f"no inbound event {event_id}", status=404, title="Not found")
        return found

    @router.get("/stats", response_model=Counts, summary="Live counts")
    async def stats() -> Counts:
        """Sessions by status, deliveries by status, dead letters, oldest pending delivery."""
        return await ops.counts()


# --- wiring -----------------------------------------------------------------------------


class OperatorSurface:
    """Owns the admin API, the MCP endpoint (and its session manager's lifetime) and the
    operator pages of one gateway."""

    def __init__(
        self,
        store: Store,
        *,
        transports: Mapping[str, Transport],
        admin_token: str | None,
        delivery_wake: Signal,
        signed_in: OpsSignIn | None = None,
    ) -> None:
        self.ops = OperatorStore(store)
        self.policy = AccessPolicy(admin_token, signed_in=signed_in)
        self._wake = delivery_wake
        self.service = OperatorService(
            self.ops, transports=transports, outbox_written=delivery_wake.set
        )
        #: registers the MCP tools on the server at ``/mcp``'s first request: the session tools
        #: alone unless the composition root hands the whole list
        #: (``gateway.runtime.mcp.register_tools``)
        self.register_mcp_tools: Callable[[MCPServer], None] | None = None
        self._mcp = McpEndpoint(self._mcp_tools)

    def _mcp_tools(self, server: MCPServer) -> None:
        if self.register_mcp_tools is not None:
            self.register_mcp_tools(server)
            return
        from gateway.http.mcp import add_session_tools

        add_session_tools(server, self.service)

    def mount(self, app: FastAPI) -> None:
        from gateway.http.audit_log import add_audit_routes, audit_pages
        from gateway.http.ui import ops_routes

        install_problem_handlers(app)
        app.include_router(admin_router(self.service, self.policy, self._wake.set))
        # the audit log: GET /api/v1/audit and its page /ops/audit
        audit_api = admin_api_router(self.policy, prefix=f"{API_PREFIX}/audit", tag="audit")
        add_audit_routes(audit_api, self.ops.store.db)
        app.include_router(audit_api)
        app.router.routes.append(Route(MCP_PATH, endpoint=GuardedASGI(self._mcp, self.policy)))
        app.router.routes.extend(ops_routes())
        app.router.routes.extend(audit_pages())
        if self.policy.signed_in is not None:  # GATEWAY_OPS_AUTH=oidc: /ops/login ...
            app.router.routes.extend(self.policy.signed_in.routes())

    async def stop(self) -> None:
        """Ends open MCP streams (before the HTTP server drains)."""
        await self._mcp.stop()
