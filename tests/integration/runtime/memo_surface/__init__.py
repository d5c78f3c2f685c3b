"""A small surface built from the public plugin API alone (gateway.core.plugins)."""
