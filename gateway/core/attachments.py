"""Files shared in a thread: the port an adapter's transport implements to fetch them, the
port a surface that uploads files itself calls (``FileShare``), what kind of file one is (an
image or short text could go straight to the model), and a bounded download helper. The core
never sees a platform's URL rules or tokens. The ground floor holds them because the rooms
that read files (``files``: images and voice; ``knowledge``: documents) and every adapter
share them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

import httpx

from gateway.core.domain import Attachment, ReplyTarget, SessionKey


class FileFetchError(Exception):
    """The file could not be fetched; ``str`` is the reason told in the thread."""


class FileTooLarge(FileFetchError):
    pass


@runtime_checkable
class FileSource(Protocol):
    """Optional part of a ``Transport``: fetch a file shared on the platform."""

    async def fetch_file(self, attachment: Attachment, *, max_bytes: int) -> bytes:
        """The file's bytes; ``FileTooLarge`` past ``max_bytes``, ``FileFetchError`` when
        the platform will not give it."""
        ...


class FileShare(Protocol):
    """What a surface that uploads files itself (the web chat) calls: the file joins the
    thread's documents; the answer is what to show the person."""

    async def share(
        self,
        key: SessionKey,
        target: ReplyTarget,
        name: str,
        data: bytes,
        media_type: str | None,
    ) -> tuple[bool, str]:
        """``(accepted, note)``; not accepted: too big or a type that cannot be read."""
        ...


_IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp")


_TEXT_SUFFIXES = (".txt", ".md", ".markdown", ".csv")


def inline_kind(a: Attachment) -> str | None:
    """``images`` or ``text`` for a file that could go straight to the model, by its
    declared type or name (the bytes are checked once fetched)."""
    mime = (a.mime_type or "").split(";", 1)[0].strip().lower()
    name = (a.name or "").lower()
    if a.kind in ("photo", "image") or mime.startswith("image/") or name.endswith(_IMAGE_SUFFIXES):
        return "images"
    if mime in ("text/plain", "text/markdown", "text/csv") or name.endswith(_TEXT_SUFFIXES):
        return "text"
    return None


def image_type(data: bytes) -> str | None:
    """The media type of a PNG, JPEG, GIF or WebP image, from its first bytes."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def too_large(name: str | None, size: int, max_bytes: int) -> FileTooLarge:
    return FileTooLarge(f"{name or 'the file'} is {size:,} bytes; the limit is {max_bytes:,} bytes")


async def download(
    client: httpx.AsyncClient,
    url: str,
    *,
    max_bytes: int,
    name: str | None = None,
    headers: Mapping[str, str] | None = None,
    refuse_html: bool = False,
) -> bytes:
    """GET ``url`` and read at most ``max_bytes`` (the declared length is checked first, then
    what actually arrives). ``refuse_html``: a login page instead of the file (Slack answers
    so when the token may not read files) is an error, not a document."""
    try:
        async with client.stream("GET", url, headers=dict(headers or {})) as response:
            if response.status_code != 200:
                raise FileFetchError(
                    f"could not download {name or 'the file'}: HTTP {response.status_code}"
                )
            declared = response.headers.get("content-length")
            if (
                declared is not None
                and declared.isascii()
                and declared.isdigit()
                and int(declared) > max_bytes
            ):
                raise too_large(name, int(declared), max_bytes)
            kind = response.headers.get("content-type", "")
            if refuse_html and kind.startswith("text/html"):
                raise FileFetchError(
                    f"could not download {name or 'the file'}: the platform answered with a "
                    "web page (does the bot token have the files:read scope?)"
                )
            chunks: list[bytes] = []
            total = 0
            async for chunk in response.aiter_bytes():
                total += len(chunk)
                if total > max_bytes:
                    raise too_large(name, total, max_bytes)
                chunks.append(chunk)
    except httpx.HTTPError as exc:
        raise FileFetchError(f"could not download {name or 'the file'}: {exc}") from exc
    return b"".join(chunks)
