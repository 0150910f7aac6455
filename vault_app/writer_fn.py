"""The writer: what the queue-triggered function does with one staged batch.

It appends the trigger's batch under the stream's lease and, while it holds leases, drains
further pending batches from the same queue, so many small producer batches become a few
large page writes ("throughput comes from batching, not from more writers").

Exactly once: every batch carries its id into the commit record; a batch redelivered after
its commit (the process died before the queue message was deleted) is recognised by the
writer and not appended again. Permanently bad batches (invalid envelope, missing
claim-check blob) are marked ``rejected`` with the reason and fail the invocation, so the
host moves them to ``<queue>-poison`` after ``maxDequeueCount`` attempts; the stream flows on.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from azure.core.exceptions import ResourceNotFoundError

from vault_app import envelope
from vault_app.envelope import Envelope, EnvelopeError
from vault_app.services import Services, StagingQueue
from vault_app.staging import Stager
from vault_app.telemetry import event
from vault_core.azure import translate_errors
from vault_core.errors import LeaseLost, StreamLeased, VaultError
from vault_core.pageblob import CommittedBatch
from vault_core.writer import AppendResult, Batch, StreamWriter

log = logging.getLogger("vault_app.writer")

DRAIN_MESSAGES = 32
"""Extra queue messages fetched per receive while coalescing (the queue service maximum)."""
DRAIN_BYTES = 64 * 1024 * 1024
"""Stop draining once this much is pending in one invocation (bounds memory and latency)."""
DRAIN_VISIBILITY = 300
"""Seconds drained messages stay invisible to others while this invocation works on them."""
LEASED_RETRY_SECONDS = 5
WRITER_LEASE_SECONDS = 15
"""Azure's shortest lease: if a writer process dies, its stream is free again within 15 s.
The writer renews it during long appends, so a short lease costs nothing while alive."""

WRITER_IDLE_SECONDS = 10.0
"""How long a stream's writer (and its lease) stays open after its last append."""

fault_hook: Callable[[str], None] | None = None
"""Test seam of the local host (``--fault``): called at named points, e.g. ``after-commit``."""


class _AlreadyCommitted(Exception):
    """A claim-check batch whose blob is gone because its commit already happened."""


@dataclass(frozen=True)
class Staged:
    """A queue message as the trigger hands it over."""

    id: str
    body: str
    dequeue_count: int = 1
    pop_receipt: str | None = None


@dataclass
class _Work:
    envelope: Envelope
    drained: Staged | None = None
    """None for the trigger message itself (the host deletes that one on success)."""


@dataclass
class _Plan:
    by_stream: dict[str, list[_Work]] = field(default_factory=dict)
    bytes: int = 0


def write_staged(services: Services, queue: StagingQueue, trigger: Staged) -> None:
    stager = Stager(services)
    try:
        first = _load(services, envelope.decode(trigger.body))
    except _AlreadyCommitted:
        return  # a redelivery whose claim-check blob went with its commit
    except EnvelopeError as exc:
        _reject(stager, trigger.body, str(exc))
        raise
    plan = _Plan()
    _add(plan, _Work(first))
    _drain(services, queue, plan)
    for stream, work in plan.by_stream.items():
        try:
            _append(services, queue, stream, work)
        except StreamLeased:
            if stream != first.stream:
                _release(queue, [w.drained for w in work if w.drained])
                continue
            # Another instance writes this stream: hand the batch back as a fresh message
            # rather than failing, so lease contention never pushes good batches to poison.
            _release(queue, [w.drained for w in work if w.drained])
            with translate_errors():
                queue.client.send_message(trigger.body, visibility_timeout=LEASED_RETRY_SECONDS)
            log.info("stream %s is leased by another writer; batch %s re-queued", stream, first.batch_id)
        except VaultError:
            _release(queue, [w.drained for w in plan.by_stream[stream] if w.drained])
            if stream == first.stream:
                raise
            log.exception("append to %s failed; its drained batches return to the queue", stream)


