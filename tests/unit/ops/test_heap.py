"""The start-up heap is left out of later garbage collections: a full collection under load
walks only what serving made (each one stops the event loop, holding every message in
flight)."""

from __future__ import annotations

import gc

from structlog.testing import capture_logs

from gateway.ops.cli import freeze_start_up_heap


def test_what_start_up_made_is_out_of_every_later_collection() -> None:
    start_up = [[n] for n in range(1_000)]  # lists are tracked by the collector
    try:
        with capture_logs() as logs:
            freeze_start_up_heap()
        watched = {id(o) for generation in range(3) for o in gc.get_objects(generation)}
        assert not any(id(item) in watched for item in start_up)
        assert gc.get_freeze_count() >= len(start_up)
        [event] = [e for e in logs if e["event"] == "start_up_heap_frozen"]
        assert event["objects"] >= len(start_up)
    finally:
        gc.unfreeze()
