"""A batch staged as version 2 units, and how a writer cuts messages into units
(docs/FORMAT.md §6.8, §11.7). Pure: bytes in, bytes out.

An app that writes format 2 stages a batch too large for a queue message as a claim-check blob of
units from offset 0 (:func:`encode_units`), cut as the writer cuts a commit (:func:`cut_units`)
and compressed there, on the HTTP tier, which scales out. The writer checks every unit whole
(:func:`staged_units`: header, checksum, decompression and boundaries, as a reader will) and copies
each one that is full enough into the log with only its offset, timestamp and checksum changed
(:func:`~vault_core.unitformat.restamped_unit`): the one process that appends a stream neither
decodes nor compresses those messages again. A unit too small to stand alone, or compressed with
another codec than the writer's, has its messages re-packed with their neighbours
(:func:`unit_fields`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import repeat
from typing import NamedTuple

from vault_core.binaryitems import binary_items
from vault_core.codecs import CODEC_NONE
from vault_core.errors import CorruptRecord
from vault_core.prefix import FLAG_COMPRESSION_MASK, FLAG_KEY_IS_TEXT, UNIT_VERSION, VERSION_OFFSET
from vault_core.recordformat import NewMessage
from vault_core.unitformat import (
    UNIT_TARGET_BYTES,
    UNIT_TARGET_MESSAGES,
    SealedUnit,
    encode_unit,
    opened_unit,
    payload_ends,
    sealed_unit,
)

Field = tuple[bytes, bool, bytes]
"""A message as a unit holds it: its key's bytes, whether the key is text, its value."""

COPY_FRACTION = 4
"""A staged unit is copied as it is when it holds at least 1/4 of either target (512 messages, or
256 KiB of payload at the default 1 MiB): a reader's fixed cost per unit (§11.7) is then at most
a few percent of what its messages cost. Smaller ones are re-packed with their neighbours."""


def message_fields(messages: Iterable[NewMessage]) -> Iterator[Field]:
    """Each message as a :data:`Field`: a text key encoded as UTF-8."""
    for value, key in messages:
        if isinstance(key, str):
            yield key.encode("utf-8"), True, value
        else:
            yield key, False, value


def cut_units(
    fields: Iterable[Field], unit_bytes: int = UNIT_TARGET_BYTES
) -> Iterator[tuple[list[bytes], list[bytes], bool]]:
    """``(keys, values, keys are text)`` of each unit §11.7 lays ``fields`` out in: consecutive
    messages until the payload would pass ``unit_bytes`` (a unit of one larger message holds just
    it) or the unit holds UNIT_TARGET_MESSAGES, and a new unit where keys change from text to
    binary or back."""
    keys: list[bytes] = []
    values: list[bytes] = []
    text = False
    size = 8  # the payload's two leading zero boundaries
    for key, is_text, value in fields:
        grown = size + 8 + len(key) + len(value)
        if values and (is_text != text or grown > unit_bytes or len(values) == UNIT_TARGET_MESSAGES):
            yield keys, values, text
            keys, values = [], []
            grown = 16 + len(key) + len(value)
        text = is_text
        keys.append(key)
        values.append(value)
        size = grown
    if values:
        yield keys, values, text


def encode_units(
    fields: Iterable[Field], timestamp: int, *, codec: int, unit_bytes: int = UNIT_TARGET_BYTES
) -> bytes:
    """``fields`` as units laid out from offset 0, stamped ``timestamp``: a staged batch."""
    out = bytearray()
    for keys, values, text in cut_units(fields, unit_bytes):
        out += encode_unit(keys, values, len(out), timestamp, codec=codec, key_is_text=text)
    return bytes(out)


class StagedUnits(NamedTuple):
    """A batch of units from offset 0 that passed every check of §11.5 (:func:`staged_units`)."""

    data: bytes
    units: list[SealedUnit]
    """Each unit's checked header and stored bytes (views into ``data``)."""
    messages: int
    """How many messages they hold."""


def staged_units(buf: bytes, *, stream: str | None = None) -> StagedUnits:
    """Check that ``buf`` is whole, valid units laid out from offset 0, each one's payload too.

    Everything a reader will check, so that a writer never copies into a log a unit that a
    reader refuses. Raises :class:`CorruptRecord` (or :class:`UnsupportedVersion` for a codec
    this reader does not know) as a reader would.
    """
    view = memoryview(buf)
    units: list[SealedUnit] = []
    pos = 0
    while pos < len(buf):
        if pos + VERSION_OFFSET < len(buf) and view[pos + VERSION_OFFSET] != UNIT_VERSION:
            version = view[pos + VERSION_OFFSET]
            raise CorruptRecord(
                f"a batch of units holds a frame of version {version}", stream=stream, offset=pos
            )
        unit = sealed_unit(view, pos, 0, len(buf), stream=stream, complete=True)
        assert unit is not None  # complete: a cut-off unit raises
        payload_ends(opened_unit(unit, stream=stream), stream=stream)
        units.append(unit)
        pos += unit.length
    return StagedUnits(buf, units, sum(u.size for u in units))


def copies_as_is(unit: SealedUnit, codec: int, unit_bytes: int = UNIT_TARGET_BYTES) -> bool:
    """Whether a writer that compresses with ``codec`` copies this staged unit as it is: full
    enough (COPY_FRACTION), and compressed with ``codec`` or stored as it is (the codec did not
    make it smaller where it was staged, and would not here: a unit is cut the same way)."""
    size, payload = COPY_FRACTION * unit.size, COPY_FRACTION * unit.payload_length
    stored_by = unit.flags & FLAG_COMPRESSION_MASK
    return (size >= UNIT_TARGET_MESSAGES or payload >= unit_bytes) and stored_by in (codec, CODEC_NONE)


def unit_fields(unit: SealedUnit, *, stream: str | None = None) -> Iterator[Field]:
    """The messages of a checked unit as :data:`Field` s, in order (it is decompressed again)."""
    stored = opened_unit(unit, stream=stream)
    key_ends, value_ends = payload_ends(stored, stream=stream)
    keys_start = 8 * (unit.size + 1)
    keys = binary_items(stored.payload, key_ends, 0, unit.size, keys_start)
    values = binary_items(stored.payload, value_ends, 0, unit.size, keys_start + key_ends[-1])
    return zip(keys, repeat(bool(unit.flags & FLAG_KEY_IS_TEXT)), values)
