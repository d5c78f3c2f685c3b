"""The outbox: typed parts, delivery, pacing, files and the end of a streamed answer."""
