"""Thread exactness on every surface: a person opens two threads one after the other (a web
chat thread, a Telegram forum topic, a Slack thread, a Mattermost reply thread); each answer
lands in the thread it answers, once, and nowhere else."""

from __future__ import annotations

import asyncio

import pytest

from testsupport.harness import running_gateway
from testsupport.live_surfaces import NAMES, live_surface


@pytest.mark.parametrize("name", NAMES)
async def test_each_answer_lands_in_the_thread_it_answers(name: str, database_url: str) -> None:
    async with live_surface(name) as s:
        async with running_gateway(
            database_url, adapters=s.adapters(), web_chat=name == "web", **s.settings
        ) as gw:
            await s.attached(gw)
            first = await s.open_thread("first question")
            second = await s.open_thread("second question")
            expected = {
                "first": "echo: " + s.thread_form("first question"),
                "second": "echo: " + s.thread_form("second question"),
            }
            for _ in range(150):
                await s.refresh(first)
                await s.refresh(second)
                if s.answers(first) and s.answers(second):
                    break
                await asyncio.sleep(0.1)
        assert s.answers(first) == [expected["first"]]
        assert s.answers(second) == [expected["second"]]
        # nothing outside those two threads
        assert sorted(s.all_answers()) == sorted(expected.values())
