"""Reading streams: bounded reads, full scans with prefetch, tail following, time seeks.

Every read is bounded by the commit record's ``committed`` length, so a torn or
uncommitted tail is never returned. Every record's checksum is verified.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from itertools import chain
from typing import NamedTuple, Protocol, TypeVar, cast

from vault_core.boundaries import Boundaries, frame_sits_at
from vault_core.clock import Clock, SystemClock
from vault_core.errors import (
    CorruptRecord,
    FormatError,
    InvalidOffset,
    OffsetPastEnd,
    StreamNotFound,
)
from vault_core.index import IndexTables
from vault_core.limits import DEFAULT_READ_BYTES, DEFAULT_READ_MESSAGES
from vault_core.messagebatch import MessageBatch, batch_messages, decode_batches
from vault_core.pagelog import CommitState, LogOpener, ReadableLog
from vault_core.prefetch import PendingRead, prefetched_reads
from vault_core.recordformat import HEADER_SIZE, Message, decode, decode_span, frame_at, record_length_at
from vault_core.retry import Backoff
from vault_core.scanparts import (
    ScanPart,
    decode_parts,
    opening_ahead,
    part_batches,
    part_messages,
    skipping,
)
from vault_core.span import Span
from vault_core.unitformat import MAX_UNIT_BYTES, UNIT_HEADER_SIZE

SCAN_CHUNK = 4 * 1024 * 1024
SCAN_FIRST_CHUNK = SCAN_CHUNK
"""A scan's first read; each next one is twice as long, up to ``chunk``. Reads that start small
(512 KiB, doubling) let a scan's consumer start before the larger reads behind it are in, but on
a quiet machine they made the whole scan slower (v2 0.88x at 100 B, 0.68x at 1 KiB, v1 0.91x and
0.95x: BENCHMARKS.md, core_format): every read pays its request and its check, and the prefetch
already overlaps the reads. So a scan reads whole chunks from its start unless told otherwise.
Timed again on another machine kind, with reads handed on as soon as they are checked: mixed
(format 2 0.87-1.29x at 1 KiB, format 1 0.92-1.17x; BENCHMARKS.md, core_format_opened)."""
SCAN_PREFETCH = 4
SCAN_OPEN_AHEAD = 3
"""Units a scan decompresses on a helper thread ahead of its consumer
(:func:`~vault_core.scanparts.opening_ahead`)."""
DEFAULT_MAX_BYTES = DEFAULT_READ_BYTES
DEFAULT_MAX_COUNT = DEFAULT_READ_MESSAGES
T = TypeVar("T")
X = TypeVar("X")
_Decoded = tuple[bytes, Span, tuple[list[ScanPart], int] | CorruptRecord]
"""A scan's buffer, its span, and what :func:`decode_parts` made of it: its parts and the
position after them, or its damage."""
MIN_READ = max(HEADER_SIZE, UNIT_HEADER_SIZE)
"""The fewest bytes a read fetches: a whole header, whichever the version, so that a read with a
tiny ``max_bytes`` learns the length of what it must return at least one message of."""


@dataclass(frozen=True)
class ScanOptions:
    """How a scan reads a range of log: what every scan entry point takes (a full scan's defaults)."""

    chunk: int = SCAN_CHUNK
    """Bytes per ranged read."""
    first_chunk: int = SCAN_FIRST_CHUNK
    """Bytes of the first ranged read (at most ``chunk``); the reads double up to ``chunk``."""
    prefetch: int = SCAN_PREFETCH
    """Ranged reads in flight while the oldest is decoded."""
    skip_corrupt: bool = False
    """Skip a corrupt record and resume at the next proven boundary, instead of raising."""
    on_skip: Callable[[int, int], None] | None = None
    """With ``skip_corrupt``: called with the offset and length of each stretch skipped."""


FULL_SCAN = ScanOptions()
_SEEK_SCAN = ScanOptions(chunk=1024 * 1024, prefetch=2)
"""A time seek's scan: about one index spacing of log, so smaller ranges and fewer in flight."""


@dataclass(frozen=True)
class ReadResult:
    messages: list[Message]
    next_offset: int
    """Where the next read continues: after the last returned record."""
    committed: int
    """The committed length seen by this read; ``next_offset == committed`` means caught up."""


@dataclass(frozen=True)
class BatchReadResult:
    """:class:`ReadResult` as columns: the same messages in :class:`~vault_core.messagebatch.MessageBatch`
    es (one per version 2 unit or run of version 1 records), for a consumer that renders columns
    (the read API) and so builds no :class:`Message` per message."""

    batches: list[MessageBatch]
    next_offset: int
    committed: int

    @property
    def count(self) -> int:
        return sum(map(len, self.batches))

    def messages(self) -> list[Message]:
        return list(batch_messages(self.batches))


class _Page(NamedTuple):
    """What a read asks for: the stream, where it starts, and how much it may return."""

    stream: str
    from_offset: int
    max_bytes: int
    max_count: int


class Decoder(Protocol[T]):
    """What a read decodes a buffer with: :func:`~vault_core.recordformat.decode_span` (messages)
    or :func:`~vault_core.messagebatch.decode_batches` (batches), which take the same arguments."""

    def __call__(
        self, span: Span, *, max_count: int | None = None, units: list[tuple[int, int]] | None = None
    ) -> tuple[list[T], int]: ...


def scan_log(log: ReadableLog, start: int, end: int, options: ScanOptions = FULL_SCAN) -> Iterator[Message]:
    """Every record in ``[start, end)``; ``start`` must be a record boundary, ``end`` <= committed.

    Version 1 records and version 2 units alike, read as ``options`` (:class:`ScanOptions`) says.

    Downloads ``chunk``-sized ranges with up to ``prefetch`` in flight, so decoding overlaps
    the network; memory stays at about ``(prefetch + 3) * chunk`` and two chunks' decoded frames
    however long the stream.
    With ``skip_corrupt`` a corrupt record is skipped (``on_skip(offset, skipped_bytes)``)
    and reading resumes at the next **proven** boundary after it: the next of ``resync``
    (ascending index points), else ``end``. Never at a sync marker found by searching, which
    may lie inside a value and start a forged record (docs/FORMAT.md §7.3). Without
    ``skip_corrupt`` a corrupt record raises.

    A buffer is checked before any of its messages is handed on, every frame and every unit's
    checksum (on a thread, while the consumer takes the buffer before: :func:`scan_parts`); a
    unit is decompressed a few units ahead of the consumer, on a helper thread, and its messages
    are built one at a time as they are taken (:mod:`vault_core.scanparts`), by
    ``itertools.chain``, ``map`` and ``zip``: taking
    the next message of a unit runs no Python code.
    """
    return _taken(scan_parts(log, start, end, options), part_messages, options, log.stream)


def scan_log_batches(
    log: ReadableLog, start: int, end: int, options: ScanOptions = FULL_SCAN
) -> Iterator[MessageBatch]:
    """:func:`scan_log` as :class:`~vault_core.messagebatch.MessageBatch` columns: one batch per
    version 2 unit and per run of version 1 records, the same messages, checks and skipping.

    For bulk consumers (export, verify, columnar engines): a unit's batch is its decompressed
    payload as it is, so a scan of version 2 units does no Python work per message.
    """
    return _taken(scan_parts(log, start, end, options), part_batches, options, log.stream)


def scan_parts(
    log: ReadableLog,
    start: int,
    end: int,
    options: ScanOptions = FULL_SCAN,
    resync: Sequence[int] = (),
    first: int = 0,
) -> Iterator[list[ScanPart]]:
    """What both scans read, as the parts :func:`~vault_core.scanparts.decode_parts` makes of
    each buffer (in order).

    ``resync``: proven boundaries (ascending) where reading may resume after a corrupt record;
    ``first``: messages before this offset (inside the unit at ``start``) are left out.

    Each buffer is waited for and decoded on a thread of its own while the consumer takes the
    parts of the one before it, which go on as soon as they are decoded (a unit's messages are
    built as they are taken, on the consumer's thread), so at most two buffers' parts are held.
    A buffer that does not decode raises when the consumer has taken every part of the one
    before, as it would decoded in turn.
    """
    if start >= end:
        return
    reads = prefetched_reads(
        log, start, end, chunk=options.chunk, prefetch=options.prefetch, first=options.first_chunk
    )
    ahead = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"mv-decode-{log.stream}")

    def taken(read: PendingRead, last: bool, carry: bytes, base: int, skip_to: int) -> _Decoded:
        # On ``ahead``: waits for the read, then decodes it while the consumer takes the one before.
        data = read.result()
        buf = carry + data if carry else data
        if skip_to > base:  # still skipping: drop what lies before the boundary
            drop = min(len(buf), skip_to - base)
            buf, base = buf[drop:], base + drop
        span = Span(buf, base, 0, len(buf), log.stream, last, first)
        return buf, span, _decoded(span)

    try:
        carry = b""
        base = start
        skip_to = start  # after a corrupt record: the proven boundary where reading resumes
        pending: Future[_Decoded] | None = ahead.submit(taken, *next(reads), carry, base, skip_to)
        while pending is not None:
            buf, span, decoded = pending.result()
            base = span.base
            pos = 0
            records: list[ScanPart] | None = None
            while isinstance(decoded, CorruptRecord):
                if not options.skip_corrupt:
                    raise decoded
                bad = max(pos, decoded.offset - base if decoded.offset is not None else pos)
                yield _records_before(span._replace(start=pos, end=bad))
                over = _walk_over(buf, base, bad, end, log.read)
                skip_to = base + over if over is not None else _next_boundary(resync, base + bad, end)
                if options.on_skip:
                    options.on_skip(base + bad, skip_to - (base + bad))
                pos = min(skip_to - base, len(buf))
                if skip_to - base > len(buf):
                    break
                decoded = _decoded(span._replace(start=pos))
            if not isinstance(decoded, CorruptRecord):
                records, pos = decoded
            carry = buf[pos:]
            base += pos
            following = next(reads, None)
            # the next read is waited for and decoded while the consumer takes this one's parts
            pending = ahead.submit(taken, *following, carry, base, skip_to) if following else None
            if records is not None:
                yield records
            del records, decoded, span, buf
        if carry:
            raise CorruptRecord(
                f"{len(carry)} bytes before the committed end do not form a whole record",
                stream=log.stream,
                offset=base,
            )
    finally:
        reads.close()
        ahead.shutdown(wait=False, cancel_futures=True)


