"""The writer: what the queue-triggered function does with one staged batch.

It appends the trigger's batch under the stream's lease and, while it holds leases, drains
further pending batches from the same queue, so many small producer batches become a few
large page writes ("throughput comes from batching, not from more writers").

Only the queue's **owner** does that (docs/ARCHITECTURE.md §3.7): with several instances polling
the same queues, one instance at a time holds a queue's owner lease and writes all of its
streams; any other instance that receives a batch of the queue passes it straight back for the
owner's next drain and pauses its own polling of the queue for NOT_OWNER_PAUSE_SECONDS.

Exactly once: every batch carries its id into the commit record; a batch redelivered after
its commit (the process died before the queue message was deleted) is recognised by the
writer and not appended again.

What happens to a batch that cannot be appended now (docs/ARCHITECTURE.md "Failures"):

* **Transient** (storage unavailable or throttling, the stream leased by another writer, our
  lease lost): the batch goes back to its queue as a *fresh* message, visible again after a
  short delay, and the invocation succeeds. A fresh message starts at dequeue count 0, so an
  outage of any length never pushes a good batch towards the poison queue. Only if even that
  hand-back fails (the queue itself is unreachable) does the invocation fail, and the host
  retries it.
* **Permanent** (not a valid envelope; a claim-check blob missing for a batch that is not
  committed; the stream full): the batch is marked ``rejected`` with the reason and moved to
  ``<queue>-poison`` by the writer itself, and the invocation succeeds; the stream flows on.
  ``vault poison replay`` puts it back once the cause is fixed.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from concurrent import futures
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from vault_app import envelope, telemetry
from vault_app.claimcheck import AlreadyCommitted, ClaimChecks
from vault_app.drained import DrainedFile
from vault_app.envelope import Envelope, EnvelopeError
from vault_app.open_writers import Owner
from vault_app.runtime import Runtime
from vault_app.services import Services, StagingQueue
from vault_app.telemetry import event
from vault_core.errors import StreamFull, VaultError, WriterConflict, retriable
from vault_core.queueing import QueuedMessage
from vault_core.retry import backed_off, note_backoff
from vault_core.stagedunits import StagedUnits
from vault_core.writer import AppendResult, Batch

log = logging.getLogger("vault_app.writer")

DRAIN_MESSAGES = 32
"""Extra queue messages fetched per receive while coalescing (the queue service maximum)."""
DRAIN_BYTES = 64 * 1024 * 1024
"""Stop draining once this much is pending in one invocation (bounds memory and latency)."""
DRAIN_VISIBILITY = 15
"""Seconds drained messages stay invisible to others once held; renewed while this invocation
works on them, so a writer that dies gives them back within this long."""
DRAIN_RECEIVE_VISIBILITY = 5
"""Seconds a drain's receive (or a fresh copy's send) first hides its messages: their receipts
are written down for a replacement (vault_app.drained) only once the reply is in, so a process
killed while the request is in flight leaves them hidden this long, not DRAIN_VISIBILITY. The
renewer takes them to DRAIN_VISIBILITY once they near its end (RENEW_LEFT_SHARE), so one
appended within 3 s costs no extra request (docs/ARCHITECTURE.md §3.2)."""
RENEW_LEFT_SHARE = 1 / 3
"""A held message is renewed once no more than this share of the visibility it was last given
is left (held 3.3 s of a receive's 5, or 10 s of DRAIN_VISIBILITY), looked at every
RENEW_CHECK_SECONDS: a message drained, appended and deleted in that time, as a normal append
is, costs its queue no renewal; only an append that runs long does. Renewing once a third had
passed cost a throttled queue 0.4 renewals a batch on two contended cores (docs/CAPACITY.md §7.4)."""
RENEW_CHECK_SECONDS = DRAIN_RECEIVE_VISIBILITY / 10
"""How often held messages are looked at (no request unless one is due): a renewal the queue
refused is tried again at least three times before the message's visibility runs out."""
LEASED_RETRY_SECONDS = 1
"""Delay before a batch handed back because another writer holds its stream's lease; that
writer is draining the same queue meanwhile, so the batch is usually appended by it."""
DELETE_PACE_SECONDS = 0.25
"""Between attempts to delete a message the writer is done with, to send a batch back, or to
receive a drain's next messages, on a queue that refuses requests."""
DELETE_PATIENCE_SECONDS = DRAIN_VISIBILITY / 2
"""How long a delete or a hand-back keeps trying (a hand-back given up: its drained message is
released, or its trigger's invocation fails and the host retries it). A committed batch's
message has at least RENEW_LEFT_SHARE of its visibility less one RENEW_CHECK_SECONDS left when
its batch commits (renewals stop there), so the last attempts may come after it is visible
again: they still delete it unless it was received again meanwhile (a pop receipt holds until
the next receive), and a message received again is a duplicate its batch id makes harmless."""
DRAIN_ROUNDS_SECONDS = 10.0
"""An invocation whose drain found batches drains again once it has appended them (a round),
while its rounds keep finding some, for up to this long: batches that arrive while it appends
wait for its next round, not for the host to settle its trigger and poll again (a get and a
delete of the trigger a round, and the host's back-offs between invocations, saved). Then it
ends, so that a draining host waits no longer than this for it."""
DRAIN_ROUND_SECONDS = 1.0
"""A round's drain receives no more once it has drained for this long, and appends what it has:
a queue taken over after its owner's death holds the backlog of a whole lease time (15 s), and
draining all of it, claim-check downloads included, held the first commit back 5 to 10 s
(docs/ARCHITECTURE.md §3.7). The rest waits for the next round, moments later."""
STREAMS_AT_ONCE = 8
"""Streams of one round appended side by side, each under its own writer and lease (one writer
a stream, as ever): a round then takes as long as its slowest stream, not all of them in turn.
One after the other, a round of 8 single-batch streams held its queue's writer for 8 appends
while the queue's one-second bucket overflowed (docs/CAPACITY.md §7.4)."""
DELETES_AT_ONCE = 8
"""Committed batches' deletes of one invocation in flight at once, on a pool of its own: a delete
on a refusing queue holds its thread for up to DELETE_PATIENCE_SECONDS, and on the worker
process's shared pool (runtime.writer_io) one queue's paced deletes held back the drains,
hand-backs and deletes of the process's other queues, whose requests then went unused
(docs/CAPACITY.md §7.5)."""
NOT_OWNER_PAUSE_SECONDS = 1.0
"""How long an invocation that received a batch of a queue another instance owns waits, after
handing the batch back, before it returns (and its instance polls that queue again)."""


@dataclass(frozen=True)
class StagingMessage:
    """A message of a staging queue as the trigger hands it over (its body is an envelope)."""

    id: str
    body: str
    dequeue_count: int = 1
    pop_receipt: str | None = None


@dataclass
class _Work:
    envelope: Envelope
    drained: QueuedMessage | None = None
    """None for the trigger message itself (the host deletes that one on success)."""


@dataclass
class _Plan:
    by_stream: dict[str, list[_Work]] = field(default_factory=dict)
    bytes: int = 0
    drained: int = 0
    """Messages its drain received (the trigger not counted)."""


def write_staged(runtime: Runtime, queue: StagingQueue, trigger: StagingMessage) -> None:
    started, waited, started_ms = time.monotonic(), backed_off(), time.time_ns() // 1_000_000
    with telemetry.current().writing(queue.name, queue.account):
        try:
            _write(runtime, queue, trigger)
        finally:
            # Time spent working vs waiting on storage that refused: the retries' back-offs on this
            # thread and the wait for the paced deletes at the end. What a throttled queue costs.
            event(
                log,
                "invocation",
                queue=queue.name,
                account=queue.account,
                started_ms=started_ms,  # when, so that a queue's time without one can be told too
                seconds=round(time.monotonic() - started, 3),
                backed_off=round(backed_off() - waited, 3),
            )


def _write(runtime: Runtime, queue: StagingQueue, trigger: StagingMessage) -> None:
    services = runtime.services
    try:
        owner = runtime.writers.own(services, queue)
    except VaultError as exc:
        if not exc.retriable:
            raise
        _hand_back_trigger(services, queue, trigger, exc)
        return
    waited = False
    if owner is Owner.OTHER_INSTANCE:  # a dead owner's lease about to run out: take over then
        after = runtime.writers.own_when_free(services, queue, within=2 * NOT_OWNER_PAUSE_SECONDS)
        if after is not None:
            owner, waited = after, True
    if not owner:
        _pass_to_owner(queue, trigger, pause=owner is Owner.OTHER_INSTANCE and not waited)
        return
    try:
        _write_owned(runtime, queue, trigger)
    finally:
        runtime.writers.done(queue)


def _write_owned(runtime: Runtime, queue: StagingQueue, trigger: StagingMessage) -> None:
    """This instance owns the queue: append the trigger's batch and whatever else is pending."""
    services = runtime.services
    claims = services.claims
    try:
        first = claims.load(envelope.decode(trigger.body))
    except AlreadyCommitted:
        return  # a redelivery whose claim-check blob went with its commit
    except EnvelopeError as exc:
        _poison(services, queue, trigger.body, str(exc))
        return
    except VaultError as exc:
        if not exc.retriable:
            raise
        _hand_back_trigger(services, queue, trigger, exc)  # trying again later can cure it: never poison
        return
    telemetry.current().link(first.trace)
    # Its stream's lease and recovery side by side with the drain, if it is not open here (a
    # queue taken over from a dead owner): the first append is the takeover's last step.
    runtime.writers.open_ahead(services, first.stream)
    try:
        _append_pending(runtime, queue, trigger, first)
    finally:
        runtime.writers.keep_opened(first.stream)


def _append_pending(runtime: Runtime, queue: StagingQueue, trigger: StagingMessage, first: Envelope) -> None:
    """Drain the queue and append the trigger's batch and the drained ones, in rounds."""
    plan = _Plan()
    _add(plan, _Work(first))
    ends = time.monotonic() + DRAIN_ROUNDS_SECONDS
    with (
        DrainRenewer(queue, runtime.writers.drained(runtime.services, queue)) as renewer,
        ThreadPoolExecutor(STREAMS_AT_ONCE, thread_name_prefix="mv-append") as streams,
        ThreadPoolExecutor(DELETES_AT_ONCE, thread_name_prefix="mv-delete") as deletes,
    ):
        rounds = _Rounds(runtime, queue, trigger, renewer, streams, deletes, ends)
        rounds.drain(plan)
        runtime.fault("after-drain")
        appended = rounds.append(plan)
        count = 1
        while appended and plan.drained and time.monotonic() < ends:  # more came: another round
            # Its deletes first: on a queue at its target they and the producers' next sends take
            # the same requests, and the next receive then finds those sends, not a few of them.
            rounds.wait_for_cleanup()
            plan = _Plan()
            rounds.drain(plan)
            appended = rounds.append(plan)
            count += 1
        rounds.wait_for_cleanup()
    # Why the invocation ends: what each costs its queue (the host's delete of the trigger and
    # its next poll) is counted against the rounds it ran (docs/CAPACITY.md §7.4).
    ended = "an append failed" if not appended else "none drained" if not plan.drained else "rounds' time"
    event(log, "rounds", queue=queue.name, rounds=count, ended=ended)


@dataclass
class _Appended:
    """What appending one stream's batches of a round left behind."""

    cleanup: list[Future[None]]
    """Its committed batches' deletes (messages, claim-check blobs), in flight on the writer's pool."""
    backed_off: float
    """Seconds its thread waited on storage that refused it."""
    failed: bool = False
    """Its batches could not be appended now for a reason other streams share (storage refusing
    or unreachable, an error not understood) and went back to the queue: the invocation drains
    no further round. Not when another writer holds the stream's lease (steered batches meet
    that often, on a tier of several queues): the other streams flow on, and so do the rounds."""


@dataclass
class _Rounds:
    """What every round of one writer invocation shares: a round's streams are appended side by
    side on ``streams`` (STREAMS_AT_ONCE), each under its own writer and lease."""

    runtime: Runtime
    queue: StagingQueue
    trigger: StagingMessage
    """The trigger's batch is the one work item not drained, in the first round only."""
    renewer: DrainRenewer
    streams: Executor
    deletes: Executor
    """Where its committed batches' cleanup runs (DELETES_AT_ONCE): this queue's alone."""
    ends: float
    """When the invocation drains no further round (DRAIN_ROUNDS_SECONDS after it began)."""
    cleanup: list[Future[None]] = field(default_factory=list)

    def drain(self, plan: _Plan) -> None:
        """A round's drain: receive what waits in the queue, up to DRAIN_BYTES, for up to
        DRAIN_ROUND_SECONDS, into ``plan``."""
        runtime, queue, renewer = self.runtime, self.queue, self.renewer
        services = runtime.services
        stop = time.monotonic() + DRAIN_ROUND_SECONDS
        while plan.bytes < DRAIN_BYTES and time.monotonic() < stop:
            try:
                asked, held = _receive_patiently(queue, self.ends)
            except VaultError as exc:
                log.info("draining %s stopped: %s", queue.name, exc)
                return  # append what we have
            plan.drained += len(held)
            # A dead writer's batches all went around before: their re-sends side by side.
            held = list(runtime.writer_io.map(lambda m: _fresh(queue, m) if m.dequeue_count > 1 else m, held))
            renewer.hold(held, since=asked, visibility=DRAIN_RECEIVE_VISIBILITY)
            # Claim-check downloads are independent: fetch them side by side, keep queue order.
            loaded = runtime.writer_io.map(lambda m: _try_load(services.claims, m.body), held)
            for m, result in zip(held, loaded, strict=True):
                if isinstance(result, Envelope):
                    _add(plan, _Work(result, m))
                    # Its lease and recovery side by side with the rest of the drain and the
                    # other streams' appends: a backlog taken over holds batches of every stream
                    # of the queue, and opening each at its append, one after the other, took seconds.
                    runtime.writers.open_ahead(services, result.stream)
                    continue
                renewer.forget([m])
                if isinstance(result, AlreadyCommitted):
                    _delete_patiently(queue, m)
                elif isinstance(result, EnvelopeError):
                    _poison(services, queue, m.body, str(result))
                    _delete_patiently(queue, m)
                else:
                    _hand_back(services, queue, [m], result)
            if len(held) < DRAIN_MESSAGES:
                return

    def append(self, plan: _Plan) -> bool:
        """Append a round's batches, their streams side by side; False if any stream's failed
        (``_Appended.failed``), so the invocation drains no further round. A round takes as long
        as its slowest stream, and waits on storage as long as the stream that waited longest
        (counted as its back-off)."""
        try:
            appending = [
                self.streams.submit(contextvars.copy_context().run, self._append_stream, stream, work)
                for stream, work in plan.by_stream.items()
            ]
            futures.wait(appending)
        finally:
            for stream in plan.by_stream:  # opened ahead by the drain but not appended: kept, or let go
                self.runtime.writers.keep_opened(stream)
        done = [a.result() for a in appending if a.exception() is None]
        for d in done:
            self.cleanup += d.cleanup
        note_backoff(max((d.backed_off for d in done), default=0.0))
        for failed in appending:
            failed.result()  # the trigger's error, if its stream raised one: the host retries it
        return not any(d.failed for d in done)

    def wait_for_cleanup(self) -> None:
        """Wait for the cleanup of the batches committed so far (their deletes, in flight while
        other streams appended): time spent waiting on the queue, counted as a back-off."""
        waiting = time.monotonic()
        for done in self.cleanup:
            done.result()
        self.cleanup.clear()
        note_backoff(time.monotonic() - waiting)

    def _append_stream(self, stream: str, work: list[_Work]) -> _Appended:
        """Append one stream's batches of a round (in a thread of ``streams``), and decide what
        becomes of them if they cannot be. Raises only what the host must retry the trigger for."""
        services, queue = self.runtime.services, self.queue
        waited = backed_off()
        drained = [w.drained for w in work if w.drained]
        has_trigger = any(w.drained is None for w in work)
        try:
            cleanup = _append(self.runtime, queue, stream, work, self.renewer, self.deletes)
            return _Appended(cleanup, backed_off() - waited)
        except StreamFull as exc:
            self.renewer.forget(drained)
            for w in work:
                if w.drained is None:  # the trigger's batch: the host deletes its message
                    _poison(services, queue, self.trigger.body, str(exc))
                else:
                    _poison(services, queue, w.drained.body, str(exc))
                    _delete_patiently(queue, w.drained)
            return _Appended([], backed_off() - waited)
        except BaseException as exc:
            self.renewer.forget(drained)
            if retriable(exc):  # trying again later can cure it: never a reason to poison
                _hand_back(services, queue, drained, exc, stream, io=self.runtime.writer_io)
                if has_trigger:
                    _hand_back_trigger(services, queue, self.trigger, exc, stream)
                return _Appended([], backed_off() - waited, failed=not isinstance(exc, WriterConflict))
            # A bug or an answer we do not understand: give the drained batches back and
            # let the host retry the trigger (and poison it after maxDequeueCount).
            _release(queue, drained)
            if drained:
                telemetry.current().requeued(queue.name, queue.account, "error", len(drained))
            if has_trigger:
                raise
            log.exception("append to %s failed; its drained batches return to the queue", stream)
            return _Appended([], backed_off() - waited, failed=True)


def _append(
    runtime: Runtime,
    queue: StagingQueue,
    stream: str,
    work: list[_Work],
    renewer: DrainRenewer,
    deletes: Executor,
) -> list[Future[None]]:
    """Append and commit one stream's batches; their cleanup, started on ``deletes``."""
    tel = telemetry.current()
    started = time.monotonic()
    with tel.appending(stream, [w.envelope.trace for w in work]):
        started_ns = time.time_ns()
        # A dead owner's lease on a stream of the queue just taken from it is broken (§3.7).
        home = runtime.services.queue_for(stream)
        dead = runtime.writers.inherited(queue) and (home.account, home.name) == (queue.account, queue.name)
        results = runtime.writers.append(
            runtime.services, stream, [batch_of(w.envelope) for w in work], break_dead_lease=dead
        )
        tel.appended(stream, _commits(work, results), started_ns, time.time_ns())
    runtime.fault("after-commit")
    now_ms = time.time_ns() // 1_000_000
    # Cleanup after the commit, side by side and while the other streams append (the invocation
    # waits for it before its next round's drain); anything left behind is harmless (a redelivery
    # is a duplicate, a forgotten claim-check blob is removed by the container's lifecycle rule).
    drained = [w.drained for w in work if w.drained]
    renewer.forget(drained)
    claims = [w.envelope.claim for w in work if w.envelope.claim]
    cleanup = [deletes.submit(runtime.services.claims.delete, claims)]
    cleanup += [deletes.submit(_delete_patiently, queue, m) for m in drained]
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
        lag_ms=now_ms - min(w.envelope.received_ms for w in work),
    )
    return cleanup


