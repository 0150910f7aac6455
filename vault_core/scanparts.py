"""What the per-message scan makes of a buffer before it hands the messages on. Pure: bytes in,
parts out.

:func:`decode_parts` checks every frame of a buffer as :func:`~vault_core.recordformat.decode`
does, and raises what it raises, before any message of the buffer is handed on. It leaves each
version 2 unit as a :class:`UnitPart` (the verified, decompressed unit and which of its messages
are wanted), whose :class:`~vault_core.recordformat.Message` objects :func:`part_messages` builds
one at a time as the scan's consumer takes them. So a scan builds no list of a unit's messages,
let alone of a whole read's (a 4 MiB read of 100 B events is 100,000 of them): a list that
large costs about twice as much per message as the messages themselves, in allocation far from
the cache and in the cyclic collector's passes over the heap (a ``Message`` is a tuple subclass,
which the collector tracks for as long as it lives). Version 1 records are held the same way, as a
:class:`RecordsPart`: the read's bytes and where each checked record's key and value lie in them.
"""

from __future__ import annotations

import bisect
import zlib
from array import array
from collections.abc import Iterable, Iterator
from concurrent.futures import Executor, Future
from itertools import repeat
from operator import add
from typing import NamedTuple

from vault_core.errors import FormatError
from vault_core.prefix import FLAG_COMPRESSION_MASK, MAGIC, UNIT_VERSION, VERSION_OFFSET
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
    iter_unit_messages,
)
from vault_core.unitformat import Unit, decode_unit, unit_length_at


class UnitPart(NamedTuple):
    """Messages ``first`` to ``stop`` (indexes in the unit, ``first < stop``) of a verified unit."""

    unit: Unit
    first: int
    stop: int

    def before(self, end: int) -> UnitPart | None:
        """Its messages that start before stream offset ``end`` (None if none do)."""
        stop = min(self.stop, end - self.unit.offset)
        if stop <= self.first:
            return None
        return self if stop == self.stop else self._replace(stop=stop)


class RecordsPart(NamedTuple):
    """Consecutive version 1 records of one read that passed every check of ``decode``: record
    ``i``'s key is ``buf[key_starts[i]:key_ends[i]]`` and its value ``buf[key_ends[i]:value_ends[i]]``
    (its header the 32 bytes before the key), and ``buf[0]`` is stream offset ``base``."""

    buf: bytes
    base: int
    timestamps: array[int]
    flags: array[int]
    key_starts: array[int]
    key_ends: array[int]
    value_ends: array[int]

    def before(self, end: int) -> RecordsPart | None:
        """Its records that start before stream offset ``end`` (None if none do)."""
        n = bisect.bisect_left(self.key_starts, end - self.base + HEADER_SIZE)
        if n == 0:
            return None
        if n == len(self.key_starts):
            return self
        return RecordsPart(
            self.buf,
            self.base,
            self.timestamps[:n],
            self.flags[:n],
            self.key_starts[:n],
            self.key_ends[:n],
            self.value_ends[:n],
        )

    def messages(self) -> Iterator[Message]:
        """Its records as :class:`Message`, each built as it is taken (``map`` and ``zip`` in C)."""
        buf = self.buf
        keys = map(buf.__getitem__, map(slice, self.key_starts, self.key_ends))
        values = map(buf.__getitem__, map(slice, self.key_ends, self.value_ends))
        offsets = map(add, self.key_starts, repeat(self.base - HEADER_SIZE))
        fields = zip(offsets, self.timestamps, keys, values, self.flags, repeat(0))
        # tuple.__new__ straight from C: a named tuple's own __new__ is Python (~1 µs a call)
        return map(tuple.__new__, repeat(Message), fields)  # type: ignore[arg-type]


ScanPart = RecordsPart | UnitPart
"""Version 1 records, checked; or the wanted messages of a unit: each built when taken."""


