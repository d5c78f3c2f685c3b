"""Files out on Slack: files.uploadV2 (getUploadURLExternal, the upload, completeUploadExternal)
shares the file into the stored thread, the caption as its initial comment."""

from __future__ import annotations

import pytest

from adapters.slack.transport import SlackTransport, make_web_client
from gateway.core.domain import OutgoingFile, ReplyTarget
from gateway.core.errors import DeliveryError
from testsupport.fakes.slack import BOT_TOKEN, HUMAN, TEAM_ID, FakeSlack

PDF = OutgoingFile(
    name="report.pdf", mime_type="application/pdf", data=b"%PDF-1.4 report", caption="Q3"
)


def transport_for(fake: FakeSlack) -> SlackTransport:
    return SlackTransport(make_web_client(token=BOT_TOKEN, base_url=fake.api_url, timeout=5))


async def test_upload_lands_in_the_root_thread(fake: FakeSlack) -> None:
    root, (reply_ts,) = fake.seed_thread("C0GENERAL", [(HUMAN, "the report?")], root_text="r")
    target = ReplyTarget(platform="slack", scope=TEAM_ID, chat_id="C0GENERAL", thread_id=root)
    result = await transport_for(fake).send_file(target, PDF, idempotency_key="d1:1")
    [upload] = fake.uploads.values()
    assert upload.data == PDF.data and upload.filename == "report.pdf"
    assert (upload.channel, upload.thread_ts) == ("C0GENERAL", root)
    assert upload.initial_comment == "Q3"
    assert result.platform_message_id == upload.id
    (posted,) = fake.bot_posts("C0GENERAL")
    assert posted.thread_ts == root != reply_ts
    assert posted.files == [{"id": upload.id, "name": "report.pdf", "title": "report.pdf"}]
    assert fake.thread_violations == []


async def test_upload_where_the_bot_is_not_a_member_is_permanent(fake: FakeSlack) -> None:
    target = ReplyTarget(platform="slack", scope=TEAM_ID, chat_id="C0NOBOT", thread_id=None)
    with pytest.raises(DeliveryError) as info:
        await transport_for(fake).send_file(target, PDF, idempotency_key="k")
    assert info.value.permanent
    assert fake.bot_posts("C0NOBOT") == []
