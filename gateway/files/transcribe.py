"""Speech to text through an OpenAI-compatible ``POST /v1/audio/transcriptions`` server
(``TRANSCRIPTION_BASE_URL``: OpenAI, Groq, a local faster-whisper server).

A request that fails on the way (a dropped connection, a 5xx, a 429) is tried again with a
growing pause; a refusal (another 4xx) is final."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import httpx
import structlog

from gateway.core.domain import Attachment

log = structlog.get_logger(__name__)

#: tries of one transcription, and the first pause between two (doubled each time)
ATTEMPTS = 3
FIRST_PAUSE = 0.5

_AUDIO_KINDS = ("voice", "audio")
_AUDIO_SUFFIXES = (".ogg", ".oga", ".opus", ".mp3", ".m4a", ".wav", ".webm", ".flac", ".aac")


class TranscriptionFailed(Exception):
    """The audio could not be transcribed; ``str`` says why."""


def is_audio(a: Attachment) -> bool:
    """A voice note or an audio file, by the platform's kind, its media type or its name."""
    mime = (a.mime_type or "").split(";", 1)[0].strip().lower()
    name = (a.name or "").lower()
    return a.kind in _AUDIO_KINDS or mime.startswith("audio/") or name.endswith(_AUDIO_SUFFIXES)


def transcriptions_url(base_url: str) -> str:
    """``TRANSCRIPTION_BASE_URL`` as people write it (``https://host/v1``, ``https://host``,
    or the full ``.../v1/audio/transcriptions``) to the endpoint."""
    base = base_url.rstrip("/")
    if base.endswith("/audio/transcriptions"):
        return base
    if base.endswith("/v1"):
        return base + "/audio/transcriptions"
    return base + "/v1/audio/transcriptions"


class Transcriber:
    def __init__(
        self,
        base_url: str,
        *,
        model: str,
        api_key: str | None = None,
        timeout: float = 120.0,
        first_pause: float = FIRST_PAUSE,
    ) -> None:
        self.url = transcriptions_url(base_url)
        self.model = model
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(timeout=timeout, headers=headers)
        self._first_pause = first_pause

    async def close(self) -> None:
        await self._client.aclose()

    async def transcribe(self, data: bytes, *, name: str, mime_type: str | None) -> str:
        """The text spoken in ``data``; ``TranscriptionFailed`` once the tries are spent or
        the server refuses."""
        pause = self._first_pause
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return await self._once(data, name=name, mime_type=mime_type)
            except _Retry as exc:
                if attempt == ATTEMPTS:
                    raise TranscriptionFailed(str(exc)) from exc
                log.info("transcription_retry", attempt=attempt, error=str(exc))
                await asyncio.sleep(pause)
                pause *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    async def _once(self, data: bytes, *, name: str, mime_type: str | None) -> str:
        try:
            response = await self._client.post(
                self.url,
                data={"model": self.model, "response_format": "json"},
                files={"file": (name, data, mime_type or "application/octet-stream")},
            )
        except httpx.HTTPError as exc:
            raise _Retry(f"transcription server unreachable: {exc}") from exc
        if response.status_code == 429 or response.status_code >= 500:
            raise _Retry(f"transcription server answered HTTP {response.status_code}")
        if response.status_code != 200:
            raise TranscriptionFailed(
                f"transcription server refused the audio: HTTP {response.status_code}"
            )
        try:
            body = response.json()
        except ValueError as exc:
            raise TranscriptionFailed("transcription server answered no JSON") from exc
        text = body.get("text") if isinstance(body, Mapping) else None
        if not isinstance(text, str):
            raise TranscriptionFailed("transcription server answered no text")
        return text.strip()


class _Retry(Exception):
    """A failure worth another try."""
