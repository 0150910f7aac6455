"""Retrying storage calls, and the one time budget that bounds them on a request path.

An HTTP request must answer ``503`` promptly when storage is down, before a client's own
timeout (often 30 s) gives up on it: so every storage call made while a :func:`budget` is
active shares its deadline. :func:`request_hook` is installed in every storage client of
:class:`vault_core.azure.StorageAccount`; on each attempt (the SDK's own retries included)
it caps the connect and read timeouts at the time left, and once none is left it raises
:class:`BudgetExhausted`, which is not an ``AzureError`` so no SDK retry loop retries it.
Code without a budget (the writer, Spark, the client) keeps the SDKs' patient defaults.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from vault_core.errors import StorageUnavailable

T = TypeVar("T")

REQUEST_BUDGET_SECONDS = 4.0
"""Every storage call of one HTTP request together, retries included: well under the 30 s
that many HTTP clients wait, so they see the ``503`` and its ``Retry-After``. The default of
:func:`request_budget`; an app may set another (:func:`set_request_budget`)."""

_deadline: ContextVar[float | None] = ContextVar("vault_storage_deadline", default=None)
_request_budget = REQUEST_BUDGET_SECONDS


def set_request_budget(seconds: float) -> None:
    """The budget of every request of this process from now on (the app's setting)."""
    global _request_budget
    if not seconds > 0:
        raise ValueError(f"a request's storage budget must be positive, got {seconds}")
    _request_budget = seconds


def request_budget() -> float:
    """Seconds one request's storage calls may take together: REQUEST_BUDGET_SECONDS unless set."""
    return _request_budget


class BudgetExhausted(Exception):
    """The request's storage budget ran out (translated to StorageUnavailable)."""


@contextmanager
def budget(seconds: float | None = None) -> Iterator[None]:
    """Bound every storage call in this block (this thread or task) by one deadline, ``seconds``
    from now (by default, a request's: :func:`request_budget`)."""
    token = _deadline.set(time.monotonic() + (request_budget() if seconds is None else seconds))
    try:
        yield
    finally:
        _deadline.reset(token)


def remaining() -> float | None:
    """Seconds left in the current budget, or None when there is none."""
    deadline = _deadline.get()
    return None if deadline is None else deadline - time.monotonic()


def request_hook(request: Any) -> None:
    """Per-attempt hook of the storage pipelines (``raw_request_hook``): enforce the budget."""
    left = remaining()
    if left is None:
        return
    if left <= 0.05:
        raise BudgetExhausted("the request's storage time budget is spent")
    options = request.context.options
    options["connection_timeout"] = min(float(options.get("connection_timeout", left)), left)
    options["read_timeout"] = min(float(options.get("read_timeout", left)), left)


_waited = threading.local()


def note_backoff(seconds: float) -> None:
    """Count time this thread waits on storage that refused it (a retry's back-off): see
    :func:`backed_off`."""
    _waited.seconds = backed_off() + seconds


def backed_off() -> float:
    """Seconds this thread has spent so far waiting on storage that refused it: the storage
    SDKs' retry back-offs, and what a caller counts with :func:`note_backoff`."""
    return float(getattr(_waited, "seconds", 0.0))


def with_retries(
    op: Callable[[], T],
    attempts: int = 4,
    base: float = 0.2,
    *,
    pace: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Retry :class:`StorageUnavailable` with exponential back-off and jitter, or every ``pace``
    seconds (a busy queue's next tokens met as they come in).

    Within a :func:`budget`, never sleeps past its deadline: the last error is raised instead.
    """
    for attempt in range(attempts):
        try:
            return op()
        except StorageUnavailable:
            delay = base * (2**attempt) * (0.5 + random.random()) if pace is None else pace
            left = remaining()
            if attempt == attempts - 1 or (left is not None and left < delay + 0.1):
                raise
            sleep(delay)
    raise AssertionError("unreachable")


class Backoff:
    """Waits that double from ``first`` up to ``longest``: the one back-off of every poll loop."""

    def __init__(self, first: float, longest: float) -> None:
        self.first = first
        self.longest = longest
        self._next = first

    def next(self) -> float:
        """The wait before the next try; the one after it is twice as long (up to ``longest``)."""
        delay = self._next
        self._next = min(delay * 2, self.longest)
        return delay

    def reset(self) -> None:
        """Something arrived: the next wait is short again."""
        self._next = self.first


def poll(
    fetch: Callable[[], T],
    done: Callable[[T], bool],
    wait: float,
    *,
    first: float = 0.05,
    longest: float = 1.0,
    each_within: float | None = REQUEST_BUDGET_SECONDS,
) -> T:
    """Call ``fetch`` until ``done`` says so or ``wait`` seconds pass; the last value fetched.

    Back-off between calls from ``first`` to ``longest`` seconds. On a request path each call
    gets a fresh storage budget of ``each_within`` seconds, so a long wait is not cut short by
    the request's budget, while a call made when storage is down still fails within one budget;
    ``None`` (libraries, the client) sets no budget.
    """
    deadline = time.monotonic() + wait
    backoff = Backoff(first, longest)
    while True:
        if each_within is None:
            value = fetch()
        else:
            with budget(each_within):
                value = fetch()
        left = deadline - time.monotonic()
        if done(value) or left <= 0:
            return value
        time.sleep(min(backoff.next(), left))
