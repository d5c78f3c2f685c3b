"""Images shared with a question: an image for a model that accepts images
(``AGENT_VISION_MODELS``), its text read by OCR for any other model (``gateway.files.ocr``)."""

from __future__ import annotations

import asyncio
import base64
import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.core.attachments import FileFetchError, FileSource, image_type, inline_kind
from gateway.core.domain import Attachment
from gateway.files import ocr


def is_image(a: Attachment) -> bool:
    return inline_kind(a) == "images"


def accepts_images(model: str | None, patterns: Sequence[str]) -> bool:
    """Whether ``model`` is declared to accept images (a name or ``fnmatch`` pattern of
    ``AGENT_VISION_MODELS``); never guessed from the name."""
    return model is not None and any(fnmatch.fnmatchcase(model, p) for p in patterns)


@dataclass
class ImagesRead:
    #: OpenAI content parts for the model: ``image_url`` (vision) or ``text`` (OCR)
    parts: list[Mapping[str, Any]] = field(default_factory=list)
    #: what to tell the person (an image that could not be fetched or read)
    notes: list[str] = field(default_factory=list)
    #: characters of OCR text given to the model (for the prompt's budget)
    text_chars: int = 0


async def read_images(
    images: Sequence[Attachment], source: FileSource | None, *, vision: bool, max_bytes: int
) -> ImagesRead:
    out = ImagesRead()
    for a in images:
        name = a.name or a.kind
        if not vision and not ocr.available():
            out.notes.append(
                f"🖼️ I could not look at {name}: this model does not take images, and reading "
                "their text needs the ocr extra."
            )
            continue
        if source is None:
            out.notes.append(f"⚠️ I cannot fetch {name} from this platform.")
            continue
        try:
            data = await source.fetch_file(a, max_bytes=max_bytes)
        except FileFetchError as exc:
            out.notes.append(f"⚠️ {exc}")
            continue
        mime = image_type(data)
        if mime is None:
            out.notes.append(f"⚠️ {name} is not a PNG, JPEG, GIF or WebP image.")
            continue
        if vision:
            url = f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
            out.parts.append({"type": "image_url", "image_url": {"url": url}})
            continue
        text = await asyncio.to_thread(ocr.read_text, data)
        said = (
            f"Text read by OCR from the image {name}:\n{text}"
            if text
            else f"The image {name} was shared; OCR found no text in it."
        )
        out.parts.append({"type": "text", "text": said})
        out.text_chars += len(said)
    return out
