"""``TeamsAdapter.check``: the app id and secret against the token endpoint (a token is
issued), and the OpenID metadata inbound activities are checked against (its keys load),
each with its fix (docs/how-to/teams.md)."""

from __future__ import annotations

from adapters.teams.auth import AuthError, OpenIdKeys
from adapters.teams.tokens import TokenError, TokenSource
from gateway.core.ports import Check

_SECRET_FIX = (
    "set TEAMS_APP_ID to the bot's Microsoft App ID and TEAMS_APP_PASSWORD to a current client "
    "secret (Azure portal -> the Azure Bot -> Configuration -> Manage Password -> "
    "Certificates & secrets -> New client secret); a single-tenant bot also needs "
    "TEAMS_TENANT_ID"
)


async def check_app(tokens: TokenSource, keys: OpenIdKeys, *, app_id: str) -> list[Check]:
    checks: list[Check] = []
    try:
        await tokens.token()
    except TokenError as exc:
        refused = exc.status in (400, 401, 403)
        checks.append(
            Check(
                name="teams",
                ok=False,
                detail=(
                    f"the token endpoint refused app {app_id}: {exc}"
                    if refused
                    else f"cannot get a token from {tokens.url}: {exc}"
                ),
                fix=_SECRET_FIX if refused else "check TEAMS_TOKEN_URL and the network",
            )
        )
    else:
        checks.append(
            Check(
                name="teams",
                ok=True,
                detail=f"app {app_id}: the token endpoint issued a Bot Framework token",
            )
        )
    try:
        await keys.key("")  # loads the document and its keys; no key has an empty id
    except AuthError as exc:
        if keys.fetches == 0:
            checks.append(
                Check(
                    name="teams signing keys",
                    ok=False,
                    detail=f"{keys.metadata_url}: {exc}",
                    fix="check TEAMS_OPENID_METADATA_URL (unset: Bot Framework's) and the "
                    "network: without its keys every activity is refused with 401",
                )
            )
            return checks
    checks.append(
        Check(
            name="teams signing keys",
            ok=True,
            detail=f"the OpenID metadata at {keys.metadata_url} lists signing keys",
        )
    )
    checks.append(
        Check(
            name="teams endpoint",
            ok=True,
            detail="activities arrive at POST /teams/messages",
            fix="set the bot's messaging endpoint to https://<your host>/teams/messages "
            "(Azure Bot -> Configuration)",
        )
    )
    return checks
