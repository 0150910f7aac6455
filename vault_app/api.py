"""The HTTP handlers (docs/API.md), independent of the Functions runtime."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import re
import time
import weakref
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from typing import Any

import msgspec

from vault_app import params, poison
from vault_app.auth.guard import Caller, anyone, on_some_stream, on_stream, secured
from vault_app.auth.policy import Action
from vault_app.batches import COMMITTED, BatchStatus, batch_id_for
from vault_app.http import HttpError, Request, Response, guarded, in_thread, json_response
from vault_app.ingest import parse_batch
from vault_app.openapi import SPEC
from vault_app.readahead import ReadAhead
from vault_app.services import Services, StagingQueue, services
from vault_app.staging import Stager
from vault_app.tail import SWEEP_MAX_STREAMS, Busy, Tails, WaitSlots
from vault_core import __version__ as VERSION
from vault_core.aio import async_clients
from vault_core.errors import InvalidInput, OffsetPastEnd, StorageUnavailable, VaultError
from vault_core.limits import (
    DEFAULT_READ_BYTES,
    DEFAULT_READ_MESSAGES,
    MAX_READ_BYTES,
    MAX_READ_MESSAGES,
    MAX_WAIT_SECONDS,
)
from vault_core.names import validate_batch_id, validate_stream_name
from vault_core.pagelog import CommitState
from vault_core.reader import ReadResult, StreamReader
from vault_core.recordformat import FLAG_KEY_IS_TEXT, MAX_TIMESTAMP_MS, Message, message_id
from vault_core.retry import budget
from vault_core.times import to_millis

_read_ahead = ReadAhead()
NDJSON = "application/x-ndjson"
BATCH_RECHECK_SECONDS = 1.0
"""A producer's ``?wait=`` reads the batch table at least this often (see _committed_within)."""
HEALTH_FRESH_SECONDS = 1.0
HEALTH_STALE_SECONDS = 5.0
"""/health's poison counts are read at most once a second and served up to 5 s old meanwhile."""
HEALTH_BUDGET_SECONDS = 2.0
"""All storage calls of one /health together: a probe answers within about this long."""
log = logging.getLogger("vault_app")


def _given(req: Request, name: str) -> str | None:
    """A query parameter's value; an empty one (``?minutes=``) is refused, not taken as absent."""
    raw = req.query.get(name)
    if raw == "":
        raise HttpError(400, "bad_request", f"query parameter {name} is empty: give a value or leave it out")
    return raw


