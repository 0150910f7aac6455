"""Which staging queue takes a batch: the stream's own queue while it is healthy, another while it
is not (docs/ARCHITECTURE.md §2.5).

Every stream has a fixed order of preference over all queues of all accounts: its home queue
first (``crc32(stream) mod A × Q``, §2.3), then the others in an order of its own (highest
``crc32(stream/queue index)`` first, "rendezvous hashing"), so a stream that leaves its home goes
to the same second queue from every instance, and streams that leave one queue spread over the
others instead of all landing on the next. A batch goes to the first queue in that order that
is **healthy**, and **sticks** there while that queue is merely busy:

- a healthy first choice that refuses a send is tried again, STICK_ATTEMPTS times in all,
  STICK_PACE_SECONDS apart (within the request's storage budget): a queue at its target takes
  one of them as its tokens come in, and the stream's batches stay in one queue, with one writer,
  rather than spread over two whose writers then meet on the stream's lease (a hand-back each);
  only a queue that refuses all of them has stayed refused, and the batch moves on;
- a queue that stayed refused (throttled, unreachable, stalled) is unhealthy for a cool-down,
  0.5 s at first and doubling while it keeps refusing, up to 8 s; the first send that succeeds
  after it makes the queue healthy again and resets the cool-down;
- an account with two or more of its queues unhealthy at once is unhealthy as a whole (an
  account over its own target refuses on every queue), until those queues recover.

Health is what this process observed; every instance keeps its own, from its own traffic, and
needs no coordination. When every queue is unhealthy the tier is over capacity: a POST tries
only the queue due back first, and if that refuses too it is answered 503 with a
``Retry-After`` of the time until the first queue is due back.
"""

from __future__ import annotations

import functools
import math
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from vault_core.errors import StorageUnavailable
from vault_core.retry import with_retries

FIRST_COOL_DOWN = 0.5
"""Seconds a queue that refused a send is passed over, the first time."""
LONGEST_COOL_DOWN = 8.0
"""The cool-down doubles while the queue keeps refusing, up to this."""
ACCOUNT_UNHEALTHY_QUEUES = 2
"""An account with this many queues unhealthy at once is passed over as a whole."""
STICK_ATTEMPTS = 8
"""Sends a POST makes to its stream's first healthy queue before it has stayed refused: 1.75 s
of them, within the request's 4 s budget. With 4 (0.75 s), 2 saturated queues still answered
half their POSTs 503 after trying both (docs/CAPACITY.md §7.4)."""
STICK_PACE_SECONDS = 0.25
"""Between those sends: the pace of the writer's own attempts on a refusing queue
(vault_app.writer_fn.DELETE_PACE_SECONDS), so a busy queue's next tokens are met, not missed."""
TRIES_PER_BATCH = 3
"""Queues one POST tries before it answers 503: enough to step past one throttled queue or
account, few enough that a tier over capacity answers at once rather than adding load."""


