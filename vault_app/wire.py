"""What the read routes send: messages and pages as JSON or NDJSON (docs/API.md "Consume"),
and a stream's catalog entry."""

from __future__ import annotations

import base64
import binascii
import functools
from itertools import repeat
from operator import itemgetter
from typing import Any

import msgspec

from vault_core.recordformat import FLAG_KEY_IS_TEXT, Message, message_id

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

    This is the read path's inner loop, so it runs no bytecode per message: each column (ids,
    keys, values as text) is made by ``map`` over the page in C, and the lines from the columns.
    A page with a value or key that is not UTF-8 (or, with ``force_b64``, with both text and
    binary keys) is made message by message instead, as it must choose per message.
    """
    if not messages:
        return []
    n = len(messages)
    text_keys = n  # only base64 tells text keys from binary ones
    if force_b64:
        text_keys = sum(map(FLAG_KEY_IS_TEXT.__and__, map(_FLAGS, messages))) // FLAG_KEY_IS_TEXT
    try:
        if force_b64:
            values = list(map(bytes.decode, map(_B64, map(_VALUE, messages))))
            if text_keys not in (0, n):
                raise _PerMessage
        else:
            values = list(map(bytes.decode, map(_VALUE, messages)))
        if text_keys == 0:
            keys, key_encoding = list(map(bytes.decode, map(_B64, map(_KEY, messages)))), "base64"
        else:
            keys, key_encoding = list(map(bytes.decode, map(_KEY, messages))), "utf-8"
    except (UnicodeDecodeError, _PerMessage):
        return [wire_line(m, force_b64) for m in messages]
    offsets = list(map(_OFFSET, messages))
    stamps = list(map(_TIMESTAMP, messages))
    ids = map(_ID, zip(stamps, offsets, strict=True))
    value_encoding = "base64" if force_b64 else "utf-8"
    return list(
        map(WireLine, offsets, stamps, ids, keys, repeat(key_encoding, n), values, repeat(value_encoding, n))
    )


class _PerMessage(Exception):
    """A page whose lines :func:`wire_lines` cannot make column by column."""


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
