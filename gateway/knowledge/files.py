"""Where the knowledge base keeps file bytes, by SHA-256, so that every replica can read them:
in PostgreSQL (``kb_files.content``, the default: nothing to set up), or in an S3-compatible
bucket when ``GATEWAY_FILES_S3_URL`` is set (the row then records ``storage = 's3'`` and the
object is ``<prefix><sha256>``). Content-addressed, so a put is idempotent and two replicas
storing the same file write the same object.

The S3 client is boto3 (the ``s3`` extra), run in a worker thread; its errors become
``FileStorageError`` here, with ``transient`` telling the ingest job whether to try again."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from gateway.core.errors import GatewayError

if TYPE_CHECKING:
    from gateway.core.settings import Settings


class FileStorageError(GatewayError):
    """The file store could not be reached or refused; ``transient``: worth another try."""

    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


class S3Files:
    """File bytes in an S3-compatible bucket (AWS S3, MinIO, Ceph, R2, ...)."""

    kind = "s3"

    def __init__(
        self,
        *,
        url: str,
        bucket: str,
        access_key: str | None,
        secret_key: str | None,
        region: str = "us-east-1",
        prefix: str = "kb/",
    ) -> None:
        self.url = url
        self.bucket = bucket
        self.prefix = prefix
        self._credentials = (access_key, secret_key)
        self._region = region
        self._client: Any = None  # built on first use: no I/O in the constructor

    def _s3(self) -> Any:
        if self._client is None:
            try:
                import boto3
                from botocore.config import Config
            except ImportError as exc:  # pragma: no cover - depends on the install
                raise FileStorageError(
                    "GATEWAY_FILES_S3_URL is set but boto3 is not installed: "
                    "pip install 'chat-gateway[s3]'",
                    transient=False,
                ) from exc
            access, secret = self._credentials
            self._client = boto3.client(
                "s3",
                endpoint_url=self.url,
                aws_access_key_id=access,
                aws_secret_access_key=secret,
                region_name=self._region,
                config=Config(
                    s3={"addressing_style": "path"},
                    retries={"max_attempts": 3, "mode": "standard"},
                    connect_timeout=5,
                    read_timeout=30,
                ),
            )
        return self._client

    def key(self, sha256: str) -> str:
        return f"{self.prefix}{sha256}"

    async def put(self, sha256: str, data: bytes) -> None:
        await self._call("put_object", Bucket=self.bucket, Key=self.key(sha256), Body=data)

    async def get(self, sha256: str) -> bytes:
        def read() -> bytes:
            response = self._s3().get_object(Bucket=self.bucket, Key=self.key(sha256))
            body = response["Body"]
            try:
                return bytes(body.read())
            finally:
                body.close()

        data: bytes = await self._run(read)
        return data

    async def delete(self, sha256: str) -> None:
        await self._call("delete_object", Bucket=self.bucket, Key=self.key(sha256))

    async def check(self) -> str:
        """That the bucket is there and ours to use (``doctor``)."""
        await self._call("head_bucket", Bucket=self.bucket)
        return f"bucket {self.bucket} at {self.url}"

    async def _call(self, method: str, **kwargs: Any) -> None:
        await self._run(lambda: getattr(self._s3(), method)(**kwargs))

    async def _run(self, fn: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return await asyncio.to_thread(fn)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code = str(error.get("Code", ""))
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
            raise FileStorageError(
                f"S3 {code or status}: {error.get('Message') or exc}",
                transient=status >= 500 or status == 429 or code in ("SlowDown", "RequestTimeout"),
            ) from exc
        except BotoCoreError as exc:  # the endpoint unreachable, a timeout, bad credentials
            raise FileStorageError(f"S3: {exc}", transient=True) from exc


def build_files(settings: Settings) -> S3Files | None:
    """The S3 file store when configured; ``None``: the bytes stay in PostgreSQL."""
    if not settings.gateway_files_s3_url or not settings.gateway_files_s3_bucket:
        return None
    access = settings.gateway_files_s3_access_key
    secret = settings.gateway_files_s3_secret_key
    return S3Files(
        url=settings.gateway_files_s3_url,
        bucket=settings.gateway_files_s3_bucket,
        access_key=access.get_secret_value() if access else None,
        secret_key=secret.get_secret_value() if secret else None,
        region=settings.gateway_files_s3_region,
        prefix=settings.gateway_files_s3_prefix,
    )
