"""What a scan makes of a buffer before it hands its messages on, one at a time or as column
batches. Pure, bytes in and parts out, but for :func:`opening_ahead`'s one helper thread.

:func:`decode_parts` walks every frame of a buffer and checks it as
:func:`~vault_core.recordformat.decode` does up to each version 2 unit's checksum, and raises what
``decode`` raises, before any message of the buffer is handed on. It leaves each unit sealed, as a
:class:`UnitPart` (its checked header and stored bytes, and which of its messages are wanted):
:func:`part_messages` checks a decompressed unit's boundaries and builds its
:class:`~vault_core.recordformat.Message` objects one at a time as the scan's consumer reaches it
(:func:`part_batches`: its :class:`~vault_core.messagebatch.MessageBatch`, over the payload).

Why a unit is opened shortly before it is taken, and not with the checksums: a buffer's units
decompressed together are the buffer four or five times over (a 4 MiB read of 1 KiB events is
16 MiB of payload), which the scan would hold at once. :func:`opening_ahead` decompresses each
unit a few units before the consumer reaches it, on a helper thread: the codec releases the GIL,
so at 1 KiB events, where decompression is half of what a message costs, it runs on the second
core while the consumer builds the unit before (BENCHMARKS.md, core_format: the scan's CPU per
message). A unit whose checksum holds but whose payload does not decompress to what its header
declares, or whose boundaries do not agree (only a writer's bug or a forged unit can do that),
is reported where the consumer reaches it, after the messages before it.

And why no list of a unit's messages, let alone of a whole read's (a 4 MiB read of 100 B events is
100,000 of them): a list that large costs about twice as much per message as the messages
themselves, in allocation far from the cache and in the cyclic collector's passes over the heap
(a ``Message`` is a tuple subclass, which the collector tracks for as long as it lives). Version 1
records are held the same way, as a :class:`RecordsPart`: the read's bytes and where each checked
record's key and value lie in them.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import NamedTuple, TypeVar

from vault_core.errors import CorruptRecord
from vault_core.messagebatch import MessageBatch, records_batch, unit_batch
from vault_core.recordformat import (
    HEADER_SIZE,
    Message,
    RecordRun,
    check_records,
    is_unit_at,
    raise_record_error,
    record_messages,
    stored_unit_messages,
)
from vault_core.span import Span
from vault_core.unitformat import (
    SealedUnit,
    StoredUnit,
    opened_unit,
    payload_ends,
    sealed_unit,
    unpacked_unit,
)

X = TypeVar("X")


class UnitPart(NamedTuple):
    """Messages ``first`` to ``stop`` (indexes in the unit, ``first < stop``) of a unit whose
    header and checksum are checked, of stream ``stream``."""

    unit: SealedUnit
    first: int
    stop: int
    stream: str | None
    opening: Future[StoredUnit] | None = None
    """Its decompression, queued on a helper thread ahead of the consumer (:func:`opening_ahead`)."""

    def before(self, end: int) -> UnitPart | None:
        """Its messages that start before stream offset ``end`` (None if none do)."""
        stop = min(self.stop, end - self.unit.offset)
        if stop <= self.first:
            return None
        return self if stop == self.stop else self._replace(stop=stop)

    def opened(self) -> StoredUnit:
        """The unit decompressed (:class:`CorruptRecord` if it does not): by the helper thread if
        it has started on it, else here (the helper is behind)."""
        if self.opening is not None and not self.opening.cancel():
            return self.opening.result()
        return opened_unit(self.unit, stream=self.stream)

    def messages(self) -> Iterator[Message]:
        """Its messages, the unit opened, its boundaries checked, each message built as it is taken."""
        stored = self.opened()
        key_ends, value_ends = payload_ends(stored, stream=self.stream)
        return stored_unit_messages(stored, key_ends, value_ends, self.first, self.stop)

    def batches(self) -> tuple[MessageBatch]:
        """Its messages as one batch over the opened unit's payload."""
        unit = unpacked_unit(self.opened(), stream=self.stream)
        return (unit_batch(unit, self.first).head(self.stop - self.first),)


class RecordsPart(NamedTuple):
    """Consecutive version 1 records of one read that passed every check of ``decode``, where
    :func:`~vault_core.recordformat.check_records` found them in ``buf`` (stream offset ``base``)."""

    buf: bytes
    base: int
    run: RecordRun

    def before(self, end: int) -> RecordsPart | None:
        """Its records that start before stream offset ``end`` (None if none do)."""
        n = bisect.bisect_left(self.run.key_starts, end - self.base + HEADER_SIZE)
        if n == 0:
            return None
        if n == len(self.run.key_starts):
            return self
        return self._replace(run=RecordRun(*(column[:n] for column in self.run)))

    def messages(self) -> Iterator[Message]:
        """Its records as :class:`Message`, each built as it is taken (``map`` and ``zip`` in C)."""
        return record_messages(self.buf, self.base, self.run)

    def batches(self) -> tuple[MessageBatch]:
        """Its records as one batch, their keys and values copied into one buffer each."""
        return (records_batch(self.buf, self.base, self.run),)


