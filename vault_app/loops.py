"""What the HTTP handlers keep per event loop of a worker (:class:`LoopCaches`, one per
:class:`vault_app.runtime.Runtime`): the stream tail watches and /health's recent poison counts."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from dataclasses import dataclass
from typing import Any

from vault_app.services import Services, StagingQueue
from vault_app.tail import SWEEP_MAX_STREAMS, Tails
from vault_core.errors import VaultError
from vault_core.pagelog import CommitState
from vault_core.retry import budget

log = logging.getLogger("vault_app")


HEALTH_FRESH_SECONDS = 1.0
HEALTH_STALE_SECONDS = 5.0
"""/health's poison counts are read at most once a second and served up to 5 s old meanwhile."""
HEALTH_BUDGET_SECONDS = 2.0
"""All storage calls of one /health together: a probe answers within about this long."""


@dataclass
class _Counts:
    value: list[dict[str, Any]] | None = None
    at: float = 0.0
    refreshing: asyncio.Task[list[dict[str, Any]]] | None = None


class LoopCaches:
    def __init__(self, services: Services) -> None:
        self.services = services
        self._tails: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Tails] = weakref.WeakKeyDictionary()
        self._counts: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Counts] = (
            weakref.WeakKeyDictionary()
        )

    def tails(self) -> Tails:
        """The stream watches of the running event loop (the worker has one)."""
        loop = asyncio.get_running_loop()
        found = self._tails.get(loop)
        if found is None:
            found = self._tails[loop] = _tails_on(self.services)
        return found

    async def recent_poison_counts(self) -> list[dict[str, Any]]:
        """The poison counts, at most HEALTH_FRESH_SECONDS old, or up to HEALTH_STALE_SECONDS old
        while a refresh runs: probes every second, from several places, cost storage one read of
        the counts a second, and a probe never waits for storage when a recent answer is at hand."""
        loop = asyncio.get_running_loop()
        counts = self._counts.setdefault(loop, _Counts())
        age = loop.time() - counts.at
        if counts.value is not None and age < HEALTH_FRESH_SECONDS:
            return counts.value
        if counts.refreshing is None or counts.refreshing.done():

            async def refresh() -> list[dict[str, Any]]:
                value = await _poison_counts(self.services)
                counts.value, counts.at = value, loop.time()
                return value

            counts.refreshing = loop.create_task(refresh())
        if counts.value is not None and age < HEALTH_STALE_SECONDS:
            return counts.value
        return await asyncio.shield(counts.refreshing)


def _tails_on(svc: Services) -> Tails:

    async def commit_state(stream: str) -> CommitState:
        return await svc.async_reads(svc.vault_storage).commit_state(svc.settings.streams_container, stream)

    async def commit_states() -> dict[str, CommitState]:
        clients = svc.async_reads(svc.vault_storage)
        return await clients.commit_states(svc.settings.streams_container, SWEEP_MAX_STREAMS)

    return Tails(commit_state, commit_states)


async def _poison_counts(svc: Services) -> list[dict[str, Any]]:
    """Per staging queue, its poison queue's approximate count (None if unreadable); [] if the
    queues cannot even be named (settings). One attempt per count, all at once, under a short
    budget of their own: a probe stays cheap, and answers within about that budget when storage
    is down."""
    try:
        queues = svc.queues
        accounts = svc.staging_storages
    except Exception:
        log.warning("health: the poison queues cannot be named", exc_info=True)
        return []

    async def count(q: StagingQueue) -> int | None:
        try:
            return await svc.async_reads(accounts[q.account]).queue_length(q.poison.name)
        except VaultError:
            return None

    found: list[int | None] = [None] * len(queues)
    # The budget bounds each attempt; the outer bound is the probe's promise, whatever hangs.
    with budget(HEALTH_BUDGET_SECONDS), contextlib.suppress(asyncio.TimeoutError):
        found = await asyncio.wait_for(
            asyncio.gather(*(count(q) for q in queues)), HEALTH_BUDGET_SECONDS + 0.5
        )
    return [
        {"account": q.account, "queue": q.name, "poison_messages": n}
        for q, n in zip(queues, found, strict=True)
    ]