def _commits(work: list[_Work], results: list[AppendResult]) -> list[telemetry.Commit]:
    """What telemetry records of each batch: results come in the order of the batches."""
    return [
        telemetry.Commit(
            r.batch_id,
            w.envelope.trace,
            w.envelope.received_ms,
            r.count,
            r.first_offset,
            r.next_offset,
            r.duplicate,
        )
        for w, r in zip(work, results, strict=True)
    ]


def batch_of(env: Envelope) -> Batch:
    """The writer's :class:`Batch` of a loaded envelope: messages, records or units."""
    if isinstance(env.records, StagedUnits):
        return Batch.of_units(env.records, env.batch_id)
    if env.records is not None:
        return Batch.of_records(env.records, env.batch_id)
    return Batch(env.messages or [], env.batch_id)


def _receive_patiently(queue: StagingQueue, until: float) -> tuple[float, list[QueuedMessage]]:
    """One receive of up to DRAIN_MESSAGES (one request), and when its attempt was made: one
    attempt every DELETE_PACE_SECONDS while its queue refuses (at its request target), until
    ``until``. The SDK's back-off (0.5 s, then 2.5 s) would hold the invocation longer than the
    queue does and leave the requests it frees to the producers' sends."""
    while True:
        asked = time.monotonic()
        try:
            return asked, queue.staging.receive(DRAIN_MESSAGES, DRAIN_RECEIVE_VISIBILITY, retry=False)
        except VaultError as exc:
            if not exc.retriable or asked + DELETE_PACE_SECONDS > until:
                raise
        time.sleep(DELETE_PACE_SECONDS)