def _int_param(req: Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = _given(req, name)
    if raw is None:
        return default
    if not params.is_integer(raw):
        shown = raw if len(raw) <= 40 else raw[:40] + "..."
        raise HttpError(400, "bad_request", f"query parameter {name} must be an integer, got {shown!r}")
    value = int(raw)
    if not lo <= value <= hi:
        raise HttpError(400, "bad_request", f"query parameter {name} must be between {lo} and {hi}")
    return value


def _wait_param(req: Request) -> float:
    raw = _given(req, "wait")
    if raw is None:
        return 0.0
    if not params.is_number(raw):
        shown = raw if len(raw) <= 40 else raw[:40] + "..."
        raise HttpError(400, "bad_request", f"wait must be a number of seconds, got {shown!r}")
    value = float(raw)
    if not 0 <= value <= MAX_WAIT_SECONDS:
        raise HttpError(400, "bad_request", f"wait must be between 0 and {MAX_WAIT_SECONDS} seconds")
    return value


def parse_time(raw: str) -> int:
    """Milliseconds since the epoch, from milliseconds or ISO 8601 (naive means UTC).

    Times before the epoch or past what a record can carry are clamped to that range: a seek
    there means "from the start" or "at the end".
    """
    if not params.is_time(raw):
        shown = raw if len(raw) <= 40 else raw[:40] + "..."
        raise HttpError(
            400,
            "bad_request",
            f"time {shown!r} is neither milliseconds since the epoch (up to 20 digits) nor ISO 8601 "
            "(2026-11-22T06:00:00Z)",
        )
    try:
        ms = to_millis(raw)
    except InvalidInput as exc:
        raise HttpError(400, "bad_request", str(exc)) from None
    return min(max(ms, 0), MAX_TIMESTAMP_MS)


def _stream(req: Request) -> str:
    return validate_stream_name(req.route.get("stream", ""))


def _svc() -> Services:
    return services()


# -- produce -------------------------------------------------------------------------------
@guarded
@secured(on_stream(Action.WRITE))
async def post_messages(req: Request, caller: Caller) -> Response:
    svc = _svc()
    stream = _stream(req)
    wait = _wait_param(req)
    batch_id, status = await in_thread(_stage, svc, req, stream)
    if wait > 0 and status.status != COMMITTED:
        status = await _committed_within(svc, stream, batch_id, wait) or status
    return json_response(200 if status.status == COMMITTED else 202, status.to_json())


def _stage(svc: Services, req: Request, stream: str) -> tuple[str, BatchStatus]:
    messages, producer_id = parse_batch(req.body, req.header("content-type"), svc.settings.limits)
    key = req.header("idempotency-key")
    if key is not None and not 0 < len(key) <= params.IDEMPOTENCY_KEY_MAX:
        raise HttpError(
            400, "bad_request", f"Idempotency-Key must be 1-{params.IDEMPOTENCY_KEY_MAX} characters"
        )
    batch_id = batch_id_for(stream, key, producer_id)
    return batch_id, Stager(svc).stage(stream, batch_id, messages)


async def _committed_within(svc: Services, stream: str, batch_id: str, wait: float) -> BatchStatus | None:
    """The batch's status once committed, if that happens within ``wait`` seconds.

    The batch is staged already, so whatever happens here the answer is at least a 202: when too
    many requests wait, or storage cannot be read, it is the 202 at once (a 429 or 503 would
    invite a resend). Each commit record the stream's tail watch sees names the batches that
    commit made durable: usually the answer is there, with no read of its own. Otherwise (the
    batch went in with an earlier commit between two polls) the batch table says, checked at
    each change and at least every :data:`BATCH_RECHECK_SECONDS` (its rows may trail the commit
    record a little).
    """
    try:
        async with _wait_slots().slot():
            deadline = time.monotonic() + wait
            seen = -1
            while (left := deadline - time.monotonic()) > 0:
                state = await _tails().wait_past(stream, seen, min(left, BATCH_RECHECK_SECONDS))
                if state is not None and state.committed > seen:
                    seen = state.committed
                    hit = next((b for b in state.batches if b.batch_id == batch_id), None)
                    if hit is not None:
                        return BatchStatus.of_commit(stream, hit)
                with budget():
                    found = await in_thread(svc.batch_table.committed, stream, batch_id)
                if found is not None:
                    return found
    except (Busy, StorageUnavailable):
        pass
    return None


def _batch_id(req: Request) -> str:
    raw = req.route.get("id", "")
    try:
        return validate_batch_id(raw)
    except InvalidInput:
        raise HttpError(404, "not_found", f"no batch with id {raw!r}") from None


@guarded
@secured(on_some_stream(Action.READ))
def get_batch(req: Request, caller: Caller) -> Response:
    """A batch by id alone: unambiguous unless producers used the same id on several streams.

    Only batches of streams the caller may read count: one elsewhere is "not found", as if it
    did not exist, so an id tells nothing about streams the caller cannot read."""
    batch_id = _batch_id(req)
    found = _svc().batch_table.find(batch_id, lambda stream: caller.may(Action.READ, stream))
    if not found:
        raise HttpError(404, "not_found", f"no batch with id {batch_id!r}")
    if len(found) > 1:
        streams = sorted(s.stream for s in found)
        raise HttpError(
            409,
            "ambiguous_batch",
            f"batch id {batch_id!r} names batches on {len(streams)} streams ({', '.join(streams[:10])}); "
            "ask GET /streams/{stream}/batches/{id}",
        )
    return json_response(200, found[0].to_json())


@guarded
@secured(on_stream(Action.READ))
def get_stream_batch(req: Request, caller: Caller) -> Response:
    stream = _stream(req)
    batch_id = _batch_id(req)
    status: BatchStatus | None = _svc().batch_table.status(stream, batch_id)
    if status is None:
        raise HttpError(404, "not_found", f"no batch with id {batch_id!r} on stream {stream!r}")
    return json_response(200, status.to_json())


# -- catalog -------------------------------------------------------------------------------
@guarded
@secured(on_some_stream(Action.READ))
def list_streams(req: Request, caller: Caller) -> Response:
    """The streams the caller may read; the staging queues (shared by all streams) only for
    admins of every stream."""
    svc = _svc()
    streams = [_catalog_json(e.__dict__) for e in svc.vault.streams() if caller.may(Action.READ, e.stream)]
    doc: dict[str, Any] = {"streams": streams}
    if caller.everywhere(Action.ADMIN):
        doc["queues"] = [d.to_json() for d in poison.queue_depths(svc)]
    return json_response(200, doc)


def _catalog_json(e: dict[str, Any]) -> dict[str, Any]:
    return {
        "stream": e["stream"],
        "committed": e["committed"],
        "count": e["count"],
        "first_timestamp": e["first_ts"],
        "last_timestamp": e["last_ts"],
        "created": e["created"],
        "updated": e["updated"],
    }


@guarded
@secured(on_stream(Action.READ))
def get_stream(req: Request, caller: Caller) -> Response:
    svc = _svc()
    stream = _stream(req)
    state = svc.vault.reader.state(stream)  # the commit record is the truth; the catalog may lag
    entry = svc.vault.index.catalog_entry(stream)
    doc: dict[str, Any] = (
        _catalog_json(entry.__dict__) if entry else {"stream": stream, "created": None, "updated": None}
    )
    doc.update(
        committed=state.committed,
        count=state.count,
        first_timestamp=state.first_ts,
        last_timestamp=state.last_ts,
    )
    return json_response(200, doc)


# -- consume -------------------------------------------------------------------------------
@guarded
@secured(on_stream(Action.READ))
async def get_messages(req: Request, caller: Caller) -> Response:
    """A page of messages; with ``wait``, at the end of the log, the first page that arrives.

    The wait is a coroutine on the stream's shared tail watch (vault_app.tail): no thread and no
    storage call of its own; the read and the formatting run in a thread."""
    svc = _svc()
    stream = _stream(req)
    page = _PageRequest(
        stream,
        limit=_int_param(req, "limit", DEFAULT_READ_MESSAGES, 1, MAX_READ_MESSAGES),
        max_bytes=_int_param(req, "max_bytes", DEFAULT_READ_BYTES, 1, MAX_READ_BYTES),
        force_b64=_read_encoding(req) == "base64",
        ndjson=NDJSON in (req.header("accept") or ""),
    )
    wait = _wait_param(req)
    reader = svc.vault.reader
    at = _given(req, "at")
    if at is not None:
        if _given(req, "from") is not None:
            raise HttpError(400, "bad_request", "give either from or at, not both")
        offset = await in_thread(reader.seek_time, stream, parse_time(at))
    else:
        offset = _int_param(req, "from", 0, 0, params.MAX_OFFSET)
    if wait > 0 and _tails().at_end(stream, offset):
        # A consumer chasing the tail, again: its stream is watched and ends where it asks, so
        # it waits at once. Its empty page, should nothing come, costs no storage call.
        found, response = False, _empty_page(page, offset)
    else:
        found, response = await in_thread(_page, reader, page, offset)
    if found or wait <= 0:
        return response
    async with _wait_slots().slot():
        deadline = time.monotonic() + wait
        while (left := deadline - time.monotonic()) > 0:
            state = await _tails().wait_past(stream, offset, left)
            if state is None or state.committed <= offset:
                break  # the wait is over: the empty page
            with budget():  # a fresh budget: the wait may have outlasted the request's
                found, response = await in_thread(_page, reader, page, offset)
            if found:
                break
    return response


def _read_encoding(req: Request) -> str:
    encoding = _given(req, "encoding") or "utf-8"
    if encoding not in params.READ_ENCODINGS:
        raise HttpError(400, "bad_request", f"encoding must be one of {', '.join(params.READ_ENCODINGS)}")
    return encoding


@dataclass(frozen=True)
class _PageRequest:
    stream: str
    limit: int
    max_bytes: int
    force_b64: bool
    ndjson: bool


def _page(reader: StreamReader, page: _PageRequest, offset: int) -> tuple[bool, Response]:
    """Read and format one page: whether it has messages, and the response."""
    stream, max_bytes = page.stream, page.max_bytes
    result = _read(reader, stream, offset, page.limit, max_bytes)
    # Before formatting: a sequential consumer's next range downloads while this one is built.
    _read_ahead.done(reader, stream, offset, result.next_offset, result.committed, max_bytes)
    headers = {"X-Next-Offset": str(result.next_offset), "X-Committed": str(result.committed)}
    lines = [wire_line(m, page.force_b64) for m in result.messages]
    if page.ndjson:
        return bool(lines), Response(200, _ENCODER.encode_lines(lines), headers, mimetype=NDJSON)
    body = WirePage(stream, result.next_offset, result.committed, lines)
    return bool(lines), Response(200, _ENCODER.encode(body), headers)


def _empty_page(page: _PageRequest, end: int) -> Response:
    headers = {"X-Next-Offset": str(end), "X-Committed": str(end)}
    if page.ndjson:
        return Response(200, b"", headers, mimetype=NDJSON)
    return Response(200, _ENCODER.encode(WirePage(page.stream, end, end, [])), headers)


def _read(reader: StreamReader, stream: str, offset: int, limit: int, max_bytes: int) -> ReadResult:
    try:
        data, state = _read_ahead.fetch(reader, stream, offset, max_bytes)
        return reader.decode_checked(stream, offset, data, state, max_bytes=max_bytes, max_count=limit)
    except OffsetPastEnd as exc:
        raise HttpError(416, "invalid_offset", str(exc)) from exc


# -- waiting -------------------------------------------------------------------------------
_tails_by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Tails] = weakref.WeakKeyDictionary()


