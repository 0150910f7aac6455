"""Parsing a producer's POST body into messages, checking every limit before anything is staged.

The body is decoded straight into typed structs (msgspec) rather than into dicts and lists:
a field the API does not know is refused where it stands, before its value is built, so a
body of junk costs no more memory than the body itself, and known fields are checked for
their types in the same pass. The number of messages is bounded before decoding, so a body
of millions of tiny objects is refused before it becomes millions of Python objects.
"""

from __future__ import annotations

import base64
import binascii
import re

import msgspec

from vault_app.config import Limits
from vault_app.http import HttpError
from vault_core.recordformat import MAX_KEY_BYTES, NewMessage

NDJSON_TYPES = ("application/x-ndjson", "application/ndjson", "application/jsonl")


class WireMessage(msgspec.Struct, forbid_unknown_fields=True):
    """One message of a produce body (docs/API.md)."""

    value: str
    key: str | None = None
    encoding: str | None = None
    key_encoding: str | None = None


class WireBatch(msgspec.Struct, forbid_unknown_fields=True):
    """A JSON produce body."""

    messages: list[WireMessage]
    batch_id: str | None = None


_BATCH = msgspec.json.Decoder(WireBatch)
_LINE = msgspec.json.Decoder(WireMessage)
TEXT_ENCODINGS = ("utf-8", "text")
"""What ``encoding`` and ``key_encoding`` may say of text (or leave out): ``text`` is an alias."""
_TEXT_ENCODINGS = (None, *TEXT_ENCODINGS)
_SPENT = WireMessage("")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def parse_batch(body: bytes, content_type: str | None, limits: Limits) -> tuple[list[NewMessage], str | None]:
    """Messages and the producer's ``batch_id`` (JSON only); raises HttpError 400/413."""
    if len(body) > limits.max_batch_bytes:
        raise HttpError(
            413, "too_large", f"request body is {len(body)} bytes; the maximum is {limits.max_batch_bytes}"
        )
    if not body.strip():
        raise HttpError(400, "bad_request", 'empty body: send {"messages": [...]} or NDJSON lines')
    # Every message has a "value" key, and that text cannot occur inside a JSON string (its
    # quotes would be escaped), so this count bounds the messages (a value that is itself the
    # word "value" counts twice, hence the factor) before any object is built.
    if body.count(b'"value"') > 2 * limits.max_batch_messages:
        raise _too_many(f"over {2 * limits.max_batch_messages}", limits)
    ctype = (content_type or "application/json").split(";")[0].strip().lower()
    ndjson = ctype in NDJSON_TYPES
    try:
        items, batch_id = _decode(body, ndjson)
    except msgspec.ValidationError as exc:
        raise HttpError(
            400, "bad_request", f"invalid {'NDJSON line' if ndjson else 'batch'}: {exc}"
        ) from None
    except UnicodeDecodeError:  # msgspec checks UTF-8 as it decodes each string
        raise HttpError(400, "bad_request", _not_utf8(body, ndjson)) from None
    except msgspec.DecodeError as exc:
        raise HttpError(400, "bad_request", _malformed(exc, body, ndjson)) from None
    except RecursionError:
        raise HttpError(400, "bad_request", "JSON nested too deeply") from None
    if not items:
        raise HttpError(400, "bad_request", "the batch has no messages")
    if len(items) > limits.max_batch_messages:
        raise _too_many(str(len(items)), limits)
    return _messages(items, limits), batch_id


def _messages(items: list[WireMessage], limits: Limits) -> list[NewMessage]:
    """The messages as bytes; each decoded string is let go as soon as it is converted, so the
    text and the bytes of a whole batch are never in memory at once."""
    out = []
    for i, item in enumerate(items):
        out.append(_message(item, i, limits))
        items[i] = _SPENT
    return out


def _malformed(exc: msgspec.DecodeError, body: bytes, ndjson: bool) -> str:
    what = f"malformed {'NDJSON' if ndjson else 'JSON'}: {exc}"
    if _SURROGATE_ESCAPE.search(body):  # msgspec calls a lone one "truncated": say what it is
        what += (
            "; a \\uD800-\\uDFFF escape without its pair (a lone surrogate) is not Unicode text: "
            "send such bytes base64-encoded"
        )
    return what


_MARK = "\U0010fffe"
"""Stands in for invalid UTF-8 to find the field it was in: a noncharacter, never sent as text."""
_INVALID_RUN = re.compile("[\udc80-\udcff]+")
_FIELDS = ("value", "key", "encoding", "key_encoding")


def _not_utf8(body: bytes, ndjson: bool) -> str:
    """Where a body that is not UTF-8 first goes wrong: the field (``message 3 value``) when
    the bytes are inside a known field's text, and the byte offset."""
    try:
        body.decode("utf-8")
        at = -1
    except UnicodeDecodeError as exc:
        at = exc.start
    where = "the body"
    # Invalid bytes become lone surrogates here, and each run of them the mark.
    marked = _INVALID_RUN.sub(_MARK, body.decode("utf-8", "surrogateescape"))
    if _MARK.encode() not in body:  # else the mark would be ambiguous
        where = _field_with_mark(marked.encode(), ndjson) or where
    return (
        f"{where} is not valid UTF-8 (byte {at} of the body; overlong forms and encoded "
        "surrogates are not UTF-8 either): send such bytes base64-encoded"
    )


def _decode(body: bytes, ndjson: bool) -> tuple[list[WireMessage], str | None]:
    """The messages of a body (NDJSON lines, or a batch object) and its batch id, if any."""
    if ndjson:
        return _LINE.decode_lines(body), None
    doc = _BATCH.decode(body)
    return doc.messages, doc.batch_id


def _field_with_mark(body: bytes, ndjson: bool) -> str | None:
    try:
        items, batch_id = _decode(body, ndjson)
    except (msgspec.MsgspecError, RecursionError):
        return None  # outside a string, or in a field name: the body is malformed anyway
    if batch_id is not None and _MARK in batch_id:
        return "batch_id"
    for i, item in enumerate(items):
        for name in _FIELDS:
            text = getattr(item, name)
            if text is not None and _MARK in text:
                return f"message {i} {name}"
    return None


def _too_many(count: str, limits: Limits) -> HttpError:
    return HttpError(
        413, "too_large", f"{count} messages in one batch; the maximum is {limits.max_batch_messages}"
    )


def _message(item: WireMessage, i: int, limits: Limits) -> NewMessage:
    # Called once per message of every batch: the common shape (text value, text key, no
    # encodings) takes the short path, and error texts are only built for errors.
    encoding = item.encoding
    value = item.value.encode() if encoding is None else _bytes(item.value, encoding, i, "value")
    key: str | bytes = item.key or ""
    if item.key_encoding is not None:
        key = _key(item.key or "", item.key_encoding, i)
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


def _key(key: str, encoding: str, i: int) -> str | bytes:
    if encoding == "base64":
        return _bytes(key, "base64", i, "key")
    if encoding in _TEXT_ENCODINGS:
        return key
    raise HttpError(
        400, "bad_request", f'message {i} key: unknown key_encoding {encoding!r} (use "utf-8" or "base64")'
    )


def _bytes(raw: str, encoding: str, i: int, field: str) -> bytes:
    if encoding in _TEXT_ENCODINGS:
        return raw.encode()
    if encoding == "base64":
        try:
            return base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise HttpError(400, "bad_request", f"message {i} {field} is not valid base64") from exc
    raise HttpError(
        400, "bad_request", f'message {i} {field}: unknown encoding {encoding!r} (use "utf-8" or "base64")'
    )