def _fresh(queue: StagingQueue, m: QueuedMessage) -> QueuedMessage:
    """A drained message that went around before (a writer that held it died) goes on as a fresh
    copy that this invocation holds, and the old one is deleted.

    Every receive counts towards the host's ``maxDequeueCount``, drains included: a batch held
    by a writer killed twice would otherwise reach poison through no fault of its own. The copy
    starts at dequeue count 0 and carries its re-send count (envelope.REFRESH_LIMIT bounds it).
    A crash between the send and the delete leaves two copies: the batch id makes the second a
    duplicate (docs/ARCHITECTURE.md §3.5). If the copy cannot be sent, the old message goes on.
    """
    body = envelope.refreshed(m.body)
    if body is None:
        return m
    try:
        copy = queue.staging.send(body, visible_in=DRAIN_RECEIVE_VISIBILITY, retry=False)
    except VaultError:
        return m
    _delete_patiently(queue, m)
    telemetry.current().requeued(queue.name, queue.account, "refreshed")
    return copy


def _try_load(claims: ClaimChecks, body: str) -> Envelope | Exception:
    try:
        return claims.load(envelope.decode(body))
    except (AlreadyCommitted, EnvelopeError, VaultError) as exc:
        return exc


def _add(plan: _Plan, work: _Work) -> None:
    plan.by_stream.setdefault(work.envelope.stream, []).append(work)
    env = work.envelope
    if env.records is not None:
        plan.bytes += len(env.records.data)
    else:
        plan.bytes += sum(len(m.value) + len(m.key_bytes()[0]) for m in env.messages or [])


