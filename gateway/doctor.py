"""``gateway doctor``: configuration, database reachability and platform credentials, in
plain words. Exit 0 when everything checked is fine, 1 otherwise."""

from __future__ import annotations

import asyncio

import httpx

from gateway.settings import Settings


async def _check_database(settings: Settings) -> tuple[bool, str]:
    from session_store.store import Store

    if not settings.database_url:
        return (
            True,
            f"embedded PostgreSQL under {settings.gateway_data_dir} (started by `gateway run`)",
        )
    try:
        store = await asyncio.wait_for(
            Store.connect(settings.database_url, min_size=1, max_size=1), 5
        )
    except Exception as exc:  # noqa: BLE001 - doctor reports any failure in plain words
        return False, f"cannot reach DATABASE_URL: {exc}"
    try:
        await store.ping()
    finally:
        await store.close()
    return True, "DATABASE_URL reachable"


async def _get_json(
    client: httpx.AsyncClient, method: str, url: str, **kw: object
) -> dict[str, object]:
    response = await client.request(method, url, **kw)  # type: ignore[arg-type]
    try:
        data = response.json()
    except ValueError:
        data = {}
    if not isinstance(data, dict):
        data = {}
    data["_status"] = response.status_code
    return data


async def run_doctor(settings: Settings) -> int:
    checks: list[tuple[str, bool, str]] = []
    checks.append(("configuration", True, "settings parsed"))
    ok, detail = await _check_database(settings)
    checks.append(("database", ok, detail))
    async with httpx.AsyncClient(timeout=10) as client:
        if settings.telegram_bot_token:
            token = settings.telegram_bot_token.get_secret_value()
            try:
                data = await _get_json(
                    client, "GET", f"{settings.telegram_api_base_url}{token}/getMe"
                )
                good = bool(data.get("ok"))
                checks.append(
                    (
                        "telegram",
                        good,
                        "getMe ok" if good else f"getMe failed: {data.get('description')}",
                    )
                )
            except httpx.HTTPError as exc:
                checks.append(("telegram", False, f"cannot reach the Bot API: {exc}"))
        if settings.slack_bot_token:
            base = settings.slack_api_base_url.rstrip("/") + "/"
            try:
                data = await _get_json(
                    client,
                    "POST",
                    base + "auth.test",
                    headers={
                        "Authorization": f"Bearer {settings.slack_bot_token.get_secret_value()}"
                    },
                )
                good = bool(data.get("ok"))
                checks.append(
                    (
                        "slack",
                        good,
                        "auth.test ok" if good else f"auth.test failed: {data.get('error')}",
                    )
                )
            except httpx.HTTPError as exc:
                checks.append(("slack", False, f"cannot reach the Slack Web API: {exc}"))
        if settings.mattermost_url and settings.mattermost_token:
            try:
                data = await _get_json(
                    client,
                    "GET",
                    _mattermost_api_base(settings.mattermost_url) + "/users/me",
                    headers={
                        "Authorization": f"Bearer {settings.mattermost_token.get_secret_value()}"
                    },
                )
                good = data["_status"] == 200
                checks.append(
                    (
                        "mattermost",
                        good,
                        "users/me ok" if good else f"users/me failed: {data.get('message')}",
                    )
                )
            except httpx.HTTPError as exc:
                checks.append(("mattermost", False, f"cannot reach Mattermost: {exc}"))
    # knowledge base (issue 15): the embedding endpoint and pgvector
    from gateway.knowledge.health import knowledge_checks

    checks.extend(await knowledge_checks(settings))
    for name, good, detail in checks:
        print(f"{'ok ' if good else 'BAD'} {name}: {detail}")
    return 0 if all(good for _, good, _ in checks) else 1


def _mattermost_api_base(url: str) -> str:
    # the adapter's own URL rules (path prefixes, a pasted /api/v4): a pure helper, no SDK
    from adapters.mattermost.urls import server_urls

    return server_urls(url).api_base
