"""``gateway doctor``: configuration, the database, the agent and every configured surface, in
plain words, with the exact setting or step that fixes each failure. Exit 0 when everything
checked is fine, 1 otherwise.

The platform checks live in the surface plugins (``SurfacePlugin.checks``, by default the
adapter's own ``check()``): doctor builds the surfaces the settings enable through the registry
(``registry.build_adapters``) and asks each one's plugin; no platform API is called from
here."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from urllib.parse import urlsplit

import httpx

from gateway.core.conversations import Conversations
from gateway.core.errors import ConfigError
from gateway.core.hub import Broadcast
from gateway.core.ports import AdapterContext, Check
from gateway.core.registry import build_adapters, enabled_plugins, find_plugin, surface_plugins
from gateway.core.settings import Settings, settings_source
from gateway.http.webauth import WebIdentity

#: how long one agent probe may take
AGENT_TIMEOUT_SECONDS = 10.0


class _NoConversations(Conversations):
    """Doctor never starts a surface, so none reads conversations; building one must not
    need a database (doctor also runs when the database is the thing that is broken)."""

    def __init__(self) -> None:  # deliberately no store
        pass


async def collect_checks(settings: Settings) -> list[Check]:
    checks = [Check(name="configuration", ok=True, detail=f"settings from {settings_source()}")]
    checks.append(await _check_database(settings))
    # off the loop: the probe of a busy port asks it /healthz (blocking, a 2 s timeout)
    checks.append(await asyncio.to_thread(check_http_port, settings))
    checks.append(check_allowed_hosts(settings))
    checks.extend(await check_agent(settings))
    checks.extend(await check_surfaces(settings))
    checks.extend(await check_tools(settings))
    # knowledge base: the embedding endpoint and pgvector
    from gateway.knowledge.health import knowledge_checks

    checks.extend(await knowledge_checks(settings))
    # files people share: voice (TRANSCRIPTION_*) and OCR (the ocr extra)
    from gateway.files.health import files_checks

    checks.extend(files_checks(settings))
    checks.extend(_no_platform(settings))
    return checks


def _no_platform(settings: Settings) -> list[Check]:
    """Advice when no surface with a ``gateway setup`` command is switched on."""
    if any(p.setup is not None for p in enabled_plugins(settings)):
        return []
    setups = [p for p in surface_plugins() if p.setup is not None]
    if not setups:
        return []
    names = "|".join(p.name for p in setups)
    guides = ", ".join(p.setup.guide for p in setups if p.setup is not None)
    return [
        Check(
            name="platforms",
            ok=True,
            detail="none configured: only the web chat answers",
            fix=f"connect one with `gateway setup {names}` (guides: {guides})",
        )
    ]


async def check_surfaces(settings: Settings, *, platforms: bool = True) -> list[Check]:
    """Each enabled surface's own ``check()``; a surface that cannot even be built (a bad
    setting) is one failed check naming that setting."""

    context = AdapterContext(
        live=Broadcast(),
        conversations=_NoConversations(),
        identity=WebIdentity.from_settings(settings, None),
    )
    try:
        adapters = build_adapters(settings, context, platforms=platforms)
    except ConfigError as exc:
        return [Check(name="surfaces", ok=False, detail=str(exc), fix=f"correct {exc.setting}")]
    checks: list[Check] = []
    for adapter in adapters:
        plugin = find_plugin(adapter.platform)
        try:
            checks.extend(await (plugin.checks(adapter) if plugin else adapter.check()))
        except Exception as exc:  # noqa: BLE001 - doctor reports any failure in plain words
            checks.append(
                Check(
                    name=adapter.platform,
                    ok=False,
                    detail=f"the check itself failed: {type(exc).__name__}: {exc}",
                )
            )
    return checks


async def _check_database(settings: Settings) -> Check:
    from session_store.store import Store

    if not settings.database_url:
        return Check(
            name="database",
            ok=True,
            detail=f"embedded PostgreSQL under {settings.gateway_data_dir} "
            "(started by `gateway run`)",
        )
    try:
        store = await asyncio.wait_for(
            Store.connect(settings.database_url, min_size=1, max_size=1), 5
        )
    except Exception as exc:  # noqa: BLE001 - doctor reports any failure in plain words
        return Check(
            name="database",
            ok=False,
            detail=f"cannot reach DATABASE_URL: {exc}",
            fix="check DATABASE_URL (postgresql://user:password@host:5432/db), or unset it "
            "to use the embedded PostgreSQL",
        )
    try:
        await store.ping()
    finally:
        await store.close()
    return Check(name="database", ok=True, detail="DATABASE_URL reachable")


def check_http_port(settings: Settings) -> Check:
    """Whether ``gateway run`` could listen where the settings say (a busy port made it exit
    with a bare ``[Errno 98]``)."""
    from gateway.http.app import probe_listen

    host, port = settings.gateway_http_host, settings.gateway_http_port
    error = probe_listen(host, port)
    if error is None:
        where = "a free port" if port == 0 else f"{host}:{port}"
        return Check(name="http", ok=True, detail=f"can listen on {where}")
    if answers_as_gateway(host, port):
        # doctor run beside the gateway it checks: its own port is not a conflict
        return Check(
            name="http",
            ok=True,
            detail=f"port {port} on {host} is in use by a running gateway (/healthz answered)",
        )
    return Check(
        name="http",
        ok=False,
        detail=str(error),
        fix=f"stop what listens there (a gateway already running?), or set {error.setting} "
        "to a free one",
    )


def check_allowed_hosts(settings: Settings) -> Check:
    """Which Host names the HTTP server answers (gateway.http.guard): behind a reverse proxy on
    the same host, the public name must be listed or every webhook gets 403."""
    from gateway.http.guard import HttpPolicy

    allowed = HttpPolicy.from_settings(settings).allowed_hosts
    if allowed is None:
        return Check(name="allowed hosts", ok=True, detail="any Host name is answered")
    if allowed:
        names = ", ".join(sorted(allowed))
        return Check(name="allowed hosts", ok=True, detail=f"localhost names and {names}")
    return Check(
        name="allowed hosts",
        ok=True,
        detail="only localhost names (a loopback GATEWAY_HTTP_HOST, GATEWAY_ALLOWED_HOSTS unset)",
        fix="behind a reverse proxy that passes on the public name, list it, e.g. "
        "GATEWAY_ALLOWED_HOSTS=bot.example.com; until then webhooks get 403 'Host not allowed'",
    )


def answers_as_gateway(host: str, port: int) -> bool:
    """Whether a gateway listens at ``host:port``: its /healthz answers with a status."""
    connect = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    netloc = f"[{connect}]:{port}" if ":" in connect else f"{connect}:{port}"
    try:
        response = httpx.get(f"http://{netloc}/healthz", timeout=2.0, trust_env=False)
        body = response.json()
    except (httpx.HTTPError, ValueError):
        return False
    return isinstance(body, dict) and body.get("status") in ("ok", "wedged")


# --- the agent -------------------------------------------------------------------------------


async def check_agent(settings: Settings) -> list[Check]:
    if settings.agent == "echo":
        return [
            Check(
                name="agent",
                ok=True,
                detail="AGENT=echo: replies repeat the message (no model)",
                fix=None,
            )
        ]
    if settings.agent == "openai":
        return [await _check_openai(settings)]
    if settings.agent == "http":
        return [await _check_http_agent(settings)]
    from gateway.agents.loading import load_agent

    try:
        agent = load_agent(settings.agent, settings)
    except ConfigError as exc:
        return [
            Check(
                name="agent",
                ok=False,
                detail=str(exc),
                fix="set AGENT to module:callable of an importable agent, or echo/openai/http",
            )
        ]
    return [Check(name="agent", ok=True, detail=f"AGENT={settings.agent} loads ({agent.name})")]


async def _check_openai(settings: Settings) -> Check:
    base = settings.openai_base_url.rstrip("/")
    key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else None
    host = urlsplit(base).hostname or ""
    if key is None and host.endswith("api.openai.com"):
        return Check(
            name="agent",
            ok=False,
            detail="AGENT=openai against api.openai.com without a key",
            fix="set OPENAI_API_KEY (platform.openai.com -> API keys), or OPENAI_BASE_URL to "
            "your own OpenAI-compatible server",
        )
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        async with httpx.AsyncClient(timeout=AGENT_TIMEOUT_SECONDS) as client:
            response = await client.get(base + "/models", headers=headers)
    except httpx.HTTPError as exc:
        return Check(
            name="agent",
            ok=False,
            detail=f"cannot reach OPENAI_BASE_URL {base} ({type(exc).__name__})",
            fix="set OPENAI_BASE_URL to the server's API base (it ends in /v1) and check that "
            "the server is running",
        )
    if response.status_code in (401, 403):
        return Check(
            name="agent",
            ok=False,
            detail=f"{base}/models answered {response.status_code}: the key was refused",
            fix="set OPENAI_API_KEY to a valid key for this server"
            if key
            else "set OPENAI_API_KEY (this server requires a key)",
        )
    if response.status_code == 404:
        # some compatible servers have no model listing; chat completions may still work
        return Check(
            name="agent",
            ok=True,
            detail=f"{base} reachable; it lists no models, so AGENT_MODEL cannot be checked",
        )
    if response.status_code >= 400:
        return Check(
            name="agent",
            ok=False,
            detail=f"{base}/models answered HTTP {response.status_code}",
            fix="check OPENAI_BASE_URL and the server's logs",
        )
    try:
        data = response.json().get("data")
        offered = {str(m.get("id")) for m in data if isinstance(m, dict)}
    except (ValueError, AttributeError, TypeError):
        return Check(
            name="agent",
            ok=False,
            detail=f"{base}/models did not answer an OpenAI model list",
            fix="set OPENAI_BASE_URL to an OpenAI-compatible API base (ending in /v1)",
        )
    wanted = list(dict.fromkeys([settings.agent_model, *settings.agent_models]))
    missing = [m for m in wanted if m not in offered]
    if missing:
        shown = ", ".join(sorted(offered)[:10]) or "none"
        setting = "AGENT_MODEL" if settings.agent_model in missing else "AGENT_MODELS"
        return Check(
            name="agent",
            ok=False,
            detail=f"{base} does not offer {', '.join(missing)} (it offers: {shown})",
            fix=f"set {setting} to models the server offers",
        )
    return Check(
        name="agent",
        ok=True,
        detail=f"{base} reachable, key accepted, offers {', '.join(wanted)}",
    )


async def _check_http_agent(settings: Settings) -> Check:
    url = settings.agent_http_url or ""
    try:
        async with httpx.AsyncClient(timeout=AGENT_TIMEOUT_SECONDS) as client:
            # any answer proves the URL reaches a server (the agent itself only takes POSTs,
            # and a signed turn is not something doctor should send)
            response = await client.get(url)
    except httpx.HTTPError as exc:
        return Check(
            name="agent",
            ok=False,
            detail=f"cannot reach AGENT_HTTP_URL {url} ({type(exc).__name__})",
            fix="set AGENT_HTTP_URL to your agent's URL and check that it is running",
        )
    return Check(
        name="agent", ok=True, detail=f"AGENT_HTTP_URL reachable (HTTP {response.status_code})"
    )


# --- output ----------------------------------------------------------------------------------


def render(checks: Sequence[Check], emit: Callable[[str], None] = print) -> None:
    for check in checks:
        emit(f"{'ok ' if check.ok else 'BAD'} {check.name}: {check.detail}")
        if check.fix:
            emit(f"    {'fix' if not check.ok else 'tip'}: {check.fix}")


async def run_doctor(settings: Settings) -> int:
    checks = await collect_checks(settings)
    render(checks)
    return 0 if all(c.ok for c in checks) else 1


async def check_tools(settings: Settings) -> list[Check]:
    """Tools: the file parses, MCP servers answer, and which tools are left out
    for lack of a valid policy entry (never offered to the model: fail closed)."""
    from gateway.tools.service import inspect_tools

    if not settings.gateway_tools:
        return [Check(name="tools", ok=True, detail="off (GATEWAY_TOOLS=false)")]
    try:
        catalog, unreachable = await inspect_tools(settings)
    except ConfigError as exc:
        return [Check(name="tools", ok=False, detail=str(exc), fix=f"correct {exc.setting}")]
    out = [
        Check(
            name="tools",
            ok=True,
            detail=f"offered under a policy: {', '.join(catalog.names) or 'none'}",
        )
    ]
    for name in unreachable:
        out.append(
            Check(
                name=f"mcp {name}",
                ok=False,
                detail="cannot connect (its tools are not offered)",
                fix=f"start the server or correct [mcp.{name}] in GATEWAY_TOOLS_FILE",
            )
        )
    # left out by the fail-closed policy: a note (tip), not a failure
    for x in catalog.left_out:
        out.append(
            Check(
                name=f"tool {x.name}",
                ok=True,
                detail=f"left out, never offered: {x.reason}",
                fix=f'give it a policy entry [tools."{x.name}"] in GATEWAY_TOOLS_FILE',
            )
        )
    return out


def config_failure(exc: ConfigError) -> Check:
    """A setting that does not even parse, as doctor reports it."""
    names = ", ".join(dict.fromkeys(one.setting for one in exc.each))
    return Check(name="configuration", ok=False, detail=str(exc), fix=f"correct or unset {names}")
