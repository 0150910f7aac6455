"""The query, route and header parameters of the HTTP API (docs/API.md): their exact forms,
stated once, and their parsers, which answer a bad one with a 400 that says what was wrong.

The handlers check what they receive against these forms, and :mod:`vault_app.openapi`
publishes the same patterns, so the document and the app agree on what is valid: a value a
generated client or validator accepts is one the app accepts, and the other way round. Python's
own parsers are more lenient than the document can say (``int(" 1_0")`` is 10, ``float("1_0")``
too, ``\\d`` takes any script's digits, ``fromisoformat`` takes week dates on 3.11): each value is
matched here first and parsed second.
"""

from __future__ import annotations

import re

from vault_app.http import HttpError, Request
from vault_core.errors import InvalidInput
from vault_core.limits import MAX_WAIT_SECONDS
from vault_core.names import validate_batch_id, validate_stream_name
from vault_core.recordformat import MAX_TIMESTAMP_MS
from vault_core.times import to_millis

INTEGER = r"-?[0-9]{1,20}"
"""An integer query parameter (its range is checked after parsing)."""
NUMBER = r"-?[0-9]{1,20}(\.[0-9]{1,20})?([eE][-+]?[0-9]{1,3})?"
"""A number of seconds (``wait``): decimal, as clients print floats."""
MILLIS = r"-?[0-9]{1,20}"
ISO_TIME = (
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
    r"([T ][0-9]{2}:[0-9]{2}(:[0-9]{2}([.,][0-9]{1,6})?)?([Zz]|[+-][0-9]{2}:?[0-9]{2})?)?"
)
TIME = f"{MILLIS}|{ISO_TIME}"
"""``at``: milliseconds since the epoch, or an ISO 8601 date or date and time (UTC unless it
names a zone)."""
RANGE = r"bytes=([0-9]{0,19})-([0-9]{0,19})"
"""``Range``: one range of bytes (``bytes=a-b``, ``bytes=a-`` or the last ``n``: ``bytes=-n``)."""
IDEMPOTENCY_KEY_MAX = 200
MAX_OFFSET = 2**62
"""Largest ``from``: past any stream, and small enough to stay a 64-bit integer everywhere."""
READ_ENCODINGS = ("utf-8", "base64")
"""``encoding`` of a read: ``base64`` never returns values as text."""

_INTEGER = re.compile(INTEGER)
_NUMBER = re.compile(NUMBER)
_TIME = re.compile(TIME)


def is_integer(raw: str) -> bool:
    return _INTEGER.fullmatch(raw) is not None


def is_number(raw: str) -> bool:
    return _NUMBER.fullmatch(raw) is not None


def is_time(raw: str) -> bool:
    return _TIME.fullmatch(raw) is not None


def anchored(pattern: str) -> str:
    """A pattern as OpenAPI (ECMA 262) matches it: anywhere unless anchored."""
    return f"^(?:{pattern})$"


def _shown(raw: str) -> str:
    return raw if len(raw) <= 40 else raw[:40] + "..."


def given(req: Request, name: str) -> str | None:
    """A query parameter's value; an empty one (``?minutes=``) is refused, not taken as absent."""
    raw = req.query.get(name)
    if raw == "":
        raise HttpError(400, "bad_request", f"query parameter {name} is empty: give a value or leave it out")
    return raw


def int_param(req: Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = given(req, name)
    if raw is None:
        return default
    if not is_integer(raw):
        raise HttpError(400, "bad_request", f"query parameter {name} must be an integer, got {_shown(raw)!r}")
    value = int(raw)
    if not lo <= value <= hi:
        raise HttpError(400, "bad_request", f"query parameter {name} must be between {lo} and {hi}")
    return value


def wait_param(req: Request) -> float:
    raw = given(req, "wait")
    if raw is None:
        return 0.0
    if not is_number(raw):
        raise HttpError(400, "bad_request", f"wait must be a number of seconds, got {_shown(raw)!r}")
    value = float(raw)
    if not 0 <= value <= MAX_WAIT_SECONDS:
        raise HttpError(400, "bad_request", f"wait must be between 0 and {MAX_WAIT_SECONDS} seconds")
    return value


def read_encoding(req: Request) -> str:
    encoding = given(req, "encoding") or "utf-8"
    if encoding not in READ_ENCODINGS:
        raise HttpError(400, "bad_request", f"encoding must be one of {', '.join(READ_ENCODINGS)}")
    return encoding


def parse_time(raw: str) -> int:
    """Milliseconds since the epoch, from milliseconds or ISO 8601 (naive means UTC).

    Times before the epoch or past what a record can carry are clamped to that range: a seek
    there means "from the start" or "at the end".
    """
    if not is_time(raw):
        raise HttpError(
            400,
            "bad_request",
            f"time {_shown(raw)!r} is neither milliseconds since the epoch (up to 20 digits) nor ISO 8601 "
            "(2026-11-22T06:00:00Z)",
        )
    try:
        ms = to_millis(raw)
    except InvalidInput as exc:
        raise HttpError(400, "bad_request", str(exc)) from None
    return min(max(ms, 0), MAX_TIMESTAMP_MS)


def stream_of(req: Request) -> str:
    return validate_stream_name(req.route.get("stream", ""))


def batch_id_of(req: Request) -> str:
    raw = req.route.get("id", "")
    try:
        return validate_batch_id(raw)
    except InvalidInput:
        raise HttpError(404, "not_found", f"no batch with id {raw!r}") from None


_RANGE = re.compile(RANGE)
"""One range; 19 digits is past any blob size, and keeps the numbers small to parse."""


def parse_range(header: str | None, committed: int) -> tuple[int, int]:
    """``[start, end)`` of a ``Range`` header against the committed length (``end`` may be
    <= ``start`` when the range is unsatisfiable: a 416). Raises HttpError 400 if malformed."""
    raw = (header if header is not None else "bytes=0-").strip()  # an empty Range is malformed
    match = _RANGE.fullmatch(raw)
    if not match or (not match.group(1) and not match.group(2)):
        shown = raw if len(raw) <= 60 else raw[:60] + "..."
        raise HttpError(400, "bad_request", f"unsupported Range {shown!r}: use one range, bytes=a-b")
    if match.group(1):
        start = int(match.group(1))
        end = int(match.group(2)) + 1 if match.group(2) else committed
    else:  # suffix range: the last n bytes
        start, end = max(0, committed - int(match.group(2))), committed
    return start, end