def _decoded(span: Span) -> tuple[list[ScanPart], int] | CorruptRecord:
    try:
        return decode_parts(span)
    except CorruptRecord as exc:
        return exc


def _first_at_or_after(log: ReadableLog, start: int, committed: int, at_ms: int) -> int:
    """The offset of the first message from ``start`` with a timestamp of at least ``at_ms``, or
    ``committed`` if none has one."""
    for message in scan_log(log, start, committed, _SEEK_SCAN):
        if message.timestamp >= at_ms:
            return message.offset
    return committed


def _walk_over(buf: bytes, base: int, bad: int, end: int, read: Callable[[int, int], bytes]) -> int | None:
    """Where the record after the corrupt one at ``buf[bad]`` starts, by the corrupt record's own
    length, if that lands on a record that verifies (or on ``end``); else None.

    This is still a walk from a proven boundary: the length is the one the writer wrote in the
    bad record's header. If the damage is in that header, the landing almost surely fails to
    verify (sync marker, its own offset, checksum) and the caller falls back to an index point.
    """
    frame = frame_at(buf, bad)
    if frame is None or not frame.magic_ok or frame.offset != base + bad:
        return None
    landing = bad + frame.length
    if base + landing == end:
        return landing
    try:
        records, _ = decode(buf, base, landing, max_count=1)
        if not records:  # the frame there runs past this buffer (a unit often does): fetch it whole
            at = base + landing
            head = frame_at(read(at, min(MIN_READ, end - at)), 0) if at < end else None
            if head is not None and at + head.length <= end:
                records, _ = decode(read(at, head.length), at, max_count=1, complete=True)
    except FormatError:
        return None
    return landing if records else None


