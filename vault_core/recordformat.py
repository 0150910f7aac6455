"""The record format, version 1 (specified byte for byte in ``docs/FORMAT.md``).

A stream is a sequence of records packed without padding. Every field's position is
derived from the one before it, so this module and the specification cannot drift::

    record  := header key value
    header  := magic crc version flags key_length value_length offset timestamp   (32 bytes)

All integers are little-endian. ``crc`` is CRC-32 (IEEE 802.3, as ``zlib.crc32``) of every
byte after it: from ``version`` to the last byte of ``value``. Only ``magic`` is left out,
because it is a constant that is compared byte for byte anyway, and ``crc`` cannot cover
itself. Checking ``offset`` against the record's position, as :func:`decode` does, turns
a false sync marker inside a value into a detectable mismatch.

This module is pure: bytes in, records out. No storage, no clock.
"""

from __future__ import annotations

import struct
import sys
import zlib
from array import array
from collections.abc import Iterable, Iterator
from itertools import chain, repeat
from operator import add
from typing import NamedTuple

from vault_core.binaryitems import binary_items
from vault_core.errors import CorruptRecord, MessageTooLarge, UnsupportedVersion
from vault_core.prefix import (
    CRC_COVERAGE_START,
    CRC_OFFSET,
    FLAG_COMPRESSION_MASK,
    FLAG_KEY_IS_TEXT,
    MAGIC,
    MAX_KEY_BYTES,
    MAX_VALUE_BYTES,
    PREFIX_SIZE,
    UNIT_VERSION,
)

# re-exported: a format module names every position of its frame, the shared ones too
from vault_core.prefix import MAGIC_OFFSET as MAGIC_OFFSET
from vault_core.prefix import VERSION_OFFSET as VERSION_OFFSET
from vault_core.span import Span
from vault_core.unitformat import StoredUnit, Unit, decode_unit, unit_length_at

FORMAT_VERSION = 1

# struct layouts, named after the spec sections they implement.
HEADER = struct.Struct("<4sIBBHIQq")
HEADER_SIZE = HEADER.size  # 32
_PREFIX = struct.Struct("<4sI")  # magic, crc
_COVERED = struct.Struct("<BBHIQq")  # version .. timestamp: the header part the crc covers

# magic, crc and version: the fixed prefix, whose positions vault_core.prefix names
FLAGS_OFFSET = PREFIX_SIZE
KEY_LENGTH_OFFSET = FLAGS_OFFSET + 1
VALUE_LENGTH_OFFSET = KEY_LENGTH_OFFSET + 2
OFFSET_OFFSET = VALUE_LENGTH_OFFSET + 4
TIMESTAMP_OFFSET = OFFSET_OFFSET + 8
KEY_OFFSET = TIMESTAMP_OFFSET + 8
assert KEY_OFFSET == HEADER_SIZE == _PREFIX.size + _COVERED.size == 32

# flags (FLAG_COMPRESSION_MASK: codecs 1-7 are reserved in a record; FLAG_KEY_IS_TEXT)
KNOWN_FLAGS = FLAG_COMPRESSION_MASK | FLAG_KEY_IS_TEXT
SUPPORTED_COMPRESSION = frozenset({0})

# limits (MAX_KEY_BYTES and MAX_VALUE_BYTES: vault_core.prefix, shared with units)
MAX_RECORD_BYTES = HEADER_SIZE + MAX_KEY_BYTES + MAX_VALUE_BYTES
MAX_TIMESTAMP_MS = (1 << 48) - 1
MAX_OFFSET = (1 << 48) - 1


