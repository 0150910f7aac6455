"""Records → Arrow columns, without Python bytecode per record where it can be avoided.

:func:`vault_core.recordformat.decode` builds one :class:`Message` (two ``bytes`` copies and a named
tuple) per record: about 2.5 µs each (100-byte values), which caps a Spark task at ~400k rows/s.
Here:

1. **Split path.** ``bytes.split(MAGIC)`` cuts the buffer into record bodies in C, ``map`` runs
   ``zlib.crc32`` over them in C, and every other check (lengths, version, flags, the offset
   each record claims) and the column extraction are Arrow kernels. It verifies the longest
   prefix of records it can; it stops at the first body that fails a check, which is either a
   bad record or a value that happens to contain the 4-byte sync marker.
2. **Chain path.** From there a plain loop walks the record chain by its length fields and
   checks each CRC; the same Arrow kernels check the rest. It takes over for the record the
   split path could not verify and for the record cut off by the end of the buffer.

The checks are those of :func:`~vault_core.recordformat.decode`: nothing is returned that it would
refuse. Where a record does not verify, decoding stops there and ``decode`` itself is run on
it, so the error raised is the reference one, word for word.

3. **Units.** A version 2 unit (docs/FORMAT.md §11) is checked and decompressed by
   :func:`vault_core.unitformat.sealed_unit` and ``opened_unit``; its payload already has
   Arrow's binary layout (offsets buffer, data buffer), so its key and value columns are Arrow arrays over the
   decompressed bytes, built without a loop per message once their boundaries pass the checks
   of :func:`~vault_core.unitformat.payload_ends` (done here by Arrow's own validation and one
   kernel per run of units; that function itself runs only on a unit that fails them, for the
   reference error). Consecutive units become one piece, their columns joined (one copy), up to
   :data:`BATCH_PAYLOAD_BYTES`: Spark and PySpark pay for every batch as well as every row, and
   a unit of 100-byte events is only ~2,000 rows.

Pieces are decoded as a :class:`Decoder` is iterated, so a Spark task hands a batch to the JVM
and decodes the next while the JVM turns the first into rows.
"""

from __future__ import annotations

import struct
import sys
import zlib
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from operator import itemgetter

import pyarrow as pa
import pyarrow.compute as pc

from vault_core.errors import CorruptRecord, FormatError
from vault_core.recordformat import (
    FLAG_KEY_IS_TEXT,
    FORMAT_VERSION,
    HEADER,
    HEADER_SIZE,
    MAGIC,
    MAX_KEY_BYTES,
    MAX_VALUE_BYTES,
    SUPPORTED_COMPRESSION,
    UNIT_VERSION,
    Message,
    decode,
)
from vault_core.unitformat import StoredUnit, opened_unit, payload_ends, sealed_unit

BATCH_PAYLOAD_BYTES = 4 * 1024 * 1024
"""Consecutive units become one piece (one Arrow batch) until their payloads reach this: about 16
units, as many bytes as the format 1 records of one 4 MiB range, which are one batch too."""

# A record body is the record without its 4-byte magic; its 28-byte header reads as seven
# little-endian uint32 words: crc | version, flags, key_len | value_len | offset lo, hi | ts lo, hi.
# Guard the assumptions so that a format change fails loudly here rather than decoding wrongly.
assert HEADER.format == "<4sIBBHIQq" and HEADER_SIZE == 32 and len(MAGIC) == 4
assert frozenset({0}) == SUPPORTED_COMPRESSION, "teach the columnar decoder about compression"
if sys.byteorder != "little":  # pragma: no cover - every Spark platform in use is little-endian
    raise ImportError("vault_core.spark.columnar reinterprets headers as little-endian integers")

