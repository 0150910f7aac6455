"""Planning: which committed byte ranges each Spark task reads. No Spark in this module.

A partition is ``(stream, start, end)``: a committed byte range that starts and ends on record
boundaries, so a task can decode it without looking outside it. Boundaries come from the
sparse index (:meth:`IndexTables.points`, about one per MiB of log), never from scanning
the log, so planning a terabyte stream costs a few Table queries. Time bounds are resolved
with :meth:`StreamReader.seek_time` (one index lookup plus at most ~1 MiB of log).

Partitions carry their connection as plain strings (:class:`Connection`) and their read
settings, so an executor needs nothing but the partition.
"""

from __future__ import annotations

import bisect
import itertools
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from vault_core.errors import InvalidOffset, StreamNotFound
from vault_core.recordformat import HEADER_SIZE, frame_at
from vault_core.spark.connection import Clients, Connection, clients
from vault_core.spark.options import (
    DEFAULT_CHUNK_BYTES,
    DEFAULT_PREFETCH,
    Position,
    ReadOptions,
)
from vault_core.unitformat import UNIT_HEADER_SIZE

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StreamRange:
    """Committed bytes ``[start, end)`` of one stream; both ends are record or unit boundaries."""

    stream: str
    start: int
    end: int
    first: int | None = None
    """A message offset inside the version 2 unit at ``start``: the rows before it are left out
    (a ``fromOffset`` inside a unit; docs/FORMAT.md §11.6)."""
    stop: int | None = None
    """A message offset inside the unit that ends at ``end``: it and the rows after it are left out."""

    @property
    def size(self) -> int:
        return self.end - self.start

    @classmethod
    def since(cls, stream: str, done: int, committed: int, remedy: str) -> StreamRange | None:
        """The bytes committed to ``stream`` after the ``done`` already read; None if none.

        A log shorter than what was read was deleted and recreated: a ValueError that says so and
        what to do (``remedy``), never a silent re-read from a wrong place."""
        if committed < done:
            raise ValueError(
                f"stream {stream!r} has {committed} committed bytes but {done} were already read: "
                f"was it deleted and recreated? {remedy}"
            )
        return cls(stream, done, committed) if committed > done else None


@dataclass(frozen=True)
class ReadSettings:
    """How a task reads its range: what executors need besides the range itself."""

    skip_corrupt: bool = False
    corrupt_report_path: str | None = None
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    prefetch: int = DEFAULT_PREFETCH

    @classmethod
    def of(cls, options: ReadOptions) -> ReadSettings:
        return cls(options.skip_corrupt, options.corrupt_report_path, options.chunk_bytes, options.prefetch)


@dataclass(frozen=True)
class Partition:
    """One task's work: a range, where it lives and how to read it. Picklable, no SDK objects."""

    range: StreamRange
    connection: Connection
    settings: ReadSettings = ReadSettings()

    @property
    def stream(self) -> str:
        return self.range.stream

    @property
    def start(self) -> int:
        return self.range.start

    @property
    def end(self) -> int:
        return self.range.end


def split_range(start: int, end: int, boundaries: Iterable[int], max_bytes: int) -> list[tuple[int, int]]:
    """Cut ``[start, end)`` at some of ``boundaries`` (ascending) into pieces of at most ``max_bytes``.

    Greedy: each piece ends at the furthest boundary that keeps it within ``max_bytes``. Where
    two consecutive boundaries are further apart than that, the piece is as small as the
    boundaries allow (one index spacing), never empty.
    """
    if start >= end:
        return []
    edges = [start]
    best: int | None = None  # furthest boundary within max_bytes of the last edge
    for b in boundaries:
        if b <= edges[-1] or b >= end:
            continue
        if b - edges[-1] > max_bytes:
            if best is not None:
                edges.append(best)
                best = None
            if b - edges[-1] > max_bytes:
                edges.append(b)
                continue
        best = b
    if end - edges[-1] > max_bytes and best is not None:
        edges.append(best)
    edges.append(end)
    return list(itertools.pairwise(edges))


def even_cuts(start: int, end: int, boundaries: Sequence[int], pieces: int) -> list[int]:
    """Up to ``pieces - 1`` of ``boundaries`` (ascending) that cut ``[start, end)`` into about equal
    parts: for each ``k``, the boundary nearest ``start + k * (end - start) / pieces``."""
    inside = [b for b in boundaries if start < b < end]
    cuts: list[int] = []
    for k in range(1, pieces):
        if not inside:
            break
        target = start + k * (end - start) // pieces
        i = bisect.bisect_left(inside, target)
        near = min(inside[max(0, i - 1) : i + 1], key=lambda b: abs(b - target))
        if not cuts or near > cuts[-1]:
            cuts.append(near)
    return cuts


