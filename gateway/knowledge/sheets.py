"""Spreadsheets (XLSX, ODS, XLS) read with python-calamine: each sheet is a section, its rows
stay rows (``header: value; ...`` under the sheet's first row), ``ROWS`` rows per block."""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from datetime import date, datetime, time
from typing import Any

#: rows per block (one passage holds whole rows, never half a row)
ROWS = 20


class SheetError(Exception):
    """The workbook cannot be read; ``str`` says why."""


def sheet_blocks(data: bytes) -> Iterator[tuple[str, str, str]]:
    """``(sheet, rows, text)`` blocks of a workbook (``rows``: ``rows 2-21``, as the sheet
    numbers them)."""
    from python_calamine import CalamineError, CalamineWorkbook

    try:
        book = CalamineWorkbook.from_filelike(io.BytesIO(data))
        sheets = [(name, book.get_sheet_by_name(name).to_python()) for name in book.sheet_names]
    except (CalamineError, ValueError, OSError) as exc:
        raise SheetError(f"the spreadsheet cannot be read: {exc}") from exc
    for name, rows in sheets:
        yield from _sheet(name, [[_cell(v) for v in row] for row in rows])


def _sheet(name: str, rows: Sequence[Sequence[str]]) -> Iterator[tuple[str, str, str]]:
    rows = [_trim(r) for r in rows if any(c for c in r)]
    if not rows:
        return
    header, body = rows[0], rows[1:]
    if not body:
        yield name, "row 1", " | ".join(header)
        return
    for start in range(0, len(body), ROWS):
        part = body[start : start + ROWS]
        lines = [_row(header, row) for row in part]
        # rows are numbered as the sheet shows them (the header is row 1)
        yield name, f"rows {start + 2}-{start + 1 + len(part)}", "\n".join(lines)


def _row(header: Sequence[str], row: Sequence[str]) -> str:
    pairs = []
    for i, value in enumerate(row):
        if not value:
            continue
        label = header[i] if i < len(header) and header[i] else f"column {i + 1}"
        pairs.append(f"{label}: {value}")
    return "; ".join(pairs)


def _trim(row: Sequence[str]) -> list[str]:
    out = list(row)
    while out and not out[-1]:
        out.pop()
    return out


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    return str(value).strip()