def _tails() -> Tails:
    """The stream watches of the running event loop (the worker has one)."""
    loop = asyncio.get_running_loop()
    tails = _tails_by_loop.get(loop)
    if tails is None:
        svc = _svc()

        async def commit_state(stream: str) -> CommitState:
            return await async_clients(svc.vault_account).commit_state(svc.settings.streams_container, stream)

        async def commit_states() -> dict[str, CommitState]:
            clients = async_clients(svc.vault_account)
            return await clients.commit_states(svc.settings.streams_container, SWEEP_MAX_STREAMS)

        tails = _tails_by_loop[loop] = Tails(commit_state, commit_states)
    return tails


@lru_cache(maxsize=1)
def _wait_slots() -> WaitSlots:
    return WaitSlots(_svc().settings.max_waiting)


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


_ENCODER = msgspec.json.Encoder()
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
    offset, ts, key, value, flags = m
    value_text, value_enc = _text(value, force_b64)
    key_text, key_enc = _text(key, force_b64 and not flags & FLAG_KEY_IS_TEXT)
    return WireLine(offset, ts, message_id(ts, offset), key_text, key_enc, value_text, value_enc)


# -- raw log -------------------------------------------------------------------------------
_RANGE = re.compile(params.RANGE)
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


@guarded
@secured(on_stream(Action.READ))
def get_log(req: Request, caller: Caller) -> Response:
    svc = _svc()
    stream = _stream(req)
    blob = svc.vault.blob(stream)
    committed = blob.state().committed
    given = req.header("range")
    raw = (given if given is not None else "bytes=0-").strip()
    start, end = parse_range(raw, committed)
    if start >= committed or end <= start:
        return Response(
            416,
            json.dumps(
                {
                    "error": "invalid_range",
                    "message": f"range {raw} is outside the committed log (0-{committed - 1})",
                }
            ).encode(),
            {"Content-Range": f"bytes */{committed}"},
        )
    end = min(end, committed, start + MAX_READ_BYTES)
    data = blob.read(start, end - start)
    return Response(
        206,
        data,
        {
            "Content-Range": f"bytes {start}-{end - 1}/{committed}",
            "Accept-Ranges": "bytes",
            "X-Committed": str(committed),
        },
        mimetype="application/octet-stream",
    )


