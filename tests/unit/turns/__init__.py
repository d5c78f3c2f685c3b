"""Unit tests of the turn pipeline and its stages, on fake turns (no database)."""
