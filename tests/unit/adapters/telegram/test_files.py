"""Files out on Telegram: a picture goes up with sendPhoto, anything else with sendDocument,
each in the exact topic (and reply chain) a text reply would use, caption included."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from adapters.telegram.transport import TelegramBot, TelegramTransport
from gateway.core.domain import OutgoingFile
from gateway.core.errors import DeliveryError
from tests.unit.adapters.telegram.test_transport import target_of
from testsupport.fakes.telegram import FakeTelegram

PNG = OutgoingFile(name="chart.png", mime_type="image/png", data=b"\x89PNG\r\n\x1a\nchart")
PDF = OutgoingFile(name="report.pdf", mime_type="application/pdf", data=b"%PDF-1.4 report")


@pytest.fixture
async def transport(fake: FakeTelegram) -> AsyncIterator[TelegramTransport]:
    t = TelegramTransport(TelegramBot(fake.token, base_url=fake.base_url))
    yield t
    await t.close()


async def test_photo_and_document_land_in_the_topic(
    fake: FakeTelegram, transport: TelegramTransport
) -> None:
    forum = fake.forum()
    topic = fake.create_topic(forum, "Reports")
    other = fake.create_topic(forum, "Other")
    asked = fake.user_says(forum, "send the chart and the report", topic=topic)
    target = target_of(fake, asked)
    photo = await transport.send_file(target, PNG, idempotency_key="k1")
    doc = await transport.send_file(
        target,
        OutgoingFile(name=PDF.name, mime_type=PDF.mime_type, data=PDF.data, caption="Q3 🎉"),
        idempotency_key="k2",
    )
    first, second = fake.sent_to(forum, topic)
    assert (first.media, second.media) == ("photo", "document")
    assert first.upload is not None and first.upload.data == PNG.data
    assert second.upload is not None and second.upload.data == PDF.data
    assert second.upload.filename == "report.pdf" and second.text == "Q3 🎉"
    assert first.reply_to == asked["message_id"] == second.reply_to
    assert photo.platform_message_id == str(first.message_id)
    assert doc.platform_message_id == str(second.message_id)
    assert fake.sent_to(forum, other) == [] and fake.sent_to(forum, None) == []
    assert fake.calls("sendPhoto")[-1].params["message_thread_id"] == str(topic)


async def test_upload_to_a_deleted_topic_is_permanent(
    fake: FakeTelegram, transport: TelegramTransport
) -> None:
    forum = fake.forum()
    topic = fake.create_topic(forum, "Gone")
    target = target_of(fake, fake.user_says(forum, "q", topic=topic))
    fake.delete_topic(forum, topic)
    with pytest.raises(DeliveryError) as info:
        await transport.send_file(target, PDF, idempotency_key="k")
    assert info.value.permanent
