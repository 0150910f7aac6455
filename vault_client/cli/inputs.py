"""What ``vault produce`` reads: NDJSON message objects, or plain lines (one message each).

``auto`` decides by the first non-blank line: a JSON object with a ``"value"`` makes the
whole input NDJSON, anything else makes it plain lines. Blank lines are skipped either way.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from vault_core.errors import InvalidInput

Format = Literal["auto", "ndjson", "lines"]


@dataclass(frozen=True)
class InputMessage:
    value: bytes | str
    key: bytes | str | None
    size: int
    """Bytes of input this message came from (for the progress bar)."""


def _is_message_object(line: bytes) -> bool:
    try:
        doc = json.loads(line)
    except ValueError:
        return False
    return isinstance(doc, dict) and "value" in doc


def read_messages(
    lines: Iterable[bytes], fmt: Format = "auto", key: str | None = None
) -> Iterator[InputMessage]:
    """Messages from ``lines``; ``key`` is the key of plain lines (NDJSON objects carry their own)."""
    mode: Format = fmt
    for number, raw in enumerate(lines, 1):
        line = raw.rstrip(b"\r\n")
        if not line.strip():
            continue
        if mode == "auto":
            mode = "ndjson" if _is_message_object(line) else "lines"
        if mode == "ndjson":
            value, msg_key = _ndjson_message(line, number)
            yield InputMessage(value, msg_key if msg_key is not None else key, len(raw))
        else:
            yield InputMessage(line, key, len(raw))


def _ndjson_message(line: bytes, number: int) -> tuple[bytes | str, bytes | str | None]:
    try:
        doc = json.loads(line)
    except ValueError as exc:
        raise InvalidInput(f"input line {number} is not valid JSON ({exc})") from None
    if not isinstance(doc, dict) or "value" not in doc:
        raise InvalidInput(f'input line {number}: expected a JSON object with a "value"')
    value = _field(doc["value"], doc.get("encoding"), f"input line {number} value", text_only=False)
    key = (
        None
        if doc.get("key") is None
        else _field(doc["key"], doc.get("key_encoding"), f"input line {number} key", text_only=True)
    )
    return value, key


def _field(raw: Any, encoding: Any, what: str, *, text_only: bool) -> bytes | str:
    if encoding == "base64":
        if not isinstance(raw, str):
            raise InvalidInput(f"{what}: base64 must be a string")
        try:
            return base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidInput(f"{what} is not valid base64") from None
    if encoding not in (None, "utf-8", "text"):
        raise InvalidInput(f'{what}: unknown encoding {encoding!r} (use "utf-8" or "base64")')
    if isinstance(raw, str):
        return raw
    if text_only:
        raise InvalidInput(f"{what} must be a string")
    # A JSON value that is not a string (an object, a number) is stored as its compact JSON text.
    return json.dumps(raw, separators=(",", ":"), ensure_ascii=False)
