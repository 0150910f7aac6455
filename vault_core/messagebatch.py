"""Consecutive messages as columns: what a bulk reader takes from a scan instead of one
:class:`~vault_core.recordformat.Message` per message. Pure: bytes in, batches out.

A :class:`MessageBatch` holds the messages of one version 2 unit (or the part of it a scan
wants), or of a run of version 1 records, in the layout of a unit's payload (docs/FORMAT.md
§11.3, Arrow's binary layout): ``n + 1`` boundaries into one buffer of keys, the same for the
values, and an array each of offsets, timestamps and flags (each array's buffer is also an Arrow
array's: a columnar consumer wraps them without a copy). A unit's batch is its verified,
decompressed payload as it is, with no loop per message; version 1 records are checked and
copied into the same shape record by record, with exactly the checks of
:func:`~vault_core.recordformat.decode`, whose error is the one raised for a record that fails.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import accumulate, chain, repeat
from operator import add, sub

from vault_core.binaryitems import binary_items
from vault_core.prefix import FLAG_KEY_IS_TEXT
from vault_core.recordformat import (
    HEADER_SIZE,
    MAX_RECORD_BYTES,
    Message,
    RecordRun,
    check_records,
    is_unit_at,
    raise_record_error,
)
from vault_core.span import Span
from vault_core.unitformat import MAX_PAYLOAD_BYTES, Unit, decode_unit

RUN_BYTES = MAX_PAYLOAD_BYTES
"""A batch of version 1 records spans at most this many bytes of log: like a unit's, its key and
value boundaries then fit 32 bits (Arrow's binary offsets), and a batch stays a bounded allocation."""
assert MAX_RECORD_BYTES <= RUN_BYTES  # any one record starts a run and fits it


@dataclass(frozen=True, slots=True)
class MessageBatch:
    """Consecutive messages of a stream, verified, as columns (``len(batch)`` of them, at least 1).

    Message ``i`` is at ``offsets[i]``, stamped ``timestamps[i]`` (ms since the epoch), with the
    key ``keys[key_ends[i]:key_ends[i + 1]]`` and the value ``values[value_ends[i]:value_ends[i + 1]]``
    (boundaries need not start at 0). The messages are contiguous in the log: each one's next
    offset is the offset of the one after it, and the last one's is ``next_offset``.
    """

    offsets: array[int]
    """``'q'``: each message's offset."""
    timestamps: array[int]
    """``'q'``: each message's timestamp."""
    flags: array[int]
    """``'B'``: each message's flags as :class:`Message` has them (``FLAG_KEY_IS_TEXT``)."""
    key_ends: array[int]
    """``'I'``: ``len + 1`` boundaries into ``keys``."""
    keys: bytes
    value_ends: array[int]
    """``'I'``: ``len + 1`` boundaries into ``values``."""
    values: bytes
    next_offset: int
    """Where the message after the last one starts: where a scan continues."""
    unit: bool
    """Messages of one version 2 unit (each one's next offset is its offset + 1, the last one's
    ``next_offset``); False: version 1 records, whose lengths say where the next starts."""

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def first_offset(self) -> int:
        return self.offsets[0]

    @property
    def log_bytes(self) -> int:
        """Bytes of log the messages occupy (their sizes added up)."""
        return self.next_offset - self.offsets[0]

    def messages(self) -> list[Message]:
        """The messages as :class:`Message` tuples, equal to what the per-message decoder returns."""
        return list(self.iter_messages())

    def iter_messages(self) -> Iterator[Message]:
        """:meth:`messages`, each built as it is taken.

        No bytecode runs per message: ``map`` and ``zip`` drive the tuple building in C, and the
        keys and values are cut in C too (:func:`~vault_core.binaryitems.binary_items`).
        And no list holds them: a :class:`Message` is a tuple subclass, which the cyclic collector
        tracks for as long as it lives (it stops tracking only plain tuples), so a list of thousands
        of them sets off collections, each a pass over the heap, that cost as much as building
        them; a consumer that drops each message before taking the next sets off none.
        """
        n = len(self.offsets)
        key_list = binary_items(self.keys, self.key_ends, 0, n)
        value_list = binary_items(self.values, self.value_ends, 0, n)
        first = self.offsets[0]
        ends = (
            chain(range(first + 1, first + len(self.offsets)), (self.next_offset,))
            if self.unit
            else repeat(0)
        )
        fields = zip(self.offsets, self.timestamps, key_list, value_list, self.flags, ends, strict=False)
        # tuple.__new__ straight from C: a named tuple's own __new__ is Python (~1 µs a call)
        return map(tuple.__new__, repeat(Message), fields)  # type: ignore[arg-type]

    def head(self, n: int) -> MessageBatch:
        """The first ``n`` messages (``1 <= n <= len``): where a scan that ends inside a unit stops."""
        if n >= len(self.offsets):
            return self
        return MessageBatch(
            self.offsets[:n],
            self.timestamps[:n],
            self.flags[:n],
            self.key_ends[: n + 1],
            self.keys,
            self.value_ends[: n + 1],
            self.values,
            self.offsets[n],
            self.unit,
        )


def unit_batch(unit: Unit, first: int = 0) -> MessageBatch:
    """Messages ``first`` to the end (indexes in the unit) of a verified unit; ``first < unit.size``."""
    n = unit.size - first
    start = unit.offset + first
    return MessageBatch(
        array("q", range(start, start + n)),
        array("q", [unit.timestamp]) * n,
        array("B", [unit.flags & FLAG_KEY_IS_TEXT]) * n,
        unit.key_ends[first:] if first else unit.key_ends,
        unit.keys,
        unit.value_ends[first:] if first else unit.value_ends,
        unit.values,
        unit.end,
        True,
    )


def decode_batches(
    span: Span,
    *,
    max_count: int | None = None,
    units: list[tuple[int, int]] | None = None,
) -> tuple[list[MessageBatch], int]:
    """:func:`~vault_core.recordformat.decode`, as batches: the whole records and units of
    ``span`` and the position after them.

    One batch per unit, and one per run of version 1 records (at most :data:`RUN_BYTES` of log).
    Messages before offset ``span.first`` are left out. A frame cut off by ``span.end`` is left
    for the caller, unless ``span.complete`` says it is the committed end, where it is corrupt;
    what does not verify raises what ``decode`` raises, word for word.
    ``max_count`` and ``units`` are ``decode``'s: at most that many messages (a stop inside a unit
    returns the next message's offset minus ``span.base``), and the ``(start, end)`` offsets of
    the units.
    """
    buf, base_offset, pos, end, _, _, first = span
    view = memoryview(buf)
    out: list[MessageBatch] = []
    room = sys.maxsize if max_count is None else max_count  # messages still wanted
    while pos < end and room > 0:
        if is_unit_at(view, pos, end):
            unit = decode_unit(span, pos)
            if unit is None:
                break  # cut off by ``end``: the caller completes it
            if units is not None:
                units.append((unit.offset, unit.end))
            skip = min(max(0, first - unit.offset), unit.size)
            if skip < unit.size:
                taken = unit_batch(unit, skip)
                if len(taken) > room:  # stopped inside the unit: a later read starts at its next message
                    out.append(taken.head(room))
                    return out, out[-1].next_offset - base_offset
                out.append(taken)
                room -= len(taken)
            pos += unit.length
            continue
        batch, after = _record_run(view, base_offset, pos, end, first, room)
        if batch is not None:
            out.append(batch)
            room -= len(batch)
        if after == pos:  # not a record this run takes: why, or that it is cut off by ``end``
            raise_record_error(span, pos)
            break
        pos = after
    return out, pos


def _record_run(
    view: memoryview, base_offset: int, start: int, end: int, first: int, room: int
) -> tuple[MessageBatch | None, int]:
    """Version 1 records from ``start`` that pass every check of ``decode``, up to the first unit,
    the first record that fails or is cut off, :data:`RUN_BYTES` of log, or ``room`` records taken;
    their batch (their keys and values copied into one buffer each) and where they end."""
    run, pos = check_records(view, base_offset, start, min(end, start + RUN_BYTES), first, room)
    return (records_batch(view, base_offset, run) if run.key_starts else None), pos


def records_batch(buf: bytes | memoryview, base_offset: int, run: RecordRun) -> MessageBatch:
    """The batch of a run of checked version 1 records (at least one) that
    :func:`~vault_core.recordformat.check_records` found in ``buf`` (stream offset ``base_offset``):
    their keys and values copied into one buffer each."""
    view = memoryview(buf)
    starts, key_ends, value_ends = run.key_starts, run.key_ends, run.value_ends
    return MessageBatch(
        array("q", map(add, starts, repeat(base_offset - HEADER_SIZE))),
        run.timestamps,
        run.flags,
        array("I", accumulate(map(sub, key_ends, starts), initial=0)),
        b"".join(map(view.__getitem__, map(slice, starts, key_ends))),
        array("I", accumulate(map(sub, value_ends, key_ends), initial=0)),
        b"".join(map(view.__getitem__, map(slice, key_ends, value_ends))),
        value_ends[-1] + base_offset,  # a record ends with its value
        False,
    )


def batch_messages(batches: Iterable[MessageBatch]) -> Iterator[Message]:
    """Every message of ``batches``, in order (each built in C as it is taken)."""
    return chain.from_iterable(map(MessageBatch.iter_messages, batches))
