"""The staging envelope: what one queue message carries from the HTTP tier to the writer.

Version 1, compact JSON (the queue holds text; ``messageEncoding`` is ``none`` in host.json)::

    {"v": 1, "id": BATCH_ID, "stream": STREAM, "ts": RECEIVED_MS,
     "m": [[KEY, KEY_IS_TEXT, VALUE_B64], ...]}          # inline, or
    {"v": 1, "id": ..., "stream": ..., "ts": ..., "claim": BLOB_NAME, "n": COUNT}

Version 2 (:data:`UNITS_VERSION`) carries a batch as version 2 units, compressed where it is
staged (an app that writes format 2 stages so whatever does not fit the inline messages)::

    {"v": 2, "id": ..., "stream": ..., "ts": ..., "u": UNITS_B64, "n": COUNT}   # inline, or
    {"v": 2, "id": ..., "stream": ..., "ts": ..., "claim": BLOB_NAME, "n": COUNT}

A writer of an earlier release knows only version 1, in which it would take units for records,
so it refuses version 2 to poison instead (replay it once every writer is upgraded).

Either may end with ``"tp": TRACEPARENT``: the W3C trace context of the POST that staged the
batch (only when telemetry is on, :mod:`vault_app.telemetry`), so the writer's commit continues
its trace. Optional and never checked beyond its type: an envelope without it (or with one that
does not parse) is appended all the same. Either may also carry ``"rf": N``: how many times the
writer has re-sent the batch as a fresh queue message (:func:`refreshed`); absent means 0.

Values are base64 so arbitrary bytes survive the text queue. A batch whose inline envelope is
over :data:`INLINE_LIMIT` travels, in an app that writes format 2, as its compressed units
inline if that envelope is within the limit; otherwise it goes to a claim-check blob and the
queue message carries only its name (:mod:`vault_app.claimcheck` chooses). The blob holds the
batch in the vault's own record format (docs/FORMAT.md §6.8) with offsets from 0: binary,
checksummed, and decoded by the same code as the log, with no base64 or JSON. An app that
writes format 2 stages it as compressed version 2 units, which its writer copies into the log as
they are (:mod:`vault_core.stagedunits`); one that writes format 1 as version 1 records. The
writer takes either, whatever it writes itself.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from vault_core import recordformat, stagedunits
from vault_core.errors import FormatError, InvalidInput
from vault_core.names import validate_batch_id, validate_stream_name
from vault_core.recordformat import NewMessage
from vault_core.stagedunits import StagedUnits, message_fields, staged_units
from vault_core.unitformat import UNIT_VERSION
from vault_core.writer import WriterSettings

VERSION = 1
UNITS_VERSION = 2
"""The version of an envelope that carries units, inline or by a claim-check pointer (this
writer reads both versions)."""
INLINE_LIMIT = 60_000
"""Queue messages are at most 64 KiB; keep a margin for the service's own encoding."""
TRACE_MAX = 256
"""A longer ``tp`` is dropped: a W3C traceparent is 55 characters."""
REFRESH_LIMIT = 3
"""How many times the writer re-sends one batch as a fresh message (dequeue count 0) after it
went around with a writer that died; past it the queue's count stands and the host's
``maxDequeueCount`` applies, so a batch that kills every writer that touches it still ends in
poison."""


class EnvelopeError(InvalidInput):
    """A queue message that is not a valid staging envelope (it ends in the poison queue)."""


@dataclass(frozen=True)
class Envelope:
    batch_id: str
    stream: str
    received_ms: int
    messages: list[NewMessage] | None = None
    claim: str | None = None
    count: int = 0
    records: recordformat.EncodedBatch | StagedUnits | None = None
    """A batch of units (inline), or a claim-check batch once its blob is read: already in record
    form (records or units), checked."""
    trace: str | None = None
    """The ``traceparent`` of the POST that staged the batch, if it carried one."""


def encode_messages(
    batch_id: str, stream: str, received_ms: int, messages: list[NewMessage], trace: str | None = None
) -> str:
    rows = []
    for m in messages:
        key, flags = m.key_bytes()
        is_text = bool(flags)
        rows.append(
            [
                m.key if is_text else base64.b64encode(key).decode(),
                is_text,
                base64.b64encode(m.value).decode(),
            ]
        )
    return _dump({"v": VERSION, "id": batch_id, "stream": stream, "ts": received_ms, "m": rows}, trace)


def encode_claim(
    batch_id: str,
    stream: str,
    received_ms: int,
    blob_name: str,
    count: int,
    trace: str | None = None,
    *,
    units: bool = False,
) -> str:
    """A claim-check pointer; ``units``: its blob holds version 2 units (:data:`UNITS_VERSION`)."""
    version = UNITS_VERSION if units else VERSION
    return _dump(
        {"v": version, "id": batch_id, "stream": stream, "ts": received_ms, "claim": blob_name, "n": count},
        trace,
    )