def _next_boundary(resync: Sequence[int], after: int, end: int) -> int:
    """The first proven boundary after ``after`` (``end`` if none is known before it)."""
    i = bisect.bisect_right(resync, after)
    return min(resync[i], end) if i < len(resync) else end


def _records_before(span: Span) -> list[ScanPart]:
    # decoding raised at ``span.end``: the whole records from ``span.start`` up to it are good.
    if span.end <= span.start:
        return []
    records, _ = decode_parts(span._replace(complete=False))
    return records


def _taken(
    parts: Iterator[list[ScanPart]],
    take: Callable[[ScanPart], Iterable[X]],
    options: ScanOptions,
    stream: str,
) -> Iterator[X]:
    """What ``take`` makes of every part, in order (a unit's messages each built as it is taken,
    or its batch), the units decompressed a few ahead of the consumer on a helper thread
    (:func:`~vault_core.scanparts.opening_ahead`). A unit that does not open (its checksum held)
    raises where it is reached, or with ``skip_corrupt`` is skipped whole: its checked header
    says where the next frame starts, where the parts go on."""
    taker = skipping(take, options.on_skip) if options.skip_corrupt else take
    ahead = opening_ahead(parts, SCAN_OPEN_AHEAD, f"mv-open-{stream}")
    return chain.from_iterable(map(taker, ahead))