# -- direct access -------------------------------------------------------------------------
@guarded
@secured(on_stream(Action.READ))
def get_access(req: Request, caller: Caller) -> Response:
    """A read-only SAS for the stream's blob alone, living ``VAULT_SAS_MINUTES`` at most and
    never past the caller's token: whoever loses access loses it on the blob soon after too."""
    svc = _svc()
    stream = _stream(req)
    state = svc.vault.blob(stream).state()
    now = datetime.now(timezone.utc)
    expires = sas_expiry(now, svc.settings.sas_minutes, caller.principal.expires)
    url, sas = svc.vault.read_access(stream, start=now - timedelta(minutes=5), expiry=expires)
    return json_response(
        200,
        {
            "stream": stream,
            "blob_url": url,
            "sas": sas,
            "expires": expires.isoformat(),
            "committed": state.committed,
        },
        {"Cache-Control": "no-store"},  # a SAS is a credential: no cache may keep it
    )


def sas_expiry(now: datetime, minutes: int, credential_expires: float | None) -> datetime:
    expires = now + timedelta(minutes=minutes)
    if credential_expires is not None:
        expires = min(expires, datetime.fromtimestamp(credential_expires, timezone.utc))
    return expires


# -- service -------------------------------------------------------------------------------
@guarded
@secured(anyone)
async def health(req: Request, caller: Caller) -> Response:
    """Always 200: the app answers. ``degraded`` when a poison count cannot be read (storage is
    down or slow), so an unreachable storage account never makes a probe restart a healthy app.

    Open to probes without a credential, so it says nothing about data: queue names and
    poison counts only to admins of every stream. A coroutine with async storage calls made
    side by side: a probe needs no thread, so busy threads never make it slow."""
    counts = await _recent_poison_counts()
    known = [c["poison_messages"] for c in counts]
    ok = bool(counts) and None not in known
    doc: dict[str, Any] = {"status": "ok" if ok else "degraded", "version": VERSION}
    if caller.everywhere(Action.ADMIN):
        doc["poison_messages"] = sum(n for n in known if n is not None) if ok else None
        doc["queues"] = counts
        doc["waiting"] = _wait_slots().waiting  # in this worker process: how close to VAULT_MAX_WAITING
    return json_response(200, doc)