# -- giving batches back -------------------------------------------------------------------
def _retry_delay(services: Services, exc: BaseException) -> int:
    """How long a batch handed back for ``exc`` stays hidden: LEASED_RETRY_SECONDS, or
    ``VAULT_UNAVAILABLE_RETRY_SECONDS`` (config.DEFAULT_UNAVAILABLE_RETRY_SECONDS) when storage
    could not be reached."""
    if isinstance(exc, WriterConflict):
        return LEASED_RETRY_SECONDS
    return services.settings.unavailable_retry_seconds


def _reason(exc: BaseException) -> str:
    """Why a batch went back, as the re-queue metric names it."""
    return "leased" if isinstance(exc, WriterConflict) else "unavailable"


def _send_back(
    services: Services, queue: StagingQueue, body: str, exc: BaseException, stream: str | None
) -> StagingQueue:
    """Send a batch back as a fresh message for later; the queue that took it.

    A batch whose stream another writer holds goes to the stream's home queue: steering sends a
    stream's batches home while home is healthy (docs/ARCHITECTURE.md §2.5), so home's owner
    most likely holds the stream and appends it in its next round, where this writer would get
    it back and meet the same lease for as long as the stream stays busy. If home refuses (it
    may be the throttled queue the batch was steered away from), this queue takes it.

    One attempt at each every DELETE_PACE_SECONDS while they refuse (at their request target),
    for up to DELETE_PATIENCE_SECONDS, as a delete is paced: the round waits for its hand-backs,
    and with the SDK's back-offs (2.5 s, then 4.5 s) it waited seconds with batches in its queue
    and the queue's requests unused (docs/CAPACITY.md §7.5).
    """
    delay = _retry_delay(services, exc)
    targets = [queue]
    if isinstance(exc, WriterConflict) and stream is not None:
        home = services.queue_for(stream)
        if (home.account, home.name) != (queue.account, queue.name):
            targets.insert(0, home)
    deadline = time.monotonic() + DELETE_PATIENCE_SECONDS
    while True:
        for to in targets:
            try:
                to.staging.send(body, visible_in=delay, retry=False)
                return to
            except VaultError as error:
                if to is queue and (not error.retriable or time.monotonic() + DELETE_PACE_SECONDS > deadline):
                    raise
        time.sleep(DELETE_PACE_SECONDS)
        note_backoff(DELETE_PACE_SECONDS)


