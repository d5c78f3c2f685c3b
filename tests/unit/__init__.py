"""Unit tests, one package per package of the code."""
