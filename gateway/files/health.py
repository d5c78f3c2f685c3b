"""What ``gateway doctor`` says about files people share: voice (``TRANSCRIPTION_*``) and OCR
(the ``ocr`` extra, recommended: it is not in the zero-config install)."""

from __future__ import annotations

from gateway.core.ports import Check
from gateway.core.settings import Settings
from gateway.files import ocr
from gateway.files.transcribe import transcriptions_url

#: what the ``ocr`` extra adds to a plain install, measured: ``pip install
#: 'chat-gateway[ocr]'`` into a fresh virtualenv that already had the plain install (Python
#: 3.11, Linux x86-64, nothing cached) added 419 MB (onnxruntime, OpenCV, Shapely, Pillow,
#: RapidOCR with its weights) in 51 s
OCR_SIZE = "adds about 420 MB and 50 s to the install"


def files_checks(settings: Settings) -> list[Check]:
    return [_voice(settings), _ocr(settings)]


def _voice(settings: Settings) -> Check:
    if not settings.transcription_base_url:
        return Check(
            name="voice",
            ok=True,
            detail="TRANSCRIPTION_BASE_URL not set: a voice note gets a short answer saying "
            "voice is not set up",
            fix="set TRANSCRIPTION_BASE_URL to an OpenAI-compatible transcription server",
        )
    url = transcriptions_url(settings.transcription_base_url)
    return Check(
        name="voice",
        ok=True,
        detail=f"voice notes transcribed by {url} ({settings.transcription_model})",
    )


def _ocr(settings: Settings) -> Check:
    vision = ", ".join(settings.agent_vision_models) or "none declared"
    if ocr.available():
        return Check(
            name="ocr",
            ok=True,
            detail=f"images and scanned PDFs read by OCR ({ocr.PACKAGE}, weights in its wheel); "
            f"models that take images (AGENT_VISION_MODELS): {vision}",
        )
    return Check(
        name="ocr",
        ok=True,
        detail="OCR not installed: images reach only models in AGENT_VISION_MODELS "
        f"({vision}), scanned PDFs are refused",
        fix=f"pip install 'chat-gateway[ocr]' ({OCR_SIZE}, no download at run time)",
    )