_BODY_HEADER = HEADER_SIZE - len(MAGIC)  # 28
_VERSION_FLAGS_MASK = 0xFFFF & ~(FLAG_KEY_IS_TEXT << 8)  # the version byte and every flag we refuse
_TEXT_BIT = FLAG_KEY_IS_TEXT << 8
_CRC_LENGTHS = struct.Struct("<4xI2xHI").unpack_from  # crc, key_len, value_len
_CRC_START = 8  # the CRC covers everything from the version byte on
_AFTER_CRC = itemgetter(slice(4, None))  # body → the bytes its CRC covers
_BINARY = pa.binary()
_U32_AT = struct.Struct("<I").unpack_from
_TIMESTAMP = pa.timestamp("us", tz="UTC")
SPARK_MAX_MS = (2**63 - 1) // 1000
"""The largest timestamp, either side of 1970, that a Spark timestamp (microseconds in 64 bits)
holds, in ms: about 292,000 years. Readers do not check a timestamp's range (FORMAT.md §2), but a
value past this one has no Spark timestamp: it is reported, never wrapped round."""


def _unrepresentable(timestamp: int, stream: str | None, offset: int) -> FormatError:
    return FormatError(
        f"timestamp {timestamp} ms is outside what a Spark timestamp holds (±{SPARK_MAX_MS} ms);"
        " writers write 0 to 2^48 - 1 (FORMAT.md §2)",
        stream=stream,
        offset=offset,
    )


def _i64(value: int) -> pa.Scalar:
    """``value`` as the int64 scalar a Python int in a compute call becomes, given explicitly:
    inferring it costs ~0.7 ms a call where pyarrow's optional ``dateutil`` is not installed
    (pyarrow looks for it, and fails, on every call), more than a whole unit's columns."""
    return pa.scalar(value, pa.int64())


_ZERO, _ONE, _TWO, _SEVEN, _MS_TO_US = (_i64(v) for v in (0, 1, 2, 7, 1000))


@dataclass(frozen=True)
class Columns:
    """Verified records of one buffer, as Arrow arrays (``offset, timestamp, key, value, key_text``)."""

    arrays: tuple[pa.Array, ...]
    rows: int
    end: int
    """Buffer position after the last verified record: where the caller continues (or carries)."""
    error: FormatError | None = None
    """Why decoding stopped at ``end`` before the buffer's end, if a record did not verify."""


@dataclass(frozen=True)
class Pieces:
    """What :meth:`Decoder.pieces` found: columns per run of units or of records, in log order."""

    parts: list[Columns]
    end: int
    """Buffer position after the last verified record or unit (as ``Columns.end``)."""
    error: FormatError | None = None

    def joined(self) -> Columns:
        """The pieces as one :class:`Columns`: their arrays concatenated, column by column."""
        if not self.parts:
            return Columns((), 0, self.end, self.error)
        if len(self.parts) == 1:
            return Columns(self.parts[0].arrays, self.parts[0].rows, self.end, self.error)
        columns = zip(*(p.arrays for p in self.parts), strict=True)
        arrays = tuple(pa.concat_arrays(list(column)) for column in columns)
        return Columns(arrays, sum(p.rows for p in self.parts), self.end, self.error)


