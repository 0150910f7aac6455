"""Record format version 2: one framed, compressed, columnar *unit* holding many messages
(specified byte for byte in ``docs/FORMAT.md`` §11). Pure: bytes in, messages out.

Every field's position is derived from the one before it::

    unit    := header stored
    header  := magic crc version flags count payload_length stored_length offset timestamp  (38 bytes)
    stored  := codec(payload)                 (stored_length bytes; payload_length before the codec)
    payload := key_offsets value_offsets keys values
    key_offsets, value_offsets := u32[count + 1]   (0, then each key's / value's end: Arrow's layout)

``magic``, ``crc`` and ``version`` keep the places they have in version 1 (§9's fixed prefix).
``crc`` is the CRC-32 of every byte after it, from ``version`` to the last stored byte: it is
checked before anything is decompressed. The message ``i`` of a unit at position ``P`` has the
offset ``P + i``; a writer never lets a unit be shorter than its count, so these offsets lie
inside the unit and no two messages of a stream share one.
"""

from __future__ import annotations

import bisect
import struct
import sys
import zlib
from array import array
from collections.abc import Sequence
from typing import NamedTuple

from vault_core import codecs
from vault_core.errors import CorruptRecord, UnsupportedVersion
from vault_core.prefix import (
    CRC_COVERAGE_START,
    FLAG_COMPRESSION_MASK,
    FLAG_KEY_IS_TEXT,
    MAGIC,
    MAX_KEY_BYTES,
    MAX_VALUE_BYTES,
    PREFIX_SIZE,
    UNIT_VERSION,
)

# re-exported: a format module names every position of its frame, the shared ones too
from vault_core.prefix import CRC_OFFSET as CRC_OFFSET
from vault_core.prefix import MAGIC_OFFSET as MAGIC_OFFSET
from vault_core.prefix import VERSION_OFFSET as VERSION_OFFSET
from vault_core.span import Span

UNIT_HEADER = struct.Struct("<4sIBBIIIQq")
UNIT_HEADER_SIZE = UNIT_HEADER.size  # 38
_COVERED_HEADER = struct.Struct("<BBIIIQq")  # version .. timestamp: the header part the crc covers
_CRC = struct.Struct("<I")

# magic, crc and version: the fixed prefix, whose positions vault_core.prefix names
FLAGS_OFFSET = PREFIX_SIZE
COUNT_OFFSET = FLAGS_OFFSET + 1
PAYLOAD_LENGTH_OFFSET = COUNT_OFFSET + 4
STORED_LENGTH_OFFSET = PAYLOAD_LENGTH_OFFSET + 4
OFFSET_OFFSET = STORED_LENGTH_OFFSET + 4
TIMESTAMP_OFFSET = OFFSET_OFFSET + 8
STORED_OFFSET = TIMESTAMP_OFFSET + 8
assert STORED_OFFSET == UNIT_HEADER_SIZE == 8 + _COVERED_HEADER.size == 38

KNOWN_UNIT_FLAGS = FLAG_COMPRESSION_MASK | FLAG_KEY_IS_TEXT
SUPPORTED_CODECS = frozenset(codecs.CODEC_NAMES)

MAX_PAYLOAD_BYTES = 4 * 1024 * 1024
"""Largest payload a unit may declare: what a reader may have to allocate for one unit."""
MAX_UNIT_BYTES = UNIT_HEADER_SIZE + MAX_PAYLOAD_BYTES
"""Longest unit frame: stored bytes are never more than the payload (FORMAT.md §11.2)."""
MAX_UNIT_COUNT = MAX_PAYLOAD_BYTES // 8 - 1
"""Most messages a unit can hold: its two offset arrays alone take 8 bytes a message and 8 more."""
UNIT_TARGET_BYTES = 1024 * 1024
"""A writer closes a unit before its payload would pass this (a unit of one larger message holds
just that message, up to MAX_PAYLOAD_BYTES), or at UNIT_TARGET_MESSAGES messages, whichever comes
first. A reader pays a fixed cost per unit (its decompression handed to a helper thread and back,
its boundaries checked, its columns set up), 70-90 µs of CPU on the bench machine, so a unit
needs about a thousand messages before that is a small part of what they cost (1 KiB events in
256 KiB units: a scan 7-20 % slower on Azurite, 5 % more bytes; BENCHMARKS.md, "Units of 1 MiB or
2,048 messages"). Parquet's data pages are 1 MiB for the same trade."""
UNIT_TARGET_MESSAGES = 2048
"""The other bound of a unit a writer closes: small messages fill a unit in messages long before
bytes (100 B events: 2,048 of them are ~230 KiB), and a read that starts inside a unit
decompresses all of it, so this bounds what a page of small messages decompresses for the few
it returns; the fixed cost per unit is long amortized by then."""
assert 8 * 2 + MAX_KEY_BYTES + MAX_VALUE_BYTES <= MAX_PAYLOAD_BYTES  # any one message fits a unit

