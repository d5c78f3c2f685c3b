"""What ``gateway doctor`` says about the knowledge base: the embedder, whether the database
can do vector search (pgvector) or only full text, and the S3-compatible bucket if set."""

from __future__ import annotations

import asyncio

from gateway.core.ports import Check
from gateway.core.settings import Settings
from gateway.knowledge.embed import EmbeddingError, LocalEmbedder
from gateway.knowledge.files import FileStorageError, build_files
from gateway.knowledge.service import build_embedder


async def knowledge_checks(settings: Settings) -> list[Check]:
    checks: list[Check] = []
    embedder = build_embedder(settings)
    try:
        if isinstance(embedder, LocalEmbedder):
            await embedder.embed(["doctor"])
            checks.append(
                Check(
                    name="embeddings",
                    ok=True,
                    detail=f"built-in local embedder {embedder.model} "
                    f"(loaded in {embedder.load_seconds or 0:.2f} s, no download)",
                )
            )
        else:
            dim = await asyncio.wait_for(embedder.dimension(), 15)
            checks.append(
                Check(name="embeddings", ok=True, detail=f"{embedder.model}: {dim} dimensions")
            )
    except (EmbeddingError, TimeoutError) as exc:
        checks.append(
            Check(
                name="embeddings",
                ok=False,
                detail=f"the embeddings server: {exc or 'timed out'}",
                fix="correct EMBEDDING_BASE_URL / EMBEDDING_API_KEY / EMBEDDING_MODEL, or unset "
                "EMBEDDING_BASE_URL to use the built-in embedder",
            )
        )
    finally:
        await embedder.aclose()
    ok, detail = await _vector_check(settings)
    checks.append(Check(name="knowledge search", ok=ok, detail=detail))
    files = build_files(settings)
    if files is not None:
        try:
            where = await asyncio.wait_for(files.check(), 15)
            checks.append(Check(name="file storage", ok=True, detail=f"S3-compatible: {where}"))
        except (FileStorageError, TimeoutError) as exc:
            checks.append(
                Check(
                    name="file storage",
                    ok=False,
                    detail=f"the S3-compatible bucket: {exc or 'timed out'}",
                    fix="correct GATEWAY_FILES_S3_URL / GATEWAY_FILES_S3_BUCKET / the keys, "
                    "create the bucket, or unset GATEWAY_FILES_S3_URL to keep files in PostgreSQL",
                )
            )
    return checks


async def _vector_check(settings: Settings) -> tuple[bool, str]:
    if not settings.database_url:
        return True, "hybrid (full text + pgvector, shipped with the embedded PostgreSQL)"
    from gateway.core.errors import StoreError
    from session_store.repos.knowledge import KnowledgeStore
    from session_store.store import Store

    try:
        store = await asyncio.wait_for(
            Store.connect(settings.database_url, min_size=1, max_size=1), 5
        )
    except (StoreError, TimeoutError):
        return False, "cannot tell: the database is unreachable"
    try:
        ks = KnowledgeStore(store.db)
        available = await ks.vector_available()
        try:
            column = await ks.vector_enabled()
        except StoreError:
            column = False  # not migrated yet
    finally:
        await store.close()
    if column:
        return True, "hybrid (full text + pgvector)"
    if available:
        return True, (
            "pgvector is installable on this server but not in use: run `gateway migrate` "
            "as a role allowed to CREATE EXTENSION vector (retrieval is full-text only until "
            "the knowledge tables are created with it)"
        )
    return True, (
        "full-text only: this PostgreSQL has no pgvector (the vector extension); install it "
        "for hybrid retrieval"
    )
