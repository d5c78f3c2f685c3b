"""``MattermostAdapter.check``: the token (users/me), and the teams and channels the bot is a
member of (it hears and answers only there), each with its fix (docs/how-to/mattermost.md)."""

from __future__ import annotations

import httpx

from adapters.mattermost.api import MattermostApi, MattermostApiError
from gateway.core.ports import Check

_TEAM_FIX = (
    "add the bot to a team: as a team admin, Main Menu -> Invite People (or System Console -> "
    "User Management -> Teams -> the team -> Add Members) and pick the bot account"
)
_CHANNEL_FIX = (
    "add the bot to each channel it should answer in: in the channel type `/invite @{bot}` "
    "(or Channel menu -> Add Members)"
)


async def check_server(api: MattermostApi, *, url: str) -> list[Check]:
    try:
        return await _check(api)
    except MattermostApiError as exc:
        if exc.status in (401, 403):
            return [
                Check(
                    name="mattermost",
                    ok=False,
                    detail=f"the server refused MATTERMOST_TOKEN ({exc.status} {exc.error_id})",
                    fix="set MATTERMOST_TOKEN to the bot's access token (System Console -> "
                    "Integrations -> Bot Accounts -> the bot -> Create New Token)",
                )
            ]
        return [
            Check(
                name="mattermost",
                ok=False,
                detail=f"the server answered {exc}",
                fix="check MATTERMOST_URL (the address you open Mattermost at) and the server",
            )
        ]
    except httpx.HTTPError as exc:
        return [
            Check(
                name="mattermost",
                ok=False,
                detail=f"cannot reach {url} ({type(exc).__name__}: {exc})",
                fix="check MATTERMOST_URL (https://host[:port], the address you open "
                "Mattermost at) and the network",
            )
        ]
    finally:
        await api.aclose()


async def _check(api: MattermostApi) -> list[Check]:
    me = await api.get_me()
    username = str(me.get("username") or "?")
    checks = [
        Check(
            name="mattermost",
            ok=True,
            detail=f"users/me ok: @{username} ({'bot account' if me.get('is_bot') else 'user'})",
            fix=None
            if me.get("is_bot")
            else "this token belongs to a person, not a bot account: its replies show as that "
            "person (System Console -> Integrations -> Bot Accounts -> Add Bot Account)",
        )
    ]
    teams = await api.my_teams()
    if not teams:
        checks.append(
            Check(
                name="mattermost teams",
                ok=False,
                detail="the bot is a member of no team, so it sees no channel",
                fix=_TEAM_FIX,
            )
        )
        return checks
    seen: list[str] = []
    channel_count = 0
    direct = 0
    for team in teams:
        team_id = str(team.get("id") or "")
        channels = await api.my_team_channels(team_id)
        names = sorted(
            str(c.get("display_name") or c.get("name"))
            for c in channels
            if c.get("type") in ("O", "P") and c.get("team_id") == team_id
        )
        direct = max(direct, sum(1 for c in channels if c.get("type") in ("D", "G")))
        channel_count += len(names)
        label = team.get("display_name") or team.get("name") or team_id
        seen.append(f"{label}: {', '.join(names) if names else 'no channels'}")
    checks.append(
        Check(
            name="mattermost channels",
            ok=channel_count > 0,
            detail=f"member of {len(teams)} team(s), {channel_count} channel(s), "
            f"{direct} direct/group message(s) - " + "; ".join(seen),
            fix=None if channel_count else _CHANNEL_FIX.format(bot=username),
        )
    )
    return checks