if sys.byteorder == "little":

    def _u32s(data: bytes) -> array[int]:
        a = array("I")
        a.frombytes(data)
        return a

else:  # pragma: no cover - big-endian hosts

    def _u32s(data: bytes) -> array[int]:
        a = array("I")
        a.frombytes(data)
        a.byteswap()
        return a


assert array("I").itemsize == 4


def encode_unit(
    keys: Sequence[bytes],
    values: Sequence[bytes],
    offset: int,
    timestamp: int,
    *,
    codec: int,
    key_is_text: bool,
) -> bytes:
    """One unit holding ``values`` (with ``keys``), laid out at stream ``offset``, stamped ``timestamp``.

    Falls back to codec none when compression does not make the unit smaller, and also when it
    would leave the unit no longer than its count of messages (the payload alone is 8 bytes per
    message): every message's offset ``offset + i`` then lies inside the unit, and the last
    message's successor (the unit's end) is never ``offset + count``, the offset it would have
    if the unit held one more.
    """
    count = len(values)
    if count == 0 or count != len(keys):
        raise ValueError("a unit holds at least one message, and a key for each")
    key_ends = _ends(keys)
    value_ends = _ends(values)
    payload = b"".join((key_ends.tobytes(), value_ends.tobytes(), *keys, *values))
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise ValueError(f"unit payload of {len(payload)} bytes exceeds {MAX_PAYLOAD_BYTES}")
    stored = codecs.compress(codec, payload) if codec != codecs.CODEC_NONE else payload
    too_short = UNIT_HEADER_SIZE + len(stored) <= count
    if codec != codecs.CODEC_NONE and (len(stored) >= len(payload) or too_short):
        codec, stored = codecs.CODEC_NONE, payload
    flags = codec | (FLAG_KEY_IS_TEXT if key_is_text else 0)
    return _framed(flags, count, len(payload), stored, offset, timestamp)


def restamped_unit(unit: SealedUnit, offset: int, timestamp: int) -> bytes:
    """``unit`` (checked, and its payload too: :func:`~vault_core.stagedunits.staged_units`) as it
    is, moved to stream ``offset`` and stamped ``timestamp``: only those two header fields and the
    checksum change. The stored bytes are copied, not decompressed or compressed again."""
    return _framed(unit.flags, unit.size, unit.payload_length, unit.stored, offset, timestamp)


def _framed(
    flags: int, count: int, payload_length: int, stored: bytes | memoryview, offset: int, timestamp: int
) -> bytes:
    covered = _COVERED_HEADER.pack(UNIT_VERSION, flags, count, payload_length, len(stored), offset, timestamp)
    crc = zlib.crc32(stored, zlib.crc32(covered))
    return b"".join((MAGIC, _CRC.pack(crc), covered, stored))


def _ends(parts: Sequence[bytes]) -> array[int]:
    ends = array("I", [0])
    total = 0
    for n in map(len, parts):
        total += n
        ends.append(total)
    if sys.byteorder != "little":  # pragma: no cover
        ends.byteswap()
    return ends


class Unit(NamedTuple):
    """A unit that passed every check of §11.5: its header and decompressed payload sections."""

    offset: int
    timestamp: int
    flags: int
    size: int
    """Messages in the unit (``count`` in the header)."""
    length: int
    """Bytes the unit occupies in the log: ``offset + length`` is where the next one starts."""
    key_ends: array[int]
    """``size + 1`` key boundaries (0 first) into ``keys``; the same for values."""
    value_ends: array[int]
    keys: bytes
    values: bytes
    payload: bytes
    """The whole decompressed payload (the Arrow path builds arrays over it without copies)."""

    @property
    def end(self) -> int:
        return self.offset + self.length

    @property
    def keys_start(self) -> int:
        """Where ``keys`` begins in ``payload`` (the two offset arrays come first)."""
        return 8 * (self.size + 1)