class Decoder:
    """The pieces of ``buf[start:end]`` (``buf[0]`` at stream offset ``base``), each decoded when
    asked for, so that a Spark task hands one batch on while it decodes the next.

    One piece per run of version 2 units (their key and value columns joined, up to about
    :data:`BATCH_PAYLOAD_BYTES`) and one per run of version 1 records, none empty. Once iterated,
    ``end`` is the buffer position after the last verified record or unit and ``error`` why it
    stopped there, if a frame did not verify. A frame cut off by ``end`` is left for the caller
    (``end`` points at it) unless ``last`` says ``end`` is where the range ends, where it is an
    error, as in ``decode``.
    """

    def __init__(
        self,
        buf: bytes,
        base: int,
        start: int = 0,
        end: int | None = None,
        *,
        last: bool = False,
        stream: str | None = None,
    ) -> None:
        self.buf, self.base, self.last, self.stream = buf, base, last, stream
        self.stop = len(buf) if end is None else end
        if self.stop - start >= 1 << 31:
            raise ValueError("a Decoder takes at most 2 GiB at a time (Arrow binary offsets are 32-bit)")
        self.end = start
        self.error: FormatError | None = None

    def __iter__(self) -> Iterator[Columns]:
        buf, base, stop, last, stream = self.buf, self.base, self.stop, self.last, self.stream
        while self.end < stop and self.error is None:  # alternate runs of records and of units
            if _at_unit(buf, self.end, stop):
                piece, cut_off = _units(buf, base, self.end, stop, last, stream)
            else:
                piece = _records(buf, base, self.end, stop, last, stream)
                cut_off = not _at_unit(buf, piece.end, stop)  # (or an error): nothing more here
            self.end, self.error = piece.end, piece.error
            if piece.rows:
                yield piece
            if cut_off:
                break  # the caller carries it

    def pieces(self) -> Pieces:
        """Every piece at once, in a list (:meth:`Pieces.joined` makes them one)."""
        parts = list(self)
        return Pieces(parts, self.end, self.error)


def _at_unit(buf: bytes, pos: int, end: int) -> bool:
    """Whether a version 2 unit's prefix (sync marker, version 2) is at ``buf[pos]``."""
    return pos + 9 <= end and buf[pos + 8] == UNIT_VERSION and buf[pos : pos + 4] == MAGIC


def _units(
    buf: bytes, base: int, start: int, end: int, last: bool, stream: str | None
) -> tuple[Columns, bool]:
    """Consecutive version 2 units from ``start`` as one piece of at most about
    :data:`BATCH_PAYLOAD_BYTES`, up to a frame that is not a unit, one cut off by ``end`` (the
    bool says so) or one that does not verify (``Columns.error``)."""
    units: list[StoredUnit] = []
    keys: list[pa.Array] = []
    values: list[pa.Array] = []
    pos, size, cut_off = start, 0, False
    error: FormatError | None = None
    while size < BATCH_PAYLOAD_BYTES and _at_unit(buf, pos, end):
        try:
            sealed = sealed_unit(buf, pos, base, end, stream=stream, complete=last)
            if sealed is None:
                cut_off = True
                break
            unit = opened_unit(sealed, stream=stream)
            if not -SPARK_MAX_MS <= unit.timestamp <= SPARK_MAX_MS:
                raise _unrepresentable(unit.timestamp, stream, unit.offset)
            unit_keys, unit_values = _unit_arrays(unit, stream)
        except FormatError as exc:
            error = exc
            break
        units.append(unit)
        keys.append(unit_keys)
        values.append(unit_values)
        pos += unit.length
        size += len(unit.payload)
    piece = _joined(units, keys, values, base, pos, error, stream)
    return piece, cut_off and piece.error is None


def _joined(
    units: list[StoredUnit],
    keys: list[pa.Array],
    values: list[pa.Array],
    base: int,
    end: int,
    error: FormatError | None,
    stream: str | None,
) -> Columns:
    """The piece of a run of units that passed :func:`_unit_arrays`, which ends at ``end`` (a buffer
    position) with ``error``: their keys and values joined (one copy, where a batch per unit costs
    Spark more), and the limits on a key's and a value's length checked over the whole run."""
    if not units:
        return Columns((), 0, end, error)
    joined_keys = keys[0] if len(keys) == 1 else pa.concat_arrays(keys)
    joined_values = values[0] if len(values) == 1 else pa.concat_arrays(values)
    if _longest(joined_keys) > MAX_KEY_BYTES or _longest(joined_values) > MAX_VALUE_BYTES:
        # A unit of the run holds a key or value over the limit: the units before it are good,
        # and the reference check finds it and says why, as it would for the unit alone.
        for i, unit in enumerate(units):
            try:
                payload_ends(unit, stream=stream)
            except CorruptRecord as exc:
                return _joined(units[:i], keys[:i], values[:i], base, unit.offset - base, exc, stream)
        raise AssertionError(f"columnar decoder and payload_ends disagree at offset {units[0].offset}")
    columns = _units_columns(units, keys, joined_keys, joined_values)
    return Columns(columns, len(joined_keys), end, error)


