"""Documents made in the tests: PDFs (fpdf2), DOCX (python-docx), HTML and Markdown."""

from __future__ import annotations

import io
from collections.abc import Sequence
from datetime import UTC, datetime

# fpdf2 stamps a PDF with the time it was made: two PDFs of the same pages made a second apart
# would differ (another sha256, so another document), and a test that adds "the same file"
# again would depend on the clock
_PDF_DATE = datetime(2024, 1, 1, tzinfo=UTC)


def make_pdf(pages: Sequence[str]) -> bytes:
    """A PDF with a text layer: one page per string (paragraphs split on blank lines)."""
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_creation_date(_PDF_DATE)
    pdf.set_font("helvetica", size=11)
    for text in pages:
        pdf.add_page()
        for paragraph in text.split("\n\n"):
            pdf.multi_cell(0, 6, paragraph)
            pdf.ln(4)
    return bytes(pdf.output())


def make_scanned_pdf(pages: int = 2) -> bytes:
    """A scan-like PDF: pages holding only an image, no text layer."""
    from fpdf import FPDF

    png = _gray_png(64, 64)
    pdf = FPDF()
    pdf.set_creation_date(_PDF_DATE)
    for _ in range(pages):
        pdf.add_page()
        pdf.image(io.BytesIO(png), x=10, y=10, w=180)
    return bytes(pdf.output())


def _gray_png(width: int, height: int) -> bytes:
    import struct
    import zlib

    raw = b"".join(b"\x00" + bytes((x * 4) % 256 for x in range(width)) for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def make_docx(items: Sequence[tuple[str, str]]) -> bytes:
    """``(kind, text)`` items: kind ``h1``..``h3`` for headings, ``p`` for paragraphs."""
    import docx

    document = docx.Document()
    for kind, text in items:
        if kind.startswith("h"):
            document.add_heading(text, level=int(kind[1:]))
        else:
            document.add_paragraph(text)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()