class Message(NamedTuple):
    """One record as a reader returns it (a named tuple: readers build millions of these)."""

    offset: int
    timestamp: int
    """Milliseconds since 1970-01-01T00:00:00Z."""
    key: bytes
    value: bytes
    flags: int = 0
    end: int = 0
    """The next message's offset, for a message of a version 2 unit (``offset + 1``, or the unit's
    end for its last message); 0 for a version 1 record, whose lengths say where the next starts."""

    @property
    def size(self) -> int:
        """Bytes of log from this message to the next one: ``offset + size`` is the next offset."""
        return self.next_offset - self.offset

    @property
    def next_offset(self) -> int:
        return self.end or self.offset + HEADER_SIZE + len(self.key) + len(self.value)

    @property
    def ends_frame(self) -> bool:
        """Whether the next message starts a new record or unit (always, in version 1): a unit is
        longer than its count, so its last message's successor is never ``offset + 1``."""
        return self.end != self.offset + 1

    @property
    def key_is_text(self) -> bool:
        return bool(self.flags & FLAG_KEY_IS_TEXT)

    @property
    def id(self) -> str:
        return message_id(self.timestamp, self.offset)


def message_id(timestamp: int, offset: int) -> str:
    """24 hex digits: 48-bit timestamp then 48-bit offset, so ids sort by time, then offset.

    Unique within a stream (offsets are); ``(stream, id)`` is unique across the vault.
    """
    return f"{timestamp:012x}{offset:012x}"


_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


def parse_message_id(mid: str) -> tuple[int, int]:
    """Inverse of :func:`message_id`: ``(timestamp, offset)``."""
    if len(mid) != 24 or not all(c in _HEX_DIGITS for c in mid):  # int() would take "+" and "_"
        raise ValueError(f"message id must be 24 hex digits, got {mid!r}")
    return int(mid[:12], 16), int(mid[12:], 16)


class NewMessage(NamedTuple):
    """A message a producer hands to the writer, before it has an offset (a named tuple: the
    HTTP tier builds one per message of every batch, and a frozen dataclass costs 3× as much)."""

    value: bytes
    key: bytes | str = b""

    def key_bytes(self) -> tuple[bytes, int]:
        if isinstance(self.key, str):
            return self.key.encode("utf-8"), FLAG_KEY_IS_TEXT
        return self.key, 0

    def encoded_size(self) -> int:
        key, _ = self.key_bytes()
        return HEADER_SIZE + len(key) + len(self.value)


def check_limits(key: bytes, value: bytes | bytearray | memoryview) -> None:
    if len(key) > MAX_KEY_BYTES:
        raise MessageTooLarge(f"key is {len(key)} bytes; the maximum is {MAX_KEY_BYTES}")
    if len(value) > MAX_VALUE_BYTES:
        raise MessageTooLarge(f"value is {len(value)} bytes; the maximum is {MAX_VALUE_BYTES}")


def encode_into(out: bytearray, message: NewMessage, offset: int, timestamp: int) -> int:
    """Append one record for ``message`` at stream ``offset`` to ``out``; returns its size."""
    value, given_key = message  # hot path: no method calls for the common case
    if isinstance(given_key, str):
        key, flags = given_key.encode("utf-8"), FLAG_KEY_IS_TEXT
    else:
        key, flags = given_key, 0
    klen, vlen = len(key), len(value)
    if klen > MAX_KEY_BYTES or vlen > MAX_VALUE_BYTES:
        check_limits(key, value)
    covered = _COVERED.pack(FORMAT_VERSION, flags, klen, vlen, offset, timestamp)
    # The crc runs over covered header, key and value in turn: no copy, no view.
    crc = zlib.crc32(value, zlib.crc32(key, zlib.crc32(covered)))
    out += _PREFIX.pack(MAGIC, crc)
    out += covered
    out += key
    out += value
    return HEADER_SIZE + klen + vlen


def encode(messages: Iterable[NewMessage], first_offset: int, timestamp: int) -> bytes:
    """Records for ``messages`` laid out from ``first_offset``, all stamped ``timestamp``."""
    out = bytearray()
    offset = first_offset
    for message in messages:
        offset += encode_into(out, message, offset, timestamp)
    return bytes(out)


