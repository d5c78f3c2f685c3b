"""``TelegramAdapter.check``: the token (getMe), what the bot sees in groups (privacy mode),
and the webhook-mode settings, each as a ``Check`` with the fix (docs/how-to/telegram.md)."""

from __future__ import annotations

from collections.abc import Callable

from telegram.error import InvalidToken, TelegramError

from adapters.telegram.transport import TelegramBot
from gateway.core.errors import ConfigError
from gateway.core.ports import Check

PRIVACY_ON = (
    "privacy mode is on: in groups the bot receives only /commands, @mentions of it and "
    "replies to its messages (everything, if it is an admin of the group)"
)
PRIVACY_FIX = (
    "to answer in forum topics without an @mention: BotFather -> /setprivacy -> choose the "
    "bot -> Disable, then remove the bot from each group and add it again; or make the bot "
    "an admin of the group (docs/how-to/telegram.md step 3)"
)


async def check_bot(
    bot: TelegramBot, *, webhook_settings: Callable[[], None] | None = None
) -> list[Check]:
    """``webhook_settings`` raises ``ConfigError`` when webhook mode lacks what it needs
    (``None`` in polling mode)."""
    checks: list[Check] = []
    if webhook_settings is not None:
        try:
            webhook_settings()
        except ConfigError as exc:
            checks.append(
                Check(
                    name="telegram webhook",
                    ok=False,
                    detail=str(exc),
                    fix=f"set {exc.setting} (a random string of A-Z, a-z, 0-9, _ and -, "
                    "e.g. `openssl rand -hex 32`), or use TELEGRAM_MODE=polling"
                    if exc.setting == "TELEGRAM_WEBHOOK_SECRET"
                    else f"set {exc.setting} to the public https:// URL that reaches "
                    "POST /telegram/webhook, or use TELEGRAM_MODE=polling",
                )
            )
        else:
            checks.append(
                Check(name="telegram webhook", ok=True, detail="webhook URL and secret are set")
            )
    try:
        await bot.initialize()  # getMe
    except TelegramError as exc:
        # a failed initialize leaves the bot "not initialized", so shutdown() would skip
        # closing the connection getMe opened: close the request client directly
        await bot.request.shutdown()
        checks.append(_getme_failure(exc))
        return checks
    try:
        me = bot.bot
        checks.append(
            Check(
                name="telegram",
                ok=True,
                detail=f"getMe ok: @{me.username} (id {me.id})",
            )
        )
        if me.can_read_all_group_messages:
            checks.append(
                Check(
                    name="telegram privacy",
                    ok=True,
                    detail="privacy mode is off (can_read_all_group_messages): the bot "
                    "receives every group message",
                )
            )
        else:
            checks.append(
                Check(name="telegram privacy", ok=True, detail=PRIVACY_ON, fix=PRIVACY_FIX)
            )
    finally:
        await bot.shutdown()
    return checks


def _getme_failure(exc: TelegramError) -> Check:
    if isinstance(exc, InvalidToken):
        return Check(
            name="telegram",
            ok=False,
            detail="the Bot API rejected TELEGRAM_BOT_TOKEN (getMe: Unauthorized)",
            fix="set TELEGRAM_BOT_TOKEN to the token BotFather gave "
            "(BotFather -> /mybots -> the bot -> API Token)",
        )
    return Check(
        name="telegram",
        ok=False,
        detail=f"cannot reach the Bot API: {exc.message}",
        fix="check the network and TELEGRAM_API_BASE_URL (default https://api.telegram.org/bot)",
    )
