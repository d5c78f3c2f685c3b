"""Text read from images by OCR: RapidOCR on onnxruntime, whose detection and recognition
weights ship inside its wheel (nothing is downloaded at run time).

Optional: the ``ocr`` extra (``pip install 'chat-gateway[ocr]'``, 419 MB with onnxruntime
and OpenCV). Without it ``available()`` is false, images reach only models that accept images,
and ``gateway doctor`` recommends the extra. The engine loads once per process, on first use;
calls are serialised (one engine, and OCR is CPU-bound: callers run it in a thread)."""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Sequence
from typing import Any

#: the package of the ``ocr`` extra
PACKAGE = "rapidocr_onnxruntime"
#: boxes read with less confidence than this are left out
MIN_SCORE = 0.5

_lock = threading.Lock()
_engine: Any = None


class OcrUnavailable(Exception):
    """The ``ocr`` extra is not installed."""


def available() -> bool:
    return importlib.util.find_spec(PACKAGE) is not None


def read_text(image: bytes) -> str:
    """The text in ``image`` (PNG, JPEG, ...), line by line in reading order; ``""`` when it
    shows none. Blocking (seconds on a busy CPU): call it in a thread."""
    global _engine
    with _lock:
        if _engine is None:
            if not available():
                raise OcrUnavailable(f"OCR needs the ocr extra ({PACKAGE})")
            from rapidocr_onnxruntime import RapidOCR

            _engine = RapidOCR()
        found, _ = _engine(image, use_cls=False)
    return "\n".join(lines(found or ()))


def lines(found: Sequence[Any]) -> list[str]:
    """RapidOCR's boxes ``[corners, text, score]`` as lines: boxes whose middles lie within
    half a box height of each other are one line, left to right; lines top to bottom."""
    boxes = []
    for corners, text, score in found:
        if float(score) < MIN_SCORE or not str(text).strip():
            continue
        ys = [float(p[1]) for p in corners]
        xs = [float(p[0]) for p in corners]
        boxes.append(((min(ys) + max(ys)) / 2, max(ys) - min(ys), min(xs), str(text).strip()))
    boxes.sort()
    out: list[list[tuple[float, str]]] = []
    last_mid = last_height = None
    for mid, height, left, text in boxes:
        if (
            out
            and last_mid is not None
            and abs(mid - last_mid) <= max(height, last_height or 0) / 2
        ):
            out[-1].append((left, text))
            continue
        out.append([(left, text)])
        last_mid, last_height = mid, height
    return [" ".join(t for _, t in sorted(line)) for line in out]
