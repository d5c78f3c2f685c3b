"""Reliability campaigns: fault injection, fuzzing, the platforms campaign."""
