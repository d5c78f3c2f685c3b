"""MATTERMOST_URL normalization: one scope per server however the URL is written."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.mattermost import MattermostAdapter, MattermostConfig
from adapters.mattermost.settings import MattermostSettings
from adapters.mattermost.urls import server_urls
from gateway.core.errors import ConfigError


@pytest.mark.parametrize(
    ("url", "scope", "api", "ws"),
    [
        (
            "https://chat.example.com",
            "chat.example.com",
            "https://chat.example.com/api/v4",
            "wss://chat.example.com/api/v4/websocket",
        ),
        (
            "https://Chat.Example.COM/",
            "chat.example.com",
            "https://chat.example.com/api/v4",
            "wss://chat.example.com/api/v4/websocket",
        ),
        (
            "https://chat.example.com:443",
            "chat.example.com",
            "https://chat.example.com/api/v4",
            "wss://chat.example.com/api/v4/websocket",
        ),
        (
            "https://chat.example.com:8443",
            "chat.example.com:8443",
            "https://chat.example.com:8443/api/v4",
            "wss://chat.example.com:8443/api/v4/websocket",
        ),
        (
            "http://localhost:8065",
            "localhost:8065",
            "http://localhost:8065/api/v4",
            "ws://localhost:8065/api/v4/websocket",
        ),
        (
            "http://10.0.0.5:80/",
            "10.0.0.5",
            "http://10.0.0.5/api/v4",
            "ws://10.0.0.5/api/v4/websocket",
        ),
        (
            "https://chat.example.com/mm",
            "chat.example.com/mm",
            "https://chat.example.com/mm/api/v4",
            "wss://chat.example.com/mm/api/v4/websocket",
        ),
        (
            "https://chat.example.com/mm/",
            "chat.example.com/mm",
            "https://chat.example.com/mm/api/v4",
            "wss://chat.example.com/mm/api/v4/websocket",
        ),
        (
            "https://chat.example.com/mm/api/v4",
            "chat.example.com/mm",
            "https://chat.example.com/mm/api/v4",
            "wss://chat.example.com/mm/api/v4/websocket",
        ),
        (
            "http://[::1]:8065",
            "[::1]:8065",
            "http://[::1]:8065/api/v4",
            "ws://[::1]:8065/api/v4/websocket",
        ),
        (
            "  https://chat.example.com  ",
            "chat.example.com",
            "https://chat.example.com/api/v4",
            "wss://chat.example.com/api/v4/websocket",
        ),
    ],
)
def test_server_urls(url: str, scope: str, api: str, ws: str) -> None:
    urls = server_urls(url)
    assert (urls.scope, urls.api_base, urls.websocket_url) == (scope, api, ws)
    assert urls.secure == url.strip().startswith("https")


@pytest.mark.parametrize(
    "url",
    [
        "ftp://chat.example.com",
        "chat.example.com",
        "https://",
        "https://u:p@chat.example.com",
        "http://host:notaport",
    ],
)
def test_server_urls_rejects(url: str) -> None:
    with pytest.raises(ValueError):
        server_urls(url)


def _settings(**values: Any) -> MattermostSettings:
    # no .env file: tests never read the developer's configuration
    return MattermostSettings(**{"_env_file": None, **values})


def test_adapter_from_settings_names_bad_url() -> None:
    settings = _settings(MATTERMOST_URL="https://u:p@chat.example.com", MATTERMOST_TOKEN="t")
    with pytest.raises(ConfigError) as info:
        MattermostAdapter(MattermostConfig.from_settings(settings))
    assert info.value.setting == "MATTERMOST_URL"


def test_adapter_from_settings() -> None:
    settings = _settings(
        MATTERMOST_URL="https://chat.example.com/mm/",
        MATTERMOST_TOKEN="secret-token",
    )
    adapter = MattermostAdapter(MattermostConfig.from_settings(settings))
    assert adapter.platform == "mattermost"
    assert adapter.scope == "chat.example.com/mm"
    assert adapter.transport.max_message_length == 16383
    assert adapter.transport.idempotent is True
    assert "secret-token" not in repr(adapter._config)
