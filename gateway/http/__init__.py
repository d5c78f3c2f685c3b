"""The HTTP surfaces: app, guard, web identity, admin API, operator pages, MCP."""