def _hand_back_trigger(
    services: Services,
    queue: StagingQueue,
    trigger: StagingMessage,
    exc: BaseException,
    stream: str | None = None,
) -> None:
    """Requeue the trigger's batch as a fresh message (``_send_back``); the host then deletes
    the trigger.

    If no queue can take it, fail the invocation: the host retries it later.
    """
    to = _send_back(services, queue, trigger.body, exc, stream)
    telemetry.current().requeued(queue.name, queue.account, _reason(exc))
    log.info("batch of message %s handed back to %s for later: %s", trigger.id, to.name, exc)


def _pass_to_owner(queue: StagingQueue, trigger: StagingMessage, *, pause: bool) -> None:
    """Another process owns the queue: its batch goes back at once, visible to the owner's next
    drain. If the owner is another instance, this invocation then pauses, so that this
    instance's poller of the queue takes one message per NOT_OWNER_PAUSE_SECONDS instead of
    racing the owner for every batch. Not for a sibling (another worker process of this
    instance): the host runs one invocation of a queue per instance at a time, so the owner
    is idle on it meanwhile, and a pause would only hold back the next one, which may reach it."""
    queue.staging.send(trigger.body)
    telemetry.current().requeued(queue.name, queue.account, "not_owner")
    log.info("batch of message %s handed back to %s for its owner", trigger.id, queue.name)
    if pause:
        time.sleep(NOT_OWNER_PAUSE_SECONDS)