def _unit_arrays(unit: StoredUnit, stream: str | None) -> tuple[pa.Array, pa.Array]:
    """The key and value arrays of a unit whose payload decompressed, its offset arrays and data
    handed to Arrow as they are (no copy), once §11.5's checks of its boundaries pass (all but
    the limits on a key's and a value's length, which :func:`_joined` checks for a run of units
    at once): each array starts at 0, the two end where the payload does, and neither decreases
    (Arrow's own full validation, in C++, where a check in Python is a loop per boundary)."""
    n, data = unit.size, unit.payload
    width = 4 * (n + 1)
    keys_start, key_bytes, value_bytes = (
        2 * width,
        _U32_AT(data, width - 4)[0],
        _U32_AT(data, 2 * width - 4)[0],
    )
    try:
        if not (
            _U32_AT(data, 0)[0] == 0
            and _U32_AT(data, width)[0] == 0
            and keys_start + key_bytes + value_bytes == len(data)
        ):
            raise pa.ArrowInvalid("boundaries that start or end elsewhere")
        payload = pa.py_buffer(data)
        keys = pa.Array.from_buffers(
            _BINARY, n, [None, payload.slice(0, width), payload.slice(keys_start, key_bytes)]
        )
        values = pa.Array.from_buffers(
            _BINARY, n, [None, payload.slice(width, width), payload.slice(keys_start + key_bytes)]
        )
        keys.validate(full=True)  # offsets that never decrease and stay inside the data
        values.validate(full=True)
    except pa.ArrowInvalid:
        payload_ends(unit, stream=stream)  # raises the reference error
        raise AssertionError(f"columnar decoder and payload_ends disagree at offset {unit.offset}") from None
    return keys, values


def _longest(array: pa.Array) -> int:
    """The length of the longest element of a binary array."""
    return int(pc.max(pc.binary_length(array)).as_py())


def _units_columns(
    units: list[StoredUnit], keys: list[pa.Array], joined_keys: pa.Array, joined_values: pa.Array
) -> tuple[pa.Array, ...]:
    """The columns of a run of verified units, given their keys (each unit's and joined) and
    values: offsets and timestamps built per row without a loop, the keys as text where they are."""
    rows = len(joined_keys)
    # Message i of a unit at P has offset P + i: the row number plus, per unit, P minus its first row.
    shift, stamps, first = [], [], 0
    for u in units:
        shift.append(array("q", [u.offset - first]) * u.size)
        stamps.append(array("q", [u.timestamp * 1000]) * u.size)
        first += u.size
    offset = pc.add(_counting(rows), _int64s(pa.int64(), rows, shift))
    timestamp = _int64s(_TIMESTAMP, rows, stamps)
    text = [bool(u.flags & FLAG_KEY_IS_TEXT) for u in units]
    if all(text):
        key_text = _as_text(joined_keys)
    elif not any(text):
        key_text = pa.nulls(rows, pa.string())
    else:  # text keys and others in one run: unit by unit
        key_text = pa.concat_arrays(
            [_as_text(k) if t else pa.nulls(len(k), pa.string()) for k, t in zip(keys, text, strict=True)]
        )
    return offset, timestamp, joined_keys, joined_values, key_text


def _int64s(kind: pa.DataType, rows: int, parts: list[array[int]]) -> pa.Array:
    """``parts`` laid end to end as an Arrow array of ``kind`` (64-bit): one join, no kernel."""
    data = parts[0] if len(parts) == 1 else b"".join(parts)
    return pa.Array.from_buffers(kind, rows, [None, pa.py_buffer(data)])


