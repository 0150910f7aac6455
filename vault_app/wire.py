"""What the read routes send: messages and pages as JSON or NDJSON (docs/API.md "Consume"),
and a stream's catalog entry."""

from __future__ import annotations

import base64
import binascii
import functools
import sys
from array import array
from collections.abc import Callable, Iterable
from itertools import repeat
from operator import itemgetter
from typing import Any

import msgspec

from vault_core.messagebatch import MessageBatch
from vault_core.recordformat import FLAG_KEY_IS_TEXT, MAX_OFFSET, MAX_TIMESTAMP_MS, Message, message_id

NDJSON = "application/x-ndjson"


class WireLine(msgspec.Struct, gc=False):
    """One message of a read (docs/API.md "Consume").

    Untracked by the garbage collector (``gc=False``): it holds only numbers and strings, so it
    can be in no reference cycle, and a page makes ten thousand of them at a time."""

    offset: int
    timestamp: int
    id: str
    key: str
    key_encoding: str
    value: str
    value_encoding: str


class WirePage(msgspec.Struct):
    stream: str
    next_offset: int
    committed: int
    messages: list[WireLine]


ENCODER = msgspec.json.Encoder()
"""Encodes whole pages in C: faster than building each line by hand (bench/parse.py)."""


def _text(raw: bytes, force_b64: bool) -> tuple[str, str]:
    """``raw`` as UTF-8 text when it is valid UTF-8 (and base64 is not forced), else base64."""
    if not force_b64:
        try:
            return raw.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            pass
    return base64.b64encode(raw).decode("ascii"), "base64"


def wire_line(m: Message, force_b64: bool) -> WireLine:
    """One message of a read, field by field (what :func:`wire_lines` does for a whole page)."""
    offset, ts, key, value, flags, _ = m
    value_text, value_enc = _text(value, force_b64)
    key_text, key_enc = _text(key, force_b64 and not flags & FLAG_KEY_IS_TEXT)
    return WireLine(offset, ts, message_id(ts, offset), key_text, key_enc, value_text, value_enc)


_OFFSET, _TIMESTAMP, _KEY, _VALUE, _FLAGS = map(itemgetter, range(5))  # Message's fields
_ID = "%012x%012x".__mod__  # message_id(timestamp, offset) of a (timestamp, offset) pair
_B64 = functools.partial(binascii.b2a_base64, newline=False)


def wire_lines(messages: list[Message], force_b64: bool) -> list[WireLine]:
    """The messages of a read as :class:`WireLine` s, the same ones :func:`wire_line` makes.

    It runs no bytecode per message: each column (ids, keys, values as text) is made by ``map``
    over the page in C, and the lines from the columns. A page with a value or key that is not
    UTF-8 (or, with ``force_b64``, with both text and binary keys) is made message by message
    instead, as it must choose per message.
    """
    if not messages:
        return []
    offsets, stamps = list(map(_OFFSET, messages)), list(map(_TIMESTAMP, messages))
    try:
        return _lines(
            offsets,
            stamps,
            map(_ID, zip(stamps, offsets, strict=True)),
            _text_keys(map(_FLAGS, messages), len(messages), force_b64),
            force_b64,
            lambda b64: _strings(map(_VALUE, messages), b64),
            lambda b64: _strings(map(_KEY, messages), b64),
        )
    except (UnicodeDecodeError, _PerMessage):
        return [wire_line(m, force_b64) for m in messages]


def batch_lines(batches: Iterable[MessageBatch], force_b64: bool) -> list[WireLine]:
    """The lines of a read's batches: what :func:`wire_lines` makes of their messages, made
    straight from each batch's columns, so that no :class:`Message` (two ``bytes`` and a tuple)
    is built per message on the way. This is the read API's inner loop (issue 23).

    Like :func:`wire_lines`, it runs no bytecode per message; a batch it cannot make column by
    column goes through :func:`wire_lines`, which then chooses message by message.
    """
    out: list[WireLine] = []
    for batch in batches:
        try:
            out += _lines(
                batch.offsets.tolist(),
                batch.timestamps.tolist(),
                _ids(batch),
                _text_keys(batch.flags, len(batch), force_b64),
                force_b64,
                functools.partial(_parts, batch.values, batch.value_ends),
                functools.partial(_parts, batch.keys, batch.key_ends),
            )
        except (UnicodeDecodeError, _PerMessage):
            out += wire_lines(batch.messages(), force_b64)
    return out


_Strings = Callable[[bool], list[str]]
"""A column of a page as strings: base64 (True), or UTF-8 text (False: UnicodeDecodeError if a
part is not UTF-8)."""


