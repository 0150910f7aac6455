"""The HTTP handlers (docs/API.md), independent of the Functions runtime.

Their parameters are parsed in :mod:`vault_app.params`, what they send is rendered by
:mod:`vault_app.wire`, and what they keep per event loop (tail watches, wait slots, /health's
counts) is in :mod:`vault_app.loops`."""

from __future__ import annotations

import functools
import json
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from vault_app import params, poison
from vault_app.auth.policy import Action
from vault_app.batches import COMMITTED, BatchStatus, batch_id_for, pieces_known
from vault_app.guard import Caller, anyone, on_some_stream, on_stream, secured
from vault_app.http import HttpError, Request, Response, guarded, in_thread, json_response
from vault_app.ingest import parse_batch
from vault_app.openapi import SPEC
from vault_app.params import (
    batch_id_of,
    given,
    int_param,
    parse_range,
    parse_time,
    read_encoding,
    stream_of,
    wait_param,
)
from vault_app.readahead import ReadAhead
from vault_app.runtime import Runtime
from vault_app.services import Services
from vault_app.staging import Stager
from vault_app.tail import Busy
from vault_app.wire import ENCODER, NDJSON, WirePage, batch_lines, catalog_json
from vault_core import __version__ as VERSION
from vault_core.errors import FormatError, OffsetPastEnd, StorageUnavailable
from vault_core.limits import (
    DEFAULT_READ_BYTES,
    DEFAULT_READ_MESSAGES,
    MAX_READ_BYTES,
    MAX_READ_MESSAGES,
)
from vault_core.prefix import UNIT_VERSION
from vault_core.reader import MIN_READ, BatchReadResult, StreamReader
from vault_core.retry import budget

BATCH_RECHECK_SECONDS = 1.0
"""A producer's ``?wait=`` reads the batch table at least this often (see _committed_within)."""
log = logging.getLogger("vault_app")


# -- produce -------------------------------------------------------------------------------
@guarded
@secured(on_stream(Action.WRITE))
async def post_messages(rt: Runtime, req: Request, caller: Caller) -> Response:
    svc = rt.services
    stream = stream_of(req)
    wait = wait_param(req)
    batch_id, status = await in_thread(rt, _stage, svc, req, stream)
    if wait > 0 and status.status != COMMITTED:
        status = await _committed_within(rt, stream, batch_id, wait) or status
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


async def _committed_within(rt: Runtime, stream: str, batch_id: str, wait: float) -> BatchStatus | None:
    """The batch's status once committed, if that happens within ``wait`` seconds.

    The batch is staged already, so whatever happens here the answer is at least a 202: when too
    many requests wait, or storage cannot be read, it is the 202 at once (a 429 or 503 would
    invite a resend). Each commit record the stream's tail watch sees names the batches that
    commit made durable: usually the answer is there, with no read of its own. Otherwise (the
    batch went in with an earlier commit between two polls) the batch table says, checked at
    each change and at least every :data:`BATCH_RECHECK_SECONDS` (its rows may trail the commit
    record a little). A batch in several format 2 units is answered from its row in the index,
    which has its pieces (vault_app.batches).
    """
    try:
        async with rt.wait_slots.slot():
            deadline = time.monotonic() + wait
            seen = -1
            while (left := deadline - time.monotonic()) > 0:
                state = await rt.loops.tails().wait_past(stream, seen, min(left, BATCH_RECHECK_SECONDS))
                if state is not None and state.committed > seen:
                    seen = state.committed
                    hit = next((b for b in state.batches if b.batch_id == batch_id), None)
                    if hit is not None and (state.format < UNIT_VERSION or pieces_known(hit)):
                        return BatchStatus.of_commit(stream, hit)
                # The commit record just seen stands for the latest: one read of it less a check.
                record = None if state is None else state.batches
                with budget():
                    check = functools.partial(rt.services.batch_table.committed, record=record)
                    found = await in_thread(rt, check, stream, batch_id)
                if found is not None:
                    return found
    except (Busy, StorageUnavailable):
        pass
    return None


@guarded
@secured(on_some_stream(Action.READ))
def get_batch(rt: Runtime, req: Request, caller: Caller) -> Response:
    """A batch by id alone: unambiguous unless producers used the same id on several streams.

    Only batches of streams the caller may read count: one elsewhere is "not found", as if it
    did not exist, so an id tells nothing about streams the caller cannot read."""
    batch_id = batch_id_of(req)
    found = rt.services.batch_table.find(batch_id, lambda stream: caller.may(Action.READ, stream))
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
def get_stream_batch(rt: Runtime, req: Request, caller: Caller) -> Response:
    stream = stream_of(req)
    batch_id = batch_id_of(req)
    status: BatchStatus | None = rt.services.batch_table.status(stream, batch_id)
    if status is None:
        raise HttpError(404, "not_found", f"no batch with id {batch_id!r} on stream {stream!r}")
    return json_response(200, status.to_json())