class Planner:
    """Resolves positions to offsets and splits ranges, for one connection (driver side)."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.clients: Clients = clients(connection)

    def committed(self, stream: str, *, missing_ok: bool = False) -> int:
        """The committed length from the commit record; a missing stream is 0 if ``missing_ok``."""
        try:
            return self.clients.blob(stream).state().committed
        except StreamNotFound:
            if missing_ok:
                return 0
            raise StreamNotFound(
                f"stream {stream!r} does not exist in container {self.connection.container!r}"
            ) from None

    def resolve(self, stream: str, position: Position, committed: int, *, is_end: bool) -> int:
        """The byte offset of ``position`` in ``stream``, given its committed length now."""
        if position.kind == "earliest":
            return 0
        if position.kind == "latest":
            return committed
        if position.kind == "time":
            if committed == 0:
                return 0
            # seek_time reads its own commit record, which may be newer: never go past ours.
            return min(self.clients.reader.seek_time(stream, position.value), committed)
        offset = position.value
        if offset > committed:
            if is_end:
                return committed  # "up to offset N" when less is committed: read what there is
            raise InvalidOffset(
                f"fromOffset {offset} is past the committed end of stream {stream!r} ({committed})"
            )
        if 0 < offset < committed:
            # Raises InvalidOffset unless a message has exactly this offset (one small ranged GET).
            self.clients.reader.read(stream, offset, max_bytes=HEADER_SIZE, max_count=1)
        return offset

    def unit_around(self, stream: str, offset: int, committed: int) -> tuple[int, int] | None:
        """``(start, end)`` of the version 2 unit that holds the message ``offset`` inside it (not
        at its start), or None when a frame starts at ``offset``: a partition must not cut a unit."""
        if not 0 < offset < committed:
            return None
        reader = self.clients.reader
        start = reader.boundaries.prove(stream, offset, committed, reader.log(stream).read)
        if start == offset:
            return None
        frame = frame_at(reader.log(stream).read(start, UNIT_HEADER_SIZE), 0)
        assert frame is not None  # proven: the unit's header lies before the committed end
        # a damaged length may run past the committed end: no partition reads there (FORMAT.md §7.2)
        return start, min(start + frame.length, committed)

    def resolve_range(
        self, stream: str, start: Position, end: Position, *, missing_ok: bool = False
    ) -> StreamRange:
        committed = self.committed(stream, missing_ok=missing_ok)
        lo = self.resolve(stream, start, committed, is_end=False)
        hi = self.resolve(stream, end, committed, is_end=True)
        if lo > hi:
            raise InvalidOffset(
                f"stream {stream!r}: the start ({start} → offset {lo}) is after the end ({end} → offset {hi})"
            )
        if lo == hi:
            return StreamRange(stream, lo, hi)
        first_unit = self.unit_around(stream, lo, committed)
        last_unit = self.unit_around(stream, hi, committed)
        return StreamRange(
            stream,
            first_unit[0] if first_unit else lo,
            last_unit[1] if last_unit else hi,
            lo if first_unit else None,
            hi if last_unit else None,
        )

    def split(self, r: StreamRange, max_bytes: int, pieces: int = 1) -> list[StreamRange]:
        """``r`` cut at index points into at least ``pieces`` about equal parts (where the points
        allow) of at most about ``max_bytes`` each; one piece without an index."""
        if r.size <= 0:
            return []
        if r.size <= max_bytes and pieces <= 1:
            return [r]
        index = self.clients.index
        if index is None:
            log.warning(
                "no table endpoint for the index: stream %s is read as one partition (%d bytes)",
                r.stream,
                r.size,
            )
            return [r]
        points = [p.offset for p in index.points(r.stream, r.start, r.end)]
        edges = [r.start, *even_cuts(r.start, r.end, points, pieces), r.end]
        out = [
            StreamRange(r.stream, a, b)
            for lo, hi in itertools.pairwise(edges)
            for a, b in split_range(lo, hi, points, max_bytes)
        ]
        out[0] = replace(out[0], first=r.first)
        out[-1] = replace(out[-1], stop=r.stop)
        return out

    def partitions(self, ranges: Sequence[StreamRange], options: ReadOptions) -> list[Partition]:
        """Each range cut at ``maxPartitionBytes``; with ``minPartitions``, every range also gets
        its share of that many (by size), so that a small read still spreads over every core."""
        settings = ReadSettings.of(options)
        total = sum(r.size for r in ranges)
        want = options.min_partitions

        def share(r: StreamRange) -> int:
            return -(-want * r.size // total) if want > 1 and total else 1  # rounded up: ``want`` in all

        return [
            Partition(piece, self.connection, settings)
            for r in ranges
            for piece in self.split(r, options.max_partition_bytes, share(r))
        ]


def plan_read(options: ReadOptions) -> list[Partition]:
    """The partitions of a batch read: every stream's range between its from and to positions."""
    planner = Planner(options.connection)
    ranges = [
        planner.resolve_range(s, options.start.for_stream(s), options.end.for_stream(s))
        for s in options.streams
    ]
    return planner.partitions(ranges, options)
