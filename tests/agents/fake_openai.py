"""The fake OpenAI-compatible server lives in ``benchmarks.fakes.openai`` (the benchmarks
use it too); the tests keep importing it from here."""

from benchmarks.fakes.openai import (
    SUMMARY_MARKER,
    FakeOpenAI,
    Recorded,
    Step,
    realistic_tokens,
)

__all__ = ["SUMMARY_MARKER", "FakeOpenAI", "Recorded", "Step", "realistic_tokens"]