class TierBusy(StorageUnavailable):
    """No staging queue took the batch: every queue tried refused or is cooling down."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        """Seconds until the first queue is due back (the 503's ``Retry-After``)."""


@dataclass
class _Health:
    until: float = 0.0
    """Monotonic time until which the queue is passed over (0: healthy)."""
    cool_down: float = 0.0
    """The next cool-down, if it refuses again."""


def preference(stream: str, queues: int) -> list[int]:
    """Queue indexes in the stream's order of preference: home first, then by rendezvous hash."""
    home = zlib.crc32(stream.encode()) % queues
    others = sorted(
        (i for i in range(queues) if i != home),
        key=lambda i: zlib.crc32(f"{stream}/{i}".encode()),
        reverse=True,
    )
    return [home, *others]


class Steering:
    """Queue health as this process observed it, and the choice of queue it makes."""

    def __init__(self, accounts: Sequence[int], clock: Callable[[], float] = time.monotonic) -> None:
        self.accounts = list(accounts)
        """The account of each queue, by queue index."""
        self.clock = clock
        self._health = [_Health() for _ in self.accounts]
        self._lock = threading.Lock()

    def candidates(self, stream: str) -> list[int]:
        """Up to :data:`TRIES_PER_BATCH` queues to try in turn: the healthy ones in the stream's
        order of preference. When every queue is cooling down, the one due back first, alone:
        one probe per batch, so that a tier that recovered is used again at once rather than
        after the cool-downs (which an outage may have stretched to their longest)."""
        now = self.clock()
        order = preference(stream, len(self.accounts))
        with self._lock:
            sick_accounts = self._sick_accounts(now)
            healthy = [
                i for i in order if self._health[i].until <= now and self.accounts[i] not in sick_accounts
            ]
            if not healthy:  # every account is sick: its healthy queues still get a try
                healthy = [i for i in order if self._health[i].until <= now]
            if not healthy:
                healthy = [min(order, key=lambda i: self._health[i].until)]
        return healthy[:TRIES_PER_BATCH]

    def _sick_accounts(self, now: float) -> set[int]:
        unhealthy: dict[int, int] = {}
        for i, health in enumerate(self._health):
            if health.until > now:
                unhealthy[self.accounts[i]] = unhealthy.get(self.accounts[i], 0) + 1
        return {a for a, n in unhealthy.items() if n >= ACCOUNT_UNHEALTHY_QUEUES}

    def refused(self, queue: int) -> None:
        """A send to ``queue`` failed with StorageUnavailable: pass it over for a while."""
        with self._lock:
            health = self._health[queue]
            cool_down = health.cool_down or FIRST_COOL_DOWN
            health.until = self.clock() + cool_down
            health.cool_down = min(cool_down * 2, LONGEST_COOL_DOWN)

    def accepted(self, queue: int) -> None:
        """A send to ``queue`` succeeded: it is healthy again."""
        health = self._health[queue]
        if health.cool_down:
            with self._lock:
                health.until = 0.0
                health.cool_down = 0.0

    def retry_after(self) -> int:
        """Whole seconds until the first queue is due back (at least 1)."""
        now = self.clock()
        with self._lock:
            soonest = min(h.until for h in self._health)
        return max(1, math.ceil(soonest - now))

    def healthy(self, queue: int) -> bool:
        """Whether ``queue`` is not being passed over now."""
        with self._lock:
            return self._health[queue].until <= self.clock()

    def unhealthy(self) -> list[int]:
        """The queues passed over now (for logs and tests)."""
        now = self.clock()
        with self._lock:
            return [i for i, h in enumerate(self._health) if h.until > now]


def send_steered(
    steering: Steering,
    stream: str,
    send: Callable[[int], object],
    *,
    retry_alone: Callable[[int], object],
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Send with ``send(queue index)`` to the stream's first healthy queue that takes it; the index.

    The first queue, if healthy, gets up to :data:`STICK_ATTEMPTS` sends (it is merely busy
    unless it refuses them all); each next one gets one attempt (a refusal moves on to the next
    at once, rather than waiting out back-offs on a queue that said it is over its target). A
    tier of one queue has nowhere to steer to: ``retry_alone`` sends there with the usual
    retries. Raises :class:`TierBusy` when no queue took the batch.
    """
    if len(steering.accounts) == 1:
        retry_alone(0)
        return 0
    last: StorageUnavailable | None = None
    for n, queue in enumerate(steering.candidates(stream)):
        attempts = STICK_ATTEMPTS if n == 0 and steering.healthy(queue) else 1
        try:
            with_retries(functools.partial(send, queue), attempts, pace=STICK_PACE_SECONDS, sleep=sleep)
        except StorageUnavailable as exc:
            steering.refused(queue)
            last = exc
            continue
        steering.accepted(queue)
        return queue
    reason = f"the last refused: {last}" if last else "every queue is cooling down after refusing"
    raise TierBusy(
        f"every staging queue is over its target or unavailable ({reason})", steering.retry_after()
    )