def decode(
    buf: bytes | bytearray | memoryview,
    base_offset: int,
    start: int = 0,
    end: int | None = None,
    *,
    max_count: int | None = None,
    stream: str | None = None,
    complete: bool = False,
    first: int = 0,
    units: list[tuple[int, int]] | None = None,
) -> tuple[list[Message], int]:
    """Decode whole records from ``buf[start:end]``; ``buf[0]`` is stream offset ``base_offset``.

    Returns the records and the buffer position after the last whole record; a record cut
    off by ``end`` is left for the caller to complete with more bytes, unless ``complete``
    says ``end`` is the committed end of the stream, where a cut-off record is corrupt.
    Raises :class:`CorruptRecord` or :class:`UnsupportedVersion` on anything that does not verify.

    Version 2 units (docs/FORMAT.md §11) are decoded too, so a mixed log reads as one. Messages
    before stream offset ``first`` are dropped (a read that starts inside a unit decodes the unit
    from its start). When ``max_count`` stops inside a unit, the position returned is the next
    message's offset minus ``base_offset``: inside that unit, where a later read starts.
    ``units``, if given, collects the ``(start, end)`` stream offsets of the units decoded.
    """
    end = len(buf) if end is None else end
    span = Span(buf, base_offset, start, end, stream, complete, first)
    return decode_span(span, max_count=max_count, units=units)


def decode_span(
    span: Span, *, max_count: int | None = None, units: list[tuple[int, int]] | None = None
) -> tuple[list[Message], int]:
    """:func:`decode` of a :class:`~vault_core.span.Span` (what the reader's decoders take)."""
    buf, base_offset, pos, end, _, _, first = span
    view = memoryview(buf)
    data = buf if isinstance(buf, bytes) else None  # what keys and values are sliced from
    out: list[Message] = []
    room = sys.maxsize if max_count is None else max_count  # messages still wanted
    while pos < end and room > 0:
        if is_unit_at(view, pos, end):
            messages, after = _decode_unit(span, pos, room)
            if after is None:
                break  # cut off by ``end``: the caller completes it
            if units is not None:
                units.append((base_offset + pos, base_offset + pos + _unit_length(view, pos)))
            out += messages
            room -= len(messages)
            if after < 0:  # stopped inside the unit by max_count
                return out, -after - base_offset
            pos = after
            continue
        run, after = check_records(view, base_offset, pos, end, first, room)
        if run.key_starts:
            data = data or bytes(view[:end])  # a bytearray or a view: copied once, not per record
            out += record_messages(data, base_offset, run)
            room -= len(run.key_starts)
        if after == pos:  # not a record that checks: why, or that it is cut off by ``end``
            raise_record_error(span, pos)
            break
        pos = after
    return out, pos


def is_unit_at(view: memoryview, pos: int, end: int) -> bool:
    """Whether a version 2 unit starts at ``view[pos]`` (by its prefix; its header may be cut off)."""
    return (
        pos + HEADER_SIZE <= end
        and view[pos + VERSION_OFFSET] == UNIT_VERSION
        and view[pos : pos + 4] == MAGIC
    )


class RecordRun(NamedTuple):
    """Consecutive version 1 records that passed every check of :func:`decode`: record ``i``'s key
    is ``buf[key_starts[i]:key_ends[i]]``, its value ``buf[key_ends[i]:value_ends[i]]`` and its
    header the 32 bytes before the key (positions in the buffer checked, ``'q'`` arrays)."""

    timestamps: array[int]
    flags: array[int]
    """``'B'``: each record's flags."""
    key_starts: array[int]
    key_ends: array[int]
    value_ends: array[int]


