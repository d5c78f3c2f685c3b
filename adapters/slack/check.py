"""``SlackAdapter.check``: the bot token (auth.test), its granted scopes (the
``x-oauth-scopes`` response header) against ``scopes.BOT_SCOPES``, and the ingress settings
(Events API Request URL, or the Socket Mode app-level token), each with its fix
(docs/how-to/slack.md)."""

from __future__ import annotations

from collections.abc import Mapping

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.scopes import APP_TOKEN_SCOPE, BOT_SCOPES
from adapters.slack.transport import make_web_client
from gateway.core.ports import Check

_REINSTALL = (
    "under OAuth & Permissions -> Bot Token Scopes (or apply deploy/slack/manifest.*.yaml), "
    "then Install to Workspace again and copy the new Bot User OAuth Token into SLACK_BOT_TOKEN"
)


def _error(exc: SlackApiError) -> str:
    data = exc.response.data if exc.response is not None else None
    error = data.get("error") if isinstance(data, Mapping) else None
    return str(error) if error else "unknown error"


def _header(headers: Mapping[str, object], name: str) -> str | None:
    for key, value in headers.items():
        if key.lower() == name:
            return str(value)
    return None


async def check_tokens(
    client: AsyncWebClient, *, base_url: str, app_token: str | None, events_api: bool
) -> list[Check]:
    checks: list[Check] = []
    try:
        response = await client.auth_test()
    except SlackApiError as exc:
        error = _error(exc)
        return [
            Check(
                name="slack",
                ok=False,
                detail=f"auth.test failed: {error}",
                fix="set SLACK_BOT_TOKEN to the Bot User OAuth Token (xoxb-...) from the app's "
                "OAuth & Permissions page (install the app to the workspace first)",
            )
        ]
    except (TimeoutError, aiohttp.ClientError) as exc:
        return [
            Check(
                name="slack",
                ok=False,
                detail=f"cannot reach the Slack Web API at {base_url} ({type(exc).__name__})",
                fix="check the network and SLACK_API_BASE_URL (default https://slack.com/api/)",
            )
        ]
    team, user = response.get("team"), response.get("user")
    checks.append(
        Check(
            name="slack",
            ok=True,
            detail=f"auth.test ok: bot @{user} ({response.get('user_id')}) in {team} "
            f"({response.get('team_id')})",
        )
    )
    granted_header = _header(response.headers, "x-oauth-scopes")
    if granted_header is None:
        checks.append(
            Check(
                name="slack scopes",
                ok=True,
                detail="Slack did not report the granted scopes (no x-oauth-scopes header); "
                f"the bot needs {', '.join(BOT_SCOPES)}",
            )
        )
    else:
        granted = {s.strip() for s in granted_header.split(",") if s.strip()}
        missing = [s for s in BOT_SCOPES if s not in granted]
        if missing:
            checks.append(
                Check(
                    name="slack scopes",
                    ok=False,
                    detail=f"missing bot scopes: {', '.join(missing)} "
                    f"(granted: {', '.join(sorted(granted)) or 'none'})",
                    fix=f"add {', '.join(missing)} {_REINSTALL}",
                )
            )
        else:
            checks.append(
                Check(
                    name="slack scopes",
                    ok=True,
                    detail=f"all {len(BOT_SCOPES)} bot scopes granted ({', '.join(BOT_SCOPES)})",
                )
            )
    if app_token is not None:
        checks.append(await _check_app_token(app_token, base_url=base_url))
    elif events_api:
        checks.append(
            Check(
                name="slack events",
                ok=True,
                detail="Events API: Slack must POST to https://<your public host>/slack/events",
                fix="Event Subscriptions -> Request URL = https://<your public host>/slack/events "
                "(Slack verifies it while the gateway runs)",
            )
        )
    return checks


async def _check_app_token(app_token: str, *, base_url: str) -> Check:
    client = make_web_client(token=app_token, base_url=base_url)
    fix = (
        f"set SLACK_APP_TOKEN to an app-level token (xapp-...) with the {APP_TOKEN_SCOPE} "
        "scope: Basic Information -> App-Level Tokens -> Generate Token and Scopes; and turn "
        "Socket Mode on"
    )
    try:
        await client.apps_connections_open(app_token=app_token)
    except SlackApiError as exc:
        return Check(
            name="slack socket mode",
            ok=False,
            detail=f"apps.connections.open failed: {_error(exc)}",
            fix=fix,
        )
    except (TimeoutError, aiohttp.ClientError) as exc:
        return Check(
            name="slack socket mode",
            ok=False,
            detail=f"cannot reach the Slack Web API ({type(exc).__name__})",
            fix="check the network and SLACK_API_BASE_URL",
        )
    return Check(
        name="slack socket mode",
        ok=True,
        detail="the app-level token opens Socket Mode connections (apps.connections.open ok)",
    )
