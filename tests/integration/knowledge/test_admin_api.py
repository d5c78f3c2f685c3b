"""The knowledge base in the admin API: upload, list, search, reindex, delete, citations."""

from __future__ import annotations

import base64
from typing import Any

import httpx

from testsupport.documents import make_pdf
from testsupport.harness import running_gateway, wait_for

#: an upload's body is the file itself (gateway.http.guard: upload routes take only this type)
OCTETS = {"Content-Type": "application/octet-stream"}


async def test_upload_list_search_reindex_delete(database_url: str) -> None:
    pdf = make_pdf(["Welcome.", "Refunds are paid within thirty days."])
    async with (
        running_gateway(database_url, web_chat=False) as gw,
        httpx.AsyncClient(base_url=gw.url) as client,
    ):
        up = await client.post(
            "/api/v1/kb/documents", params={"name": "policy.pdf"}, content=pdf, headers=OCTETS
        )
        assert up.status_code == 200, up.text
        doc = up.json()["document"]
        assert up.json()["created"] is True and doc["state"] == "queued"
        again = await client.post(
            "/api/v1/kb/documents", params={"name": "other-name.pdf"}, content=pdf, headers=OCTETS
        )
        assert again.json() == {**again.json(), "created": False}
        assert again.json()["document"]["id"] == doc["id"]

        async def ready() -> bool:
            r = await client.get(f"/api/v1/kb/documents/{doc['id']}")
            return bool(r.json()["state"] == "ready")

        await wait_for(ready, timeout=20)
        listed = (await client.get("/api/v1/kb/documents", params={"kb": "default"})).json()
        assert [(d["name"], d["pages"]) for d in listed] == [("policy.pdf", 2)]
        hits = (await client.get("/api/v1/kb/search", params={"q": "refunds paid"})).json()
        assert (hits[0]["document_name"], hits[0]["page"]) == ("policy.pdf", 2)

        re = await client.post(f"/api/v1/kb/documents/{doc['id']}/reindex")
        assert re.status_code == 200 and re.json()["state"] == "queued"
        await wait_for(ready, timeout=20)

        bad = await client.post(
            "/api/v1/kb/documents",
            params={"name": "x.bin"},
            content=bytes(range(256)),
            headers=OCTETS,
        )
        assert bad.status_code == 415 and "unsupported file type" in bad.text
        empty = await client.post("/api/v1/kb/documents", params={"name": "x.txt"})
        assert empty.status_code == 422

        assert (await client.delete(f"/api/v1/kb/documents/{doc['id']}")).status_code == 204
        assert (await client.delete(f"/api/v1/kb/documents/{doc['id']}")).status_code == 404
        assert (await client.get(f"/api/v1/kb/documents/{doc['id']}")).status_code == 404
        assert (await client.get("/api/v1/kb/citations/1")).json() == []
        spec = (await client.get("/openapi.json")).json()
        assert "/api/v1/kb/documents" in spec["paths"]


async def test_mcp_tools_upload_search_cite_and_delete(database_url: str) -> None:
    from mcp import Client

    async with running_gateway(database_url, web_chat=False) as gw:
        async with Client(f"{gw.url}mcp") as client:

            async def call(tool: str, **arguments: Any) -> dict[str, Any]:
                result = await client.call_tool(tool, arguments)
                assert not result.is_error, result.content
                assert result.structured_content is not None
                return dict(result.structured_content)

            up = await call(
                "kb_upload", name="notes.md", text="# Office\n\nThe office opens at nine."
            )
            assert up["created"] is True
            pdf = base64.b64encode(make_pdf(["Intro.", "Refunds take thirty days."])).decode()
            up2 = await call("kb_upload", name="policy.pdf", content_base64=pdf)

            async def ready() -> bool:
                docs = (await call("kb_list"))["documents"]
                return len(docs) == 2 and all(d["state"] == "ready" for d in docs)

            await wait_for(ready, timeout=20)
            found = await call("kb_search", query="when do refunds happen")
            assert found["passages"][0]["source"] == "policy.pdf, p. 2"
            bad = await client.call_tool("kb_upload", {"name": "x.bin", "content_base64": "AAEC"})
            assert bad.is_error
            assert (await call("kb_reindex", document_id=up2["id"]))["state"] == "queued"
            assert (await call("kb_delete", document_id=up["id"]))["deleted"] is True
            assert (await client.call_tool("kb_delete", {"document_id": up["id"]})).is_error
            assert (await call("kb_citations", message_id=1))["citations"] == []


async def test_the_ops_page_and_its_script_are_served(database_url: str) -> None:
    async with (
        running_gateway(database_url, web_chat=False) as gw,
        httpx.AsyncClient(base_url=gw.url) as client,
    ):
        page = await client.get("/ops/kb")
        assert page.status_code == 200 and '<script src="/ops/kb/kb.js">' in page.text
        assert "script-src 'self'" in page.headers["content-security-policy"]
        script = await client.get("/ops/kb/kb.js")
        assert script.headers["content-type"].startswith("text/javascript")
        assert "/api/v1/kb/documents" in script.text and "innerHTML" not in script.text