def check_records(
    view: memoryview,
    base_offset: int,
    start: int,
    end: int,
    first: int = 0,
    room: int = sys.maxsize,
) -> tuple[RecordRun, int]:
    """The version 1 records from ``view[start]`` that pass every check of :func:`decode`, up to the
    first unit or record that fails or is cut off by ``end``, and where they end; records before
    offset ``first`` are checked, not kept, and at most ``room`` records are kept.

    One loop over a whole read, for every decoder of records: the checks are written once, and
    the loop binds them to locals once per read, not per record.
    """
    timestamps, flag_list = array("q"), array("B")
    key_starts, key_ends, value_ends = array("q"), array("q"), array("q")
    add_timestamp, add_flags = timestamps.append, flag_list.append
    add_key_start, add_key_end, add_value_end = key_starts.append, key_ends.append, value_ends.append
    unpack = HEADER.unpack_from
    crc32 = zlib.crc32
    unknown_flags = ~KNOWN_FLAGS | FLAG_COMPRESSION_MASK  # no codec is supported in version 1
    pos = start
    while pos + HEADER_SIZE <= end and room > 0:
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
            room -= 1
        pos = rec_end
    return RecordRun(timestamps, flag_list, key_starts, key_ends, value_ends), pos


def record_messages(buf: bytes, base_offset: int, run: RecordRun) -> Iterator[Message]:
    """The records of ``run`` (checked in ``buf``, whose ``buf[0]`` is stream offset ``base_offset``)
    as :class:`Message`, each built as it is taken: ``map`` and ``zip`` slice and build in C."""
    keys = map(buf.__getitem__, map(slice, run.key_starts, run.key_ends))
    values = map(buf.__getitem__, map(slice, run.key_ends, run.value_ends))
    offsets = map(add, run.key_starts, repeat(base_offset - HEADER_SIZE))
    fields = zip(offsets, run.timestamps, keys, values, run.flags, repeat(0))
    # tuple.__new__ straight from C: a named tuple's own __new__ is Python (~1 µs a call)
    return map(tuple.__new__, repeat(Message), fields)  # type: ignore[arg-type]


def raise_record_error(span: Span, pos: int) -> None:
    """Raise what is wrong with the version 1 record at ``span.buf[pos]``, which
    :func:`check_records` did not take; return if it is whole and good but cut off by ``span.end``."""
    buf, base_offset, _, end, stream, complete, _ = span
    at = base_offset + pos
    if pos + HEADER_SIZE > end:
        if complete:
            raise CorruptRecord("a partial record header at the committed end", stream=stream, offset=at)
        return
    magic, crc, version, flags, klen, vlen, offset, _ = HEADER.unpack_from(buf, pos)
    _check_header(magic, version, klen, vlen, offset, at, stream)
    rec_end = pos + HEADER_SIZE + klen + vlen
    if rec_end > end:
        if complete:
            raise CorruptRecord(
                f"record of {rec_end - pos} bytes runs past the committed end", stream=stream, offset=offset
            )
        return
    computed = zlib.crc32(memoryview(buf)[pos + CRC_COVERAGE_START : rec_end])
    if computed != crc:
        raise CorruptRecord(
            "record checksum mismatch", stream=stream, offset=offset, stored_crc=crc, computed_crc=computed
        )
    # flags after the checksum: a flipped flag bit is damage (skippable), a checked one a newer feature
    if flags & ~KNOWN_FLAGS or (flags & FLAG_COMPRESSION_MASK) not in SUPPORTED_COMPRESSION:
        raise UnsupportedVersion(
            f"record flags {flags:#04x} use a feature this reader does not know", stream=stream, offset=at
        )
    raise AssertionError(f"the record at offset {at} checks, but check_records did not take it")


def unit_messages(unit: Unit, first: int = 0, stop: int | None = None) -> list[Message]:
    """Messages ``first`` to ``stop`` (indexes in the unit) of a verified unit, as :class:`Message`."""
    return list(iter_unit_messages(unit, first, stop))


def iter_unit_messages(unit: Unit, first: int = 0, stop: int | None = None) -> Iterator[Message]:
    """:func:`unit_messages`, each built as it is taken (what the per-message scan hands on:
    see :meth:`~vault_core.messagebatch.MessageBatch.iter_messages` for why no list holds them)."""
    stop = unit.size if stop is None else stop
    keys = binary_items(unit.keys, unit.key_ends, first, stop)
    values = binary_items(unit.values, unit.value_ends, first, stop)
    offset, timestamp, flags, size = unit.offset, unit.timestamp, unit.flags, unit.size
    return _unit_messages(offset, timestamp, flags, unit.end, keys, values, first, stop, size)


