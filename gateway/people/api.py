"""``GET /api/v1/people/{id}/export`` and ``POST /api/v1/people/{id}/forget``, behind the admin
API's access policy: the same export and erasure as ``gateway people export|forget``.

The export answers with a zip archive (``person.json`` and ``files/``). A forget request runs
at most ``FORGET_BATCHES`` batches: ``200`` when the person is forgotten, ``202`` when the job
has more to do (send the same request again; it goes on where it stopped)."""

from __future__ import annotations

import asyncio
import io
import tempfile
import zipfile
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter
from fastapi import Path as PathParam
from starlette.responses import JSONResponse, Response

from gateway import audit
from gateway.http.admin import API_PREFIX, MAX_ID, AccessPolicy, admin_api_router
from gateway.knowledge.files import S3Files
from gateway.people.erasure import DEFAULT_BATCH, forget, start
from gateway.people.export import EXPORT_FILE, export
from session_store.errors import RequestError
from session_store.repos.erasure import ErasureStore
from session_store.store import Store

#: batches one forget request runs before it answers 202 (bounded request time)
FORGET_BATCHES = 200

PersonId = Annotated[int, PathParam(ge=1, le=MAX_ID)]


def people_router(store: Store, policy: AccessPolicy, files: S3Files | None) -> APIRouter:
    router = admin_api_router(policy, prefix=f"{API_PREFIX}/people", tag="people")

    async def known(person_id: int) -> None:
        if not await ErasureStore(store.db).exists(person_id):
            raise RequestError(f"no person {person_id}", status=404, title="Person not found")

    @router.get("/{person_id}/export", summary="Everything of one person, as a zip archive")
    async def export_person(person_id: PersonId) -> Response:
        await known(person_id)
        with tempfile.TemporaryDirectory(prefix="gw-export-") as tmp:
            data = await export(store, person_id, Path(tmp), files=files)
            body = await asyncio.to_thread(_zip, Path(tmp))
        counts = {k: len(data[k]) for k in ("messages", "files", "usage", "schedules")}
        await audit.record(store, "people.export", ("person", person_id), details=counts)
        name = f"person-{person_id}.zip"
        return Response(
            body,
            media_type="application/zip",
            headers={"Content-Disposition": f'attachment; filename="{name}"'},
        )

    @router.post("/{person_id}/forget", summary="Erase one person on every platform")
    async def forget_person(person_id: PersonId) -> Response:
        await known(person_id)
        job = await start(store, person_id)
        done = await forget(
            store, job, batch=DEFAULT_BATCH, max_batches=FORGET_BATCHES, files=files
        )
        body: dict[str, Any] = {
            "person": person_id,
            "finished": done.finished,
            "counts": done.counts,
        }
        return JSONResponse(body, status_code=200 if done.finished else 202)

    return router


def _zip(root: Path) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.write(root / EXPORT_FILE, EXPORT_FILE)
        for path in sorted((root / "files").iterdir()):
            archive.write(path, f"files/{path.name}")
    return out.getvalue()
