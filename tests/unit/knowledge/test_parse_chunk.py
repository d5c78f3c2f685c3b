"""Parsing keeps pages and heading paths; chunking follows structure."""

from __future__ import annotations

import pytest

from gateway.knowledge.chunk import chunk_blocks
from gateway.knowledge.parse import Block, ParseError, parse_document
from testsupport.documents import make_docx, make_pdf, make_scanned_pdf


def test_pdf_blocks_keep_their_page_numbers() -> None:
    data = make_pdf(["Intro page about llamas.", "The refund window is 30 days.\n\nSecond para."])
    parsed = parse_document("policy.pdf", data)
    assert parsed.format == "pdf" and parsed.pages == 2
    # pypdf gives a page's lines, not its paragraphs: one block per page
    assert [(b.page, b.text) for b in parsed.blocks][1:] == [
        (2, "The refund window is 30 days.\nSecond para."),
    ]
    assert parsed.blocks[0].page == 1


def test_a_scanned_pdf_without_text_fails_with_a_readable_reason() -> None:
    with pytest.raises(ParseError, match=r"no text layer \(2 page\(s\).*OCR"):
        parse_document("scan.pdf", make_scanned_pdf(2))


def test_a_broken_pdf_fails_with_a_reason() -> None:
    with pytest.raises(ParseError, match="PDF"):
        parse_document("broken.pdf", b"%PDF-1.4\nthis is not a pdf")


def test_docx_keeps_heading_paths() -> None:
    data = make_docx(
        [
            ("h1", "Handbook"),
            ("p", "Welcome."),
            ("h2", "Leave"),
            ("p", "Twenty days of leave."),
            ("h1", "Pay"),
            ("p", "Paid monthly."),
        ]
    )
    parsed = parse_document("handbook.docx", data)
    assert [(b.headings, b.text) for b in parsed.blocks] == [
        (("Handbook",), "Welcome."),
        (("Handbook", "Leave"), "Twenty days of leave."),
        (("Pay",), "Paid monthly."),
    ]


def test_html_headings_and_blocks_without_scripts() -> None:
    html = (
        "<html><head><title>t</title><script>var x=1;</script></head><body>"
        "<h1>Guide</h1><p>First &amp; foremost.</p><h2>Setup</h2><ul><li>Install it.</li>"
        "<li>Run it.</li></ul><h1>Other</h1><p>Done.</p></body></html>"
    )
    parsed = parse_document("guide.html", html.encode())
    assert [(b.headings, b.text) for b in parsed.blocks] == [
        (("Guide",), "First & foremost."),
        (("Guide", "Setup"), "Install it."),
        (("Guide", "Setup"), "Run it."),
        (("Other",), "Done."),
    ]


def test_markdown_heading_paths_and_fenced_code() -> None:
    md = "# A\n\nintro\n\n## B\n\n```\n# not a heading\n```\n\ntext b\n\n# C\nc text\n"
    parsed = parse_document("notes.md", md.encode())
    assert [(b.headings, b.text) for b in parsed.blocks] == [
        (("A",), "intro"),
        (("A", "B"), "```\n# not a heading\n```"),
        (("A", "B"), "text b"),
        (("C",), "c text"),
    ]


def test_csv_rows_become_labelled_blocks() -> None:
    parsed = parse_document("people.csv", b"name,city\nAda,London\nLinus,Helsinki\n")
    assert parsed.blocks == (
        Block("name: Ada; city: London\nname: Linus; city: Helsinki", headings=("rows 2-3",)),
    )


def test_plain_text_and_unsupported_types() -> None:
    parsed = parse_document("a.txt", b"one\n\ntwo")
    assert [b.text for b in parsed.blocks] == ["one", "two"]
    with pytest.raises(ParseError, match="unsupported file type"):
        parse_document("blob.bin", bytes(range(256)))
    with pytest.raises(ParseError, match="no text"):
        parse_document("empty.txt", b"  \n\n ")


def test_chunks_follow_pages_and_sections_with_overlap() -> None:
    para = " ".join(f"word{i}" for i in range(150))  # ~150+ tokens each
    blocks = [Block(para + f" p{n}", page=1, headings=("S",)) for n in range(8)]
    blocks.append(Block("page two text", page=2, headings=("S",)))
    blocks.append(Block("other section", page=2, headings=("S", "T")))
    chunks = chunk_blocks(blocks, target=512, overlap=64)
    first_page = [c for c in chunks if c.page == 1]
    assert len(first_page) >= 2
    assert all(c.tokens <= 512 + 80 for c in first_page)
    # the second chunk starts with the tail of the first
    carried = first_page[1].text.split("\n\n")[0]
    assert first_page[0].text.endswith(carried) and 20 <= len(carried.split()) < 150
    # never across a page or a heading
    assert [(c.page, c.section, c.text) for c in chunks[-2:]] == [
        (2, "S", "page two text"),
        (2, "S > T", "other section"),
    ]
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))


def test_a_long_paragraph_is_cut_into_overlapping_windows() -> None:
    words = [f"w{i}" for i in range(2000)]
    chunks = chunk_blocks([Block(" ".join(words))], target=512, overlap=64)
    assert len(chunks) > 2
    assert all(c.tokens <= 512 for c in chunks)
    seen = set()
    for c in chunks:
        seen.update(c.text.split())
    assert seen == set(words)
    assert chunks[0].text.split()[-1] in chunks[1].text.split()
