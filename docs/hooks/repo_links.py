"""A link from a page to a repository file outside ``docs/`` (``deploy/compose.yaml``, shown
next to the ``--8<--`` include that puts its text in the page) works where the pages are read
as plain files, and has no target on the site: there it is shown as the file's path."""

from __future__ import annotations

import posixpath
import re
from typing import Any

_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s#]+)\)")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    here = posixpath.dirname(page.file.src_uri)

    def outside_as_path(match: re.Match[str]) -> str:
        target = match.group(2)
        if "://" in target or target.startswith("/"):
            return match.group(0)
        if posixpath.normpath(posixpath.join(here, target)).startswith("../"):
            return f"`{match.group(1)}`"
        return match.group(0)

    return _LINK.sub(outside_as_path, markdown)