def _before(part: list[ScanPart], end: int) -> list[ScanPart]:
    """The parts of a read, cut inside where it ends, whose messages start before offset ``end``."""
    kept: list[ScanPart] = []
    for item in part:
        cut = item.before(end)
        if cut is not None:
            kept.append(cut)
        if cut is not item:
            break
    return kept


def _within_bytes(records: list[T], max_bytes: int) -> list[T]:
    """The first of the messages of one unit, and those after it while their keys and values fit
    ``max_bytes``: ``records`` are the unit's messages, or its one batch."""
    first = records[0]
    if isinstance(first, MessageBatch):
        ke, ve = first.key_ends, first.value_ends
        fits = bisect.bisect_right(
            range(1, len(first) + 1), max_bytes, key=lambda n: ke[n] - ke[0] + ve[n] - ve[0]
        )
        return cast(list[T], [first.head(max(fits, 1))])
    return cast(list[T], _messages_within_bytes(cast(list[Message], records), max_bytes))


def _messages_within_bytes(records: list[Message], max_bytes: int) -> list[Message]:
    total = len(records[0].key) + len(records[0].value)
    for i, r in enumerate(records[1:], 1):
        total += len(r.key) + len(r.value)
        if total > max_bytes:
            return records[:i]
    return records


class StreamReader:
    """Reads any stream of one vault; safe to share between threads."""

    def __init__(self, logs: LogOpener, index: IndexTables | None, *, clock: Clock | None = None) -> None:
        self.log = logs
        """The log of a stream by name (which it checks)."""
        self.index = index
        self.clock = clock or SystemClock()
        self.boundaries = Boundaries(index)
        """What this reader has proven to be record boundaries (a read may start only there)."""

    def state(self, stream: str) -> CommitState:
        return self.log(stream).state()

    def read(
        self,
        stream: str,
        from_offset: int = 0,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_count: int = DEFAULT_MAX_COUNT,
    ) -> ReadResult:
        """Up to ``max_count`` records / about ``max_bytes`` from ``from_offset`` (a record boundary).

        One GET in the common case: the commit record comes back with the bytes, so the cost
        does not depend on where in the stream the offset is. At least one record is returned
        when one is committed there, even if it is larger than ``max_bytes``.
        """
        data, state = self.fetch(stream, from_offset, max_bytes)
        page = self._decode_checked(
            decode_span, _Page(stream, from_offset, max_bytes, max_count), data, state
        )
        return ReadResult(*page)

    def decode_checked_batches(
        self,
        stream: str,
        from_offset: int,
        data: bytes,
        state: CommitState,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_count: int = DEFAULT_MAX_COUNT,
    ) -> BatchReadResult:
        """The records of bytes :meth:`fetch` returned (now or earlier: committed bytes never change), as
        columns; with one fresh read before calling the bytes corrupt.

        A GET's bytes and the commit record returned with them should agree, but a storage that
        reads them at two moments (Azurite does, and a stalled one widens the gap) can pair
        bytes from before an append with the commit record after it: the new records then look
        like garbage. A second GET tells that apart from real damage, which fails again.
        """
        page = self._decode_checked(
            decode_batches, _Page(stream, from_offset, max_bytes, max_count), data, state
        )
        return BatchReadResult(*page)

    def _decode_checked(
        self, decoder: Decoder[T], page: _Page, data: bytes, state: CommitState
    ) -> tuple[list[T], int, int]:
        """:meth:`_decode_page`, with one fresh read before calling the bytes corrupt."""
        try:
            return self._decode_page(decoder, page, data, state)
        except CorruptRecord:
            data, state = self.fetch(page.stream, page.from_offset, page.max_bytes)
            return self._decode_page(decoder, page, data, state)

    def fetch(self, stream: str, from_offset: int, max_bytes: int) -> tuple[bytes, CommitState]:
        """The raw bytes of a :meth:`read` and the commit record they came with (one GET)."""
        if from_offset < 0:
            raise InvalidOffset(f"offset must be >= 0, got {from_offset}")
        if max_bytes <= 0:
            raise InvalidOffset("max_bytes must be positive")
        # At least a header: a max_bytes smaller than the next record still learns its
        # length, so the read answers with that one record, never with an empty page.
        # A message inside a unit already proven (a read that max_count stopped there) is
        # fetched from the unit's start, which decoding needs; the state says where.
        start = self.boundaries.known_start(stream, from_offset)
        if start is None or start == from_offset:
            return self.log(stream).read_with_state(from_offset, max(max_bytes, MIN_READ))
        data, state = self.log(stream).read_with_state(start, max(max_bytes, MIN_READ))
        return data, replace(state, read_at=start)

    def _decode_page(
        self, decoder: Decoder[T], page: _Page, data: bytes, state: CommitState
    ) -> tuple[list[T], int, int]:
        """What a read of fetched bytes returns (messages or batches, next offset, committed)."""
        stream, from_offset, max_bytes, max_count = page
        if max_bytes <= 0 or max_count <= 0:
            raise InvalidOffset("max_bytes and max_count must be positive")
        committed = state.committed
        if from_offset > committed:
            raise OffsetPastEnd(
                f"offset {from_offset} is past the committed end of stream {stream!r} ({committed})"
            )
        base = from_offset if state.read_at is None else state.read_at  # where ``data`` begins
        if from_offset == committed or min(len(data), max_bytes) <= 0:
            return [], from_offset, committed
        limit = min(
            len(data), max(max_bytes, MIN_READ) if base != from_offset else max_bytes, committed - base
        )
        start = self.boundaries.prove(stream, from_offset, committed, self.log(stream).read)
        if start != base:  # a message inside a version 2 unit: decode the unit from its start
            data = self.log(stream).read(start, min(max(max_bytes, MIN_READ), committed - start))
            limit = min(len(data), max(max_bytes, MIN_READ), committed - start)
        need = record_length_at(data, 0)
        # A frame that claims to run past the committed end, or past the largest a frame can be,
        # is corrupt (FORMAT.md §7.2 step 5, §4): decoded whole up to there so that the first of
        # its checks to fail says why, never fetched at the length it claims (a damaged length
        # could ask for gigabytes), and never answered with an empty page a follower waits on.
        runs_past = (need is None and start + len(data) >= committed) or (  # a header the end cuts off
            need is not None and need > limit and (start + need > committed or need > MAX_UNIT_BYTES)
        )
        if runs_past:
            limit = min(len(data), committed - start)
        oversized = need is not None and need > limit and not runs_past
        if oversized:
            assert need is not None
            data = self.log(stream).read(start, need)  # one record or unit larger than max_bytes
            limit = need
        units: list[tuple[int, int]] = []
        span = Span(data, start, 0, limit, stream, start + limit == committed or runs_past, from_offset)
        records, pos = decoder(span, max_count=max_count, units=units)
        next_offset = start + pos
        if oversized and records:  # a unit larger than max_bytes: what max_bytes holds of it
            records = _within_bytes(records, max_bytes)
            next_offset = cast("Message | MessageBatch", records[-1]).next_offset
        # walked from a proven boundary; a next offset inside a unit is decoded from the unit's start
        unit = units[-1][0] if units and units[-1][0] < next_offset < units[-1][1] else None
        self.boundaries.learn(stream, [next_offset], unit=unit)
        return records, next_offset, committed

    def scan(
        self,
        stream: str,
        from_offset: int = 0,
        to_offset: int | None = None,
        options: ScanOptions = FULL_SCAN,
    ) -> Iterator[Message]:
        """Every record from ``from_offset`` up to ``to_offset`` (default: the committed end now).

        Checks the range when iteration starts; taking each message then runs no Python code.
        """
        parts = self._scan_parts(stream, from_offset, to_offset, options)
        return _taken(parts, part_messages, options, stream)

    def scan_batches(
        self,
        stream: str,
        from_offset: int = 0,
        to_offset: int | None = None,
        options: ScanOptions = FULL_SCAN,
    ) -> Iterator[MessageBatch]:
        """:meth:`scan` as :class:`~vault_core.messagebatch.MessageBatch` columns (one per version 2
        unit or run of version 1 records): the same messages, for consumers that take columns."""
        parts = self._scan_parts(stream, from_offset, to_offset, options)
        return _taken(parts, part_batches, options, stream)

    def _scan_parts(
        self,
        stream: str,
        from_offset: int,
        to_offset: int | None,
        options: ScanOptions,
    ) -> Iterator[list[ScanPart]]:
        log = self.log(stream)
        committed = log.state().committed
        end = committed if to_offset is None else to_offset
        if from_offset < 0 or from_offset > committed or end > committed or end < from_offset:
            raise InvalidOffset(
                f"range [{from_offset}, {end}) is outside the committed part of {stream!r} [0, {committed})"
            )
        start = from_offset
        if from_offset < end:
            start = self.boundaries.prove(stream, from_offset, committed, log.read)
        stop = end  # a to_offset inside a version 2 unit: decode the whole unit, stop at to_offset
        if from_offset < end < committed:
            unit = self.boundaries.prove(stream, end, committed, log.read)
            if unit != end:
                frame = frame_at(log.read(unit, MIN_READ), 0)
                assert frame is not None  # proven: the unit's header lies before the committed end
                # never past the committed end, even if the unit says so (only damage can): the
                # decoding then reports the unit as running past it (FORMAT.md §7.2, §7.3)
                stop = min(unit + frame.length, committed)
        resync: list[int] = []
        if options.skip_corrupt and self.index:
            resync = [p.offset for p in self.index.points(stream, from_offset + 1, stop)]
        parts = scan_parts(log, start, stop, options, resync, from_offset)
        if stop == end:
            yield from parts
            return
        for part in parts:
            kept = _before(part, end)
            if kept:
                yield kept
            if len(kept) < len(part):
                return

    def follow(
        self,
        stream: str,
        from_offset: int = 0,
        *,
        poll_min: float = 0.05,
        poll_max: float = 2.0,
        stop: threading.Event | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_count: int = DEFAULT_MAX_COUNT,
    ) -> Iterator[Message]:
        """Chase the tail: yield records as they are committed, polling with exponential back-off.

        The back-off resets as soon as data arrives. Ends when ``stop`` is set (or the caller
        stops iterating). A stream that does not exist yet is waited for.
        """
        offset = from_offset
        backoff = Backoff(poll_min, poll_max)
        while stop is None or not stop.is_set():
            try:
                result = self.read(stream, offset, max_bytes=max_bytes, max_count=max_count)
            except StreamNotFound:
                result = ReadResult([], offset, 0)
            if result.messages:
                yield from result.messages
                offset = result.next_offset
                backoff.reset()
                continue
            if stop is not None:
                stop.wait(backoff.next())
            else:
                time.sleep(backoff.next())

    def seek_time(self, stream: str, at_ms: int) -> int:
        """Offset of the first record with timestamp >= ``at_ms``, or the committed end if none.

        One index query finds the last index point before ``at_ms``; at most about one index
        spacing of log is scanned from there.
        """
        log = self.log(stream)
        committed = log.state().committed
        if at_ms <= 0:
            return 0  # every message qualifies: the first, whatever it holds (FORMAT.md §7.5)
        point = self.index.point_before_time(stream, at_ms) if self.index else None
        start = point.offset if point and point.offset < committed else 0
        try:
            return _first_at_or_after(log, start, committed, at_ms)
        except FormatError as exc:  # corrupt, or a version this reader does not know
            if start == 0 or exc.offset != start or frame_sits_at(start, log.read, committed):
                raise
            # no frame where the index point says one starts: the index's mistake, not the log's,
            # and the index is not relied on for correctness (FORMAT.md §8)
            return _first_at_or_after(log, 0, committed, at_ms)