def _lines(
    offsets: list[int],
    stamps: list[int],
    ids: Iterable[str],
    text_keys: int,
    force_b64: bool,
    values: _Strings,
    keys: _Strings,
) -> list[WireLine]:
    """A page's lines from its columns; raises where it must choose message by message."""
    n = len(offsets)
    if force_b64 and text_keys not in (0, n):
        raise _PerMessage  # text keys go as text, binary ones as base64
    value_texts = values(force_b64)
    key_encoding = "base64" if text_keys == 0 else "utf-8"
    key_texts = keys(text_keys == 0)
    value_encoding = "base64" if force_b64 else "utf-8"
    return list(
        map(
            WireLine,
            offsets,
            stamps,
            ids,
            key_texts,
            repeat(key_encoding, n),
            value_texts,
            repeat(value_encoding, n),
        )
    )


def _text_keys(flags: Iterable[int], n: int, force_b64: bool) -> int:
    """How many of a page's ``n`` keys are text: only base64 tells text keys from binary ones."""
    if not force_b64:
        return n
    return sum(map(FLAG_KEY_IS_TEXT.__and__, flags)) // FLAG_KEY_IS_TEXT


def _strings(parts: Iterable[bytes], b64: bool) -> list[str]:
    return list(map(bytes.decode, map(_B64, parts) if b64 else parts))


class _PerMessage(Exception):
    """A page whose lines :func:`wire_lines` cannot make column by column."""


def _parts(buf: bytes, ends: array[int], b64: bool) -> list[str]:
    """The parts ``buf[ends[i]:ends[i + 1]]`` of a batch's keys or values, as :data:`_Strings`."""
    if b64:
        return _strings(map(buf.__getitem__, map(slice, ends[:-1], ends[1:])), True)
    return _texts(buf, ends)


def _texts(buf: bytes, ends: array[int]) -> list[str]:
    """The parts ``buf[ends[i]:ends[i + 1]]`` as text; UnicodeDecodeError if one is not UTF-8.

    When the parts take most of an ASCII buffer (as JSON events mostly do), the buffer is
    decoded once and the parts are sliced from the string: a character per byte, so the
    boundaries hold, and one object per part instead of a ``bytes`` and then a ``str``."""
    bounds = map(slice, ends[:-1], ends[1:])
    if 2 * (ends[-1] - ends[0]) >= len(buf) and buf.isascii():
        return list(map(buf.decode("ascii").__getitem__, bounds))
    return list(map(bytes.decode, map(buf.__getitem__, bounds)))


_ID_HALF = 6
"""Bytes of each half of a message id (docs/API.md: 48-bit timestamp, then 48-bit offset)."""


def _ids(batch: MessageBatch) -> list[str]:
    """Each message's :func:`~vault_core.recordformat.message_id`, the whole batch's hex digits made
    in one call: the low 6 bytes of each timestamp and offset, big-endian, side by side in one
    buffer (12 bytes a message) whose ``hex()`` is the ids one after the other, 24 digits each.
    Three times cheaper than formatting each id; values past 48 bits (never written) are formatted."""
    n = len(batch)
    stamps, offsets = array("q", batch.timestamps), array("q", batch.offsets)
    wide = offsets[0] < 0 or offsets[-1] > MAX_OFFSET  # a batch's offsets increase
    if wide or min(stamps) < 0 or max(stamps) > MAX_TIMESTAMP_MS:
        return list(map(_ID, zip(stamps, offsets, strict=True)))
    if sys.byteorder == "little":
        stamps.byteswap()
        offsets.byteswap()
    stamp_bytes, offset_bytes = stamps.tobytes(), offsets.tobytes()
    skip = stamps.itemsize - _ID_HALF  # the high bytes, zero below 2**48
    packed = bytearray(2 * _ID_HALF * n)
    for i in range(_ID_HALF):  # byte i of every timestamp, then of every offset, in place
        packed[i :: 2 * _ID_HALF] = stamp_bytes[skip + i :: stamps.itemsize]
        packed[_ID_HALF + i :: 2 * _ID_HALF] = offset_bytes[skip + i :: offsets.itemsize]
    digits = packed.hex()
    width = 4 * _ID_HALF
    return list(
        map(digits.__getitem__, map(slice, range(0, width * n, width), range(width, width * (n + 1), width)))
    )


def catalog_json(e: dict[str, Any]) -> dict[str, Any]:
    return {
        "stream": e["stream"],
        "committed": e["committed"],
        "count": e["count"],
        "first_timestamp": e["first_ts"],
        "last_timestamp": e["last_ts"],
        "created": e["created"],
        "updated": e["updated"],
    }
