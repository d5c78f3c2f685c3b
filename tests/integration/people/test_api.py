"""The admin API's export and forget of one person: the zip archive holds their messages,
forget answers 200 once done, and a forgotten (or unknown) person is 404."""

from __future__ import annotations

import io
import json
import zipfile

import httpx

from tests.integration.people.test_erasure_job import WORD, _dump, _seed
from testsupport.harness import running_gateway


async def test_export_then_forget_through_the_admin_api(database_url: str) -> None:
    async with running_gateway(database_url, web_chat=False) as gw:
        person = await _seed(gw.store)
        async with httpx.AsyncClient(base_url=f"{gw.url}api/v1/people/") as api:
            got = await api.get(f"{person}/export")
            assert got.status_code == 200 and got.headers["content-type"] == "application/zip"
            with zipfile.ZipFile(io.BytesIO(got.content)) as archive:
                exported = json.loads(archive.read("person.json"))
            assert [m["content"] for m in exported["messages"]].count(f"{WORD} general") == 3
            assert exported["accounts"] == ["telegram:bot:77", "web:local:ann"]
            assert [s["prompt"] for s in exported["schedules"]] == [f"{WORD} every day"]

            done = await api.post(f"{person}/forget")
            assert done.status_code == 200 and done.json()["finished"] is True
            assert WORD not in await _dump(gw.store)
            again = await api.post(f"{person}/forget")
            assert again.status_code == 404
            assert (await api.get("999999/export")).status_code == 404