def _hand_back(
    services: Services,
    queue: StagingQueue,
    messages: list[QueuedMessage],
    exc: BaseException,
    stream: str | None = None,
    io: Executor | None = None,
) -> None:
    """Drained batches go back as fresh messages (dequeue count 0, ``_send_back``), the old
    ones are deleted: side by side on ``io`` if given. A new owner that meets a stream still
    leased by the dead owner may hold dozens of its batches (a whole lease time's backlog); one
    after the other, at two requests each, they held the invocation, and every other stream of
    its queue, for 17 s in ``./dev bench recovery``."""

    def one(m: QueuedMessage) -> StagingQueue | None:
        try:
            to = _send_back(services, queue, m.body, exc, stream)
        except VaultError:
            _release(queue, [m])
            return None
        _delete_patiently(queue, m)
        return to

    sent = list(io.map(one, messages)) if io is not None and len(messages) > 1 else [one(m) for m in messages]
    for m, to in zip(messages, sent, strict=True):
        telemetry.current().requeued(queue.name, queue.account, _reason(exc))
        if to is not None:
            log.info("batch of drained message %s handed back to %s for later: %s", m.id, to.name, exc)


def _release(queue: StagingQueue, messages: list[QueuedMessage]) -> None:
    for m in messages:
        try:
            queue.staging.hide(m, 0)
        except VaultError:
            pass  # it becomes visible anyway when DRAIN_VISIBILITY runs out