def _dump(doc: dict[str, Any], trace: str | None) -> str:
    if trace:
        doc["tp"] = trace
    return json.dumps(doc, separators=(",", ":"))


def encode_units(
    batch_id: str, stream: str, received_ms: int, body: bytes, count: int, trace: str | None = None
) -> str:
    """A batch inline as version 2 units (``body``: :func:`encode_claim_body` of a format 2 app)."""
    units = base64.b64encode(body).decode()
    return _dump(
        {"v": UNITS_VERSION, "id": batch_id, "stream": stream, "ts": received_ms, "u": units, "n": count},
        trace,
    )


def decode(text: str | bytes) -> Envelope:
    try:
        doc = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise EnvelopeError(f"staging message is not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise EnvelopeError("staging message is not a JSON object")
    version = doc.get("v")
    if version not in (VERSION, UNITS_VERSION) or (version == UNITS_VERSION and "m" in doc):
        raise EnvelopeError(f"unknown staging envelope version {version!r}")
    try:
        batch_id = validate_batch_id(doc["id"])
        stream = validate_stream_name(doc["stream"])
        received = int(doc["ts"])
        trace = _trace(doc.get("tp"))
        if "claim" in doc:
            return Envelope(
                batch_id, stream, received, claim=str(doc["claim"]), count=int(doc["n"]), trace=trace
            )
        if version == UNITS_VERSION:
            count = int(doc["n"])
            inline = Envelope(batch_id, stream, received, count=count, trace=trace)
            return _with_body(inline, base64.b64decode(doc["u"], validate=True), "inline batch")
        return Envelope(batch_id, stream, received, messages=[_message(row) for row in doc["m"]], trace=trace)
    except EnvelopeError:
        raise
    except (KeyError, TypeError, ValueError, binascii.Error, InvalidInput) as exc:
        raise EnvelopeError(f"malformed staging envelope: {exc!r}") from exc


def refreshed(text: str) -> str | None:
    """The envelope again with its re-send count one higher, or None once :data:`REFRESH_LIMIT`
    is reached (or the text is not an envelope object: let it fail where it is decoded)."""
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    count = doc.get("rf", 0)
    if not isinstance(count, int) or count >= REFRESH_LIMIT:
        return None
    doc["rf"] = count + 1
    return json.dumps(doc, separators=(",", ":"))


def identify(text: str) -> tuple[str | None, str | None]:
    """``(stream, batch id)`` of a queue message, valid envelope or not, as far as they can be
    read: each a valid name, else None. Enough to mark a batch rejected, or to list it in poison."""
    try:
        doc = json.loads(text)
    except ValueError:
        return None, None
    if not isinstance(doc, dict):
        return None, None
    return _valid(validate_stream_name, doc.get("stream")), _valid(validate_batch_id, doc.get("id"))


def _valid(validate: Callable[[str], str], value: Any) -> str | None:
    try:
        return validate(value) if isinstance(value, str) else None
    except InvalidInput:
        return None


def encode_claim_body(messages: list[NewMessage], received_ms: int, settings: WriterSettings) -> bytes:
    """A claim-check body: the batch as ``settings`` would write it (units or records), from 0."""
    if settings.record_format == UNIT_VERSION:
        return stagedunits.encode_units(message_fields(messages), received_ms, codec=settings.codec)
    return recordformat.encode(messages, 0, received_ms)


def decode_claimed(envelope: Envelope, blob_body: bytes) -> Envelope:
    """The records or units of a claim-check blob, checked (every unit's payload too); their
    count must match the queue message's."""
    return _with_body(envelope, blob_body, f"claim-check blob {envelope.claim!r}")


def _with_body(envelope: Envelope, blob_body: bytes, what: str) -> Envelope:
    try:
        records: recordformat.EncodedBatch | StagedUnits
        if recordformat.is_unit_at(memoryview(blob_body), 0, len(blob_body)):
            records = units = staged_units(blob_body)
            count = units.messages
        else:
            records = encoded = recordformat.encoded_batch(blob_body)
            count = len(encoded.starts)
    except FormatError as exc:
        raise EnvelopeError(f"{what} is corrupt: {exc}") from exc
    if count != envelope.count:
        raise EnvelopeError(f"{what} holds {count} messages, the queue message says {envelope.count}")
    return replace(envelope, records=records)


def _trace(value: Any) -> str | None:
    """Telemetry's context, if usable: a bad one costs the batch its trace, never its append."""
    return value if isinstance(value, str) and 0 < len(value) <= TRACE_MAX else None


def _message(row: Any) -> NewMessage:
    key, is_text, value = row
    return NewMessage(
        base64.b64decode(value, validate=True), key if is_text else base64.b64decode(key, validate=True)
    )