ScanPart = RecordsPart | UnitPart
"""Version 1 records, checked; or the wanted messages of a sealed unit: each built when taken."""


def decode_parts(span: Span) -> tuple[list[ScanPart], int]:
    """The whole records and units of ``span`` as parts, and the position after them; what
    :func:`~vault_core.recordformat.decode` takes and does, but for opening the units.

    Messages before offset ``span.first`` are left out. A frame cut off by ``span.end`` is left
    for the caller, unless ``span.complete`` says it is the committed end, where it is corrupt;
    what does not verify raises what ``decode`` raises: the first damage in the buffer, whatever
    else follows. A unit is checked up to its checksum here (``zlib.crc32`` releases the GIL) and
    opened when its messages are taken (:func:`part_messages`).
    """
    buf, base_offset, pos, end, stream, complete, first = span
    view = memoryview(buf)
    data = buf if isinstance(buf, bytes) else bytes(buf)  # what version 1 keys and values are sliced from
    out: list[ScanPart] = []
    while pos < end:
        if is_unit_at(view, pos, end):
            unit = sealed_unit(view, pos, base_offset, end, stream=stream, complete=complete)
            if unit is None:
                break  # cut off by ``end``: the caller completes it
            skip = min(max(0, first - unit.offset), unit.size)
            if skip < unit.size:
                out.append(UnitPart(unit, skip, unit.size, stream))
            pos += unit.length
            continue
        run, after = check_records(view, base_offset, pos, end, first)
        if run.key_starts:
            out.append(RecordsPart(data, base_offset, run))
        if after == pos:  # not a record that checks: why, or that it is cut off by ``end``
            raise_record_error(span, pos)
            break
        pos = after
    return out, pos


def opening_ahead(reads: Iterable[list[ScanPart]], window: int, name: str) -> Iterator[ScanPart]:
    """The parts of ``reads`` in order, each unit's decompression queued on a helper thread
    ``window`` parts before the consumer takes it, within its read.

    Decompression (the codec's, which releases the GIL) is most of what opening a unit costs, so
    on a second core it overlaps the consumer's building of the unit before (1 KiB events: 0.7 µs
    a message of 1.4). What takes the GIL stays on the consumer's thread, since another thread
    would only take it in turn: the boundaries' checks and the messages. A unit the helper has
    not started when the consumer reaches it the consumer opens itself, so a busy helper never
    holds the consumer up; a unit that does not open raises (or is skipped) where the consumer
    reaches it, as without the helper. The next read is asked for only once this one's parts are
    all taken, so its damage is raised where it was (:func:`~vault_core.reader.scan_parts`).
    At most ``window`` payloads are held ahead; the helper starts with the first unit and ends
    with the iterator.
    """
    pool: ThreadPoolExecutor | None = None
    try:
        for parts in reads:
            held: deque[ScanPart] = deque()
            for part in parts:
                if isinstance(part, UnitPart):
                    if pool is None:
                        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
                    part = part._replace(opening=pool.submit(opened_unit, part.unit, stream=part.stream))
                held.append(part)
                if len(held) > window:
                    yield held.popleft()
            yield from held
    finally:
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


def part_messages(part: ScanPart) -> Iterator[Message]:
    """The messages of a part, each built as it is taken; a unit opened first."""
    return part.messages()


def part_batches(part: ScanPart) -> tuple[MessageBatch]:
    """The messages of a part as one batch; a unit opened first."""
    return part.batches()


def skipping(
    take: Callable[[ScanPart], Iterable[X]], on_skip: Callable[[int, int], None] | None
) -> Callable[[ScanPart], Iterable[X]]:
    """``take`` (:func:`part_messages` or :func:`part_batches`) for a scan that skips corruption:
    a unit that does not open yields nothing and is reported as ``on_skip(its offset, its
    length)``; its checked header proves where the next frame starts, where the scan goes on."""

    def taken(part: ScanPart) -> Iterable[X]:
        try:
            return take(part)
        except CorruptRecord:
            if not isinstance(part, UnitPart):
                raise
            if on_skip is not None:
                on_skip(part.unit.offset, part.unit.length)
            return ()

    return taken
