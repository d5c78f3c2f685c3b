"""``DiscordAdapter.check`` (``gateway doctor`` / ``gateway setup discord``): the token
(``users/@me``), the gateway (``GET /gateway/bot``) and the privileged message-content
intent, without which Discord sends the bot empty messages in guild channels."""

from __future__ import annotations

import httpx

from adapters.discord.api import DiscordApi, DiscordApiError
from gateway.core.ports import Check

#: application flags: the message-content intent, granted (verified bots) or limited
GATEWAY_MESSAGE_CONTENT = 1 << 18
GATEWAY_MESSAGE_CONTENT_LIMITED = 1 << 19

INTENT_FIX = (
    "turn on the Message Content Intent: Discord Developer Portal -> your application -> "
    "Bot -> Privileged Gateway Intents -> MESSAGE CONTENT INTENT -> Save. Without it Discord "
    "sends the bot the text of DMs and of messages that mention it, and empty messages "
    "everywhere else (thread follow-ups without a mention go unread)"
)
TOKEN_FIX = (
    "set DISCORD_BOT_TOKEN to the bot's token: Discord Developer Portal -> your application -> "
    "Bot -> Reset Token"
)


def message_content_allowed(flags: object) -> bool:
    return isinstance(flags, int) and bool(
        flags & (GATEWAY_MESSAGE_CONTENT | GATEWAY_MESSAGE_CONTENT_LIMITED)
    )


async def check_bot(api: DiscordApi, *, base_url: str) -> list[Check]:
    try:
        return await _check(api)
    except DiscordApiError as exc:
        if exc.status in (401, 403):
            return [
                Check(
                    name="discord",
                    ok=False,
                    detail=f"Discord refused DISCORD_BOT_TOKEN ({exc.status})",
                    fix=TOKEN_FIX,
                )
            ]
        return [
            Check(
                name="discord",
                ok=False,
                detail=f"Discord answered {exc}",
                fix="check DISCORD_API_BASE_URL and Discord's status",
            )
        ]
    except httpx.HTTPError as exc:
        return [
            Check(
                name="discord",
                ok=False,
                detail=f"cannot reach {base_url} ({type(exc).__name__}: {exc})",
                fix="check DISCORD_API_BASE_URL (unset: Discord's own) and the network",
            )
        ]
    finally:
        await api.aclose()


async def _check(api: DiscordApi) -> list[Check]:
    me = await api.me()
    name = str(me.get("username") or "?")
    checks = [
        Check(
            name="discord",
            ok=True,
            detail=f"signed in as {name} (id {me.get('id')}, bot: {bool(me.get('bot'))})",
        )
    ]
    gateway = await api.gateway_bot()
    url = gateway.get("url")
    checks.append(
        Check(
            name="discord gateway",
            ok=isinstance(url, str) and bool(url),
            detail=f"gateway at {url}" if url else "GET /gateway/bot gave no url",
        )
    )
    application = await api.application()
    flags = application.get("flags")
    if message_content_allowed(flags):
        checks.append(Check(name="discord message content intent", ok=True, detail="turned on"))
    else:
        checks.append(
            Check(
                name="discord message content intent",
                ok=False,
                detail="the privileged message-content intent is off for this application",
                fix=INTENT_FIX,
            )
        )
    return checks
