"""File bytes in S3-compatible storage (``GATEWAY_FILES_S3_URL``), against moto's S3 server
running as a real local HTTP server: a document's bytes go to the bucket by SHA-256 (none in
PostgreSQL), ingest reads them back, another replica reads them too, the same file is one
object, deleting the last document that uses it deletes the object, and an unreachable
bucket is a clear error, never a half-stored document."""

from __future__ import annotations

import hashlib
import socket
from collections.abc import Iterator
from typing import Any

import asyncpg
import httpx
import pytest

from gateway.knowledge.config import KnowledgeSettings
from gateway.knowledge.files import FileStorageError, S3Files
from gateway.knowledge.service import Knowledge
from session_store.repos.knowledge import KnowledgeStore
from testsupport.documents import make_pdf
from testsupport.harness import running_gateway, wait_for
from testsupport.knowledge import SharedLocalEmbedder

BUCKET = "kb-files"
KEYS = {"aws_access_key_id": "test-access", "aws_secret_access_key": "test-secret"}


@pytest.fixture
def s3_url() -> Iterator[str]:
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    boto3.client("s3", endpoint_url=url, region_name="us-east-1", **KEYS).create_bucket(
        Bucket=BUCKET
    )
    try:
        yield url
    finally:
        server.stop()


def _objects(url: str) -> dict[str, bytes]:
    import boto3

    client = boto3.client("s3", endpoint_url=url, region_name="us-east-1", **KEYS)
    listed = client.list_objects_v2(Bucket=BUCKET).get("Contents", [])
    return {o["Key"]: client.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read() for o in listed}


async def test_documents_keep_their_bytes_in_the_bucket(database_url: str, s3_url: str) -> None:
    pdf = make_pdf(["Welcome.", "Refunds are paid within thirty days."])
    sha = hashlib.sha256(pdf).hexdigest()
    settings: dict[str, Any] = {
        "GATEWAY_FILES_S3_URL": s3_url,
        "GATEWAY_FILES_S3_BUCKET": BUCKET,
        "GATEWAY_FILES_S3_ACCESS_KEY": KEYS["aws_access_key_id"],
        "GATEWAY_FILES_S3_SECRET_KEY": KEYS["aws_secret_access_key"],
    }
    async with (
        running_gateway(database_url, web_chat=False, **settings) as gw,
        httpx.AsyncClient(base_url=gw.url) as client,
    ):
        octets = {"Content-Type": "application/octet-stream"}
        up = await client.post(
            "/api/v1/kb/documents", params={"name": "policy.pdf"}, content=pdf, headers=octets
        )
        assert up.status_code == 200, up.text
        doc_id = up.json()["document"]["id"]

        async def ready() -> bool:
            r = await client.get(f"/api/v1/kb/documents/{doc_id}")
            return bool(r.json()["state"] == "ready")

        await wait_for(ready, timeout=20)
        hits = (await client.get("/api/v1/kb/search", params={"q": "refunds paid"})).json()
        assert (hits[0]["document_name"], hits[0]["page"]) == ("policy.pdf", 2)
        assert _objects(s3_url) == {f"kb/{sha}": pdf}
        conn = await asyncpg.connect(database_url)
        try:
            row = await conn.fetchrow(
                "SELECT storage, content IS NULL AS elsewhere, size_bytes FROM kb_files"
            )
        finally:
            await conn.close()
        assert dict(row) == {"storage": "s3", "elsewhere": True, "size_bytes": len(pdf)}

        # another replica (its own client) reads the same object
        other = S3Files(
            url=s3_url,
            bucket=BUCKET,
            access_key=KEYS["aws_access_key_id"],
            secret_key=KEYS["aws_secret_access_key"],
        )
        assert await other.get(sha) == pdf
        assert "kb-files" in await other.check()

        # the same file in another knowledge base: one object; deleting one document keeps
        # it, deleting the last removes it
        again = await client.post(
            "/api/v1/kb/documents",
            params={"name": "copy.pdf", "kb": "other"},
            content=pdf,
            headers=octets,
        )
        assert again.status_code == 200 and again.json()["created"] is True
        assert list(_objects(s3_url)) == [f"kb/{sha}"]
        assert (await client.delete(f"/api/v1/kb/documents/{doc_id}")).status_code == 204
        assert list(_objects(s3_url)) == [f"kb/{sha}"]
        copy_id = again.json()["document"]["id"]
        assert (await client.delete(f"/api/v1/kb/documents/{copy_id}")).status_code == 204
        assert _objects(s3_url) == {}


async def test_doctor_checks_the_bucket(s3_url: str) -> None:
    from gateway.knowledge.health import knowledge_checks
    from testsupport.harness import make_settings

    def settings(bucket: str) -> Any:
        return make_settings(
            "postgresql://127.0.0.1:1/nothing",
            GATEWAY_FILES_S3_URL=s3_url,
            GATEWAY_FILES_S3_BUCKET=bucket,
            GATEWAY_FILES_S3_ACCESS_KEY="a",
            GATEWAY_FILES_S3_SECRET_KEY="b",
        )

    [good] = [c for c in await knowledge_checks(settings(BUCKET)) if c.name == "file storage"]
    assert good.ok and BUCKET in good.detail
    [bad] = [
        c for c in await knowledge_checks(settings("no-such-bucket")) if c.name == "file storage"
    ]
    assert not bad.ok and bad.fix is not None and "GATEWAY_FILES_S3_BUCKET" in bad.fix


async def test_an_unreachable_bucket_is_a_clear_error(kstore: KnowledgeStore) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    files = S3Files(url=f"http://127.0.0.1:{port}", bucket=BUCKET, access_key="a", secret_key="b")
    k = Knowledge(kstore, SharedLocalEmbedder(), KnowledgeSettings(), files=files)
    with pytest.raises(FileStorageError) as caught:
        await k.add("notes.md", b"# Notes\n\nHello.")
    assert caught.value.transient
    assert await kstore.list_documents() == []  # nothing half-stored
    await k.aclose()


def test_s3_settings_go_together() -> None:
    from gateway.core.errors import ConfigError
    from testsupport.harness import make_settings

    dsn = "postgresql://x/y"
    with pytest.raises(ConfigError, match="GATEWAY_FILES_S3_BUCKET"):
        make_settings(dsn, GATEWAY_FILES_S3_URL="http://127.0.0.1:9000")
    with pytest.raises(ConfigError, match="GATEWAY_FILES_S3_URL"):
        make_settings(dsn, GATEWAY_FILES_S3_BUCKET="files")
    with pytest.raises(ConfigError, match="GATEWAY_FILES_S3_SECRET_KEY"):
        make_settings(
            dsn,
            GATEWAY_FILES_S3_URL="http://127.0.0.1:9000",
            GATEWAY_FILES_S3_BUCKET="files",
            GATEWAY_FILES_S3_ACCESS_KEY="a",
        )
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="GATEWAY_FILES_S3_URL"):
        make_settings(dsn, GATEWAY_FILES_S3_URL="ftp://x", GATEWAY_FILES_S3_BUCKET="files")
