"""Files out through the outbox: a file is an outbox part of its own after the answer's text,
routed to ``Transport.send_file``; end to end, an agent's file reaches the thread after the
text, exactly once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import pytest

from gateway.agents.base import Turn
from gateway.core.domain import OutgoingFile, Reply, ReplyTarget
from gateway.core.parts import (
    MAX_FILE_BYTES,
    PART_VERSION,
    ApprovalCardPart,
    FilePart,
    TextPart,
    from_stored,
    stored,
)
from gateway.core.ports import CardSending, SendResult, Transport
from gateway.outbox.delivery import send_part
from gateway.outbox.files import outbox_parts
from testsupport.fakes.sink import SinkAdapter, SinkTransport
from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import running_gateway, wait_for

PNG = OutgoingFile(
    name="chart.png", mime_type="image/png", data=b"\x89PNG\r\n\x1a\n\x00", caption="Q3"
)


def test_parts_are_stored_as_a_kind_and_typed_fields_and_read_back() -> None:
    for part in (
        TextPart(text="hello"),
        TextPart(text="\x1egateway-file:{}", finishes_stream=True),  # text is only text
        FilePart(file=PNG),
        FilePart(file=PNG, finishes_stream=True),
        ApprovalCardPart(text="Approve?", approval_id="apr-1"),
    ):
        row = stored(part)
        assert row.part["v"] == PART_VERSION
        assert from_stored(row.kind, row.content, row.part, row.data) == part
    file_row = stored(FilePart(file=PNG))
    assert (file_row.kind, file_row.content, file_row.data) == ("file", "Q3", PNG.data)
    assert "data" not in file_row.part  # the bytes have a column of their own
    assert stored("plain") == stored(TextPart(text="plain"))
    with pytest.raises(ValueError, match="over"):
        FilePart(file=OutgoingFile(name="big", mime_type="x/y", data=b"0" * (MAX_FILE_BYTES + 1)))
    with pytest.raises(ValueError, match="newer"):
        from_stored("text", "x", {"v": PART_VERSION + 1}, None)
    with pytest.raises(ValueError, match="unknown"):
        from_stored("poll", "x", {"v": 1}, None)


def test_outbox_parts_are_the_text_then_the_files() -> None:
    transport = SinkTransport("http://127.0.0.1:9/", max_length=10)
    parts = outbox_parts(cast(Transport, transport), "one two three four", (PNG,))
    texts = [p for p in parts[:-1] if isinstance(p, TextPart)]
    assert len(texts) == len(parts) - 1
    assert " ".join(p.text for p in texts) == "one two three four"
    assert parts[-1] == FilePart(file=PNG)
    assert outbox_parts(cast(Transport, transport), "", (PNG,)) == [FilePart(file=PNG)]
    streamed = outbox_parts(cast(Transport, transport), "x", (PNG,), finishes_stream=True)
    assert streamed == [
        TextPart(text="x", finishes_stream=True),
        FilePart(file=PNG, finishes_stream=True),
    ]


class Recorder:
    """A transport without buttons: plain sends and uploads only."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    async def send(self, target: ReplyTarget, text: str, *, idempotency_key: str) -> SendResult:
        self.calls.append(("send", (text, dict(target.extra))))
        return SendResult(platform_message_id="m")

    async def send_file(
        self, target: ReplyTarget, file: OutgoingFile, *, idempotency_key: str
    ) -> SendResult:
        self.calls.append(("send_file", file))
        return SendResult(platform_message_id="f")


class CardRecorder(Recorder):
    """A transport with buttons: approval cards come through ``send_card``."""

    async def send_card(
        self, target: ReplyTarget, text: str, *, approval_id: str, idempotency_key: str
    ) -> SendResult:
        self.calls.append(("send_card", (text, approval_id, dict(target.extra))))
        return SendResult(platform_message_id="c")


async def test_delivery_sends_each_part_by_its_kind() -> None:
    rec = CardRecorder()
    assert isinstance(rec, CardSending)
    target = ReplyTarget(platform="rec", scope="s", chat_id="c")
    await send_part(cast(Transport, rec), target, TextPart(text="text"), idempotency_key="k1")
    await send_part(cast(Transport, rec), target, FilePart(file=PNG), idempotency_key="k2")
    card = ApprovalCardPart(text="Approve?", approval_id="apr-1")
    await send_part(cast(Transport, rec), target, card, idempotency_key="k3")
    assert rec.calls == [
        ("send", ("text", {})),
        ("send_file", PNG),
        # the id is an argument of its own, never smuggled in the target
        ("send_card", ("Approve?", "apr-1", {})),
    ]


async def test_a_transport_without_buttons_gets_an_approval_card_as_its_text() -> None:
    rec = Recorder()
    assert not isinstance(rec, CardSending)
    target = ReplyTarget(platform="rec", scope="s", chat_id="c")
    card = ApprovalCardPart(text="Approve?", approval_id="apr-1")
    result = await send_part(cast(Transport, rec), target, card, idempotency_key="k3")
    assert result.platform_message_id == "m"
    assert rec.calls == [("send", ("Approve?", {}))]


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