def decode_parts(
    buf: bytes | bytearray | memoryview,
    base_offset: int,
    start: int = 0,
    end: int | None = None,
    *,
    stream: str | None = None,
    complete: bool = False,
    first: int = 0,
    pool: Executor | None = None,
) -> tuple[list[ScanPart], int]:
    """The whole records and units of ``buf[start:end]`` (``buf[0]`` is stream offset
    ``base_offset``) as parts, and the position after them; what ``decode`` takes and does.

    Messages before offset ``first`` are left out. A frame cut off by ``end`` is left for the
    caller, unless ``complete`` says ``end`` is the committed end, where it is corrupt; what does
    not verify raises what ``decode`` raises: the first damage in the buffer, whatever else follows.

    With a ``pool``, the buffer's units are checked and decompressed on its threads, side by side
    (``zlib.crc32`` and zstd release the GIL), while this thread walks the buffer's frames by their
    headers; it returns once every one is done, so still nothing of a damaged buffer is returned.
    """
    view = memoryview(buf)
    data = buf if isinstance(buf, bytes) else bytes(buf)  # what version 1 keys and values are sliced from
    end = len(view) if end is None else end
    out: list[ScanPart | Future[UnitPart | None]] = []
    pos = start
    try:
        while pos < end:
            if (
                pos + HEADER_SIZE <= end
                and view[pos + VERSION_OFFSET] == UNIT_VERSION
                and view[pos : pos + 4] == MAGIC
            ):
                claimed = unit_length_at(view, pos)
                if pool is not None and claimed is not None and pos + claimed[0] <= end:
                    # Whole by its header: decoded on the pool. A header that lies fails there, and
                    # that error is raised before any this walk meets after it (see _resolved).
                    out.append(pool.submit(_unit_part, view, pos, base_offset, end, stream, complete, first))
                    pos += claimed[0]
                    continue
                unit = decode_unit(view, pos, base_offset, end, stream=stream, complete=complete)
                if unit is None:
                    break  # cut off by ``end``: the caller completes it
                part = _wanted(unit, first)
                if part is not None:
                    out.append(part)
                pos += unit.length
                continue
            records, after = _check_records(view, base_offset, pos, end, first)
            if records is not None:
                out.append(records._replace(buf=data))
            if (
                after == pos
            ):  # not a record that checks: the reference decoder says why, or that it is cut off
                _no_record(view, base_offset, pos, end, stream, complete)
                break
            pos = after
    except FormatError:
        _resolved(out)  # damage before this one, found on the pool, is the first: it is raised instead
        raise
    return _resolved(out), pos


def _unit_part(
    view: memoryview, pos: int, base_offset: int, end: int, stream: str | None, complete: bool, first: int
) -> UnitPart | None:
    """:func:`_wanted` of the unit at ``view[pos]``, which lies whole before ``end`` by its header;
    raises what :func:`~vault_core.unitformat.decode_unit` raises."""
    unit = decode_unit(view, pos, base_offset, end, stream=stream, complete=complete)
    assert unit is not None  # its header puts its end before ``end``
    return _wanted(unit, first)


def _wanted(unit: Unit, first: int) -> UnitPart | None:
    """The messages of a verified unit from offset ``first`` on (None if none)."""
    skip = min(max(0, first - unit.offset), unit.size)
    if skip == unit.size:
        return None
    # held until taken: without the payload, which keys and values copy
    return UnitPart(unit._replace(payload=b""), skip, unit.size)


def _no_record(
    view: memoryview, base_offset: int, pos: int, end: int, stream: str | None, complete: bool
) -> None:
    """Raise what ``decode`` raises for the frame at ``view[pos]``, which is not a version 1 record
    that checks; return if it is one cut off by ``end``."""
    checked, at = decode(view, base_offset, pos, end, max_count=1, stream=stream, complete=complete)
    if checked or at != pos:
        raise AssertionError(f"decode_parts and decode disagree at offset {base_offset + pos}")


def _resolved(out: list[ScanPart | Future[UnitPart | None]]) -> list[ScanPart]:
    """The parts, each unit's once its thread is done, in buffer order: the first to have failed
    raises its error (the later ones are cancelled)."""
    parts: list[ScanPart] = []
    try:
        for item in out:
            part = item.result() if isinstance(item, Future) else item
            if part is not None:
                parts.append(part)
    except BaseException:
        for item in out:
            if isinstance(item, Future):
                item.cancel()
        raise
    return parts


def _check_records(
    view: memoryview, base_offset: int, start: int, end: int, first: int
) -> tuple[RecordsPart | None, int]:
    """The version 1 records from ``start`` that pass every check of ``decode`` (up to the first
    unit, or record that fails or is cut off), as a part (None if none is wanted), and where they end."""
    timestamps, flag_list = array("q"), array("B")
    key_starts, key_ends, value_ends = array("q"), array("q"), array("q")
    add_timestamp, add_flags = timestamps.append, flag_list.append
    add_key_start, add_key_end, add_value_end = key_starts.append, key_ends.append, value_ends.append
    unpack = HEADER.unpack_from
    crc32 = zlib.crc32
    unknown_flags = ~KNOWN_FLAGS | FLAG_COMPRESSION_MASK  # no codec is supported in version 1
    pos = start
    while pos + HEADER_SIZE <= end:
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
            add_timestamp(ts)
            add_flags(flags)
            add_key_start(pos + HEADER_SIZE)
            add_key_end(pos + HEADER_SIZE + klen)
            add_value_end(rec_end)
        pos = rec_end
    if not key_starts:
        return None, pos
    return RecordsPart(b"", base_offset, timestamps, flag_list, key_starts, key_ends, value_ends), pos


def part_messages(part: ScanPart) -> Iterable[Message]:
    """The messages of a part: a unit's built as they are taken, version 1 records' as decoded."""
    if isinstance(part, UnitPart):
        return iter_unit_messages(*part)
    return part.messages()
