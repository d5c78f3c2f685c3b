"""Files out through the outbox: a file is an outbox part of its own after the answer's text,
routed to ``Transport.send_file``; end to end, an agent's file reaches the thread after the
text, exactly once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import pytest

from gateway.agents import Turn
from gateway.domain import OutgoingFile, Reply, ReplyTarget
from gateway.files import (
    FILE_MARK,
    MAX_FILE_BYTES,
    decode_file_part,
    encode_file_part,
    encode_text_part,
    outbox_parts,
    send_part,
)
from gateway.ports import SendResult, Transport
from testsupport.fakes.sink import SinkAdapter, SinkTransport
from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import running_gateway, wait_for

PNG = OutgoingFile(
    name="chart.png", mime_type="image/png", data=b"\x89PNG\r\n\x1a\n\x00", caption="Q3"
)


def test_file_parts_round_trip_and_text_is_never_a_file() -> None:
    part = encode_file_part(PNG)
    assert part.startswith(FILE_MARK)
    assert decode_file_part(part) == PNG
    assert decode_file_part("hello") is None
    assert decode_file_part(FILE_MARK + "{not json") is None
    assert decode_file_part(encode_text_part(FILE_MARK + '{"name": "x"}')) is None
    with pytest.raises(ValueError, match="over"):
        encode_file_part(
            OutgoingFile(name="big", mime_type="x/y", data=b"0" * (MAX_FILE_BYTES + 1))
        )


def test_outbox_parts_are_the_text_then_the_files() -> None:
    transport = SinkTransport("http://127.0.0.1:9/", max_length=10)
    parts = outbox_parts(cast(Transport, transport), "one two three four", (PNG,))
    assert [decode_file_part(p) for p in parts[:-1]] == [None] * (len(parts) - 1)
    assert " ".join(parts[:-1]) == "one two three four"
    assert decode_file_part(parts[-1]) == PNG
    assert outbox_parts(cast(Transport, transport), "", (PNG,)) == [encode_file_part(PNG)]


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    async def send(self, target: ReplyTarget, text: str, *, idempotency_key: str) -> SendResult:
        self.calls.append(("send", text))
        return SendResult(platform_message_id="m")

    async def send_file(
        self, target: ReplyTarget, file: OutgoingFile, *, idempotency_key: str
    ) -> SendResult:
        self.calls.append(("send_file", file))
        return SendResult(platform_message_id="f")


async def test_send_part_routes_files_to_send_file() -> None:
    rec = Recorder()
    target = ReplyTarget(platform="rec", scope="s", chat_id="c")
    await send_part(cast(Transport, rec), target, "text", idempotency_key="k1")
    await send_part(cast(Transport, rec), target, encode_file_part(PNG), idempotency_key="k2")
    assert rec.calls == [("send", "text"), ("send_file", PNG)]


class FileAgent:
    name = "files"

    async def respond(self, turn: Turn) -> Sequence[Reply]:
        return [Reply(text="here is the chart", model="files", files=(PNG,))]


async def test_an_answer_with_a_file_is_delivered_after_its_text_in_the_thread(
    database_url: str, sink: SinkServer
) -> None:
    adapter = SinkAdapter(sink.url)
    async with running_gateway(database_url, adapters=[adapter], agent=FileAgent(), web_chat=False):
        await adapter.submit({"chat": "c1", "thread": "T", "id": "1", "text": "chart please"})
        await wait_for(lambda: len(sink.accepted) == 2)
    text, upload = sink.accepted
    assert text["text"] == "here is the chart" and "file" not in text
    assert upload["file"] == {"name": "chart.png", "mime_type": "image/png", "size": len(PNG.data)}
    assert upload["text"] == "Q3"
    assert text["target"] == upload["target"] and upload["target"]["thread_id"] == "T"
