"""Reading a long byte range of a log as large ranged GETs, several in flight.

The full scan (:func:`vault_core.reader.scan_log`) and every Spark task
(:mod:`vault_core.spark.partition_reader`) read a stream this way: the range is cut into
``chunk``-sized pieces, up to ``prefetch`` of them are being downloaded while the caller decodes
the oldest, and the pieces come back in order. Memory stays at about ``prefetch + 1`` chunks
however long the range, and decoding overlaps the network.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Generator, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import NamedTuple, Protocol

from vault_core.errors import StorageFailure


class RangeReads(Protocol):
    """What the downloader needs of a log (a :class:`~vault_core.pagelog.ReadableLog` is one)."""

    @property
    def stream(self) -> str: ...

    def read(self, start: int, length: int) -> bytes:
        """Bytes ``[start, start+length)``; safe to call from several threads at once."""
        ...


def prefetched_chunks(
    log: RangeReads, start: int, end: int, *, chunk: int, prefetch: int, first: int | None = None
) -> Generator[tuple[bytes, bool], None, None]:
    """``[start, end)`` of ``log`` in order, as ``(bytes, is_last)`` pieces of ``chunk`` bytes
    (the last may be shorter), with up to ``prefetch`` ranged reads in flight.

    With ``first``, the pieces start at that size and double up to ``chunk`` (:func:`ramped`):
    the caller gets its first bytes after a small read instead of a whole chunk's.

    A read that returns fewer bytes than asked raises :class:`StorageFailure` (the caller asked
    only for bytes below the committed length, which storage must hold). Closing the generator
    early cancels the reads not yet started; those under way finish in the background.
    """
    reads = prefetched_reads(log, start, end, chunk=chunk, prefetch=prefetch, first=first)
    try:
        for read, last in reads:
            yield read.result(), last
    finally:
        reads.close()


class PendingRead(NamedTuple):
    """One ranged read of :func:`prefetched_reads`, under way."""

    log: RangeReads
    length: int
    future: Future[bytes]

    def result(self) -> bytes:
        """Its bytes, once read (waits); :class:`StorageFailure` if storage returned fewer."""
        data = self.future.result()
        if len(data) != self.length:
            stream = self.log.stream
            raise StorageFailure(f"short read from stream {stream!r}: {len(data)} of {self.length} bytes")
        return data


def prefetched_reads(
    log: RangeReads, start: int, end: int, *, chunk: int, prefetch: int, first: int | None = None
) -> Generator[tuple[PendingRead, bool], None, None]:
    """:func:`prefetched_chunks`'s reads as they are started, in order, ``(read, is_last)``: for a
    caller that hands a read to another thread to wait on (the scan's, which checks the next read
    while its consumer takes the one before). Taking a read starts the next one, so ``prefetch``
    stay in flight beyond those taken. Closing the generator cancels the reads not yet started."""
    if chunk <= 0:
        raise ValueError(f"chunk must be positive, got {chunk}")
    width = max(1, prefetch)
    # The ranges are made as they are read, never listed up front: a scan that stops early (a
    # time seek's, a page's) costs what it reads, whatever the committed length it may go to.
    ranges = ramped(start, end, chunk, chunk if first is None else first)
    upcoming = next(ranges, None)
    pool = ThreadPoolExecutor(max_workers=width, thread_name_prefix=f"mv-read-{log.stream}")
    pending: deque[PendingRead] = deque()

    def fill() -> None:
        nonlocal upcoming
        while upcoming is not None and len(pending) < width:
            p, n = upcoming
            pending.append(PendingRead(log, n, pool.submit(log.read, p, n)))
            upcoming = next(ranges, None)

    try:
        fill()
        while pending:
            read = pending.popleft()
            fill()  # before the caller waits: ``prefetch`` reads stay in flight while it decodes
            yield read, upcoming is None and not pending
    finally:
        for read in pending:
            read.future.cancel()
        pool.shutdown(wait=False, cancel_futures=True)


def ramped(start: int, end: int, chunk: int, first: int) -> Iterator[tuple[int, int]]:
    """``(position, length)`` of the reads of ``[start, end)``: the first ``first`` bytes long, each
    next one twice the one before, up to ``chunk``; the last one what is left."""
    size = max(1, min(first, chunk))
    pos = start
    while pos < end:
        yield pos, min(size, end - pos)
        pos += size
        size = min(2 * size, chunk)
