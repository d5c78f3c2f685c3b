"""What the turn stages, commands and views share: the config's prices and budgets, the
price set's version, the ledger's charges for a turn, and the person behind an account."""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from gateway.core.domain import Reply
from gateway.core.metrics import Metrics
from gateway.usage.config import PriceSet, UsageConfig
from session_store.records import MessageRecord
from session_store.repos.usage import UsageCharge, UsageKind, place_of
from session_store.store import Store
from session_store.values import SessionKey

#: a linked account's opaque id follows its person within this long
PERSON_CACHE_SECONDS = 600.0
PERSON_CACHE_SIZE = 10_000


def account_of(key: SessionKey, message: MessageRecord) -> str | None:
    """Who a question is charged to: its sender's account, or for a scheduled question the
    account that owns the schedule (``metadata.owner``)."""
    owner = message.metadata.get("owner")
    if isinstance(owner, str) and owner:
        return owner
    if message.sender_id:
        return f"{key.platform}:{key.scope}:{message.sender_id}"
    return None


def opaque_person_id(person_id: int) -> str:
    """A stable id for the model provider (OpenAI's ``user``): a hash, never a name."""
    return hashlib.sha256(f"gateway-person:{person_id}".encode()).hexdigest()[:32]


def charges_of(
    replies: Sequence[Reply],
    *,
    account: str | None,
    prices: PriceSet,
    version: int | None,
    first: int = 1,
) -> list[UsageCharge]:
    """One charge per model call the agent reports (``metadata.calls``: every tool step and
    the answer); an agent that reports only ``tokens_used`` is one call."""
    charges: list[UsageCharge] = []
    for n, reply in enumerate(replies, start=first):
        calls = reply.metadata.get("calls")
        if isinstance(calls, list) and calls:
            for call in calls:
                if isinstance(call, Mapping):
                    charges.append(_charge(call, reply, n, account, prices, version))
        elif reply.tokens_used:
            call = {"model": reply.model, "completion_tokens": reply.tokens_used}
            charges.append(_charge(call, reply, n, account, prices, version))
    return charges


def _charge(
    call: Mapping[str, Any],
    reply: Reply,
    n: int,
    account: str | None,
    prices: PriceSet,
    version: int | None,
) -> UsageCharge:
    model = str(call.get("model") or reply.model or "unknown")
    prompt = _count(call.get("prompt_tokens"))
    completion = _count(call.get("completion_tokens"))
    kind: UsageKind = "tool_step" if call.get("kind") == "tool_step" else "answer"
    cost = prices.cost(model, prompt, completion)
    return UsageCharge(
        account=account,
        model=model,
        kind=kind,
        prompt_tokens=prompt,
        completion_tokens=completion,
        cost=cost,
        price_version=version if cost is not None else None,
        reply=n,
    )


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


class UsageService:
    def __init__(self, store: Store, config: UsageConfig, metrics: Metrics) -> None:
        self.store = store
        self.config = config
        self.metrics = metrics
        self._version: int | None = None
        self._people: OrderedDict[str, tuple[float, int]] = OrderedDict()

    def use(self, config: UsageConfig) -> None:
        """A reloaded config file's prices and budgets (a changed price set is a new
        version, written on the next charge)."""
        if config.prices.digest != self.config.prices.digest:
            self._version = None
        self.config = config

    async def price_version(self) -> int | None:
        """The price set's version (written once per process); None with no prices."""
        if not self.config.prices.prices:
            return None
        if self._version is None:
            prices = self.config.prices
            self._version = await self.store.usage.price_version(prices.digest, prices.as_json())
        return self._version

    async def charges(
        self, replies: Sequence[Reply], account: str | None, *, first: int = 1
    ) -> list[UsageCharge]:
        """The charges of ``replies``, the first of which will be the turn's reply number
        ``first``."""
        version = await self.price_version()
        found = charges_of(
            replies, account=account, prices=self.config.prices, version=version, first=first
        )
        for c in found:
            self.metrics.usage_tokens.labels(c.model, "prompt").inc(c.prompt_tokens)
            self.metrics.usage_tokens.labels(c.model, "completion").inc(c.completion_tokens)
        return found

    async def person_id(self, account: str) -> int:
        """The account's person (created on first sight), cached for a while in a bounded
        map: the hot path reads it once per account, not once per message."""
        now = time.monotonic()
        hit = self._people.get(account)
        if hit is not None and now - hit[0] < PERSON_CACHE_SECONDS:
            return hit[1]
        person = await self.store.people.person_of(account)
        self._people[account] = (now, person)
        self._people.move_to_end(account)
        while len(self._people) > PERSON_CACHE_SIZE:
            self._people.popitem(last=False)
        return person

    async def charge_summary(self, session_id: int, model: str, used: tuple[int, int]) -> None:
        """A rolling summary's model call, charged to its session's place (cold path: its
        own statement, never one per message)."""
        session = await self.store.sessions.get_session(session_id)
        await self.charge_place(place_of(session.key), model, used, session_id=session_id)

    async def charge_place(
        self, place: str, model: str, used: tuple[int, int], *, session_id: int | None = None
    ) -> None:
        """A model call nobody asked for in person (a summary), charged to ``place``."""
        prompt, completion = used
        cost = self.config.prices.cost(model, prompt, completion)
        version = await self.price_version() if cost is not None else None
        charge = UsageCharge(
            account=None,
            model=model,
            kind="summary",
            prompt_tokens=prompt,
            completion_tokens=completion,
            cost=cost,
            price_version=version,
        )
        await self.store.usage.add(charge, place=place, session_id=session_id)
        self.metrics.usage_tokens.labels(model, "prompt").inc(prompt)
        self.metrics.usage_tokens.labels(model, "completion").inc(completion)

    def forget(self, *accounts: str) -> None:
        """After a link: these accounts' person changed."""
        for account in accounts:
            self._people.pop(account, None)
