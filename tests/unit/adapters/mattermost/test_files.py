"""Files out on Mattermost: the bytes go up to /files, then one post with root_id carries
them (file_ids), with the caption as its message and the delivery's pending_post_id."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.mattermost.adapter import MattermostAdapter
from gateway.core.domain import OutgoingFile, ReplyTarget
from gateway.core.errors import DeliveryError
from testsupport.fakes.mattermost import FakeMattermost
from testsupport.mattermost import make_config

PNG = OutgoingFile(name="chart.png", mime_type="image/png", data=b"\x89PNG\r\n\x1a\nchart")


@pytest.fixture
async def adapter(fake: FakeMattermost) -> Any:
    adapter = MattermostAdapter(make_config(fake, http_timeout=2))
    yield adapter
    await adapter.stop()


async def test_upload_posts_into_the_thread(
    fake: FakeMattermost, adapter: MattermostAdapter
) -> None:
    root = await fake.user_posts(fake.town_square, "chart?", mention_bot=True)
    target = ReplyTarget(
        platform="mattermost",
        scope=adapter.scope,
        chat_id=fake.town_square.id,
        thread_id=root["id"],
    )
    result = await adapter.transport.send_file(
        target,
        OutgoingFile(name=PNG.name, mime_type=PNG.mime_type, data=PNG.data, caption="Q3"),
        idempotency_key="gw-7",
    )
    post = fake.posts[result.platform_message_id or ""]
    assert post["root_id"] == root["id"] and post["message"] == "Q3"
    [file_id] = post["file_ids"]
    stored = fake.files[file_id]
    assert (stored.name, stored.data, stored.channel_id) == (
        "chart.png",
        PNG.data,
        fake.town_square.id,
    )
    assert stored.post_id == post["id"]
    # a retried delivery (same pending_post_id) does not post the file twice
    again = await adapter.transport.send_file(target, PNG, idempotency_key="gw-7")
    assert again.platform_message_id == post["id"]


async def test_upload_into_a_channel_the_bot_left_is_permanent(
    fake: FakeMattermost, adapter: MattermostAdapter
) -> None:
    closed = fake.add_channel("private", "P", members={"someone-else"})
    target = ReplyTarget(platform="mattermost", scope=adapter.scope, chat_id=closed.id)
    with pytest.raises(DeliveryError) as info:
        await adapter.transport.send_file(target, PNG, idempotency_key="k")
    assert info.value.permanent
