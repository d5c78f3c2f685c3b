"""Unit tests, one directory per package of the code."""
