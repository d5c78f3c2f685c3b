"""Files in, text blocks out: each block keeps its page (where the format has pages) and its
heading path. PDF (pypdf), DOCX (python-docx), HTML, Markdown, plain text, CSV, spreadsheets
(XLSX, ODS: ``sheets``) and e-mails (EML: ``mail``; their attachments become documents of
their own).

A file that cannot give text (a scanned PDF without a text layer, a corrupt file, an unknown
type) raises ``ParseError`` with a reason a person can act on."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import PurePath
from typing import Any, Literal

from gateway.files import ocr
from gateway.knowledge.mail import MailFile, looks_like_mail, read_mail
from gateway.knowledge.sheets import SheetError, sheet_blocks

Format = Literal["pdf", "docx", "html", "markdown", "text", "csv", "xlsx", "ods", "eml"]

#: the media type stored for each format
MEDIA_TYPES: dict[Format, str] = {
    "pdf": "application/pdf",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "html": "text/html",
    "markdown": "text/markdown",
    "text": "text/plain",
    "csv": "text/csv",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "ods": "application/vnd.oasis.opendocument.spreadsheet",
    "eml": "message/rfc822",
}
#: the formats read, by file name suffix (``gateway kb add`` takes a folder's files by these)
FORMAT_BY_SUFFIX: dict[str, Format] = {
    ".pdf": "pdf",
    ".docx": "docx",
    ".html": "html",
    ".htm": "html",
    ".md": "markdown",
    ".markdown": "markdown",
    ".txt": "text",
    ".text": "text",
    ".rst": "text",
    ".log": "text",
    ".csv": "csv",
    ".xlsx": "xlsx",
    ".ods": "ods",
    ".eml": "eml",
}
_ODS_SIGNATURE = b"mimetypeapplication/vnd.oasis.opendocument.spreadsheet"
_BY_MEDIA = {media: fmt for fmt, media in MEDIA_TYPES.items()} | {"text/x-markdown": "markdown"}

#: CSV rows per block
CSV_ROWS = 20


class ParseError(Exception):
    """The file gives no text; ``str(exc)`` is the reason shown to people."""


@dataclass(frozen=True, slots=True)
class Block:
    """A paragraph-sized piece of text where it sits: page (1-based, ``None`` for formats
    without pages) and the headings above it, outermost first."""

    text: str
    page: int | None = None
    headings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Parsed:
    format: Format
    blocks: tuple[Block, ...]
    pages: int | None = None
    #: files inside the document that are documents of their own (an e-mail's attachments)
    attachments: tuple[MailFile, ...] = ()


def detect_format(name: str, data: bytes, media_type: str | None = None) -> Format:
    """The format from the content's signature, the media type, then the file name."""
    if data.startswith(b"%PDF-"):
        return "pdf"
    suffix = PurePath(name).suffix.lower()
    if data.startswith(b"PK\x03\x04"):
        if suffix == ".docx" or b"word/" in data[:4096]:
            return "docx"
        if suffix == ".ods" or _ODS_SIGNATURE in data[:256]:
            return "ods"
        if suffix == ".xlsx" or b"xl/" in data[:4096]:
            return "xlsx"
    if media_type:
        found = _BY_MEDIA.get(media_type.split(";")[0].strip().lower())
        if found is not None:
            return found
    if suffix in FORMAT_BY_SUFFIX:
        return FORMAT_BY_SUFFIX[suffix]
    head = data[:512].lstrip().lower()
    if head.startswith((b"<!doctype html", b"<html")):
        return "html"
    if looks_like_mail(data):
        return "eml"
    if b"\x00" not in data[:4096] and _decodes(data[:4096]):
        return "text"
    raise ParseError(
        f"unsupported file type for {name!r}: send PDF, DOCX, HTML, Markdown, plain text, "
        "CSV, XLSX, ODS or EML"
    )


