"""A small real MCP server for the tools tests, written with the ``mcp`` SDK.

``python -m testsupport.mcp_server`` serves over stdio;
``python -m testsupport.mcp_server --http PORT`` over streamable HTTP at ``/mcp``.
"""

from __future__ import annotations

import asyncio
import os
import sys

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server: MCPServer = MCPServer("notes-test")
NOTES = {"standup": "Standup moved to 10:30 on Fridays.", "wifi": "guest / hunter2"}


@server.tool()
def read_note(name: str) -> str:
    """Read one note by name."""
    if name not in NOTES:
        raise ToolError(f"no note called {name!r}")
    return NOTES[name] + f" (pid {os.getpid()}, mode {os.environ.get('NOTES_MODE', '-')})"


@server.tool()
def list_notes() -> str:
    """The names of all notes."""
    return ", ".join(sorted(NOTES))


@server.tool()
def delete_note(name: str) -> str:
    """Delete a note (no policy entry in the tests: must never run)."""
    NOTES.pop(name, None)
    return f"deleted {name}"


@server.tool()
def restart_service(service: str) -> str:
    """Restart a service: a write the tools file puts behind an approval. Each run appends a
    line to the file named by ``OPS_RUNS_FILE``, so a test counts the runs from outside every
    gateway process (tests/contract/test_approvals.py)."""
    runs = os.environ.get("OPS_RUNS_FILE")
    if runs:
        with open(runs, "a", encoding="utf-8") as f:
            f.write(service + "\n")
    return f"restarted {service}"


@server.tool()
def internal_debug() -> str:
    """Excluded by the tools file."""
    return "debug"


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--http":
        asyncio.run(server.run_streamable_http_async(host="127.0.0.1", port=int(sys.argv[2])))
    else:
        asyncio.run(server.run_stdio_async())


if __name__ == "__main__":
    main()
