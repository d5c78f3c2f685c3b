"""The outbox: typed parts, delivery, pacing and the parts waiting off the worker pool."""
