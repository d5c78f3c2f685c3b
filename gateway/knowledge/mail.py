"""E-mails (``.eml``, RFC 5322) read with the standard library: the headers people search by
(From, To, Cc, Date, Subject), the body (plain text, or the HTML part's text), and the files
attached, each of which becomes a document of its own."""

from __future__ import annotations

from dataclasses import dataclass
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser

HEADERS = ("From", "To", "Cc", "Date", "Subject")


@dataclass(frozen=True, slots=True)
class MailFile:
    name: str
    data: bytes
    media_type: str | None


@dataclass(frozen=True, slots=True)
class Mail:
    headers: tuple[tuple[str, str], ...]
    body: str
    body_is_html: bool
    files: tuple[MailFile, ...]

    @property
    def subject(self) -> str:
        return next((v for k, v in self.headers if k == "Subject"), "")


def looks_like_mail(data: bytes) -> bool:
    """An RFC 5322 message: its first lines are headers, among them From and one of
    Subject/Date/To/Message-ID."""
    head = data[:4096].split(b"\n\n", 1)[0].split(b"\r\n\r\n", 1)[0].lower()
    names = {line.split(b":", 1)[0].strip() for line in head.splitlines() if b":" in line}
    return b"from" in names and bool(names & {b"subject", b"date", b"to", b"message-id"})


def read_mail(data: bytes) -> Mail:
    message = BytesParser(policy=policy.default).parsebytes(data)
    assert isinstance(message, EmailMessage)
    headers = tuple((h, str(message[h])) for h in HEADERS if message[h])
    body_part = message.get_body(preferencelist=("plain", "html"))
    body = ""
    is_html = False
    if body_part is not None:
        body = str(body_part.get_content())
        is_html = body_part.get_content_subtype() == "html"
    files: list[MailFile] = []
    for n, part in enumerate(message.iter_attachments(), start=1):
        payload = part.get_payload(decode=True)
        if not isinstance(payload, bytes) or not payload:
            continue
        name = part.get_filename() or f"attachment-{n}"
        files.append(MailFile(name=name, data=payload, media_type=part.get_content_type()))
    return Mail(headers=headers, body=body, body_is_html=is_html, files=tuple(files))
