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


def _zip(members: Sequence[tuple[str, str]]) -> bytes:
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, text in members:
            # a fixed time: the same sheets make the same bytes (one document, one sha256)
            info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
            stored = name == "mimetype"  # ODS: the first member, not compressed
            info.compress_type = zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED
            z.writestr(info, text)
    return out.getvalue()


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def make_xlsx(sheets: Sequence[tuple[str, Sequence[Sequence[str | int | float]]]]) -> bytes:
    """An XLSX workbook (Office Open XML, inline strings): ``(sheet name, rows)`` each."""
    ns = 'xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"'
    rel = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
    kinds = "application/vnd.openxmlformats-officedocument.spreadsheetml"
    members = [
        (
            "[Content_Types].xml",
            '<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org'
            '/package/2006/content-types"><Default Extension="rels" ContentType="application/'
            'vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" '
            'ContentType="application/xml"/>'
            f'<Override PartName="/xl/workbook.xml" ContentType="{kinds}.sheet.main+xml"/>'
            + "".join(
                f'<Override PartName="/xl/worksheets/sheet{i}.xml" '
                f'ContentType="{kinds}.worksheet+xml"/>'
                for i in range(1, len(sheets) + 1)
            )
            + "</Types>",
        ),
        (
            "_rels/.rels",
            '<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.'
            'openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" '
            f'Type="{rel}/officeDocument" Target="xl/workbook.xml"/></Relationships>',
        ),
        (
            "xl/workbook.xml",
            f'<?xml version="1.0" encoding="UTF-8"?><workbook {ns} xmlns:r="{rel}"><sheets>'
            + "".join(
                f'<sheet name="{_esc(name)}" sheetId="{i}" r:id="rId{i}"/>'
                for i, (name, _) in enumerate(sheets, start=1)
            )
            + "</sheets></workbook>",
        ),
        (
            "xl/_rels/workbook.xml.rels",
            '<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.'
            'openxmlformats.org/package/2006/relationships">'
            + "".join(
                f'<Relationship Id="rId{i}" Type="{rel}/worksheet" '
                f'Target="worksheets/sheet{i}.xml"/>'
                for i in range(1, len(sheets) + 1)
            )
            + "</Relationships>",
        ),
    ]
    for i, (_, rows) in enumerate(sheets, start=1):
        body = []
        for r, row in enumerate(rows, start=1):
            cells = []
            for c, value in enumerate(row):
                ref = f"{chr(65 + c)}{r}"
                if isinstance(value, str):
                    cells.append(f'<c r="{ref}" t="inlineStr"><is><t>{_esc(value)}</t></is></c>')
                else:
                    cells.append(f'<c r="{ref}"><v>{value}</v></c>')
            body.append(f'<row r="{r}">{"".join(cells)}</row>')
        members.append(
            (
                f"xl/worksheets/sheet{i}.xml",
                f'<?xml version="1.0" encoding="UTF-8"?><worksheet {ns}><sheetData>'
                + "".join(body)
                + "</sheetData></worksheet>",
            )
        )
    return _zip(members)


def make_ods(sheets: Sequence[tuple[str, Sequence[Sequence[str]]]]) -> bytes:
    """An ODS spreadsheet (OpenDocument): ``(sheet name, rows of text)`` each."""
    office = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"
    table = "urn:oasis:names:tc:opendocument:xmlns:table:1.0"
    text = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
    tables = "".join(
        f'<table:table table:name="{_esc(name)}">'
        + "".join(
            "<table:table-row>"
            + "".join(
                f'<table:table-cell office:value-type="string"><text:p>{_esc(v)}</text:p>'
                "</table:table-cell>"
                for v in row
            )
            + "</table:table-row>"
            for row in rows
        )
        + "</table:table>"
        for name, rows in sheets
    )
    content = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f'<office:document-content xmlns:office="{office}" xmlns:table="{table}" '
        f'xmlns:text="{text}" office:version="1.2"><office:body><office:spreadsheet>'
        f"{tables}</office:spreadsheet></office:body></office:document-content>"
    )
    manifest = (
        '<?xml version="1.0" encoding="UTF-8"?><manifest:manifest xmlns:manifest="urn:oasis:'
        'names:tc:opendocument:xmlns:manifest:1.0" manifest:version="1.2">'
        '<manifest:file-entry manifest:full-path="/" manifest:media-type="application/'
        'vnd.oasis.opendocument.spreadsheet"/><manifest:file-entry manifest:full-path='
        '"content.xml" manifest:media-type="text/xml"/></manifest:manifest>'
    )
    return _zip(
        [
            ("mimetype", "application/vnd.oasis.opendocument.spreadsheet"),
            ("META-INF/manifest.xml", manifest),
            ("content.xml", content),
        ]
    )


def make_eml(
    subject: str, body: str, *, attachments: Sequence[tuple[str, bytes, str]] = ()
) -> bytes:
    """An e-mail (RFC 5322) with a plain-text body and ``(name, bytes, media type)`` files."""
    from email.message import EmailMessage

    message = EmailMessage()
    message["From"] = "Dana Ops <dana@example.com>"
    message["To"] = "team@example.com"
    message["Date"] = "Mon, 01 Jan 2024 09:00:00 +0000"
    message["Subject"] = subject
    message.set_content(body)
    for name, data, media in attachments:
        main, _, sub = media.partition("/")
        message.add_attachment(data, maintype=main, subtype=sub, filename=name)
    return bytes(message)


def text_png(lines: Sequence[str], *, size: int = 36) -> bytes:
    """A screenshot-like PNG: black ``lines`` on white (Pillow's built-in font)."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default(size=size)
    width = max(40 + int(font.getlength(line)) for line in lines)
    image = Image.new("RGB", (width, 40 + len(lines) * (size + 24)), "white")
    draw = ImageDraw.Draw(image)
    for i, line in enumerate(lines):
        draw.text((20, 20 + i * (size + 24)), line, fill="black", font=font)
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def make_text_scan_pdf(pages: Sequence[Sequence[str]]) -> bytes:
    """A scanned PDF: each page only an image of its lines of text, no text layer."""
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_creation_date(_PDF_DATE)
    for lines in pages:
        pdf.add_page()
        pdf.image(io.BytesIO(text_png(lines)), x=10, y=10, w=180)
    return bytes(pdf.output())
