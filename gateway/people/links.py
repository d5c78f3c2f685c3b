"""``/link``: a one-time code for the account that asks (valid ten minutes); ``/link CODE``
from another account joins the two into one person."""

from __future__ import annotations

import secrets
from collections.abc import Mapping

import structlog

from gateway import audit
from gateway.core.domain import PLACE_KEY, Place, Reply
from gateway.turns.stage import COMMAND_MODEL, TurnRun
from gateway.turns.stages.commands import command_argument
from gateway.usage.service import UsageService, account_of
from session_store.records import MessageRecord
from session_store.repos.people import LinkCodeInvalid

log = structlog.get_logger(__name__)

CODE_SECONDS = 600
#: no 0/O, 1/I/L: read off one screen, typed on another
_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"


def new_code() -> str:
    return "".join(secrets.choice(_ALPHABET) for _ in range(8))


class LinkCommand:
    name = "link"

    def __init__(self, usage: UsageService) -> None:
        self._usage = usage

    async def answer(self, turn: TurnRun, ask: MessageRecord) -> Reply:
        account = account_of(turn.claim.key, ask)
        if account is None:
            return _reply("/link needs to know who you are; it works from a person's message.")
        code = command_argument(ask.content, "link")
        if code is None:
            return await self._offer(turn, ask, account)
        people = self._usage.store.people
        try:
            person = await people.redeem(code.strip().upper(), account)
        except LinkCodeInvalid:
            return _reply("That code is unknown or expired. Send /link again for a new one.")
        self._usage.forget(*(await people.accounts(person)))
        await audit.record(
            self._usage.store,
            "people.link",
            ("person", person),
            actor=account,
            surface=turn.claim.key.platform,
        )
        log.info("accounts_linked", person_id=person)
        return _reply(
            "Linked: your accounts are now one person here (model choice, sessions, usage "
            "and limits are shared)."
        )

    async def _offer(self, turn: TurnRun, ask: MessageRecord, account: str) -> Reply:
        stored = ask.metadata.get(PLACE_KEY)
        place = Place.from_json(stored) if isinstance(stored, Mapping) else Place()
        direct = place.direct or turn.claim.key.platform == "web"
        if not direct:
            return _reply("Send /link in a direct message with me, so the code stays yours.")
        code = new_code()
        await self._usage.store.people.save_code(code, account, ttl_seconds=CODE_SECONDS)
        return _reply(
            f"Your link code is {code} (valid 10 minutes). Send /link {code} from your other "
            "account to join them."
        )


def _reply(text: str) -> Reply:
    return Reply(text=text, model=COMMAND_MODEL)
