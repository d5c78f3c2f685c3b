"""``MATTERMOST_URL`` -> the session scope, the REST base and the websocket URL (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerUrls:
    """Where one Mattermost server lives.

    ``scope`` is ``host[:port][/path]`` normalized (lower-case host, default port and trailing
    slash dropped) so that ``https://Chat.Example.com:443/`` and ``https://chat.example.com``
    name the same server, and therefore the same sessions.
    """

    scope: str
    api_base: str
    websocket_url: str
    secure: bool


def server_urls(url: str) -> ServerUrls:
    """Parse ``MATTERMOST_URL``: ``https://host``, ``http://host:port``, optionally with a
    path prefix (``https://chat.example.com/mm``). Raises ``ValueError`` on anything else."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise ValueError("must start with http:// or https://")
    if parts.username is not None or parts.password is not None:
        # a credential in the URL would end up in logs and session keys
        raise ValueError("must not contain credentials; use MATTERMOST_TOKEN")
    host = parts.hostname
    if not host:
        raise ValueError("has no host")
    try:
        port = parts.port
    except ValueError as exc:  # urllib raises on a non-numeric or out-of-range port
        raise ValueError("has an invalid port") from exc
    if ":" in host:  # IPv6 literal: urlsplit drops the brackets
        host = f"[{host}]"
    netloc = host if port is None or port == _DEFAULT_PORTS[scheme] else f"{host}:{port}"
    path = parts.path.rstrip("/")
    # People often paste the API URL itself; the server root is what we want.
    if path.lower().endswith("/api/v4"):
        path = path[: -len("/api/v4")]
    secure = scheme == "https"
    return ServerUrls(
        scope=f"{netloc}{path}",
        api_base=f"{scheme}://{netloc}{path}/api/v4",
        websocket_url=f"{'wss' if secure else 'ws'}://{netloc}{path}/api/v4/websocket",
        secure=secure,
    )