def _counting(n: int) -> pa.Array:
    """0, 1, ..., n-1 as int64: a slice of one array kept for the process, grown when too short."""
    global _COUNTING
    if len(_COUNTING) < n:
        size = max(n, 2 * len(_COUNTING))
        _COUNTING = pc.subtract(pc.cumulative_sum(pa.repeat(_ONE_I64, size)), _ONE_I64)
    return _COUNTING.slice(0, n)


_ONE_I64 = pa.scalar(1, pa.int64())
_COUNTING: pa.Array = pa.array([], pa.int64())


def _records(buf: bytes, base: int, start: int, end: int, last: bool, stream: str | None) -> Columns:
    """Version 1 records from ``start``, up to the first unit, the end, or a record that fails."""
    head, pos = _split_path(buf, base, start, end)
    tail = _chain_path(buf, base, pos, end, last, stream)
    if head is None or not head.rows:
        return tail
    if not tail.rows:
        return Columns(head.arrays, head.rows, tail.end, tail.error)
    arrays = tuple(pa.concat_arrays([a, b]) for a, b in zip(head.arrays, tail.arrays, strict=True))
    return Columns(arrays, head.rows + tail.rows, tail.end, tail.error)


def _split_path(buf: bytes, base: int, start: int, end: int) -> tuple[Columns | None, int]:
    """The longest verifiable prefix of records, found by splitting at the sync marker."""
    data = buf if start == 0 and end == len(buf) else buf[start:end]
    bodies_list = data.split(MAGIC)
    if bodies_list[0]:  # start is not where a record starts: the chain path says why
        return None, start
    del bodies_list[0]
    if not bodies_list:
        return None, start
    crcs = pa.array(map(zlib.crc32, map(_AFTER_CRC, bodies_list)), pa.uint32(), size=len(bodies_list))
    bodies = pa.array(bodies_list, _BINARY)
    del bodies_list
    arrays, rows = _assemble(bodies, crcs, base + start)
    if not rows:
        return None, start
    used = pc.sum(pc.binary_length(bodies.slice(0, rows))).as_py()
    return Columns(arrays, rows, start + used + len(MAGIC) * rows), start + used + len(MAGIC) * rows


def _chain_path(buf: bytes, base: int, start: int, end: int, last: bool, stream: str | None) -> Columns:
    """Records from ``start`` by their length fields: the general case, and the error reporter."""
    view = memoryview(buf)
    crc32 = zlib.crc32
    bounds = array("i", [0])  # record ends, relative to start: the offsets of a records array
    push = bounds.append
    pos = start
    while pos + HEADER_SIZE <= end:
        if view[pos + 8] == UNIT_VERSION:
            break  # a unit: the Decoder takes it from here
        crc, klen, vlen = _CRC_LENGTHS(view, pos)
        rec_end = pos + HEADER_SIZE + klen + vlen
        if rec_end > end or klen > MAX_KEY_BYTES or vlen > MAX_VALUE_BYTES:
            break
        if crc32(view[pos + _CRC_START : rec_end]) != crc:
            break
        push(rec_end - start)
        pos = rec_end
    rows = len(bounds) - 1
    arrays: tuple[pa.Array, ...] = ()
    if rows:
        data = pa.py_buffer(view[start:pos])
        records = pa.Array.from_buffers(_BINARY, rows, [None, pa.py_buffer(bounds), data])
        magic_ok = pc.equal(pc.binary_slice(records, 0, len(MAGIC)), pa.scalar(MAGIC, _BINARY))
        bodies = pc.binary_slice(records, len(MAGIC), MAX_KEY_BYTES + MAX_VALUE_BYTES + HEADER_SIZE)
        arrays, good = _assemble(bodies, None, base + start, magic_ok)
        if good < rows:  # passed its CRC, failed a header check: stop at it
            pos = start + bounds[good]
        rows = good
    error = None
    if (pos + HEADER_SIZE <= end or (last and pos < end)) and not _at_unit(buf, pos, end):
        error = _reference_error(view, base, pos, end, last, stream)
    return Columns(arrays, rows, pos, error)


