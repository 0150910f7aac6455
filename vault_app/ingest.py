"""Parsing a producer's POST body into messages, checking every limit before anything is staged."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from vault_app.config import Limits
from vault_app.http import HttpError
from vault_core.format import MAX_KEY_BYTES, NewMessage

NDJSON_TYPES = ("application/x-ndjson", "application/ndjson", "application/jsonl")


def parse_batch(body: bytes, content_type: str | None, limits: Limits) -> tuple[list[NewMessage], str | None]:
    """Messages and the producer's ``batch_id`` (JSON only); raises HttpError 400/413."""
    if len(body) > limits.max_batch_bytes:
        raise HttpError(
            413, "too_large", f"request body is {len(body)} bytes; the maximum is {limits.max_batch_bytes}"
        )
    if not body.strip():
        raise HttpError(400, "bad_request", 'empty body: send {"messages": [...]} or NDJSON lines')
    ctype = (content_type or "application/json").split(";")[0].strip().lower()
    batch_id = None
    if ctype in NDJSON_TYPES:
        items = [_json(line, f"line {n}") for n, line in enumerate(body.splitlines(), 1) if line.strip()]
    else:
        doc = _json(body, "body")
        if not isinstance(doc, dict) or not isinstance(doc.get("messages"), list):
            raise HttpError(400, "bad_request", 'JSON body must be an object with a "messages" array')
        items = doc["messages"]
        if doc.get("batch_id") is not None:
            if not isinstance(doc["batch_id"], str):
                raise HttpError(400, "bad_request", "batch_id must be a string")
            batch_id = doc["batch_id"]
    if not items:
        raise HttpError(400, "bad_request", "the batch has no messages")
    if len(items) > limits.max_batch_messages:
        raise HttpError(
            413,
            "too_large",
            f"{len(items)} messages in one batch; the maximum is {limits.max_batch_messages}",
        )
    try:
        return [_message(item, i, limits) for i, item in enumerate(items)], batch_id
    except UnicodeEncodeError as exc:  # a lone surrogate (\ud800) is JSON but not Unicode text
        raise HttpError(
            400,
            "bad_request",
            f"a key or value is not valid Unicode text ({exc.reason}); send bytes as base64",
        ) from None


def _json(raw: bytes, where: str) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise HttpError(400, "bad_request", f"malformed JSON in {where}: {exc}") from exc
    except RecursionError:
        raise HttpError(400, "bad_request", f"JSON in {where} is nested too deeply") from None


def _message(item: Any, i: int, limits: Limits) -> NewMessage:
    # Called once per message of every batch: the common shape (text value, text key, no
    # encodings) takes the short path, and error texts are only built for errors.
    if not isinstance(item, dict) or "value" not in item:
        raise HttpError(400, "bad_request", f'message {i} must be an object with a "value"')
    raw, encoding = item["value"], item.get("encoding")
    value = raw.encode() if type(raw) is str and encoding is None else _bytes(raw, encoding, i, "value")
    key: str | bytes = item.get("key", "")
    if type(key) is not str or item.get("key_encoding") is not None:
        key = _key(item, i)
    elif not key.isascii():
        key.encode()  # refuse what cannot be stored as UTF-8 now, not when it is staged
    # A character is at most 4 UTF-8 bytes: only long keys need encoding to be measured.
    if len(key) * 4 > MAX_KEY_BYTES and (n := _byte_length(key)) > MAX_KEY_BYTES:
        raise HttpError(413, "too_large", f"message {i} key is {n} bytes; the maximum is {MAX_KEY_BYTES}")
    if len(value) > limits.max_message_bytes:
        raise HttpError(
            413,
            "too_large",
            f"message {i} value is {len(value)} bytes; the maximum is {limits.max_message_bytes}",
        )
    return NewMessage(value, key)


def _byte_length(key: str | bytes) -> int:
    return len(key.encode()) if isinstance(key, str) else len(key)


def _key(item: dict[str, Any], i: int) -> str | bytes:
    key = item.get("key")
    encoding = item.get("key_encoding")
    if encoding not in (None, "utf-8", "text", "base64"):
        raise HttpError(
            400,
            "bad_request",
            f'message {i} key: unknown key_encoding {encoding!r} (use "utf-8" or "base64")',
        )
    if key is None:
        return ""
    if encoding == "base64":
        return _bytes(key, "base64", i, "key")
    if isinstance(key, str):
        if not key.isascii():
            key.encode()
        return key
    raise HttpError(400, "bad_request", f"message {i} key must be a string")


def _bytes(raw: Any, encoding: Any, i: int, field: str) -> bytes:
    if not isinstance(raw, str):
        raise HttpError(400, "bad_request", f"message {i} {field} must be a string")
    if encoding in (None, "utf-8", "text"):
        return raw.encode()
    if encoding == "base64":
        try:
            return base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise HttpError(400, "bad_request", f"message {i} {field} is not valid base64") from exc
    raise HttpError(
        400, "bad_request", f'message {i} {field}: unknown encoding {encoding!r} (use "utf-8" or "base64")'
    )