# -- catalog -------------------------------------------------------------------------------
@guarded
@secured(on_some_stream(Action.READ))
def list_streams(rt: Runtime, req: Request, caller: Caller) -> Response:
    """The streams the caller may read; the staging queues (shared by all streams) only for
    admins of every stream."""
    svc = rt.services
    streams = [catalog_json(e.__dict__) for e in svc.vault.streams() if caller.may(Action.READ, e.stream)]
    doc: dict[str, Any] = {"streams": streams}
    if caller.everywhere(Action.ADMIN):
        doc["queues"] = [d.to_json() for d in poison.queue_depths(svc)]
    return json_response(200, doc)


@guarded
@secured(on_stream(Action.READ))
def get_stream(rt: Runtime, req: Request, caller: Caller) -> Response:
    svc = rt.services
    stream = stream_of(req)
    state = svc.vault.reader.state(stream)  # the commit record is the truth; the catalog may lag
    entry = svc.vault.index.catalog_entry(stream)
    doc: dict[str, Any] = (
        catalog_json(entry.__dict__) if entry else {"stream": stream, "created": None, "updated": None}
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
async def get_messages(rt: Runtime, req: Request, caller: Caller) -> Response:
    """A page of messages; with ``wait``, at the end of the log, the first page that arrives.

    The wait is a coroutine on the stream's shared tail watch (vault_app.tail): no thread and no
    storage call of its own; the read and the formatting run in a thread."""
    svc = rt.services
    stream = stream_of(req)
    page = _PageRequest(
        stream,
        limit=int_param(req, "limit", DEFAULT_READ_MESSAGES, 1, MAX_READ_MESSAGES),
        max_bytes=int_param(req, "max_bytes", DEFAULT_READ_BYTES, 1, MAX_READ_BYTES),
        force_b64=read_encoding(req) == "base64",
        ndjson=NDJSON in (req.header("accept") or ""),
    )
    wait = wait_param(req)
    reader = svc.vault.reader
    at = given(req, "at")
    if at is not None:
        if given(req, "from") is not None:
            raise HttpError(400, "bad_request", "give either from or at, not both")
        offset = await in_thread(rt, reader.seek_time, stream, parse_time(at))
    else:
        offset = int_param(req, "from", 0, 0, params.MAX_OFFSET)
    if wait > 0 and rt.loops.tails().at_end(stream, offset):
        # A consumer chasing the tail, again: its stream is watched and ends where it asks, so
        # it waits at once. Its empty page, should nothing come, costs no storage call.
        found, response = False, _empty_page(page, offset)
    else:
        found, response = await in_thread(rt, _page, rt.read_ahead, reader, page, offset)
    if found or wait <= 0:
        return response
    async with rt.wait_slots.slot():
        deadline = time.monotonic() + wait
        while (left := deadline - time.monotonic()) > 0:
            state = await rt.loops.tails().wait_past(stream, offset, left)
            if state is None or state.committed <= offset:
                break  # the wait is over: the empty page
            with budget():  # a fresh budget: the wait may have outlasted the request's
                found, response = await in_thread(rt, _page, rt.read_ahead, reader, page, offset)
            if found:
                break
    return response


@dataclass(frozen=True)
class _PageRequest:
    stream: str
    limit: int
    max_bytes: int
    force_b64: bool
    ndjson: bool


def _page(
    read_ahead: ReadAhead, reader: StreamReader, page: _PageRequest, offset: int
) -> tuple[bool, Response]:
    """Read and format one page: whether it has messages, and the response."""
    stream, max_bytes = page.stream, page.max_bytes
    result = _read(read_ahead, reader, stream, offset, page.limit, max_bytes)
    # Before formatting: a sequential consumer's next range downloads while this one is built.
    count = result.count
    read_ahead.done(
        reader,
        stream,
        offset,
        result.next_offset,
        result.committed,
        max_bytes,
        by_count=count >= page.limit,
        count=count,
    )
    headers = {"X-Next-Offset": str(result.next_offset), "X-Committed": str(result.committed)}
    lines = batch_lines(result.batches, page.force_b64)  # from the columns: no Message per message
    if page.ndjson:
        return bool(lines), Response(200, ENCODER.encode_lines(lines), headers, mimetype=NDJSON)
    body = WirePage(stream, result.next_offset, result.committed, lines)
    return bool(lines), Response(200, ENCODER.encode(body), headers)


def _empty_page(page: _PageRequest, end: int) -> Response:
    headers = {"X-Next-Offset": str(end), "X-Committed": str(end)}
    if page.ndjson:
        return Response(200, b"", headers, mimetype=NDJSON)
    return Response(200, ENCODER.encode(WirePage(page.stream, end, end, [])), headers)


def _read(
    read_ahead: ReadAhead, reader: StreamReader, stream: str, offset: int, limit: int, max_bytes: int
) -> BatchReadResult:
    try:
        data, state = read_ahead.fetch(reader, stream, offset, max_bytes, limit=limit)
        result = reader.decode_checked_batches(
            stream, offset, data, state, max_bytes=max_bytes, max_count=limit
        )
        # A prefetch sized to the consumer's last page may end before this page is full: then
        # the rest of what one GET of max_bytes reads, and the page that GET's bytes make.
        base = offset if state.read_at is None else state.read_at
        end = min(base + max(max_bytes, MIN_READ), state.committed)
        if result.count < limit and result.next_offset < state.committed and base + len(data) < end:
            data += reader.log(stream).read(base + len(data), end - base - len(data))
            result = reader.decode_checked_batches(
                stream, offset, data, state, max_bytes=max_bytes, max_count=limit
            )
        return result
    except OffsetPastEnd as exc:
        raise HttpError(416, "invalid_offset", str(exc)) from exc


# -- raw log -------------------------------------------------------------------------------


@guarded
@secured(on_stream(Action.READ))
def get_log(rt: Runtime, req: Request, caller: Caller) -> Response:
    svc = rt.services
    stream = stream_of(req)
    blob = svc.vault.blob(stream)
    committed = blob.state().committed
    header = req.header("range")
    raw = (header if header is not None else "bytes=0-").strip()
    start, end = parse_range(raw, committed)
    if header is None and committed == 0:  # the first 16 MiB of an empty log: none
        return Response(
            200, b"", {"Accept-Ranges": "bytes", "X-Committed": "0"}, mimetype="application/octet-stream"
        )
    if start >= committed or end <= start:
        held = f"the committed log is bytes 0-{committed - 1}" if committed else "nothing is committed yet"
        why = "ends before it starts" if end <= start < committed else f"is outside the log: {held}"
        return Response(
            416,
            json.dumps({"error": "invalid_range", "message": f"range {raw} {why}"}).encode(),
            {"Content-Range": f"bytes */{committed}"},
        )
    end = min(end, committed, start + MAX_READ_BYTES)
    data = blob.read(start, end - start)
    if len(data) != end - start:  # FORMAT.md §6.4: the blob holds at least the committed bytes
        raise FormatError(
            f"the blob holds {len(data)} bytes from {start}, where its commit record says"
            f" {end - start} are committed",
            stream=stream,
            offset=start + len(data),
        )
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
def get_access(rt: Runtime, req: Request, caller: Caller) -> Response:
    """A read-only SAS for the stream's blob alone, living ``VAULT_SAS_MINUTES`` at most and
    never past the caller's token: whoever loses access loses it on the blob soon after too."""
    svc = rt.services
    stream = stream_of(req)
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
async def health(rt: Runtime, req: Request, caller: Caller) -> Response:
    """Always 200: the app answers. ``degraded`` when a poison count cannot be read (storage is
    down or slow), so an unreachable storage account never makes a probe restart a healthy app.

    Open to probes without a credential, so it says nothing about data: queue names and
    poison counts only to admins of every stream. A coroutine with async storage calls made
    side by side: a probe needs no thread, so busy threads never make it slow."""
    counts = await rt.loops.recent_poison_counts()
    known = [c["poison_messages"] for c in counts]
    ok = bool(counts) and None not in known
    doc: dict[str, Any] = {"status": "ok" if ok else "degraded", "version": VERSION}
    if caller.everywhere(Action.ADMIN):
        doc["poison_messages"] = sum(n for n in known if n is not None) if ok else None
        doc["queues"] = counts
        doc["waiting"] = rt.wait_slots.waiting  # in this worker process: how close to VAULT_MAX_WAITING
    return json_response(200, doc)


@guarded
@secured(anyone)
def whoami(rt: Runtime, req: Request, caller: Caller) -> Response:
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


@guarded
def openapi(rt: Runtime, req: Request) -> Response:
    return json_response(200, SPEC)