def _assemble(
    bodies: pa.Array, crcs: pa.Array | None, first_offset: int, magic_ok: pa.Array | None = None
) -> tuple[tuple[pa.Array, ...], int]:
    """Check record bodies (records minus magic) laid end to end from ``first_offset``; columns
    of the verified prefix and its length. ``crcs`` are the computed CRCs (None: already checked)."""
    n = len(bodies)
    lengths = pc.binary_length(bodies)
    short = pc.index(pc.greater_equal(lengths, _i64(_BODY_HEADER)), False).as_py()
    if short >= 0:  # too short for a header: only the prefix before it can be checked
        n = short
        bodies, lengths = bodies.slice(0, n), lengths.slice(0, n)
        crcs = crcs.slice(0, n) if crcs is not None else None
        magic_ok = magic_ok.slice(0, n) if magic_ok is not None else None
    if n == 0:
        return (), 0
    headers = pc.binary_slice(bodies, 0, _BODY_HEADER).cast(pa.binary(_BODY_HEADER))
    words = pa.Array.from_buffers(pa.uint32(), 7 * n, [None, headers.buffers()[1]])
    seven = pc.multiply(_arange(n), _SEVEN)
    crc, vf_klen, vlen, off_lo, off_hi, ts_lo, ts_hi = (words.take(pc.add(seven, _i64(i))) for i in range(7))
    klen = pc.shift_right(vf_klen, _i64(16))
    offset = _int64(off_lo, off_hi)
    stamp_ms = _int64(ts_lo, ts_hi)
    record_size = pc.add(lengths.cast(pa.int64()), _i64(len(MAGIC)))
    position = pc.add(pc.subtract(pc.cumulative_sum(record_size), record_size), _i64(first_offset))
    checks = [
        pc.equal(pc.bit_wise_and(vf_klen, _i64(_VERSION_FLAGS_MASK)), _i64(FORMAT_VERSION)),
        pc.less_equal(klen, _i64(MAX_KEY_BYTES)),
        pc.less_equal(vlen, _i64(MAX_VALUE_BYTES)),
        pc.equal(
            pc.add(pc.add(klen.cast(pa.int64()), vlen.cast(pa.int64())), _i64(_BODY_HEADER)),
            lengths.cast(pa.int64()),
        ),
        pc.equal(offset, position),
        pc.and_(pc.greater_equal(stamp_ms, _i64(-SPARK_MAX_MS)), pc.less_equal(stamp_ms, _i64(SPARK_MAX_MS))),
    ]
    if crcs is not None:
        checks.append(pc.equal(crc, crcs))
    if magic_ok is not None:
        checks.append(magic_ok)
    ok = checks[0]
    for check in checks[1:]:
        ok = pc.and_(ok, check)
    bad = pc.index(ok, False).as_py()
    rows = n if bad < 0 else bad
    if rows == 0:
        return (), 0
    if rows < n:
        bodies, klen, offset, vf_klen, stamp_ms = (
            a.slice(0, rows) for a in (bodies, klen, offset, vf_klen, stamp_ms)
        )
    keys, values = _keys_and_values(bodies, klen)
    timestamp = pc.multiply(stamp_ms, _MS_TO_US).cast(_TIMESTAMP)
    is_text = pc.not_equal(pc.bit_wise_and(vf_klen, _i64(_TEXT_BIT)), _ZERO)
    key_text = _as_text(pc.if_else(is_text, keys, pa.scalar(None, _BINARY)))
    return (offset, timestamp, keys, values, key_text), rows


