"""Tools the assistant may call: the fail-closed policy catalog, per-turn routing
and schema budget, the built-in tools, external MCP servers, the tool loop's toolbox, and
approvals in the thread."""
