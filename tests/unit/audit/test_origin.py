"""Which surface a request came from, read from its path (and an operator page's Referer)."""

from __future__ import annotations

import pytest

from gateway.audit import acting, current
from gateway.audit.origin import surface_of


@pytest.mark.parametrize(
    ("path", "referer", "surface"),
    [
        ("/api/v1/deliveries/1/retry", None, "api"),
        ("/api/v1/kb/documents", "http://gw.example/ops/kb", "ops"),
        ("/api/v1/audit", "http://gw.example/elsewhere", "api"),
        ("/mcp", None, "mcp"),
        ("/ops/audit", None, "ops"),
        ("/login", None, "web"),
        ("/logout", None, "web"),
        ("/web/api/channels/general/messages", None, "web"),
        ("/", None, "web"),
        ("/slack/events", None, "slack"),
        ("/telegram/webhook", None, "telegram"),
    ],
)
def test_the_surface_of_a_request(path: str, referer: str | None, surface: str) -> None:
    assert surface_of(path, referer) == surface


def test_acting_nests_and_restores() -> None:
    assert current().actor == "system"
    with acting("cli:ann", surface="cli"):
        with acting(remote_addr="10.1.2.3"):
            who = current()
            assert (who.actor, who.surface, who.remote_addr) == ("cli:ann", "cli", "10.1.2.3")
        assert current().remote_addr is None
    assert current().actor == "system"
