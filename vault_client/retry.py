"""When to try a request again, and how long to wait first.

Exponential back-off with *full jitter* (a random delay between 0 and the exponential cap)
spreads retries of many producers apart, so a throttled server is not hit by a synchronised
wave. A server's ``Retry-After`` wins over the computed delay: the server knows how long.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

RETRIABLE_STATUS = frozenset({429, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 8
    """Tries in all, the first included; 1 means never retry."""
    base: float = 0.1
    """Cap of the first back-off, in seconds; it doubles per attempt."""
    cap: float = 10.0
    """No back-off is longer than this (a Retry-After is capped at ``max_retry_after``)."""
    max_retry_after: float = 60.0
    deadline: float | None = 120.0
    """Give up once this many seconds have passed since the first try (None: attempts only)."""

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to sleep before try number ``attempt + 1`` (``attempt`` counts from 0)."""
        if retry_after is not None:
            # A little jitter on top, so clients told the same Retry-After do not return together.
            return min(retry_after, self.max_retry_after) + random.uniform(0, self.base)
        return random.uniform(0, min(self.cap, self.base * (2**attempt)))

    def should_retry(self, attempt: int, started: float, delay: float) -> bool:
        """Whether try ``attempt + 1`` is allowed, given it would start after ``delay`` more seconds."""
        if attempt + 1 >= self.attempts:
            return False
        return self.deadline is None or time.monotonic() + delay - started <= self.deadline


NO_RETRY = RetryPolicy(attempts=1)


def parse_retry_after(raw: str | None) -> float | None:
    """``Retry-After`` as seconds: a number, or an HTTP date; None if absent or unreadable."""
    if not raw:
        return None
    raw = raw.strip()
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
