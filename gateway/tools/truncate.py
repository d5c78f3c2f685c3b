"""A tool's output cut to the model's share by its structure, never in the middle of one.

- JSON stays valid JSON: lists keep their first items and end with ``"... N more"``, objects
  keep their first keys and end with ``"...": "N more"``, long strings keep their start and
  say how many characters were left out; nested values are cut the same way.
- CSV (and TSV) keeps its header and whole rows, then a line saying how many rows were left.
- Text is cut at a line boundary (a word boundary inside one very long line) with a line
  saying how much was left out.

Limits are in characters (``max_output_chars``, 100 or more in the tools file); every result
fits its limit, markers included.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

__all__ = ["cap_output"]

#: below this, structure cannot be kept with its markers: a plain cut
_SMALLEST = 40
_SNIFF_LINES = 6


def cap_output(text: str, limit: int) -> str:
    """``text`` if it fits ``limit`` characters, else the part of it that does, cut by its
    structure (JSON, CSV, text) with a note of what was left out."""
    if len(text) <= limit:
        return text
    if limit < _SMALLEST:
        return text[:limit]
    stripped = text.strip()
    if stripped[:1] in ("{", "[", '"'):
        try:
            value = json.loads(stripped)
        except ValueError:
            pass
        else:
            cut = cap_json(value, limit)
            if cut is not None:
                return cut
    delimiter = _table_delimiter(text)
    if delimiter is not None:
        cut = cap_table(text, limit, delimiter)
        if cut is not None:
            return cut
    return cap_text(text, limit)


# --- JSON ----------------------------------------------------------------------------------


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def cap_json(value: Any, limit: int) -> str | None:
    """``value`` as compact JSON within ``limit`` characters (cut if need be), or None if not
    even its outline fits."""
    whole = _dumps(value)
    if len(whole) <= limit:
        return whole
    cut = _shrink(value, limit)
    return None if cut is _NOTHING else _dumps(cut)


_NOTHING = object()


def _more(n: int) -> str:
    return f"... {n} more"


def _shrink(value: Any, budget: int) -> Any:
    """A value whose compact JSON fits ``budget`` characters, or ``_NOTHING``."""
    if isinstance(value, list):
        return _shrink_list(value, budget)
    if isinstance(value, dict):
        return _shrink_dict(value, budget)
    if isinstance(value, str):
        return _shrink_str(value, budget)
    return value if len(_dumps(value)) <= budget else _NOTHING


def _shrink_str(value: str, budget: int) -> Any:
    if len(_dumps(value)) <= budget:
        return value
    # the longest prefix that fits with its note (escapes make the length uneven: search)
    lo, hi, best = 0, min(len(value), budget), None
    while lo <= hi:
        mid = (lo + hi) // 2
        candidate = value[:mid] + f"... [{len(value) - mid} more characters]"
        if len(_dumps(candidate)) <= budget:
            best, lo = candidate, mid + 1
        else:
            hi = mid - 1
    return _NOTHING if best is None else best


def _shrink_list(items: list[Any], budget: int) -> Any:
    whole = _dumps(items)
    if len(whole) <= budget:
        return items
    # room kept for the closing note, at its longest ("... N more" with N = every item)
    note = len(_dumps(_more(len(items)))) + 1
    kept: list[Any] = []
    used = 2  # the brackets
    for item in items:
        room = budget - used - note - (1 if kept else 0)
        if room <= 0:
            break
        cut = _shrink(item, room)
        if cut is _NOTHING:
            break
        kept.append(cut)
        used += len(_dumps(cut)) + (1 if len(kept) > 1 else 0)
        if not _same(cut, item):
            break  # a cut item: what follows would read as whole
    left = len(items) - len(kept)
    if left:
        kept.append(_more(left))
    return kept if len(_dumps(kept)) <= budget else _NOTHING


def _shrink_dict(mapping: dict[str, Any], budget: int) -> Any:
    whole = _dumps(mapping)
    if len(whole) <= budget:
        return mapping
    note = len(_dumps({"...": _more(len(mapping))})) - 1  # without the braces, plus a comma
    kept: dict[str, Any] = {}
    used = 2
    for key, item in mapping.items():
        head = len(_dumps(key)) + 1 + (1 if kept else 0)
        room = budget - used - note - head
        if room <= 0:
            break
        cut = _shrink(item, room)
        if cut is _NOTHING:
            break
        kept[key] = cut
        used += head + len(_dumps(cut))
        if not _same(cut, item):
            break
    left = len(mapping) - len(kept)
    if left:
        kept["..."] = _more(left)
    return kept if len(_dumps(kept)) <= budget else _NOTHING


def _same(cut: Any, item: Any) -> bool:
    return cut is item or (type(cut) is type(item) and cut == item)


# --- CSV -----------------------------------------------------------------------------------


def _table_delimiter(text: str) -> str | None:
    """``,`` or a tab if the first lines read as one table (the same number of fields, two
    or more, on every line), else None."""
    lines = text.splitlines()[:_SNIFF_LINES]
    if len(lines) < 2:
        return None
    for delimiter in (",", "\t"):
        try:
            rows = list(csv.reader(lines, delimiter=delimiter, strict=True))
        except csv.Error:
            continue
        widths = {len(r) for r in rows[:-1]}  # the last sniffed line may be cut
        if len(widths) == 1 and widths.pop() >= 2:
            return delimiter
    return None


def cap_table(text: str, limit: int, delimiter: str) -> str | None:
    """The header and as many whole rows as fit, then ``[... N more rows ...]``."""
    try:
        rows = list(csv.reader(io.StringIO(text), delimiter=delimiter, strict=True))
    except csv.Error:
        return None
    if len(rows) < 2:
        return None
    out = io.StringIO()
    writer = csv.writer(out, delimiter=delimiter, lineterminator="\n")
    writer.writerow(rows[0])
    header = out.getvalue()
    note_room = len(_table_note(len(rows) - 1))
    if len(header) + note_room > limit:
        return None
    kept = 0
    for row in rows[1:]:
        before = out.tell()
        writer.writerow(row)
        if out.tell() + note_room > limit:
            out.seek(before)
            out.truncate()
            break
        kept += 1
    return out.getvalue() + _table_note(len(rows) - 1 - kept)


def _table_note(rows: int) -> str:
    return f"[... {rows} more rows ...]"


# --- text ----------------------------------------------------------------------------------


def cap_text(text: str, limit: int) -> str:
    """The lines that fit whole, then a line saying how much was left out; one very long line
    is cut at a space."""
    note = _text_note(text.count("\n") + 1, len(text))
    if len(note) + 1 > limit:
        return text[:limit]
    room = max(limit - len(note) - 1, 0)
    head = text[:room]
    cut = head.rfind("\n")
    if cut <= 0:
        space = head.rfind(" ")
        cut = space if space > room // 2 else room
    kept = text[:cut]
    left = text[cut:].lstrip("\n")
    return f"{kept}\n{_text_note(left.count(chr(10)) + 1, len(left))}"


def _text_note(lines: int, chars: int) -> str:
    what = f"{lines} more lines, " if lines > 1 else ""
    return f"[... {what}{chars} more characters cut ...]"