def stored_unit_messages(
    unit: StoredUnit, key_ends: array[int], value_ends: array[int], first: int, stop: int
) -> Iterator[Message]:
    """:func:`iter_unit_messages` of a decompressed unit and its checked boundaries
    (:func:`~vault_core.unitformat.payload_ends`): the keys and values are cut from the payload
    itself, with no copy of its two sections first (at 1 KiB events ~0.1 µs a message)."""
    keys_start = 8 * (unit.size + 1)
    values_start = keys_start + key_ends[-1]
    keys = binary_items(unit.payload, key_ends, first, stop, keys_start)
    values = binary_items(unit.payload, value_ends, first, stop, values_start)
    end = unit.offset + unit.length
    return _unit_messages(unit.offset, unit.timestamp, unit.flags, end, keys, values, first, stop, unit.size)


def _unit_messages(
    offset: int,
    timestamp: int,
    flags: int,
    end: int,
    keys: Iterable[bytes],
    values: Iterable[bytes],
    first: int,
    stop: int,
    size: int,
) -> Iterator[Message]:
    """Messages ``first`` to ``stop`` of the unit at ``offset`` (``size`` of them, the next frame at
    ``end``) with these keys and values. No bytecode runs per message: ``map`` and ``zip`` drive
    the tuple building in C."""
    start, after = offset + first, offset + stop
    # each message's successor is the next offset, the last one's the next frame
    ends = chain(range(start + 1, after), (end,)) if stop == size else range(start + 1, after + 1)
    fields = zip(range(start, after), repeat(timestamp), keys, values, repeat(flags & FLAG_KEY_IS_TEXT), ends)
    # tuple.__new__ straight from C: a named tuple's own __new__ is Python (~1 µs a call)
    return map(tuple.__new__, repeat(Message), fields)  # type: ignore[arg-type]


def _unit_length(view: memoryview, pos: int) -> int:
    frame = frame_at(view, pos)
    assert frame is not None
    return frame.length


def _decode_unit(span: Span, pos: int, room: int) -> tuple[list[Message], int | None]:
    """The messages of the version 2 unit at ``pos`` from offset ``span.first`` on, at most ``room``,
    and the buffer position after the unit; None if ``span.end`` cuts it off; minus the next
    message's stream offset if ``room`` stopped inside it."""
    unit = decode_unit(span, pos)
    if unit is None:
        return [], None
    lo = min(max(0, span.first - unit.offset), unit.size)
    hi = min(unit.size, lo + room)
    messages = unit_messages(unit, lo, hi)
    if hi < unit.size:
        return messages, -(unit.offset + hi)
    return messages, pos + unit.length


def _check_header(
    magic: bytes,
    version: int,
    klen: int,
    vlen: int,
    offset: int,
    position: int,
    stream: str | None,
) -> None:
    if magic != MAGIC:
        raise CorruptRecord("no record starts here (bad sync marker)", stream=stream, offset=position)
    if version != FORMAT_VERSION:
        raise UnsupportedVersion(
            f"record format version {version} is not supported by this reader (it knows 1 and 2)",
            stream=stream,
            offset=position,
        )
    if klen > MAX_KEY_BYTES or vlen > MAX_VALUE_BYTES:
        raise CorruptRecord(
            f"record lengths out of range (key {klen}, value {vlen})", stream=stream, offset=position
        )
    if offset != position:
        raise CorruptRecord(
            f"record claims offset {offset} but sits at {position}", stream=stream, offset=position
        )


class EncodedBatch(NamedTuple):
    """A batch already in record form, laid out from offset 0 (a claim-check body), and
    the position of each record in it. :func:`encoded_batch` makes one after checking every
    record; the writer copies ``data`` into the log and :func:`restamp` gives the copy its place."""

    data: bytes
    starts: list[int]


