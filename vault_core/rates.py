"""Ingest rates per minute, from the minute marks the writer keeps in the index table.

A minute mark is the first record of a minute that has records (its offset, its timestamp and
how many records come before it): see :meth:`vault_core.index.IndexTables.minute_marks`. The
records of a minute are exactly those from its mark to the next mark (or to the committed
end), so the counts are exact, not sampled; only a mark lost to a crash (derived data) would
fold its minute into the one before. docs/ARCHITECTURE.md §11 has the reasoning.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from vault_core.index import MINUTE_MS, IndexPoint


@dataclass(frozen=True)
class MinuteRate:
    start: int
    """The minute's first millisecond (epoch, UTC)."""
    messages: int
    bytes: int
    seconds: float
    """How much of the minute has passed: 60, but less for the minute that is still running."""


def per_minute(
    marks: Sequence[IndexPoint], committed: int, count: int, first_ms: int, now_ms: int
) -> list[MinuteRate]:
    """One entry per minute from ``first_ms``'s minute to ``now_ms``'s, oldest first.

    ``marks`` ascending by offset; ``committed`` and ``count`` the stream's commit record, read
    after the marks (so no mark lies past it). Minutes without records count zero.
    """
    first, last = first_ms // MINUTE_MS, now_ms // MINUTE_MS
    totals: dict[int, tuple[int, int]] = {}
    ends = [*marks[1:], IndexPoint(committed, now_ms, count)] if marks else []
    for mark, end in zip(marks, ends, strict=True):
        minute = mark.timestamp // MINUTE_MS
        if first <= minute <= last:
            messages, size = totals.get(minute, (0, 0))
            totals[minute] = (
                messages + max(0, end.count - mark.count),
                size + max(0, end.offset - mark.offset),
            )
    out = []
    for minute in range(first, last + 1):
        messages, size = totals.get(minute, (0, 0))
        elapsed = 60.0 if minute < last else max(1.0, (now_ms - minute * MINUTE_MS) / 1000)
        out.append(MinuteRate(minute * MINUTE_MS, messages, size, elapsed))
    return out