def _keys_and_values(bodies: pa.Array, klen: pa.Array) -> tuple[pa.Array, pa.Array]:
    """Keys and values cut out of the bodies' data buffer, without a Python loop.

    Read with the offsets ``[b0, v0, b1, v1, ...]`` (``b`` body start, ``v`` value start), the
    body buffer is an array alternating header+key, value: take the odd and even elements.
    """
    if bodies.offset:  # the buffers below are read from element 0
        bodies = bodies.take(_arange(len(bodies)))
    n = len(bodies)
    starts = pa.Array.from_buffers(pa.int32(), n + 1, [None, bodies.buffers()[1]])
    value_starts = pc.add(starts.slice(0, n), pc.add(klen.cast(pa.int32()), _i64(_BODY_HEADER))).cast(
        pa.int32()
    )
    both = pa.concat_arrays([starts.slice(0, n), value_starts])
    k = _arange(2 * n)
    interleave = pc.add(pc.multiply(pc.bit_wise_and(k, _ONE), _i64(n)), pc.shift_right(k, _ONE))
    offsets = pa.concat_arrays([both.take(interleave), starts.slice(n, 1)])
    fields = pa.Array.from_buffers(_BINARY, 2 * n, [None, offsets.buffers()[1], bodies.buffers()[2]])
    even = pc.multiply(_arange(n), _TWO)
    keys = pc.binary_slice(fields.take(even), _BODY_HEADER, _BODY_HEADER + MAX_KEY_BYTES)
    return keys, fields.take(pc.add(even, _ONE))


def _arange(n: int) -> pa.Array:
    """0, 1, ..., n-1 as int32, built by a kernel (a Python range costs ~100 ns per element)."""
    return pc.subtract(pc.cumulative_sum(pa.repeat(_ONE_I32, n)), _ONE_I32)


_ONE_I32 = pa.scalar(1, pa.int32())


def _int64(lo: pa.Array, hi: pa.Array) -> pa.Array:
    return pc.add(lo.cast(pa.int64()), pc.shift_left(hi.cast(pa.int64()), _i64(32)))


def _reference_error(
    view: memoryview, base: int, pos: int, end: int, last: bool, stream: str | None
) -> FormatError | None:
    """Run the reference decoder on the record at ``pos``: its error, or None if merely cut off."""
    try:
        records, _ = decode(view, base, pos, end, max_count=1, stream=stream, complete=last)
    except FormatError as exc:
        return exc
    if records:
        # the one check the reference reader does not make: a timestamp a Spark row cannot hold
        if not -SPARK_MAX_MS <= records[0].timestamp <= SPARK_MAX_MS:
            return _unrepresentable(records[0].timestamp, stream, records[0].offset)
        raise AssertionError(f"columnar decoder and format.decode disagree at offset {base + pos}")
    return None


def _as_text(keys: pa.Array) -> pa.Array:
    """Keys marked as text, as strings. The flag is the writer's word, not a check (FORMAT.md §2):
    a key whose bytes are not UTF-8, which only a faulty writer marks as text, is null here and
    keeps its bytes in the ``key`` column, rather than failing the read."""
    try:
        return keys.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array([None if k is None else _utf8(k) for k in keys.to_pylist()], pa.string())


def _utf8(key: bytes) -> str | None:
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        return None


def messages_to_columns(messages: Sequence[Message]) -> tuple[pa.Array, ...]:
    """The same columns from decoded :class:`Message` objects (for comparisons and small reads)."""
    for m in messages:
        if not -SPARK_MAX_MS <= m.timestamp <= SPARK_MAX_MS:
            raise _unrepresentable(m.timestamp, None, m.offset)
    return (
        pa.array([m.offset for m in messages], pa.int64()),
        pa.array([m.timestamp * 1000 for m in messages], pa.int64()).cast(_TIMESTAMP),
        pa.array([m.key for m in messages], _BINARY),
        pa.array([m.value for m in messages], _BINARY),
        pa.array([_utf8(m.key) if m.key_is_text else None for m in messages], pa.string()),
    )


def record_batch(stream: str, arrays: Iterable[pa.Array], rows: int, schema: pa.Schema) -> pa.RecordBatch:
    """A batch in ``schema`` (the reader's exact Arrow schema): the stream column, then ``arrays``."""
    return pa.RecordBatch.from_arrays(
        [pa.repeat(pa.scalar(stream, pa.string()), rows), *arrays], schema=schema
    )
