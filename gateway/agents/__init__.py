"""The agent port and the built-in agents (echo, OpenAI-compatible, HTTP, Python)."""
