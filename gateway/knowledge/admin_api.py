"""The knowledge base in the admin API (``/api/v1/kb``), behind the same access policy as
the rest of ``/api/v1``: list, upload, reindex, delete, search, and an answer's frozen
citations."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from fastapi.security import HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, field_validator
from starlette.routing import Route

from gateway import audit
from gateway.core.errors import RequestError
from gateway.http import params
from gateway.http.admin import API_PREFIX, MAX_ID, AccessPolicy, admin_api_router
from gateway.http.ui import room_page
from gateway.knowledge.files import FileStorageError
from gateway.knowledge.places import DEFAULT_KB, Chat, check_name
from gateway.knowledge.service import FileRejected, Knowledge
from session_store.repos.knowledge import Assignment, CitationRecord, DocumentRecord, PassageHit

_BEARER = HTTPBearer(auto_error=False, description="GATEWAY_ADMIN_TOKEN")
KbName = Annotated[
    str, Query(min_length=1, max_length=200, pattern=params.NAME, description="knowledge base")
]
ChatQuery = Annotated[
    str,
    Query(min_length=5, max_length=600, pattern=params.CHAT, description="platform:scope:chat"),
]


class AssignmentIn(BaseModel):
    """Assign a knowledge base to a chat: every thread in it searches the base."""

    model_config = ConfigDict(extra="forbid")
    kb: str = Field(min_length=1, max_length=200, pattern=params.NAME)
    chat: str = Field(
        min_length=5,
        max_length=600,
        pattern=params.CHAT,
        description="platform:scope:chat, e.g. web:local:general",
    )

    @field_validator("kb")
    @classmethod
    def _storable(cls, value: str) -> str:
        return check_name(value)


class AssignmentOut(BaseModel):
    kb: str
    chat: str
    #: false when it was assigned already
    created: bool


def _chat(text: str) -> Chat:
    try:
        return Chat.parse(text)
    except ValueError as exc:
        raise RequestError(str(exc), title="Invalid chat") from exc


@dataclass(frozen=True, slots=True)
class Uploaded:
    document: DocumentRecord
    #: false when the same content was already in this knowledge base
    created: bool


def knowledge_router(knowledge: Knowledge, policy: AccessPolicy) -> APIRouter:
    router = admin_api_router(policy, prefix=f"{API_PREFIX}/kb", tag="knowledge base")

    _document_routes(router, knowledge)
    _one_document_routes(router, knowledge)
    _assignment_routes(router, knowledge)

    return router


async def _found(knowledge: Knowledge, document_id: int) -> DocumentRecord:
    doc = await knowledge.store.get_document(document_id)
    if doc is None:
        raise RequestError(f"no document {document_id}", status=404, title="Not found")
    return doc


def _document_routes(router: APIRouter, knowledge: Knowledge) -> None:
    """The documents: the list and an upload."""

    @router.get("/documents", response_model=list[DocumentRecord], summary="Documents")
    async def documents(kb: KbName | None = None) -> list[DocumentRecord]:
        """Documents with their ingest state (``queued``, ``parsing``, ``embedding``,
        ``ready``, ``failed`` with ``error``)."""
        return await knowledge.store.list_documents(kb_name=kb)

    @router.post(
        "/documents",
        response_model=Uploaded,
        summary="Upload a document",
        responses={415: {"description": "a file of a type the knowledge base cannot read"}},
        openapi_extra={
            "requestBody": {
                "required": True,
                "description": "the file itself",
                "content": {
                    "application/octet-stream": {
                        "schema": {"type": "string", "format": "binary", "minLength": 1}
                    }
                },
            }
        },
    )
    async def upload(
        request: Request,
        name: Annotated[
            str, Query(min_length=1, max_length=255, pattern=params.TEXT, description="file name")
        ],
        kb: KbName = DEFAULT_KB,
        type: Annotated[
            str | None,
            Query(
                max_length=127, pattern=params.TEXT, description="the file's media type, if known"
            ),
        ] = None,
    ) -> Uploaded:
        """The request body is the file, sent as ``application/octet-stream``; its type comes
        from the content, ``type`` and the name. The same content twice is one document."""
        data = await request.body()
        if not data:
            raise RequestError("the body is empty: send the file as the request body")
        details = {"name": name, "bytes": len(data)}
        async with audit.attempt(
            knowledge.store, "kb.document.add", ("kb", kb), details=details
        ) as seen:
            try:
                added = await knowledge.add(name, data, kb=kb, media_type=type or None)
            except FileRejected as exc:
                raise RequestError(str(exc), status=415, title="Unsupported file") from exc
            except FileStorageError as exc:
                raise RequestError(str(exc), status=503, title="File storage unavailable") from exc
            seen.update(document_id=added.document.id, created=added.created)
        return Uploaded(document=added.document, created=added.created)


def _one_document_routes(router: APIRouter, knowledge: Knowledge) -> None:
    """One document (read, re-read, remove), passages and citations."""

    @router.get("/documents/{document_id}", response_model=DocumentRecord)
    async def document(
        document_id: Annotated[int, Path(ge=1, le=MAX_ID)],
    ) -> DocumentRecord:
        return await _found(knowledge, document_id)

    @router.post("/documents/{document_id}/reindex", response_model=DocumentRecord)
    async def reindex(document_id: Annotated[int, Path(ge=1, le=MAX_ID)]) -> DocumentRecord:
        """Read and embed the document again (through its ingest job)."""
        async with audit.attempt(
            knowledge.store, "kb.document.reindex", ("kb.document", document_id)
        ):
            await _found(knowledge, document_id)
            await knowledge.store.reindex_document(document_id)
        knowledge.wake.set()
        return await _found(knowledge, document_id)

    @router.delete("/documents/{document_id}", status_code=204)
    async def delete(document_id: Annotated[int, Path(ge=1, le=MAX_ID)]) -> None:
        """Remove the document and its passages from retrieval; answers that cited it keep
        their frozen citations."""
        async with audit.attempt(
            knowledge.store, "kb.document.delete", ("kb.document", document_id)
        ):
            if not await knowledge.intake.remove(document_id):
                raise RequestError(f"no document {document_id}", status=404, title="Not found")

    @router.get("/search", response_model=list[PassageHit], summary="Search passages")
    async def search(
        q: Annotated[str, Query(min_length=1, max_length=1000, pattern=params.TEXT)],
        kb: KbName = DEFAULT_KB,
        limit: Annotated[int, Query(ge=1, le=50)] = 5,
    ) -> list[PassageHit]:
        """The passages retrieval would give the model, best first."""
        return list((await knowledge.retrieval.search(q, kbs=[kb], limit=limit)).hits)

    @router.get("/citations/{message_id}", response_model=list[CitationRecord], summary="Citations")
    async def citations(
        message_id: Annotated[int, Path(ge=1, le=MAX_ID)],
    ) -> list[CitationRecord]:
        """What an answer cites, frozen when it was written."""
        return await knowledge.store.citations(message_id)


def _assignment_routes(router: APIRouter, knowledge: Knowledge) -> None:
    @router.get("/assignments", response_model=list[Assignment], summary="Assignments")
    async def assignments(kb: KbName | None = None) -> list[Assignment]:
        """Knowledge bases assigned to chats. A turn searches its thread's documents, its
        chat's, every base assigned to the chat, and ``default`` (everywhere, unless
        ``GATEWAY_KB_DEFAULT=assigned``)."""
        return await knowledge.store.assignments(kb_name=kb)

    @router.post("/assignments", response_model=AssignmentOut, summary="Assign to a chat")
    async def assign(body: AssignmentIn) -> AssignmentOut:
        """Search the knowledge base (created if new) in every thread of the chat."""
        chat = _chat(body.chat)
        async with audit.attempt(
            knowledge.store, "kb.assign", ("kb", body.kb), details={"chat": str(chat)}
        ) as seen:
            created = await knowledge.catalog.assign(body.kb, chat)
            seen["new"] = created
        return AssignmentOut(kb=body.kb, chat=str(chat), created=created)

    @router.delete("/assignments", status_code=204, summary="Unassign from a chat")
    async def unassign(kb: KbName, chat: ChatQuery) -> None:
        where = _chat(chat)
        async with audit.attempt(
            knowledge.store, "kb.unassign", ("kb", kb), details={"chat": str(where)}
        ):
            if not await knowledge.catalog.unassign(kb, where):
                raise RequestError(
                    f"{kb} is not assigned to {where}", status=404, title="Not found"
                )


#: as the other operator pages: this origin only, no inline script
def kb_pages() -> list[Route]:
    """``/ops/kb``: documents with their job states, upload, reindex, delete, search."""
    return room_page("gateway.knowledge", "kb")
