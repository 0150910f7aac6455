"""The JSON shapes of docs/API.md: messages out (produce) and in (consume), and time values
(parsed by :func:`vault_core.times.to_millis`, re-exported here)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from vault_core.recordformat import FLAG_KEY_IS_TEXT, HEADER_SIZE, Message
from vault_core.times import to_millis

__all__ = [
    "batch_body",
    "decode_message",
    "encode_message",
    "iso",
    "message_json",
    "to_millis",
    "with_successors",
]

_quote: Callable[[str], str] = json.encoder.encode_basestring  # type: ignore[attr-defined]
"""JSON string literal of a str (C-accelerated), non-ASCII kept as is: the body is UTF-8."""


def _text_or_base64(raw: bytes) -> tuple[str, bool]:
    try:
        return raw.decode("utf-8"), False
    except UnicodeDecodeError:
        return base64.b64encode(raw).decode("ascii"), True


def encode_message(value: bytes | str, key: bytes | str | None) -> tuple[bytes, int, int]:
    """One message as the JSON object a produce body carries, with its key's and value's byte lengths.

    Text travels as text (smaller than base64, and stored as the same UTF-8 bytes). A ``str``
    key is stored as a text key; a ``bytes`` key always goes as base64 so the stored record
    keeps it binary. The lengths give the record's size in the log, from which the producer
    computes each message's offset.

    This runs once per message on the caller's thread, so it builds the object by hand with
    the C string escaper rather than through ``json.dumps`` of a dict (about 5x faster).
    """
    if isinstance(value, str):
        value_len = len(value) if value.isascii() else len(value.encode("utf-8"))
        doc = '{"value":' + _quote(value)
    else:
        value_len = len(value)
        try:
            doc = '{"value":' + _quote(bytes(value).decode("utf-8"))
        except UnicodeDecodeError:
            doc = '{"value":"' + base64.b64encode(value).decode("ascii") + '","encoding":"base64"'
    if key is None:
        return (doc + "}").encode("utf-8"), 0, value_len
    if isinstance(key, str):
        key_len = len(key) if key.isascii() else len(key.encode("utf-8"))
        doc += ',"key":' + _quote(key) + "}"
    else:
        key_len = len(key)
        doc += ',"key":"' + base64.b64encode(key).decode("ascii") + '","key_encoding":"base64"}'
    return doc.encode("utf-8"), key_len, value_len


def batch_body(fragments: list[bytes]) -> bytes:
    """A produce body from pre-encoded message objects (joined, not re-serialised)."""
    return b'{"messages":[' + b",".join(fragments) + b"]}"


def decode_message(doc: dict[str, Any]) -> Message:
    """A message of a consume answer as the same :class:`Message` the blob reader returns.

    The API reports a key as ``utf-8`` whenever its bytes are valid UTF-8, so over HTTP
    ``key_is_text`` means "the key is text", not "the producer sent a text key".
    """
    value = doc["value"]
    value_bytes = base64.b64decode(value) if doc.get("value_encoding") == "base64" else value.encode("utf-8")
    key = doc.get("key") or ""
    key_b64 = doc.get("key_encoding") == "base64"
    key_bytes = base64.b64decode(key) if key_b64 else key.encode("utf-8")
    return Message(
        int(doc["offset"]), int(doc["timestamp"]), key_bytes, value_bytes, 0 if key_b64 else FLAG_KEY_IS_TEXT
    )


def with_successors(messages: list[Message], next_offset: int) -> list[Message]:
    """The messages of one page with the offset that follows each (the next one's, then the
    page's ``next_offset``) wherever their lengths do not say it: in a format 2 unit the next
    message is at ``offset + 1`` (docs/FORMAT.md §11.6), which JSON does not carry."""
    following = [m.offset for m in messages[1:]] + [next_offset] if messages else []
    return [
        m._replace(end=nxt) if nxt != m.offset + HEADER_SIZE + len(m.key) + len(m.value) else m
        for m, nxt in zip(messages, following, strict=True)
    ]


def message_json(m: Message) -> dict[str, Any]:
    """A message as the API's JSON object (the CLI's NDJSON output and the export use this too)."""
    value, value_b64 = _text_or_base64(m.value)
    key, key_b64 = _text_or_base64(m.key)
    return {
        "offset": m.offset,
        "timestamp": m.timestamp,
        "id": m.id,
        "key": key,
        "key_encoding": "base64" if key_b64 else "utf-8",
        "value": value,
        "value_encoding": "base64" if value_b64 else "utf-8",
    }


def iso(ms: int | None) -> str:
    """Epoch milliseconds as ISO 8601 UTC (for people); empty for None."""
    if ms is None:
        return ""
    return (
        datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )
