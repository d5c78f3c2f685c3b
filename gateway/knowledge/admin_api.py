"""The knowledge base in the admin API (``/api/v1/kb``), behind the same access policy as
the rest of ``/api/v1``: list, upload, reindex, delete, search, and an answer's frozen
citations."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from fastapi.security import HTTPBearer
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from gateway.admin import API_PREFIX, MAX_ID, AccessPolicy, admin_api_router
from gateway.errors import RequestError
from gateway.knowledge.service import DEFAULT_KB, FileRejected, Knowledge
from session_store.knowledge import CitationRecord, DocumentRecord, PassageHit

_BEARER = HTTPBearer(auto_error=False, description="GATEWAY_ADMIN_TOKEN")
KbName = Annotated[str, Query(min_length=1, max_length=200, description="knowledge base")]


@dataclass(frozen=True, slots=True)
class Uploaded:
    document: DocumentRecord
    #: false when the same content was already in this knowledge base
    created: bool


def knowledge_router(knowledge: Knowledge, policy: AccessPolicy) -> APIRouter:
    router = admin_api_router(policy, prefix=f"{API_PREFIX}/kb", tag="knowledge base")

    async def found(document_id: int) -> DocumentRecord:
        doc = await knowledge.store.get_document(document_id)
        if doc is None:
            raise RequestError(f"no document {document_id}", status=404, title="Not found")
        return doc

    @router.get("/documents", response_model=list[DocumentRecord], summary="Documents")
    async def documents(kb: KbName | None = None) -> list[DocumentRecord]:
        """Documents with their ingest state (``queued``, ``parsing``, ``embedding``,
        ``ready``, ``failed`` with ``error``)."""
        return await knowledge.store.list_documents(kb_name=kb)

    @router.post("/documents", response_model=Uploaded, summary="Upload a document")
    async def upload(
        request: Request,
        name: Annotated[str, Query(min_length=1, max_length=255, description="file name")],
        kb: KbName = DEFAULT_KB,
        type: Annotated[
            str | None, Query(max_length=127, description="the file's media type, if known")
        ] = None,
    ) -> Uploaded:
        """The request body is the file, sent as ``application/octet-stream``; its type comes
        from the content, ``type`` and the name. The same content twice is one document."""
        data = await request.body()
        if not data:
            raise RequestError("the body is empty: send the file as the request body")
        try:
            added = await knowledge.add(name, data, kb=kb, media_type=type or None)
        except FileRejected as exc:
            raise RequestError(str(exc), status=415, title="Unsupported file") from exc
        return Uploaded(document=added.document, created=added.created)

    @router.get("/documents/{document_id}", response_model=DocumentRecord)
    async def document(
        document_id: Annotated[int, Path(ge=1, le=MAX_ID)],
    ) -> DocumentRecord:
        return await found(document_id)

    @router.post("/documents/{document_id}/reindex", response_model=DocumentRecord)
    async def reindex(document_id: Annotated[int, Path(ge=1, le=MAX_ID)]) -> DocumentRecord:
        """Read and embed the document again (through its ingest job)."""
        await found(document_id)
        await knowledge.store.reindex_document(document_id)
        knowledge.wake.set()
        return await found(document_id)

    @router.delete("/documents/{document_id}", status_code=204)
    async def delete(document_id: Annotated[int, Path(ge=1, le=MAX_ID)]) -> None:
        """Remove the document and its passages from retrieval; answers that cited it keep
        their frozen citations."""
        if not await knowledge.store.remove_document(document_id):
            raise RequestError(f"no document {document_id}", status=404, title="Not found")

    @router.get("/search", response_model=list[PassageHit], summary="Search passages")
    async def search(
        q: Annotated[str, Query(min_length=1, max_length=1000)],
        kb: KbName = DEFAULT_KB,
        limit: Annotated[int, Query(ge=1, le=50)] = 5,
    ) -> list[PassageHit]:
        """The passages retrieval would give the model, best first."""
        return list((await knowledge.search(q, kbs=[kb], limit=limit)).hits)

    @router.get("/citations/{message_id}", response_model=list[CitationRecord], summary="Citations")
    async def citations(
        message_id: Annotated[int, Path(ge=1, le=MAX_ID)],
    ) -> list[CitationRecord]:
        """What an answer cites, frozen when it was written."""
        return await knowledge.store.citations(message_id)

    return router


#: as the other operator pages: this origin only, no inline script
PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
}


def kb_pages() -> list[Route]:
    """``/ops/kb``: documents with their job states, upload, reindex, delete, search. The
    page calls the admin API above (same access policy); the static files are public."""
    from importlib import resources

    static = resources.files("gateway.knowledge").joinpath("static")
    page = static.joinpath("kb.html").read_text(encoding="utf-8")
    script = static.joinpath("kb.js").read_text(encoding="utf-8")

    async def kb_page(request: Request) -> Response:
        return HTMLResponse(page, headers=PAGE_HEADERS)

    async def kb_script(request: Request) -> Response:
        return Response(script, media_type="text/javascript", headers=PAGE_HEADERS)

    return [
        Route("/ops/kb", kb_page, methods=["GET"]),
        Route("/ops/kb/kb.js", kb_script, methods=["GET"]),
    ]
