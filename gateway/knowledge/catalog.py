"""The catalog of knowledge bases, a part of ``Knowledge`` (``gateway.knowledge.service``):
each base by name, built with this gateway's embedding model (switched when the model
changes), which bases a chat searches and which are assigned to it, and whether any base
exists at all."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence

import structlog

from gateway.core.domain import SessionKey
from gateway.core.hub import Signal
from gateway.knowledge.config import KnowledgeSettings
from gateway.knowledge.embed import Embedder
from gateway.knowledge.places import DEFAULT_KB, Chat, chat_kb, thread_kb
from session_store.repos.knowledge import KnowledgeBase, KnowledgeStore

log = structlog.get_logger(__name__)

#: how long "no knowledge base exists" is believed before it is asked again
NO_BASES_SECONDS = 2.0
#: knowledge bases remembered per process (the rest are read again when used)
MAX_CACHED_KBS = 1024


class Catalog:
    """The knowledge bases: owns the cache of bases by name and the belief that none exists."""

    def __init__(
        self,
        store: KnowledgeStore,
        embedder: Embedder,
        settings: KnowledgeSettings,
        *,
        wake: Signal,
    ) -> None:
        self._store = store
        self._embedder = embedder
        self._settings = settings
        self._wake = wake
        #: while no knowledge base exists anywhere, turns skip the lookup (it was a
        #: database transaction per message); rechecked every NO_BASES_SECONDS, and at once
        #: after this replica creates one (another replica's shows within that interval,
        #: sooner than its first document is read)
        self._no_bases_until = 0.0
        #: while some base is known to exist, a turn whose chat has none does not ask again
        #: whether any exists (that was a second transaction per such turn)
        self._bases_until = 0.0
        #: bases by name, most recently used last: bounded (every thread that shares a file
        #: has a base of its own, ``thread:<key>``; a week of traffic must not keep them all)
        self._kbs: OrderedDict[str, KnowledgeBase] = OrderedDict()

    async def kb(self, name: str) -> KnowledgeBase:
        """The knowledge base ``name``, built with this gateway's embedding model."""
        cached = self._kbs.get(name)
        if cached is not None and cached.embedding_model == self._embedder.model:
            self._kbs.move_to_end(name)
            return cached
        kb = await self._store.ensure_kb(
            name, model=self._embedder.model, dim=await self._embedder.dimension()
        )
        self._kbs[name] = kb
        self._kbs.move_to_end(name)
        while len(self._kbs) > MAX_CACHED_KBS:
            self._kbs.popitem(last=False)
        self._no_bases_until = 0.0
        return kb

    async def switch_model(self, name: str) -> None:
        """Rebuild ``name`` with this gateway's embedding model (its documents are queued
        again), instead of mixing two models in one index."""
        self._kbs.pop(name, None)
        await self.kb(name)

    async def adopt_model(self) -> list[str]:
        """At start: every knowledge base built with another embedding model switches to this
        gateway's (its documents are re-embedded by the jobs). Returns the bases switched."""
        switched = []
        for base in await self._store.kbs():
            if base.embedding_model != self._embedder.model:
                await self.kb(base.name)
                switched.append(base.name)
        if switched:
            self._wake.set()
            log.info("kb_model_changed", kbs=switched, model=self._embedder.model)
        return switched

    # --- scope: which knowledge bases a chat searches --------------------------------------

    async def scope(self, key: SessionKey, *, extra: Sequence[str] = ()) -> list[KnowledgeBase]:
        """What a turn in ``key`` searches: the thread's documents, the chat's, every
        operator base assigned to the chat, and ``default`` (unless it applies only where
        assigned). Never another chat's or thread's."""
        names = [thread_kb(key), chat_kb(key), *extra]
        if self._settings.default_everywhere:
            names.append(DEFAULT_KB)
        chat = Chat.of(key)
        return await self._store.scope_kbs(
            names, platform=chat.platform, scope=chat.scope, chat_id=chat.chat_id
        )

    async def assign(self, kb: str, chat: Chat) -> bool:
        """Assign the knowledge base ``kb`` (created if new) to ``chat``; ``False`` when it
        already was."""
        base = await self.kb(kb)
        return await self._store.assign(
            base, platform=chat.platform, scope=chat.scope, chat_id=chat.chat_id
        )

    async def unassign(self, kb: str, chat: Chat) -> bool:
        return await self._store.unassign(
            kb, platform=chat.platform, scope=chat.scope, chat_id=chat.chat_id
        )

    async def known(
        self, load: Callable[[], Awaitable[list[KnowledgeBase]]]
    ) -> list[KnowledgeBase]:
        """``load()``, skipped while no knowledge base exists at all (no lookup per
        turn on a gateway without documents; believed for ``NO_BASES_SECONDS``)."""
        if time.monotonic() < self._no_bases_until:
            return []
        found = await load()
        if found or time.monotonic() < self._bases_until:
            return found
        if await self._store.any_kb():
            self._bases_until = time.monotonic() + NO_BASES_SECONDS
        else:
            self._no_bases_until = time.monotonic() + NO_BASES_SECONDS
        return found
