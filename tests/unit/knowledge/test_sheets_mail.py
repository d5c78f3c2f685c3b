"""Spreadsheets (XLSX, ODS: python-calamine) and e-mails (EML: the standard library) read like
other documents: each sheet a section with its rows kept whole, an e-mail's headers and body,
and its attachments documents of their own; all found by ``gateway kb search``."""

from __future__ import annotations

from pathlib import Path

from gateway.knowledge.parse import detect_format, parse_document
from testsupport.documents import make_eml, make_ods, make_xlsx
from testsupport.process import run_cli_in_process

BUDGET = make_xlsx(
    [
        ("Budget", [["Item", "Cost", "Owner"], ["Laptops", 12000, "Ann"], ["Desks", 3400.5, "Bo"]]),
        ("Empty", []),
    ]
)
ROTA = make_ods([("Rota", [["Day", "Person"], ["Monday", "Carla"], ["Tuesday", "Dev"]])])
MAIL = make_eml(
    "Quarterly numbers",
    "Hi team,\n\nThe revenue rose by nine percent in the third quarter.\n\nDana",
    attachments=[("minutes.md", b"# Minutes\n\nThe offsite moves to Lisbon.", "text/markdown")],
)


def test_each_sheet_is_a_section_and_rows_stay_rows() -> None:
    parsed = parse_document("budget.xlsx", BUDGET)
    assert parsed.format == "xlsx"
    (block,) = parsed.blocks
    assert block.headings == ("Budget", "rows 2-3")
    assert block.text.splitlines() == [
        "Item: Laptops; Cost: 12000; Owner: Ann",
        "Item: Desks; Cost: 3400.5; Owner: Bo",
    ]
    ods = parse_document("rota.ods", ROTA)
    assert ods.format == "ods"
    assert [(b.headings, b.text) for b in ods.blocks] == [
        (("Rota", "rows 2-3"), "Day: Monday; Person: Carla\nDay: Tuesday; Person: Dev")
    ]
    # by content, whatever the name says
    assert detect_format("upload", BUDGET) == "xlsx" and detect_format("upload", ROTA) == "ods"


def test_an_email_gives_its_headers_body_and_attachments() -> None:
    parsed = parse_document("mail.eml", MAIL)
    assert parsed.format == "eml" and detect_format("forwarded", MAIL) == "eml"
    head, *body = parsed.blocks
    assert "From: Dana Ops <dana@example.com>" in head.text
    assert "Subject: Quarterly numbers" in head.text and "Attachments: minutes.md" in head.text
    assert all(b.headings[0] == "Quarterly numbers" for b in parsed.blocks)
    assert "The revenue rose by nine percent in the third quarter." in [b.text for b in body]
    (inner,) = parsed.attachments
    assert (inner.name, inner.media_type) == ("minutes.md", "text/markdown")
    assert b"Lisbon" in inner.data


async def test_kb_search_finds_spreadsheet_rows_and_emails(
    tmp_path: Path, database_url: str
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "budget.xlsx").write_bytes(BUDGET)
    (docs / "rota.ods").write_bytes(ROTA)
    (docs / "numbers.eml").write_bytes(MAIL)
    # the commands in-process (gateway.ops.cli.main) on the test's database; the zero-config
    # pair of processes is tests/unit/knowledge/test_retrieval.py's
    env = {
        "DATABASE_URL": database_url,
        "GATEWAY_DATA_DIR": str(tmp_path / "data"),
        "HF_HUB_OFFLINE": "1",
    }

    async def gateway(*args: str) -> str:
        code, out, err = await run_cli_in_process(list(args), env)
        assert code == 0, err
        return out

    added = await gateway("kb", "add", str(docs))
    assert [line.split("\t")[1] for line in added.strip().splitlines()] == ["ready"] * 3
    found = await gateway("kb", "search", "laptops cost")
    assert "budget.xlsx — Budget > rows 2-3" in found.split("\n")[0]
    assert "numbers.eml" in (await gateway("kb", "search", "revenue third quarter")).splitlines()[0]
    # the attachment is a document of its own
    assert "minutes.md" in (await gateway("kb", "search", "offsite Lisbon")).splitlines()[0]
