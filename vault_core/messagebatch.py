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
import zlib
from array import array
from collections.abc import Iterable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass
from itertools import chain, repeat

from vault_core.prefix import FLAG_COMPRESSION_MASK, FLAG_KEY_IS_TEXT, MAGIC, UNIT_VERSION
from vault_core.recordformat import (
    CRC_COVERAGE_START,
    FORMAT_VERSION,
    HEADER,
    HEADER_SIZE,
    KNOWN_FLAGS,
    MAX_KEY_BYTES,
    MAX_VALUE_BYTES,
    Message,
    decode,
)
from vault_core.unitformat import MAX_PAYLOAD_BYTES, Unit, decode_unit

RUN_BYTES = MAX_PAYLOAD_BYTES
"""A batch of version 1 records closes once its keys and values reach this: like a unit's, its
boundaries then fit 32 bits (Arrow's binary offsets), and a batch stays a bounded allocation."""


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

        No bytecode runs per message: ``map`` and ``zip`` drive the slicing and tuple building in C.
        And no list holds them: a :class:`Message` is a tuple subclass, which the cyclic collector
        tracks for as long as it lives (it stops tracking only plain tuples), so a list of thousands
        of them sets off collections, each a pass over the heap, that cost as much as building
        them; a consumer that drops each message before taking the next sets off none.
        """
        ke, ve, keys, values = self.key_ends, self.value_ends, self.keys, self.values
        key_list = map(keys.__getitem__, map(slice, ke[:-1], ke[1:]))
        value_list = map(values.__getitem__, map(slice, ve[:-1], ve[1:]))
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
    buf: bytes | bytearray | memoryview,
    base_offset: int,
    start: int = 0,
    end: int | None = None,
    *,
    stream: str | None = None,
    complete: bool = False,
    first: int = 0,
    max_count: int | None = None,
    units: list[tuple[int, int]] | None = None,
    pool: Executor | None = None,
) -> tuple[list[MessageBatch], int]:
    """:func:`~vault_core.recordformat.decode`, as batches: the whole records and units of
    ``buf[start:end]`` (``buf[0]`` is stream offset ``base_offset``) and the position after them.

    One batch per unit, and one per run of version 1 records (at most :data:`RUN_BYTES` of keys
    and values). Messages before offset ``first`` are left out. A frame cut off by ``end`` is
    left for the caller, unless ``complete`` says ``end`` is the committed end, where it is
    corrupt; what does not verify raises what ``decode`` raises, word for word. ``max_count``
    and ``units`` are ``decode``'s: at most that many messages (a stop inside a unit returns the
    next message's offset minus ``base_offset``), and the ``(start, end)`` offsets of the units.
    ``pool`` is the scan's (:class:`~vault_core.reader.ScanDecoder`): units are decoded here in turn,
    not on it (the per-message scan's :func:`~vault_core.scanparts.decode_parts` uses it).
    """
    view = memoryview(buf)
    end = len(view) if end is None else end
    out: list[MessageBatch] = []
    pos = start
    room = sys.maxsize if max_count is None else max_count  # messages still wanted
    while pos < end and room > 0:
        if pos + HEADER_SIZE <= end and view[pos + 8] == UNIT_VERSION and view[pos : pos + 4] == MAGIC:
            unit = decode_unit(view, pos, base_offset, end, stream=stream, complete=complete)
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
        if after == pos:  # not a record this run takes: the reference decoder says why, or that it is cut off
            _, checked = decode(view, base_offset, pos, end, max_count=1, stream=stream, complete=complete)
            if checked != pos:
                raise AssertionError(f"decode_batches and decode disagree at offset {base_offset + pos}")
            break
        pos = after
    return out, pos


def _record_run(
    view: memoryview, base_offset: int, start: int, end: int, first: int, room: int = sys.maxsize
) -> tuple[MessageBatch | None, int]:
    """Version 1 records from ``start`` that pass every check of ``decode``, up to the first unit,
    the first record that fails or is cut off, :data:`RUN_BYTES`, or ``room`` records taken;
    their batch and where they end."""
    offsets, timestamps, flag_list = array("q"), array("q"), array("B")
    key_ends, value_ends = array("I", [0]), array("I", [0])
    key_parts: list[memoryview] = []
    value_parts: list[memoryview] = []
    keys_total = values_total = 0
    unpack = HEADER.unpack_from
    crc32 = zlib.crc32
    unknown_flags = ~KNOWN_FLAGS | FLAG_COMPRESSION_MASK  # no codec is supported in version 1
    add_offset, add_timestamp, add_flags = offsets.append, timestamps.append, flag_list.append
    add_key, add_value, add_key_end, add_value_end = (
        key_parts.append,
        value_parts.append,
        key_ends.append,
        value_ends.append,
    )
    pos = start
    while pos + HEADER_SIZE <= end and keys_total + values_total < RUN_BYTES and room > 0:
        magic, crc, version, flags, klen, vlen, offset, ts = unpack(view, pos)
        if (
            magic != MAGIC
            or version != FORMAT_VERSION
            or flags & unknown_flags
            or klen > MAX_KEY_BYTES
            or vlen > MAX_VALUE_BYTES
            or offset != base_offset + pos
        ):
            break  # a unit, or a record that does not verify
        rec_end = pos + HEADER_SIZE + klen + vlen
        if rec_end > end or crc32(view[pos + CRC_COVERAGE_START : rec_end]) != crc:
            break
        if offset >= first:
            key_start = pos + HEADER_SIZE
            add_offset(offset)
            add_timestamp(ts)
            add_flags(flags)
            add_key(view[key_start : key_start + klen])
            add_value(view[key_start + klen : rec_end])
            keys_total += klen
            values_total += vlen
            add_key_end(keys_total)
            add_value_end(values_total)
            room -= 1
        pos = rec_end
    if not offsets:
        return None, pos
    batch = MessageBatch(
        offsets,
        timestamps,
        flag_list,
        key_ends,
        b"".join(key_parts),
        value_ends,
        b"".join(value_parts),
        pos + base_offset,
        False,
    )
    return batch, pos


def batch_messages(batches: Iterable[MessageBatch]) -> Iterator[Message]:
    """Every message of ``batches``, in order (each built in C as it is taken)."""
    return chain.from_iterable(map(MessageBatch.iter_messages, batches))