def encoded_batch(buf: bytes, *, stream: str | None = None) -> EncodedBatch:
    """Check that ``buf`` is whole, valid records laid out from offset 0; where each starts.

    Raises :class:`CorruptRecord` or :class:`UnsupportedVersion` as :func:`decode` does (it is
    :func:`decode` with ``buf`` as a complete log), and :class:`CorruptRecord` for a version 2
    unit among them: a body holds frames of one version only (FORMAT.md §6.8), and its readers
    (:func:`encoded_fields`, :func:`restamp`) take every start for a record's header.
    """
    records, _ = decode(buf, 0, stream=stream, complete=True)
    unit = next((r for r in records if r.end), None)  # only a unit's messages know their successor
    if unit is not None:
        raise CorruptRecord("a version 2 unit among version 1 records", stream=stream, offset=unit.offset)
    return EncodedBatch(buf, [r.offset for r in records])


_LENGTHS = struct.Struct("<BHI")  # flags, key length, value length: what encoded_fields() reads


def encoded_fields(batch: EncodedBatch) -> Iterator[tuple[bytes, bool, bytes]]:
    """``(key, key is text, value)`` of each record of ``batch``, in order, read from their headers.

    Not checked again: :func:`encoded_batch` checked every record when it made ``batch`` (the
    version 1 writer copies the same bytes into the log as they are). Checking them twice, and
    building a :class:`Message` of each on the way, was most of a version 2 writer's CPU for a
    claim-check batch of small messages.
    """
    data = batch.data
    lengths = _LENGTHS.unpack_from
    for start in batch.starts:
        flags, klen, vlen = lengths(data, start + FLAGS_OFFSET)
        key = start + HEADER_SIZE
        yield data[key : key + klen], bool(flags & FLAG_KEY_IS_TEXT), data[key + klen : key + klen + vlen]


_STAMP = struct.Struct("<Qq")  # offset, timestamp: the fields restamp() rewrites
_CRC = struct.Struct("<I")


def restamp(buf: bytearray, at: int, starts: list[int], first_offset: int, timestamp: int) -> None:
    """Give the records of an encoded batch copied to the end of ``buf``, from ``at``, their offsets and time.

    Each record's ``offset`` becomes ``first_offset`` plus its position in the batch, its
    ``timestamp`` becomes ``timestamp``, and its ``crc`` is computed afresh over the new bytes.
    """
    crc32 = zlib.crc32
    stamp = _STAMP.pack_into
    put_crc = _CRC.pack_into
    ends = [*starts[1:], len(buf) - at]
    with memoryview(buf) as view:  # released even on error: a viewed bytearray cannot grow
        for start, end in zip(starts, ends, strict=True):
            pos = at + start
            stamp(buf, pos + OFFSET_OFFSET, first_offset + start, timestamp)
            put_crc(buf, pos + CRC_OFFSET, crc32(view[pos + CRC_COVERAGE_START : at + end]))


def record_length_at(buf: bytes | bytearray | memoryview, pos: int) -> int | None:
    """Total length of the record or unit whose header starts at ``buf[pos]``, if the header is there."""
    frame = frame_at(buf, pos)
    return frame.length if frame else None


class Frame(NamedTuple):
    """What a header says about the record (version 1) or unit (version 2) it starts."""

    length: int
    """Bytes it occupies: the next one starts ``length`` bytes after it."""
    size: int
    """Messages it holds (1 for a record); their offsets are ``offset`` to ``offset + size - 1``."""
    offset: int
    """The offset it claims to sit at."""
    magic_ok: bool


def frame_at(buf: bytes | bytearray | memoryview, pos: int) -> Frame | None:
    """The header at ``buf[pos]`` read for its length and count (no checksum), if it is all there."""
    if pos + HEADER_SIZE > len(buf):
        return None
    magic, _, version, _, klen, vlen, offset, _ = HEADER.unpack_from(buf, pos)
    if version == UNIT_VERSION:
        unit = unit_length_at(buf, pos)
        if unit is None:
            return None
        length, count, offset = unit
        return Frame(length, count, offset, magic == MAGIC)
    return Frame(HEADER_SIZE + klen + vlen, 1, offset, magic == MAGIC)
