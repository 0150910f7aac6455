"""The query, route and header parameters of the HTTP API (docs/API.md), parsed and checked:
a 400 with what was wrong for a bad one."""

from __future__ import annotations

import re

from vault_app.http import HttpError, Request
from vault_core.errors import InvalidInput
from vault_core.limits import MAX_WAIT_SECONDS
from vault_core.names import validate_batch_id, validate_stream_name
from vault_core.recordformat import MAX_TIMESTAMP_MS
from vault_core.times import to_millis


def int_param(req: Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = req.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise HttpError(
            400, "bad_request", f"query parameter {name} must be an integer, got {raw!r}"
        ) from None
    if not lo <= value <= hi:
        raise HttpError(400, "bad_request", f"query parameter {name} must be between {lo} and {hi}")
    return value


def wait_param(req: Request) -> float:
    raw = req.query.get("wait")
    if raw is None or raw == "":
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        raise HttpError(400, "bad_request", f"wait must be a number of seconds, got {raw!r}") from None
    if not 0 <= value <= MAX_WAIT_SECONDS:
        raise HttpError(400, "bad_request", f"wait must be between 0 and {MAX_WAIT_SECONDS} seconds")
    return value


def parse_time(raw: str) -> int:
    """Milliseconds since the epoch, from milliseconds or ISO 8601 (naive means UTC).

    Times before the epoch or past what a record can carry are clamped to that range: a seek
    there means "from the start" or "at the end".
    """
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


_RANGE = re.compile(r"bytes=(\d{0,19})-(\d{0,19})")
"""One range; 19 digits is past any blob size, and keeps the numbers small to parse."""


def parse_range(header: str | None, committed: int) -> tuple[int, int]:
    """``[start, end)`` of a ``Range`` header against the committed length (``end`` may be
    <= ``start`` when the range is unsatisfiable: a 416). Raises HttpError 400 if malformed."""
    raw = (header or "bytes=0-").strip()
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