class StoredUnit(NamedTuple):
    """A unit whose header, checksum and decompression passed §11.5's checks, before those of its
    payload's boundaries (:func:`payload_ends`): what a reader that needs no copy of the keys and
    values (the Arrow one) starts from."""

    offset: int
    timestamp: int
    flags: int
    size: int
    length: int
    payload: bytes


def unit_length_at(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int, int] | None:
    """``(length, count, claimed offset)`` of the unit whose header starts at ``buf[pos]``, if whole."""
    if pos + UNIT_HEADER_SIZE > len(buf):
        return None
    _, _, _, _, count, _, stored, offset, _ = UNIT_HEADER.unpack_from(buf, pos)
    return UNIT_HEADER_SIZE + stored, count, offset


def decode_unit(span: Span, pos: int) -> Unit | None:
    """The unit at ``span.buf[pos]`` (stream offset ``span.base + pos``), checked as §11.5 says.

    None if ``span.end`` cuts it off, unless ``span.complete`` says it is the committed end (corrupt).
    Raises :class:`CorruptRecord` or :class:`UnsupportedVersion` on anything that does not verify.
    """
    buf, base, _, end, stream, complete, _ = span
    sealed = sealed_unit(buf, pos, base, end, stream=stream, complete=complete)
    return None if sealed is None else unpacked_unit(opened_unit(sealed, stream=stream), stream=stream)


def unpacked_unit(stored_unit: StoredUnit, *, stream: str | None = None) -> Unit:
    """A decompressed unit's payload split into its boundaries, keys and values, the boundaries
    checked (:func:`payload_ends`): the rest of :func:`decode_unit`."""
    offset, ts, flags, count, length, payload = stored_unit
    key_ends, value_ends = payload_ends(stored_unit, stream=stream)
    keys_start = 8 * (count + 1)
    values_start = keys_start + key_ends[-1]
    return Unit(
        offset,
        ts,
        flags,
        count,
        length,
        key_ends,
        value_ends,
        payload[keys_start:values_start],
        payload[values_start:],
        payload,
    )


class SealedUnit(NamedTuple):
    """A unit whose header and checksum passed §11.5's checks, its payload still as stored: what a
    scan checks of a whole read before it hands any message on, and opens (:func:`opened_unit`)
    a few units ahead of its consumer."""

    offset: int
    timestamp: int
    flags: int
    size: int
    length: int
    payload_length: int
    stored: bytes | memoryview
    """The stored bytes (``stored_length`` of them), compressed by the codec in ``flags``."""