class OpenWriters:
    """Writers kept open between invocations, so a busy stream pays for lease and recovery once.

    A writer closes (releasing its lease for other instances) after WRITER_IDLE_SECONDS without
    an append; one that lost its lease meanwhile is reopened. Invocations of one queue run one at
    a time (host.json), and a stream lives on one queue, so a writer is never shared at once;
    the lock covers the reaper.
    """

    def __init__(self, idle_seconds: float = WRITER_IDLE_SECONDS) -> None:
        self.idle_seconds = idle_seconds
        self._open: dict[str, tuple[StreamWriter, float]] = {}
        self._lock = threading.Lock()
        self._reaper: threading.Thread | None = None

    def append(self, services: Services, stream: str, batches: list[Batch]) -> list[AppendResult]:
        with self._lock:
            writer = self._take(stream)
        if writer is None:
            writer = services.vault.writer(stream, lease_seconds=WRITER_LEASE_SECONDS)
        try:
            results = writer.append(batches)
        except LeaseLost:
            writer.close()
            writer = services.vault.writer(stream, lease_seconds=WRITER_LEASE_SECONDS)
            results = writer.append(batches)
        except BaseException:
            writer.close()
            raise
        with self._lock:
            self._open[stream] = (writer, time.monotonic())
            self._start_reaper()
        return results

    def _take(self, stream: str) -> StreamWriter | None:
        entry = self._open.pop(stream, None)
        return entry[0] if entry else None

    def close_idle(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self._lock:
            idle = [s for s, (_, used) in self._open.items() if now - used >= self.idle_seconds]
            writers = [self._open.pop(s)[0] for s in idle]
        for w in writers:
            try:
                w.close()
            except VaultError as exc:
                log.warning("closing the writer of %s: %s", w.stream, exc)

    def _start_reaper(self) -> None:
        if self._reaper is None or not self._reaper.is_alive():
            self._reaper = threading.Thread(target=self._reap, name="mv-writer-reaper", daemon=True)
            self._reaper.start()

    def _reap(self) -> None:
        while True:
            time.sleep(1.0)
            self.close_idle()
            with self._lock:
                if not self._open:
                    return


open_writers = OpenWriters()
_io = ThreadPoolExecutor(max_workers=8, thread_name_prefix="mv-writer-io")
"""Independent storage calls of one invocation (claim-check downloads, deletes) run here."""


def _append(services: Services, queue: StagingQueue, stream: str, work: list[_Work]) -> None:
    started = time.monotonic()
    results = open_writers.append(services, stream, [_batch(w.envelope) for w in work])
    if fault_hook:
        fault_hook("after-commit")
    now_ms = time.time_ns() // 1_000_000
    # Cleanup after the commit, side by side; anything left behind is harmless (a redelivery
    # is a duplicate, a forgotten claim-check blob is removed by the container's lifecycle rule).
    claims = [w.envelope.claim for w in work if w.envelope.claim]
    cleanup = [_io.submit(_delete_claims, services, claims[i : i + 256]) for i in range(0, len(claims), 256)]
    cleanup += [_io.submit(_delete, queue, w.drained) for w in work if w.drained]
    for done in cleanup:
        done.result()
    fresh = [r for r in results if not r.duplicate]
    event(
        log,
        "appended",
        stream=stream,
        batch_ids=[r.batch_id for r in results],
        duplicates=len(results) - len(fresh),
        messages=sum(r.count for r in fresh),
        bytes=(fresh[-1].next_offset - fresh[0].first_offset) if fresh else 0,
        duration_ms=round((time.monotonic() - started) * 1000, 1),
        lag_ms=now_ms - min(w.envelope.staged_ms for w in work),
    )


def _batch(env: Envelope) -> Batch:
    if env.records is not None:
        return Batch.of_records(env.records, env.batch_id)
    return Batch(env.messages or [], env.batch_id)


def _drain(services: Services, queue: StagingQueue, plan: _Plan) -> None:
    while plan.bytes < DRAIN_BYTES:
        with translate_errors():
            got = list(
                queue.client.receive_messages(
                    max_messages=DRAIN_MESSAGES, visibility_timeout=DRAIN_VISIBILITY
                )
            )
        staged = [Staged(m.id, m.content, m.dequeue_count or 1, m.pop_receipt) for m in got]
        # Claim-check downloads are independent: fetch them side by side, keep queue order.
        loaded = _io.map(lambda st: _try_load(services, st.body), staged)
        for st, result in zip(staged, loaded, strict=True):
            if isinstance(result, Envelope):
                _add(plan, _Work(result, st))
            elif isinstance(result, _AlreadyCommitted):
                _delete(queue, st)
            else:
                # Not ours to judge here: let it come back as a trigger, so its dequeue count
                # grows and the host's poison handling applies to it.
                _release(queue, [st])
        if len(got) < DRAIN_MESSAGES:
            return


def _try_load(services: Services, body: str) -> Envelope | Exception:
    try:
        return _load(services, envelope.decode(body))
    except (_AlreadyCommitted, EnvelopeError) as exc:
        return exc


def _add(plan: _Plan, work: _Work) -> None:
    plan.by_stream.setdefault(work.envelope.stream, []).append(work)
    env = work.envelope
    if env.records is not None:
        plan.bytes += len(env.records.data)
    else:
        plan.bytes += sum(len(m.value) + len(m.key_bytes()[0]) for m in env.messages or [])


def _load(services: Services, env: Envelope) -> Envelope:
    """Resolve a claim-check reference into the full envelope."""
    if env.claim is None:
        return env
    with translate_errors():
        try:
            body = services.claimcheck.download_blob(env.claim).readall()
        except ResourceNotFoundError as exc:
            # Deleted after its commit? The batch id is in the Tables index, or (if the writer
            # died before writing that row) still in the stream's commit record.
            if services.vault.index.committed_batches(env.stream, [env.batch_id]) or any(
                b.batch_id == env.batch_id for b in _commit_record_batches(services, env.stream)
            ):
                raise _AlreadyCommitted(env.batch_id) from exc
            raise EnvelopeError(f"claim-check blob {env.claim!r} of batch {env.batch_id} is missing") from exc
    return envelope.decode_claimed(env, body)


def _commit_record_batches(services: Services, stream: str) -> tuple[CommittedBatch, ...]:
    try:
        return services.vault.blob(stream).state().batches
    except VaultError:
        return ()


def _reject(stager: Stager, body: str, reason: str) -> None:
    log.error("rejected staged message: %s", reason)
    try:
        doc = json.loads(body)
        stager.reject(str(doc["id"]), str(doc["stream"]), reason)
    except Exception:  # nothing identifies the batch: the poison queue and this log line keep it
        pass


def _release(queue: StagingQueue, messages: list[Staged]) -> None:
    for m in messages:
        try:
            with translate_errors():
                queue.client.update_message(m.id, m.pop_receipt, visibility_timeout=0)
        except VaultError:
            pass  # it becomes visible anyway when DRAIN_VISIBILITY runs out


def _delete(queue: StagingQueue, m: Staged) -> None:
    try:
        with translate_errors():
            queue.client.delete_message(m.id, m.pop_receipt)
    except VaultError:
        pass  # redelivered later, recognised as a duplicate by its batch id


def _delete_claims(services: Services, blobs: list[str]) -> None:
    """One Blob Batch request for up to 256 claim-check blobs, not one request each."""
    try:
        with translate_errors():
            services.claimcheck.delete_blobs(*blobs, raise_on_any_failure=False)
    except VaultError:
        pass  # the container's lifecycle rule removes forgotten claim-check blobs