@guarded
@secured(anyone)
def whoami(req: Request, caller: Caller) -> Response:
    """The caller as the app sees it, and what it may do: for checking a credential and grants."""
    p = caller.principal
    return json_response(
        200,
        {
            "principal": {
                "kind": p.kind,
                "id": p.id or None,
                "name": p.name or None,
                "app_id": p.app_id,
                "roles": sorted(p.roles),
                "groups": sorted(p.groups),
                "expires": int(p.expires) if p.expires is not None else None,
            },
            "permissions": {a.value: caller.permissions.patterns(a) for a in Action},
        },
        {"Cache-Control": "no-store"},
    )


@dataclass
class _Counts:
    value: list[dict[str, Any]] | None = None
    at: float = 0.0
    refreshing: asyncio.Task[list[dict[str, Any]]] | None = None


_counts_by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Counts] = weakref.WeakKeyDictionary()


async def _recent_poison_counts() -> list[dict[str, Any]]:
    """The poison counts, at most HEALTH_FRESH_SECONDS old, or up to HEALTH_STALE_SECONDS old
    while a refresh runs: probes every second, from several places, cost storage one read of
    the counts a second, and a probe never waits for storage when a recent answer is at hand."""
    loop = asyncio.get_running_loop()
    counts = _counts_by_loop.setdefault(loop, _Counts())
    age = loop.time() - counts.at
    if counts.value is not None and age < HEALTH_FRESH_SECONDS:
        return counts.value
    if counts.refreshing is None or counts.refreshing.done():

        async def refresh() -> list[dict[str, Any]]:
            value = await _poison_counts()
            counts.value, counts.at = value, loop.time()
            return value

        counts.refreshing = loop.create_task(refresh())
    if counts.value is not None and age < HEALTH_STALE_SECONDS:
        return counts.value
    return await asyncio.shield(counts.refreshing)


async def _poison_counts() -> list[dict[str, Any]]:
    """Per staging queue, its poison queue's approximate count (None if unreadable); [] if the
    queues cannot even be named (settings). One attempt per count, all at once, under a short
    budget of their own: a probe stays cheap, and answers within about that budget when storage
    is down."""
    try:
        svc = _svc()
        queues = svc.queues
        accounts = svc.staging_accounts
    except Exception:
        log.warning("health: the poison queues cannot be named", exc_info=True)
        return []

    async def count(q: StagingQueue) -> int | None:
        try:
            return await async_clients(accounts[q.account]).queue_length(q.poison.name)
        except VaultError:
            return None

    found: list[int | None] = [None] * len(queues)
    # The budget bounds each attempt; the outer bound is the probe's promise, whatever hangs.
    with budget(HEALTH_BUDGET_SECONDS), contextlib.suppress(asyncio.TimeoutError):
        found = await asyncio.wait_for(
            asyncio.gather(*(count(q) for q in queues)), HEALTH_BUDGET_SECONDS + 0.5
        )
    return [
        {"account": q.account, "queue": q.name, "poison_messages": n}
        for q, n in zip(queues, found, strict=True)
    ]


@guarded
def openapi(req: Request) -> Response:
    return json_response(200, SPEC)
