"""What the read routes send: messages and pages as JSON or NDJSON (docs/API.md "Consume"),
and a stream's catalog entry."""

from __future__ import annotations

import base64
from typing import Any

import msgspec

from vault_core.recordformat import FLAG_KEY_IS_TEXT, Message, message_id

NDJSON = "application/x-ndjson"


class WireLine(msgspec.Struct):
    """One message of a read (docs/API.md "Consume")."""

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
    """One message of a read: this is the read path's inner loop."""
    offset, ts, key, value, flags, _ = m
    value_text, value_enc = _text(value, force_b64)
    key_text, key_enc = _text(key, force_b64 and not flags & FLAG_KEY_IS_TEXT)
    return WireLine(offset, ts, message_id(ts, offset), key_text, key_enc, value_text, value_enc)


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