def sealed_unit(
    buf: bytes | bytearray | memoryview,
    pos: int,
    base_offset: int,
    end: int | None = None,
    *,
    stream: str | None = None,
    complete: bool = False,
) -> SealedUnit | None:
    """The unit at ``buf[pos]``, its header and checksum checked (§11.5 up to decompression).

    None if ``end`` cuts it off, unless ``complete`` says ``end`` is the committed end (corrupt);
    errors as :func:`decode_unit`'s. Its ``stored`` is a view into ``buf``.
    """
    end = len(buf) if end is None else end
    at = base_offset + pos
    if pos + UNIT_HEADER_SIZE > end:
        if complete:
            raise CorruptRecord("a partial unit header at the committed end", stream=stream, offset=at)
        return None
    magic, crc, version, flags, count, payload_length, stored_length, offset, ts = UNIT_HEADER.unpack_from(
        buf, pos
    )
    if magic != MAGIC:
        raise CorruptRecord("no unit starts here (bad sync marker)", stream=stream, offset=at)
    if version != UNIT_VERSION:
        raise UnsupportedVersion(
            f"record format version {version} is not supported by this reader", stream=stream, offset=at
        )
    codec = flags & FLAG_COMPRESSION_MASK
    if not (
        count > 0
        and 8 * (count + 1) <= payload_length <= MAX_PAYLOAD_BYTES
        and stored_length <= payload_length
        and UNIT_HEADER_SIZE + stored_length > count
    ):
        raise CorruptRecord(
            f"unit lengths out of range (count {count}, payload {payload_length}, stored {stored_length})",
            stream=stream,
            offset=at,
        )
    if offset != at:
        raise CorruptRecord(f"unit claims offset {offset} but sits at {at}", stream=stream, offset=at)
    unit_end = pos + UNIT_HEADER_SIZE + stored_length
    if unit_end > end:
        if complete:
            raise CorruptRecord(
                f"unit of {unit_end - pos} bytes runs past the committed end", stream=stream, offset=at
            )
        return None
    view = memoryview(buf)
    computed = zlib.crc32(view[pos + CRC_COVERAGE_START : unit_end])
    if computed != crc:
        raise CorruptRecord(
            "unit checksum mismatch", stream=stream, offset=at, stored_crc=crc, computed_crc=computed
        )
    # flags after the checksum: a flipped flag bit is damage (skippable), a checked one a newer feature
    if flags & ~KNOWN_UNIT_FLAGS or codec not in SUPPORTED_CODECS:
        raise UnsupportedVersion(
            f"unit flags {flags:#04x} use a codec or feature this reader does not know",
            stream=stream,
            offset=at,
        )
    if codec == codecs.CODEC_NONE and stored_length != payload_length:
        raise CorruptRecord(
            f"unit lengths out of range (count {count}, payload {payload_length}, stored {stored_length})",
            stream=stream,
            offset=at,
        )
    return SealedUnit(
        offset, ts, flags, count, unit_end - pos, payload_length, view[pos + STORED_OFFSET : unit_end]
    )


def opened_unit(unit: SealedUnit, *, stream: str | None = None) -> StoredUnit:
    """``unit`` with its payload decompressed, to exactly the length its header declares (a
    decompression bomb allocates no more); :class:`CorruptRecord` if it does not decompress so."""
    offset, ts, flags, count, length, payload_length, stored = unit
    try:
        payload = codecs.decompress(flags & FLAG_COMPRESSION_MASK, stored, payload_length)
    except codecs.DecompressionFailed as exc:
        raise CorruptRecord(
            f"unit payload does not decompress: {exc}", stream=stream, offset=offset
        ) from None
    return StoredUnit(offset, ts, flags, count, length, payload)


def payload_ends(unit: StoredUnit, *, stream: str | None = None) -> tuple[array[int], array[int]]:
    """The key and value boundaries of ``unit``'s payload, checked as §11.5 says: each array starts
    at 0, never decreases, steps by at most the key or value limit, and the two end where the
    payload does. Raises :class:`CorruptRecord` if they do not."""
    payload, count = unit.payload, unit.size
    arrays = 4 * (count + 1)
    key_ends = _u32s(payload[:arrays])
    value_ends = _u32s(payload[arrays : 2 * arrays])
    if not (
        key_ends[0] == 0
        and value_ends[0] == 0
        and 2 * arrays + key_ends[-1] + value_ends[-1] == len(payload)
        and _within(key_ends, MAX_KEY_BYTES)
        and _within(value_ends, MAX_VALUE_BYTES)
    ):
        raise CorruptRecord(
            "unit payload's key or value boundaries do not agree with its length",
            stream=stream,
            offset=unit.offset,
        )
    return key_ends, value_ends


def _within(ends: array[int], limit: int) -> bool:
    """Boundaries that never decrease and are at most ``limit`` apart (checked in C: no loop here;
    a sorted list is what ``sorted`` returns unchanged, after one pass, 3x faster than comparing pairs)."""
    bounds = ends.tolist()
    if bounds != sorted(bounds):
        return False
    # From a boundary, jump to the farthest one at most ``limit`` after it: every gap passed over
    # lies inside that reach. A step that cannot move finds a gap over ``limit``. Each two steps
    # advance more than ``limit``, so the keys of a unit (1 KiB at most each) take a few dozen.
    i, last = 0, len(bounds) - 1
    while i < last:
        j = bisect.bisect_right(bounds, bounds[i] + limit, i + 1) - 1
        if j == i:
            return False
        i = j
    return True
