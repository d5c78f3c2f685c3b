"""OCR (the ``ocr`` extra: RapidOCR, weights in its wheel): boxes become lines in reading
order, and a scanned PDF page without a text layer is read at ingest."""

from __future__ import annotations

from gateway.files import ocr
from gateway.knowledge.parse import parse_document
from testsupport.documents import make_text_scan_pdf


def box(x: float, y: float, w: float, h: float, text: str, score: float = 0.9) -> list[object]:
    return [[[x, y], [x + w, y], [x + w, y + h], [x, y + h]], text, score]


def test_boxes_become_lines_top_to_bottom_left_to_right() -> None:
    found = [
        box(300, 12, 100, 30, "timed out"),
        box(10, 10, 280, 34, "ERROR 502: upstream"),
        box(10, 80, 200, 30, "Retry later"),
        box(10, 120, 50, 30, "smudge", score=0.2),
    ]
    assert ocr.lines(found) == ["ERROR 502: upstream timed out", "Retry later"]


def test_a_scanned_pdf_page_is_read_by_ocr_at_ingest() -> None:
    assert ocr.available(), "the ocr extra is part of the test install"
    pdf = make_text_scan_pdf([["Invoice total 980 EUR"], ["Payment within 14 days"]])
    parsed = parse_document("scan.pdf", pdf)
    assert parsed.format == "pdf" and parsed.pages == 2
    by_page = {b.page: b.text for b in parsed.blocks}
    assert "Invoice total" in by_page[1] and "980" in by_page[1]
    assert "Payment within 14 days" in by_page[2]
