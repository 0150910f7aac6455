"""How the Functions host paces a queue trigger's polls and its storage retries, for vault_local.host.

The local host must be no faster than Azure's between two invocations of a queue function, or a
benchmark through the throttling front (docs/CAPACITY.md §7.4) would credit the vault with time
the real host does not give it. What the real host does, as its queue listener is written (the
WebJobs SDK's ``QueueListener`` and ``RandomizedExponentialBackoffStrategy``; the Storage queues
extension's clients keep Azure.Core's default retry options):

* A poll that found messages is followed, once they are processed down to ``newBatchThreshold``
  (their deletes included), by the next poll at once.
* A poll that found nothing **and a poll that storage refused** (any 5xx, such as 503
  ``ServerBusy``, once the client's own retries are spent) are treated alike: the listener waits,
  then polls again. The first wait after a poll that found messages is the minimum, 100 ms;
  each further one adds a randomised, doubling increment (100 ms × 2ⁿ⁻¹ × 0.8 to 1.2), up to
  ``maxPollingInterval``. So a refusing queue is left idle as an empty one is.
* Every storage call (the poll, the trigger's delete, its visibility renewals) is retried by
  the client on a 503 up to 3 times, after 0.8 s, 1.6 s and 3.2 s (each × 0.8 to 1.2): a
  refusal costs the host seconds, not a queue's next token.
"""

from __future__ import annotations

import random
from functools import lru_cache
from typing import Any

MINIMUM_POLLING_INTERVAL = 0.1
"""Seconds: the host's shortest wait between polls (``QueuePollingIntervals.Minimum``)."""
RANDOMISATION = 0.2
"""Each wait's increment, and each retry's delay, is scaled by a random factor within ±20 %."""
HOST_RETRIES = 3
"""Retries of one storage call the host makes on a 503 (Azure.Core's ``RetryOptions.MaxRetries``)."""
HOST_RETRY_DELAY = 0.8
"""Seconds before the host's first retry, doubling for each next one (``RetryOptions.Delay``)."""


class PollingDelay:
    """The waits between a queue trigger's polls, as the Functions host spaces them.

    Call :meth:`found` after a poll that found messages and :meth:`next` for the wait after one
    that found none or was refused.
    """

    def __init__(self, longest: float, *, shortest: float = MINIMUM_POLLING_INTERVAL) -> None:
        if not 0 <= shortest <= longest:
            raise ValueError(f"polling waits need 0 <= shortest <= longest, got {shortest}, {longest}")
        self.shortest = shortest
        self.longest = longest
        self._current = 0.0
        self._exponent = 0
        self._found = False

    def found(self) -> None:
        """A poll found messages: the next wait, if one comes, is the shortest again."""
        self._found = True

    def next(self) -> float:
        """Seconds to wait before the next poll, after one that found nothing or was refused."""
        if self._found:
            self._found = False
            self._current, self._exponent = self.shortest, 1
        elif self._current != self.longest:
            wait = self.shortest
            if self._exponent > 0:
                scale = random.uniform(1 - RANDOMISATION, 1 + RANDOMISATION)
                wait += scale * 2 ** (self._exponent - 1) * self.shortest
            if wait < self.longest:
                self._current, self._exponent = wait, self._exponent + 1
            else:
                self._current = self.longest
        return self._current


def retry_delay(retry: int) -> float:
    """Seconds the host's storage client waits before its ``retry``-th retry (1, 2, 3)."""
    return HOST_RETRY_DELAY * 2 ** (retry - 1) * random.uniform(1 - RANDOMISATION, 1 + RANDOMISATION)


@lru_cache(maxsize=1)
def _host_retry_class() -> type[Any]:
    # azure-storage-queue is imported on first use, as vault_core.azure does.
    from azure.storage.queue import ExponentialRetry

    class HostRetry(ExponentialRetry):  # type: ignore[misc]
        """The storage SDK's retry policy with the Functions host's delays (:func:`retry_delay`)."""

        def get_backoff_time(self, settings: dict[str, Any]) -> float:
            return retry_delay(max(1, int(settings["count"])))

    return HostRetry


def host_retry_policy() -> Any:
    """A retry policy for the host's own queue clients: up to :data:`HOST_RETRIES` retries of a
    refused call, after the delays of :func:`retry_delay`."""
    return _host_retry_class()(retry_total=HOST_RETRIES)