def _decodes(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        # a multi-byte character cut at the end of the sample is still text
        return exc.start >= len(data) - 3
    return True


def parse_document(name: str, data: bytes, media_type: str | None = None) -> Parsed:
    fmt = detect_format(name, data, media_type)
    if fmt == "pdf":
        return _pdf(data)
    if fmt == "docx":
        return Parsed("docx", tuple(_docx(data)))
    if fmt in ("xlsx", "ods"):
        return _spreadsheet(name, fmt, data)
    if fmt == "eml":
        return _mail(name, data)
    text = _text(data)
    if fmt == "html":
        blocks = tuple(_html(text))
    elif fmt == "markdown":
        blocks = tuple(_markdown(text))
    elif fmt == "csv":
        blocks = tuple(_csv(text))
    else:
        blocks = tuple(Block(p) for p in _paragraphs(text))
    if not blocks:
        raise ParseError(f"{name!r} has no text")
    return Parsed(fmt, blocks)


def _text(data: bytes) -> str:
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def _paragraphs(text: str) -> Iterator[str]:
    for part in re.split(r"\n\s*\n", text):
        cleaned = re.sub(r"[ \t]+", " ", part).strip()
        if cleaned:
            yield cleaned


# --- PDF -------------------------------------------------------------------------------


def _pdf(data: bytes) -> Parsed:
    import logging

    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    # pypdf logs warnings about sloppy-but-readable files; they are not the user's business
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise ParseError("the PDF is encrypted: send it without a password")
        pages = list(reader.pages)
        texts = [page.extract_text() or "" for page in pages]
    except PdfReadError as exc:
        raise ParseError(f"the PDF cannot be read: {exc}") from exc
    blocks = [
        Block(p, page=number)
        for number, text in enumerate(texts, start=1)
        for p in _paragraphs(text)
    ]
    if not blocks:
        blocks = _scanned(pages)
    return Parsed("pdf", tuple(blocks), pages=len(pages))


def _scanned(pages: list[Any]) -> list[Block]:
    """A PDF without a text layer, read page by page by OCR (its pages' images), where the
    ``ocr`` extra is installed."""
    reason = f"the PDF has no text layer ({len(pages)} page(s) of images, probably a scan)"
    if not ocr.available():
        raise ParseError(f"{reason}: install the ocr extra to read scans by OCR, or send the text")
    blocks: list[Block] = []
    for number, page in enumerate(pages, start=1):
        try:
            images = [image.data for image in page.images]
        except Exception:  # noqa: BLE001 - pypdf raises many kinds for odd image streams; that page has nothing to read
            continue
        for data in images:
            blocks += [Block(p, page=number) for p in _paragraphs(ocr.read_text(data))]
    if not blocks:
        raise ParseError(f"{reason} and OCR read no text in it: send the text")
    return blocks


# --- spreadsheets and e-mails ------------------------------------------------------------


def _spreadsheet(name: str, fmt: Format, data: bytes) -> Parsed:
    try:
        blocks = tuple(
            Block(text, headings=(sheet, rows)) for sheet, rows, text in sheet_blocks(data)
        )
    except SheetError as exc:
        raise ParseError(str(exc)) from exc
    if not blocks:
        raise ParseError(f"{name!r} has no cells with text")
    return Parsed(fmt, blocks)


def _mail(name: str, data: bytes) -> Parsed:
    mail = read_mail(data)
    subject = mail.subject or name
    head = "\n".join(f"{k}: {v}" for k, v in mail.headers)
    if mail.files:
        head += "\nAttachments: " + ", ".join(f.name for f in mail.files)
    blocks = [Block(head, headings=(subject,))] if head else []
    body = _html(mail.body) if mail.body_is_html else [Block(p) for p in _paragraphs(mail.body)]
    blocks += [Block(b.text, headings=(subject, *b.headings)) for b in body]
    if not blocks:
        raise ParseError(f"{name!r} has no text")
    return Parsed("eml", tuple(blocks), attachments=mail.files)


# --- DOCX ------------------------------------------------------------------------------


def _docx(data: bytes) -> Iterator[Block]:
    import docx

    try:
        document = docx.Document(io.BytesIO(data))
    except Exception as exc:  # python-docx raises zipfile, KeyError, lxml errors...
        raise ParseError(f"the DOCX cannot be read: {exc}") from exc
    headings: list[str] = []
    found = False
    for paragraph in document.paragraphs:
        text = paragraph.text.strip()
        if not text:
            continue
        style = (paragraph.style.name if paragraph.style is not None else "") or ""
        level = _heading_level(style)
        if level is not None:
            headings = [*headings[: level - 1], text]
            continue
        found = True
        yield Block(text, headings=tuple(headings))
    for table in document.tables:
        for row in table.rows:
            cells = [c.text.strip() for c in row.cells if c.text.strip()]
            if cells:
                found = True
                yield Block(" | ".join(cells), headings=tuple(headings))
    if not found and headings:
        yield Block(" ".join(headings), headings=tuple(headings))


def _heading_level(style: str) -> int | None:
    if style == "Title":
        return 1
    match = re.fullmatch(r"Heading (\d)", style)
    return int(match.group(1)) if match else None


# --- HTML ------------------------------------------------------------------------------

_BLOCK_TAGS = {"p", "li", "td", "th", "pre", "blockquote", "dd", "dt", "div", "section", "tr"}
_SKIP_TAGS = {"script", "style", "noscript", "template", "head", "nav"}


class _HtmlBlocks(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[Block] = []
        self.headings: list[str] = []
        self._buf: list[str] = []
        self._heading: int | None = None
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP_TAGS:
            self._skip += 1
        elif re.fullmatch(r"h[1-6]", tag):
            self._flush()
            self._heading = int(tag[1])
        elif tag in _BLOCK_TAGS or tag == "br":
            self._flush()

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP_TAGS:
            self._skip = max(0, self._skip - 1)
        elif re.fullmatch(r"h[1-6]", tag) and self._heading is not None:
            title = " ".join("".join(self._buf).split())
            self._buf = []
            if title:
                self.headings = [*self.headings[: self._heading - 1], title]
            self._heading = None
        elif tag in _BLOCK_TAGS:
            self._flush()

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self._buf.append(data)

    def _flush(self) -> None:
        if self._heading is not None:
            return
        text = " ".join("".join(self._buf).split())
        self._buf = []
        if text:
            self.blocks.append(Block(text, headings=tuple(self.headings)))

    def close(self) -> None:
        super().close()
        self._heading = None
        self._flush()


def _html(text: str) -> list[Block]:
    parser = _HtmlBlocks()
    parser.feed(text)
    parser.close()
    return parser.blocks


# --- Markdown --------------------------------------------------------------------------


def _markdown(text: str) -> Iterator[Block]:
    headings: list[str] = []
    buf: list[str] = []
    fence: str | None = None

    def flush() -> Iterator[Block]:
        joined = "\n".join(buf).strip()
        buf.clear()
        if joined:
            yield Block(joined, headings=tuple(headings))

    for line in text.splitlines():
        stripped = line.strip()
        if fence is not None:
            buf.append(line)
            if stripped.startswith(fence):
                fence = None
                yield from flush()
            continue
        if stripped.startswith(("```", "~~~")):
            yield from flush()
            fence = stripped[:3]
            buf.append(line)
            continue
        match = re.match(r"(#{1,6})\s+(.*?)\s*#*\s*$", stripped)
        if match:
            yield from flush()
            level = len(match.group(1))
            headings = [*headings[: level - 1], match.group(2)]
            continue
        if not stripped:
            yield from flush()
            continue
        buf.append(line.rstrip())
    yield from flush()


# --- CSV -------------------------------------------------------------------------------


def _csv(text: str) -> Iterator[Block]:
    try:
        dialect: type[csv.Dialect] | csv.Dialect = csv.Sniffer().sniff(text[:4096])
    except csv.Error:
        dialect = csv.excel
    rows = [r for r in csv.reader(io.StringIO(text), dialect) if any(c.strip() for c in r)]
    if not rows:
        return
    header, body = rows[0], rows[1:]
    for start in range(0, len(body), CSV_ROWS):
        lines = []
        for row in body[start : start + CSV_ROWS]:
            pairs = [f"{h.strip()}: {v.strip()}" for h, v in zip(header, row, strict=False)]
            lines.append("; ".join(pairs))
        section = f"rows {start + 2}-{start + 1 + len(body[start : start + CSV_ROWS])}"
        yield Block("\n".join(lines), headings=(section,))
    if not body:
        yield Block(", ".join(header))
