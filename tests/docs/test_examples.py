"""The example files the docs include run: the tools file through the real loader and catalog,
both agents through a running gateway, the model settings through the real settings and the
OpenAI-compatible fake, and the curl script against a running gateway's admin API."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
from aiohttp import web

from gateway.agents.http import HttpAgent
from gateway.agents.loading import load_agent
from gateway.agents.openai import OpenAIAgent
from gateway.tools.builtin import BUILTIN_SPECS, DEFAULT_POLICIES
from gateway.tools.catalog import (
    Tool,
    ToolCaller,
    ToolPolicyCatalog,
    ToolSpec,
    load_tools_file,
)
from testsupport.fakes.openai import FakeOpenAI
from testsupport.fakes.sink import SinkAdapter
from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import make_settings, running_gateway, wait_for
from testsupport.paths import REPO

EXAMPLES = REPO / "docs" / "examples"


def _module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"docs_example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def env_file(name: str) -> dict[str, str]:
    pairs = {}
    for line in (EXAMPLES / name).read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            pairs[key] = value
    return pairs


async def _never(args: Mapping[str, Any], caller: ToolCaller) -> str:
    raise AssertionError("not called")


def test_the_tools_file_loads_and_every_entry_is_valid() -> None:
    tools_file = load_tools_file(EXAMPLES / "tools.toml")
    (server,) = tools_file.servers
    assert server.name == "files" and server.wants("read_file") and not server.wants("x_admin")
    mcp = [
        Tool(
            spec=ToolSpec(name=n, description=n, parameters={}, source="mcp:files"), handler=_never
        )
        for n in ("files.read_file", "files.delete_file")
    ]
    builtins = [Tool(spec=s, handler=_never) for s in BUILTIN_SPECS.values()]
    catalog = ToolPolicyCatalog(builtins + mcp, defaults=DEFAULT_POLICIES, tools_file=tools_file)
    assert catalog.left_out == []
    assert set(tools_file.entries) <= set(catalog.names)
    policy = catalog.policy("files.delete_file")
    assert policy is not None and policy.confirm
    here = ToolCaller(
        session_id=1,
        platform="telegram",
        scope="bot",
        chat_id="-1001234",
        thread_id=None,
        user_id="7",
    )
    assert catalog.check("files.read_file", here) is None
    assert catalog.check("files.delete_file", here) == "denied for everyone"
    assert catalog.check("list_my_sessions", here) is not None  # not on the chat's allow list
    assert tools_file.max_steps == 6 and tools_file.approvers


async def test_the_http_agent_example_answers_through_a_gateway(
    database_url: str, sink: SinkServer
) -> None:
    example = _module("http_agent")
    app = example.make_app("change-me")
    seen: list[dict[str, Any]] = []

    @web.middleware
    async def record(request: web.Request, handler: Any) -> web.StreamResponse:
        seen.append(json.loads(await request.read()))
        response: web.StreamResponse = await handler(request)
        return response

    app.middlewares.append(record)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    adapter = SinkAdapter(sink.url)
    agent = HttpAgent(url=f"http://127.0.0.1:{port}/turn", secret="change-me")
    try:
        async with running_gateway(database_url, adapters=[adapter], agent=agent, web_chat=False):
            await adapter.submit({"chat": "c", "thread": "T", "id": "1", "text": "hello"})
            await wait_for(lambda: len(sink.accepted) == 1)
        wrong = HttpAgent(url=f"http://127.0.0.1:{port}/turn", secret="not-it")
        async with running_gateway(database_url, adapters=[adapter], agent=wrong, web_chat=False):
            await adapter.submit({"chat": "c", "thread": "T", "id": "2", "text": "again"})
            await wait_for(lambda: len(sink.accepted) == 2)
    finally:
        await agent.aclose()
        await runner.cleanup()
    first, refused = sink.texts_in("c", "T")
    assert first == "You asked in c: hello"
    documented = json.loads((EXAMPLES / "turn.json").read_text(encoding="utf-8"))
    sent = seen[0]
    assert set(sent) == set(documented)  # the turn JSON the agent guide shows
    for part in ("session", "target", "limits"):
        assert set(sent[part]) == set(documented[part]), part
    assert "You asked" not in refused and refused.startswith("Sorry")  # bad signature: refused


@pytest.fixture
def examples_on_path() -> Iterator[None]:
    sys.path.insert(0, str(EXAMPLES))
    try:
        yield
    finally:
        sys.path.remove(str(EXAMPLES))
        sys.modules.pop("python_agent", None)


async def test_the_python_agent_example_loads_by_its_setting_and_answers(
    database_url: str, sink: SinkServer, examples_on_path: None
) -> None:
    agent = load_agent("python_agent:CountingAgent")
    adapter = SinkAdapter(sink.url)
    async with running_gateway(database_url, adapters=[adapter], agent=agent, web_chat=False):
        await adapter.submit({"chat": "c", "thread": "P", "id": "1", "text": "one"})
        await wait_for(lambda: len(sink.accepted) == 1)
        await adapter.submit({"chat": "c", "thread": "P", "id": "2", "text": "two"})
        await wait_for(lambda: len(sink.accepted) == 2)
    assert sink.texts_in("c", "P") == [
        "'one', after 0 earlier messages in this thread",
        "'two', after 2 earlier messages in this thread",
    ]


@pytest.mark.parametrize("name", ["openai.env", "ollama.env"])
async def test_a_model_in_two_lines_answers(name: str, database_url: str, sink: SinkServer) -> None:
    values: dict[str, Any] = env_file(name)
    assert values["AGENT"] == "openai"
    fake = await FakeOpenAI(models=[values.get("AGENT_MODEL", "gpt-4o-mini")]).start()
    values["OPENAI_BASE_URL"] = fake.base_url  # the documented server, replaced by the fake
    settings = make_settings(database_url, **values)
    agent = load_agent(settings.agent, settings)
    assert isinstance(agent, OpenAIAgent)
    adapter = SinkAdapter(sink.url)
    try:
        async with running_gateway(
            database_url, adapters=[adapter], agent=agent, web_chat=False, **values
        ):
            await adapter.submit({"chat": "c", "thread": "M", "id": "1", "text": "hi model"})
            await wait_for(lambda: len(sink.accepted) == 1)
    finally:
        await fake.stop()
    (reply,) = sink.texts_in("c", "M")
    assert not reply.startswith("echo:")
    assert fake.requests and fake.requests[-1].body["model"] == settings.agent_model


async def test_the_curl_script_runs_against_the_admin_api(
    database_url: str, sink: SinkServer, tmp_path: Path
) -> None:
    token = "t" * 40
    adapter = SinkAdapter(sink.url)
    async with running_gateway(
        database_url, adapters=[adapter], web_chat=False, GATEWAY_ADMIN_TOKEN=token
    ) as gw:
        await adapter.submit({"chat": "c", "thread": "A", "id": "1", "text": "deploy today"})
        await wait_for(lambda: len(sink.accepted) == 1)
        results = {}
        for given in (token, "w" * 40):
            env = {**os.environ, "GATEWAY_URL": gw.url.rstrip("/"), "GATEWAY_ADMIN_TOKEN": given}
            process = await asyncio.create_subprocess_exec(
                "sh",
                str(EXAMPLES / "admin_api.sh"),
                cwd=tmp_path,
                env=env,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            stdout, stderr = await asyncio.wait_for(process.communicate(), 30)
            results[given] = (process.returncode, stdout.decode(), stderr.decode())
    code, printed, errors = results[token]
    assert code == 0, errors
    assert '"items"' in printed and "deploy" in printed
    document = json.loads((tmp_path / "openapi.json").read_text())
    page = (EXAMPLES.parent / "reference" / "http-api.md").read_text(encoding="utf-8")
    for path, operations in document["paths"].items():  # the reference lists every route
        row = next((r for r in page.splitlines() if f"| `{path}` |" in r), None)
        assert row is not None, path
        for method in operations:
            assert method.upper() in row.split("|")[1], (method, path)
    assert results["w" * 40][0] != 0  # a wrong token is refused


@pytest.mark.slow
async def test_backup_and_restore_into_the_embedded_server(
    database_url: str, sink: SinkServer, tmp_path: Path
) -> None:
    adapter = SinkAdapter(sink.url)
    async with running_gateway(database_url, adapters=[adapter], web_chat=False):
        await adapter.submit({"chat": "c", "thread": "B", "id": "1", "text": "keep me"})
        await wait_for(lambda: len(sink.accepted) == 1)
    dump = tmp_path / "gateway.dump"
    printed = await _script_cli(
        ["backup", str(dump)], env={"DATABASE_URL": database_url}, cwd=tmp_path
    )
    assert printed.strip() == f"backed up to {dump}" and dump.stat().st_size > 0
    # a fresh embedded server, as on a new machine (outside pytest's private tmp tree, which
    # the server's own user cannot enter)
    data_dir = Path(tempfile.mkdtemp(prefix="gw-docs-restore-"))
    embedded = {"GATEWAY_DATA_DIR": str(data_dir)}
    try:
        await _script_cli(["restore", str(dump)], env=embedded, cwd=tmp_path)
        listed = await _script_cli(["sessions", "list", "--json"], env=embedded, cwd=tmp_path)
        assert [s["key"] for s in json.loads(listed)] == ["sink:test:c:B"]
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


async def _script_cli(args: list[str], *, env: dict[str, str], cwd: Path) -> str:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        *args,
        cwd=cwd,
        env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, stderr.decode()
    return stdout.decode()


async def test_the_reverse_proxy_example_gets_through_the_host_guard(database_url: str) -> None:
    conf = (EXAMPLES / "nginx.conf").read_text(encoding="utf-8")
    (server_name,) = re.findall(r"server_name\s+([^;\s]+);", conf)
    assert "proxy_set_header Host $host;" in conf
    values: dict[str, Any] = env_file("proxy.env")
    assert server_name in values["GATEWAY_ALLOWED_HOSTS"].split(",")
    statuses = {}
    for name, overrides in (("without", {}), ("with", values)):
        async with (
            running_gateway(database_url, **overrides) as gw,
            httpx.AsyncClient(base_url=gw.url) as client,
        ):
            # what nginx sends: the public Host, from the proxy's loopback address
            headers = {"Host": server_name, "X-Forwarded-Proto": "https"}
            statuses[name] = (await client.get("/healthz", headers=headers)).status_code
    assert statuses == {"without": 403, "with": 200}
