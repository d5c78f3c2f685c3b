"""The Teams app package ``gateway setup teams`` writes: ``manifest.json`` naming the bot, and
its two icons, zipped, ready to upload (Teams admin center -> Manage apps -> Upload, or Teams
-> Apps -> Manage your apps -> Upload an app)."""

from __future__ import annotations

import io
import json
import struct
import zipfile
import zlib
from pathlib import Path
from typing import Any

MANIFEST_VERSION = "1.17"
SCHEMA = (
    "https://developer.microsoft.com/en-us/json-schemas/teams/"
    f"v{MANIFEST_VERSION}/MicrosoftTeams.schema.json"
)
#: the file ``gateway setup teams`` writes beside the ``.env`` file
PACKAGE_NAME = "teams-app.zip"
ACCENT = (0x25, 0x63, 0xEB)


def manifest(
    app_id: str, *, name: str = "Gateway", website: str = "https://example.com"
) -> dict[str, Any]:
    """The app manifest: one bot, in personal chats, group chats and team channels."""
    return {
        "$schema": SCHEMA,
        "manifestVersion": MANIFEST_VERSION,
        "version": "1.0.0",
        "id": app_id,
        "developer": {
            "name": name,
            "websiteUrl": website,
            "privacyUrl": website,
            "termsOfUseUrl": website,
        },
        "name": {"short": name[:30], "full": f"{name} assistant"[:100]},
        "description": {
            "short": "Answers in your channels' threads and chats"[:80],
            "full": (
                "Mention the bot in a channel post and it answers in that post's thread; "
                "a reply in the thread continues the conversation. In a chat, it answers there."
            ),
        },
        "icons": {"color": "color.png", "outline": "outline.png"},
        "accentColor": "#{:02X}{:02X}{:02X}".format(*ACCENT),
        "bots": [
            {
                "botId": app_id,
                "scopes": ["personal", "team", "groupChat"],
                "supportsFiles": False,
                "isNotificationOnly": False,
            }
        ],
        "permissions": ["identity", "messageTeamMembers"],
        "validDomains": [],
    }


def package(app_id: str) -> bytes:
    """The zip to upload: the manifest and its icons (192 px colour, 32 px outline)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("manifest.json", json.dumps(manifest(app_id), indent=2) + "\n")
        archive.writestr("color.png", _png(192, (*ACCENT, 255)))
        archive.writestr("outline.png", _png(32, (255, 255, 255, 255), hollow=True))
    return buffer.getvalue()


def write_package(values: dict[str, str], directory: Path) -> list[Path]:
    """``SetupSpec.write_files``: the app package beside the settings."""
    app_id = values.get("TEAMS_APP_ID")
    if not app_id:
        return []
    path = directory / PACKAGE_NAME
    directory.mkdir(parents=True, exist_ok=True)
    path.write_bytes(package(app_id))
    return [path]


def _png(size: int, rgba: tuple[int, int, int, int], *, hollow: bool = False) -> bytes:
    """A square PNG of one colour (the outline icon: a frame on a transparent ground, as
    Teams asks)."""
    rows = bytearray()
    for y in range(size):
        rows.append(0)  # no filter
        for x in range(size):
            edge = min(x, y, size - 1 - x, size - 1 - y) < 3
            rows.extend(rgba if (edge or not hollow) else (0, 0, 0, 0))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data))
            + kind
            + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        )

    header = struct.pack(">IIBBBBB", size, size, 8, 6, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(bytes(rows)))
        + chunk(b"IEND", b"")
    )