def _delete_patiently(queue: StagingQueue, m: QueuedMessage) -> None:
    """Delete a message the writer is done with (its batch committed, handed back, re-sent fresh
    or poisoned), one attempt every DELETE_PACE_SECONDS while its queue refuses (at its request
    target), for up to DELETE_PATIENCE_SECONDS.

    A delete given up costs its queue far more later: the message comes back when its visibility
    runs out, is received, re-sent fresh (``_fresh``), deleted, appended as a duplicate and
    deleted again. One attempt at a time, at about the rate a throttled queue frees requests,
    takes the next one free, where the SDK's exponential back-off (2.5 s, then 4.5 s) would let
    the producers' sends take them, and hold the round that waits for it (a hand-back's delete
    held rounds for seconds while their queue's requests went unused, docs/CAPACITY.md §7.5)."""
    deadline = time.monotonic() + DELETE_PATIENCE_SECONDS
    while True:
        try:
            queue.staging.delete(m, retry=False)
            return
        except VaultError as exc:
            if not exc.retriable or time.monotonic() + DELETE_PACE_SECONDS > deadline:
                return  # redelivered later, recognised as a duplicate by its batch id
        time.sleep(DELETE_PACE_SECONDS)


def _poison(services: Services, queue: StagingQueue, body: str, reason: str) -> None:
    """A permanent failure: mark the batch rejected (if it can be identified) and park it in poison."""
    log.error("batch rejected, moved to %s: %s", queue.poison.name, reason)
    stream, batch_id = envelope.identify(body)
    if stream is not None and batch_id is not None:
        try:
            services.batch_table.reject(stream, batch_id, reason)
        except VaultError:
            pass  # no table: the poison queue and this log line keep the batch
    queue.poison.send(body)
    telemetry.current().poisoned(queue.name, queue.account, stream)


