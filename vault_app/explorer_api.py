"""Read routes the web explorer draws from (docs/API.md "Web explorer"): a stream's ingest rate per
minute, and its consumer groups with their lag. Same guard as every read: ``read`` on the stream.
"""

from __future__ import annotations

from typing import Any

from vault_app.auth.policy import Action
from vault_app.guard import Caller, on_stream, secured
from vault_app.http import Request, Response, guarded, json_response
from vault_app.params import int_param, stream_of
from vault_app.runtime import Runtime
from vault_core.checkpoints import Checkpoint
from vault_core.errors import FormatError, InvalidOffset
from vault_core.index import MINUTE_MS
from vault_core.limits import MAX_GROUPS, MAX_RATE_MINUTES
from vault_core.rates import per_minute
from vault_core.reader import StreamReader
from vault_core.recordformat import HEADER_SIZE


@guarded
@secured(on_stream(Action.READ))
def get_rates(rt: Runtime, req: Request, caller: Caller) -> Response:
    svc = rt.services
    stream = stream_of(req)
    minutes = int_param(req, "minutes", 60, 1, MAX_RATE_MINUTES)
    now = svc.vault.clock.now_ms()
    first = now - (minutes - 1) * MINUTE_MS
    marks = svc.vault.index.minute_marks(stream, first, now)
    state = svc.vault.reader.state(stream)  # after the marks: none of them lies past it
    rates = per_minute(marks, state.committed, state.count, first, now)
    return json_response(
        200,
        {
            "stream": stream,
            "minutes": minutes,
            "from": rates[0].start,
            "to": now,
            "committed": state.committed,
            "count": state.count,
            "rates": [
                {"time": r.start, "messages": r.messages, "bytes": r.bytes, "seconds": r.seconds}
                for r in rates
            ],
        },
        {"Cache-Control": "no-store"},
    )


@guarded
@secured(on_stream(Action.READ))
def get_groups(rt: Runtime, req: Request, caller: Caller) -> Response:
    """Each consumer group's position on the stream, its lag in bytes, and in time: how much
    older the first message it has not read is than the stream's last message (0 when caught up)."""
    svc = rt.services
    stream = stream_of(req)
    checkpoints = svc.checkpoints.for_stream(stream, limit=MAX_GROUPS + 1)
    reader = svc.vault.reader
    state = reader.state(stream)
    stamps: dict[int, int | None] = {}  # groups at the same position share one read
    groups = []
    for cp in checkpoints[:MAX_GROUPS]:
        if cp.offset not in stamps:
            stamps[cp.offset] = _timestamp_at(reader, stream, cp.offset, state.committed)
        groups.append(_group_json(cp, state.committed, state.last_ts, stamps[cp.offset]))
    return json_response(
        200,
        {
            "stream": stream,
            "committed": state.committed,
            "last_timestamp": state.last_ts,
            "groups": groups,
            "truncated": len(checkpoints) > MAX_GROUPS,
        },
        {"Cache-Control": "no-store"},
    )


def _timestamp_at(reader: StreamReader, stream: str, offset: int, committed: int) -> int | None:
    """The timestamp of the record at ``offset``; None at the end or where no record starts."""
    if offset >= committed:
        return None
    try:
        # One record at most: a header's worth asked for, the rest only if the record is larger.
        found = reader.read(stream, offset, max_bytes=HEADER_SIZE, max_count=1).messages
    except (InvalidOffset, FormatError):  # a checkpoint that is not a record boundary of this log
        return None
    return found[0].timestamp if found else None


def _group_json(cp: Checkpoint, committed: int, last_ts: int | None, unread_ts: int | None) -> dict[str, Any]:
    if cp.offset >= committed:
        lag_ms: int | None = 0  # caught up
    elif last_ts is not None and unread_ts is not None:
        lag_ms = last_ts - unread_ts
    else:
        lag_ms = None
    return {
        "group": cp.group,
        "offset": cp.offset,
        "member": cp.member,
        "updated": cp.updated,
        "lag_bytes": max(0, committed - cp.offset),
        "first_unread_timestamp": unread_ts,
        "lag_ms": lag_ms,
    }
