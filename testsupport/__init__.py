"""Test support (not shipped): platform fakes, the in-process gateway, helpers."""