class DrainRenewer:
    """Keeps drained messages invisible while this invocation works on them.

    Their visibility is short (DRAIN_RECEIVE_VISIBILITY when drained, then DRAIN_VISIBILITY) and
    renewed once a third of it is left (RENEW_LEFT_SHARE, looked at every RENEW_CHECK_SECONDS, so a
    renewal a queue refused is tried again before it runs out): if this process dies, they are visible
    to another writer within DRAIN_VISIBILITY, not after a long fixed timeout; and at once to its
    replacement on the same instance, which finds them in ``written`` (vault_app.drained).
    """

    def __init__(self, queue: StagingQueue, written: DrainedFile) -> None:
        self.queue = queue
        self.written = written
        self._held: dict[str, tuple[QueuedMessage, float, float]] = {}
        """Each held message, when it was last made invisible (monotonic), and for how long."""
        self._lock = threading.Lock()
        self._round = threading.Lock()
        """Held during a renewal round: forget() waits for it, so a message is never deleted
        with a pop receipt that a renewal in flight is about to replace."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mv-drain-renewer", daemon=True)

    def __enter__(self) -> DrainRenewer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        with self._lock:
            self.written.record(())

    def hold(
        self, messages: list[QueuedMessage], since: float | None = None, visibility: float = DRAIN_VISIBILITY
    ) -> None:
        """Messages made invisible for ``visibility`` seconds at ``since`` (monotonic; by default
        now): a time no later than the request that received or sent them."""
        at = time.monotonic() if since is None else since
        with self._lock:
            self._held.update((m.id, (m, at, visibility)) for m in messages)
            self._record()

    def forget(self, messages: list[QueuedMessage]) -> None:
        with self._round, self._lock:
            for m in messages:
                self._held.pop(m.id, None)
            self._record()

    def _record(self) -> None:
        """Write what is held, with its current receipts, for a replacement (under ``_lock``)."""
        self.written.record([m for m, _, _ in self._held.values()])

    def _run(self) -> None:
        while not self._stop.wait(RENEW_CHECK_SECONDS):
            self.renew()

    def renew(self) -> None:
        """One round: every message with RENEW_LEFT_SHARE or less left of the visibility it was
        last given, invisible for DRAIN_VISIBILITY from now. One with more left is renewed by a
        later round (a round every RENEW_CHECK_SECONDS), so a message held for a normal append,
        as most are at load, costs its queue no renewal.

        The round ends at the first refusal. A queue at its request target (docs/OPERATING.md)
        refuses the rest too, and a round of retried renewals, one request per message, would
        take the requests its deletes and the producers need: a message left unrenewed only
        becomes visible again, a second delivery its batch id makes harmless."""
        with self._round:
            now = time.monotonic()
            kept = 1 - RENEW_LEFT_SHARE  # the share of its visibility a message is held unrenewed
            with self._lock:
                held = [m for m, at, hidden in self._held.values() if now - at >= hidden * kept]
            try:
                for m in held:
                    asked = time.monotonic()
                    try:  # one attempt: a refusal ends the round anyway, without a back-off
                        self.queue.staging.hide(m, DRAIN_VISIBILITY, retry=False)
                    except VaultError as exc:
                        log.info("renewing drained messages of %s stopped: %s", self.queue.name, exc)
                        return
                    with self._lock:
                        if m.id in self._held:
                            self._held[m.id] = (m, asked, DRAIN_VISIBILITY)
            finally:
                with self._lock:  # the new receipts
                    self._record()
