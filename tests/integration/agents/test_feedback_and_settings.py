"""Feedback on answers (store + web chat thumbs), the web chat's /model command, and the
agent settings' validation."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from adapters.web.extract import extract
from gateway.core.domain import Envelope
from gateway.core.errors import ConfigError, SessionNotFound
from gateway.core.settings import load_settings
from testsupport.fakes.sink import SinkAdapter
from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import running_gateway, wait_for


async def test_feedback_is_per_person_changeable_and_found_by_the_platform_message_id(
    database_url: str, sink: SinkServer
) -> None:
    adapter = SinkAdapter(sink.url)
    async with running_gateway(database_url, adapters=[adapter], web_chat=False) as gw:
        out = await adapter.submit({"chat": "c", "thread": "F", "id": "1", "text": "rate me"})
        await wait_for(lambda: len(sink.accepted) == 1)
        delivered = await wait_for(
            lambda: _sent_id(gw.store.outbox.deliveries_for_session(out.session_id))
        )
        assert delivered is not None
        store = gw.store
        # a reaction names the bot's message by the platform's id of it, in its chat
        message_id = await store.sessions.find_bot_message(
            "sink", chat_id="c", platform_message_id=delivered
        )
        assert message_id is not None
        assert (
            await store.sessions.find_bot_message(
                "sink", chat_id="other", platform_message_id=delivered
            )
            is None
        )
        # what an adapter calls for a reaction (it only has the Intake)
        react = gw.interactions.record_feedback
        assert await react(
            platform="sink", chat_id="c", message_id=delivered, user_id="cy", value=1
        )
        assert await store.sessions.feedback_by_seq(out.session_id) == {2: 1}
        assert not await react(
            platform="sink", chat_id="c", message_id="999", user_id="cy", value=1
        )
        await react(platform="sink", chat_id="c", message_id=delivered, user_id="cy", value=0)
        assert await store.sessions.set_feedback(message_id, user_id="ann", value=1) == 1
        assert await store.sessions.set_feedback(message_id, user_id="bob", value=-1) == 0  # a tie
        assert (
            await store.sessions.set_feedback(message_id, user_id="ann", value=-1) == -1
        )  # changed
        assert await store.sessions.feedback_by_seq(out.session_id) == {2: -1}
        await store.sessions.set_feedback(message_id, user_id="ann", value=0)
        assert (
            await store.sessions.set_feedback(message_id, user_id="bob", value=0) is None
        )  # all back
        assert await store.sessions.feedback_by_seq(out.session_id) == {}
        question = await store.sessions.message_id_at(out.session_id, 1)
        assert question is not None
        with pytest.raises(SessionNotFound):  # only answers take feedback
            await store.sessions.set_feedback(question, user_id="ann", value=1)


async def _sent_id(rows: Any) -> str | None:
    for row in await rows:
        if row.platform_message_id:
            return str(row.platform_message_id)
    return None


async def test_web_chat_thumbs_store_feedback_on_the_answer(database_url: str) -> None:
    async with running_gateway(database_url) as gw:
        base = gw.url.rstrip("/")
        async with httpx.AsyncClient(base_url=base) as client:
            sent = await client.post(
                "/web/api/channels/general/messages",
                json={"text": "hello", "client_msg_id": "m1"},
            )
            thread = sent.json()["thread_id"]
            history = f"/web/api/channels/general/threads/{thread}/messages"

            async def answer() -> dict[str, Any] | None:
                messages = (await client.get(history)).json()["messages"]
                return next((m for m in messages if m["role"] == "assistant"), None)

            reply = await wait_for(answer)
            assert reply["feedback"] is None
            url = f"{history}/{reply['seq_no']}/feedback"
            liked = await client.post(url, json={"value": 1})
            assert liked.status_code == 200 and liked.json() == {"feedback": 1}
            assert (await answer() or {})["feedback"] == 1
            taken_back = await client.post(url, json={"value": 0})
            assert taken_back.json() == {"feedback": None}
            assert (await client.post(url, json={"value": 5})).status_code == 422
            question = f"{history}/1/feedback"
            assert (await client.post(question, json={"value": 1})).status_code == 404
            # the page's script is served beside it (a CSP forbids inline scripts)
            page = (await client.get("/")).text
            assert '<script src="/web/static/app.js">' in page
            assert "sendFeedback" in (await client.get("/web/static/app.js")).text


def test_web_chat_maps_model_commands_with_their_argument() -> None:
    def command(text: str) -> str | None:
        env = extract("general", {"text": text, "client_msg_id": "m1"}, sender="local")
        assert isinstance(env, Envelope)
        return env.command

    assert command("/model") == "model"
    assert command("/model gpt-4o") == "model"
    assert command("/MODEL big") == "model"
    assert command("/new") == "new"
    # the one rule of every surface (gateway.core.commands): the words after a command
    # are its argument, which a command without one ignores
    assert command("/new please") == "new"
    assert command("/newer") is None
    assert command("what /model is this?") is None


@pytest.mark.parametrize(
    ("values", "setting"),
    [
        ({"AGENT": "http", "AGENT_HTTP_URL": "http://x/turn"}, "AGENT_HTTP_SECRET"),
        ({"AGENT_MODEL": "a", "AGENT_MODELS": "b,c"}, "AGENT_MODEL"),
        ({"AGENT_CONTEXT_WINDOWS": "gpt-4o"}, "AGENT_CONTEXT_WINDOWS"),
        ({"AGENT_CONTEXT_WINDOWS": "gpt-4o=lots"}, "AGENT_CONTEXT_WINDOWS"),
        ({"AGENT_MODEL": "m", "AGENT_CONTEXT_WINDOWS": "m=1000"}, "AGENT_CONTEXT_WINDOWS"),
        ({"AGENT_BUSY_MODE": "drop"}, "AGENT_BUSY_MODE"),
    ],
)
def test_bad_agent_settings_name_the_setting(values: dict[str, str], setting: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(_env_file=None, **values)
    assert info.value.setting == setting


def test_agent_settings_parse() -> None:
    settings = load_settings(
        _env_file=None,
        AGENT_MODEL="small",
        AGENT_MODELS="small, big",
        AGENT_CONTEXT_WINDOWS="Big=32768,llama3.1:8b=4096",
        AGENT_BUSY_MODE="interrupt",
    )
    assert settings.agent_models == ["small", "big"]
    assert settings.context_windows() == {"big": 32768, "llama3.1:8b": 4096}
    assert settings.agent_busy_mode == "interrupt"
