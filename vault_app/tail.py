"""Waiting for a stream to grow: one commit-record poll per stream per process, shared.

Every request that waits on a stream (a consumer's long poll at the end of the log, a producer's
``?wait=`` for its batch) waits here, as a coroutine, on that stream's :class:`_Watch`. One task
per watched stream polls the stream's commit record (one ``Get Blob Properties``, async) and wakes
all its waiters when the committed length changes. So a thousand consumers tailing one stream
cost one poll, not a thousand, and none of them holds a thread.

Polling backs off from :data:`FIRST_POLL` to :data:`LONGEST_POLL` while a stream stays quiet and
starts again at the first step once it moves: a stream that just grew is likely to grow again
soon. The process polls at most :data:`MAX_POLLS_PER_SECOND` times a second across all streams,
so many quiet streams stretch each other's interval rather than load the storage account (and
the producers that share it).

How many requests may wait at once is bounded per process (:class:`WaitSlots`): past the bound a
long poll is answered ``429`` with ``Retry-After`` at once, so waiting consumers can never crowd
out producers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from vault_core.errors import VaultError
from vault_core.pagelog import CommitState
from vault_core.retry import Backoff, budget

log = logging.getLogger("vault_app.tail")

FIRST_POLL = 0.05
"""Seconds before a stream's second poll; doubled while nothing changes."""
LONGEST_POLL = 1.0
"""Seconds between polls of a quiet stream: the most a waiter on it lags a commit, normally."""
MAX_POLLS_PER_SECOND = 50.0
"""Commit-record polls per second this process makes at most, across all watched streams."""
POLL_BUDGET_SECONDS = 2.0
"""Each poll's storage time: a stalled account makes a poll fail, not hang."""

ReadCommitState = Callable[[str], Awaitable[CommitState]]
ReadAllCommitStates = Callable[[], Awaitable[dict[str, CommitState]]]
SWEEP_ABOVE = 8
"""With more streams watched than this, one listing of every stream's commit record (a blob
listing with metadata) replaces a poll per stream: one request however many are watched."""
SWEEP_INTERVAL = 1.0
"""Seconds between two listings, at most one at a time: every watch reads the latest."""
SWEEP_MAX_STREAMS = 2000
"""A container holding more streams than this is not listed (the listing would cost more than
polling the watched ones): each watch polls its own stream again."""


@dataclass
class _Watch:
    state: CommitState | None = None
    waiters: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)


class Tails:
    """The watched streams of one event loop."""

    def __init__(
        self,
        read_state: ReadCommitState,
        read_all: ReadAllCommitStates | None = None,
        *,
        first: float = FIRST_POLL,
        longest: float = LONGEST_POLL,
        max_polls_per_second: float = MAX_POLLS_PER_SECOND,
    ) -> None:
        self._read = read_state
        self._read_all = read_all
        self._sweep: asyncio.Future[dict[str, CommitState]] | None = None
        self._swept_at = -1e9
        self._listing_fits = True
        self._first = first
        self._longest = longest
        self._max_rate = max_polls_per_second
        self._watches: dict[str, _Watch] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def at_end(self, stream: str, offset: int) -> bool:
        """Whether ``offset`` is where ``stream`` ended at its last poll (at most a poll interval
        ago): a consumer asking for it can start waiting without a read of its own. Its offset
        is then a proven boundary too, the committed end."""
        watch = self._watches.get(stream)
        return watch is not None and watch.state is not None and watch.state.committed == offset

    async def wait_past(self, stream: str, offset: int, timeout: float) -> CommitState | None:
        """Wait until ``stream`` is committed past ``offset``, at most ``timeout`` seconds.

        Returns the commit record last seen (None if no poll answered in time): committed past
        ``offset`` unless the time ran out.
        """
        watch = self._watches.get(stream)
        if watch is None:
            watch = self._watches[stream] = _Watch()
            task = asyncio.get_running_loop().create_task(self._poll(stream, watch))
            self._tasks.add(task)  # a reference, so the task is not collected while it runs
            task.add_done_callback(self._tasks.discard)
        watch.waiters += 1
        try:
            deadline = asyncio.get_running_loop().time() + timeout
            while watch.state is None or watch.state.committed <= offset:
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0:
                    break
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(watch.changed.wait(), left)
            return watch.state
        finally:
            watch.waiters -= 1

    async def _poll(self, stream: str, watch: _Watch) -> None:
        backoff = Backoff(self._first, self._longest)
        try:
            while watch.waiters > 0:
                try:
                    with budget(POLL_BUDGET_SECONDS):  # its own: not the budget of the request that began it
                        state: CommitState | None = await self._state_of(stream)
                except VaultError as exc:  # storage down or slow: the waiters time out, or it recovers
                    log.debug("tail of %s: commit record unreadable: %s", stream, exc)
                    state = None
                if state is not None and (watch.state is None or state.committed != watch.state.committed):
                    watch.state = state
                    watch.changed.set()  # wakes every waiter; each checks its own offset
                    watch.changed = asyncio.Event()
                    backoff.reset()
                spacing = 0.0 if self._sweeping() else len(self._watches) / self._max_rate
                await asyncio.sleep(max(backoff.next(), spacing))
        finally:
            if self._watches.get(stream) is watch:
                del self._watches[stream]

    def _sweeping(self) -> bool:
        return self._read_all is not None and self._listing_fits and len(self._watches) > SWEEP_ABOVE

    async def _state_of(self, stream: str) -> CommitState | None:
        """The stream's commit record: from the shared listing when many streams are watched."""
        if not self._sweeping():
            return await self._read(stream)
        loop = asyncio.get_running_loop()
        if self._sweep is None or (self._sweep.done() and loop.time() - self._swept_at >= SWEEP_INTERVAL):
            self._swept_at = loop.time()
            self._sweep = loop.create_task(self._list())
        states = await asyncio.shield(self._sweep)
        return states.get(stream)

    async def _list(self) -> dict[str, CommitState]:
        assert self._read_all is not None
        states = await self._read_all()
        self._listing_fits = len(states) <= SWEEP_MAX_STREAMS
        return states


class WaitSlots:
    """At most ``limit`` requests of this process wait at once; past that, :class:`Busy`."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.waiting = 0

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        if self.waiting >= self.limit:
            raise Busy(self.limit)
        self.waiting += 1
        try:
            yield
        finally:
            self.waiting -= 1


class Busy(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(f"this instance already holds {limit} waiting requests (VAULT_MAX_WAITING)")
        self.limit = limit
