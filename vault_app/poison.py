"""Operating the poison queues: what is parked there, putting it back, and how much there is.

A batch lands in ``<queue>-poison`` when the writer gives up on it (it is then ``rejected`` in
the batch table, with the reason; :mod:`vault_app.writer_fn`) or when the Functions host has
failed to deliver it ``maxDequeueCount`` times. Once the cause is fixed, an operator replays
it: the message goes back to its staging queue as a fresh message. That is always safe: the
writer drops a batch whose id is already committed to its stream, so a batch is appended at
most once however often it is replayed.

**Listing peeks**: it is read-only, so it never hides a message from a replay running at the
same time and changes nothing. The queue service peeks at most 32 messages (the oldest), so a
listing shows up to 32 per poison queue, with the queue's approximate count beside them
(``truncated`` when there is more); a replay still reaches every message.

**Replaying receives** (a peeked message has no pop receipt to delete it with), page by page,
each message invisible for :data:`REPLAY_VISIBILITY` seconds. A selected batch is sent to its
staging queue first and deleted from poison second, so a crash in between leaves two copies,
of which the writer appends one. Every other message received is made visible again once its
queue has been read to the end. Receiving raises the dequeue count of poison messages; nothing
reads it (no function is bound to a poison queue), so that is harmless. One call does bounded
work (:data:`REPLAY_WORK_SECONDS`, :data:`REPLAY_MAX_HELD`) and says whether it read every
poison queue to its end; if not, the caller calls again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from vault_app import envelope
from vault_app.batches import BatchStatus, BatchTable
from vault_app.envelope import EnvelopeError
from vault_app.services import Services, StagingQueue
from vault_core.errors import VaultError
from vault_core.queueing import MessageQueue, QueuedMessage

PAGE = 32
"""Messages per peek or receive: the queue service's maximum."""
REPLAY_VISIBILITY = 60
"""Seconds a message received by a replay stays invisible if the replay dies before releasing it."""
REPLAY_WORK_SECONDS = 8.0
"""A replay call starts no new page after this long (its answer says ``complete: false``)."""
REPLAY_MAX_HELD = 500
"""A replay call stops once it holds this many messages it leaves in poison: each costs one
request to make visible again, and that must fit in the call's time budget."""
PREVIEW_CHARS = 200
"""How much of a message that is not an envelope a listing shows."""


@dataclass(frozen=True)
class Parked:
    """One poison message, read as far as it can be read."""

    account: int
    queue: str
    """The staging queue; the message is in ``<queue>-poison``."""
    message_id: str
    inserted: int | None
    """When it entered the poison queue, ms since the epoch."""
    batch_id: str | None = None
    stream: str | None = None
    count: int | None = None
    claim_check: bool | None = None
    error: str | None = None
    """Why the message is not a valid staging envelope; None when it is one."""
    preview: str | None = None
    """The start of a message that is not an envelope: what an operator has to go on."""

    @property
    def valid(self) -> bool:
        return self.error is None

    def to_json(self) -> dict[str, Any]:
        return {
            "account": self.account,
            "queue": self.queue,
            "message_id": self.message_id,
            "inserted": self.inserted,
            "valid": self.valid,
            "batch_id": self.batch_id,
            "stream": self.stream,
            "count": self.count,
            "claim_check": self.claim_check,
            "error": self.error,
            "preview": self.preview,
        }


@dataclass(frozen=True)
class Selector:
    """Which poison messages an operation applies to: ``stream`` and/or ``batch_id``; None is any."""

    stream: str | None = None
    batch_id: str | None = None

    def matches(self, parked: Parked) -> bool:
        return (self.stream is None or parked.stream == self.stream) and (
            self.batch_id is None or parked.batch_id == self.batch_id
        )


def read_message(q: StagingQueue, message_id: str, inserted: datetime | None, body: str) -> Parked:
    """A poison message as a :class:`Parked`: an envelope, or whatever of it can be read."""
    where: dict[str, Any] = {
        "account": q.account,
        "queue": q.name,
        "message_id": message_id,
        "inserted": int(inserted.timestamp() * 1000) if inserted else None,
    }
    try:
        env = envelope.decode(body)
    except EnvelopeError as exc:
        stream, batch_id = envelope.identify(body)
        return Parked(**where, batch_id=batch_id, stream=stream, error=str(exc), preview=body[:PREVIEW_CHARS])
    claimed = env.claim is not None
    count = env.count if env.messages is None else len(env.messages)
    return Parked(**where, batch_id=env.batch_id, stream=env.stream, count=count, claim_check=claimed)


# -- counts --------------------------------------------------------------------------------
@dataclass(frozen=True)
class QueueDepth:
    account: int
    queue: str
    approximate_messages: int | None
    poison_messages: int | None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def queue_depths(services: Services, *, staging: bool = True, retry: bool = True) -> list[QueueDepth]:
    """Approximate counts of every staging queue (unless ``staging`` is False) and its poison queue.

    A count that cannot be read is None rather than an error: the counts are shown beside other
    things (the catalog, ``/health``) that must not fail because one queue cannot be read.
    Without ``retry`` each count is one attempt, so storage that refuses costs no back-off.
    """
    return [
        QueueDepth(q.account, q.name, _count(q.staging, retry) if staging else None, _count(q.poison, retry))
        for q in services.queues
    ]


def _count(queue: MessageQueue, retry: bool = True) -> int | None:
    try:
        return queue.approximate_count(retry=retry)
    except VaultError:
        return None


# -- listing -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Listed:
    parked: Parked
    status: BatchStatus | None
    """The batch's status (``rejected`` with its reason, usually); None if it is unknown."""

    def to_json(self) -> dict[str, Any]:
        status = self.status
        return {
            **self.parked.to_json(),
            "status": status.status if status else None,
            "reason": status.reason if status else None,
        }


@dataclass(frozen=True)
class ListedQueue:
    account: int
    queue: str
    poison_messages: int | None
    """Approximate count of the poison queue; None if it could not be read."""
    peeked: int

    @property
    def truncated(self) -> bool:
        if self.poison_messages is None:
            return self.peeked >= PAGE
        return self.poison_messages > self.peeked

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "truncated": self.truncated}


@dataclass(frozen=True)
class PoisonListing:
    messages: list[Listed]
    queues: list[ListedQueue]

    def to_json(self, *, queues: bool = True) -> dict[str, Any]:
        """``queues=False`` for an admin of some streams only: the counts are of every stream's
        batches, so they are left out, and ``truncated`` says only that a queue held more
        than a page (the caller's batches may be among those not peeked)."""
        return {
            "messages": [m.to_json() for m in self.messages],
            "queues": [q.to_json() for q in self.queues] if queues else [],
            "truncated": any(q.truncated if queues else q.peeked >= PAGE for q in self.queues),
        }


def list_poison(services: Services, selector: Selector | None = None) -> PoisonListing:
    """The oldest (up to 32) messages of every poison queue that ``selector`` picks, with statuses."""
    selector = selector or Selector()
    statuses: dict[tuple[str, str], BatchStatus | None] = {}
    messages, queues = [], []
    for q in services.queues:
        peeked = q.poison.peek(PAGE)  # a poison queue that was never created holds nothing
        queues.append(ListedQueue(q.account, q.name, _count(q.poison), len(peeked)))
        for m in peeked:
            parked = read_message(q, m.id, m.inserted, m.body)
            if selector.matches(parked):
                messages.append(Listed(parked, _status(services.batch_table, parked, statuses)))
    return PoisonListing(messages, queues)


def _status(
    table: BatchTable, parked: Parked, seen: dict[tuple[str, str], BatchStatus | None]
) -> BatchStatus | None:
    """The batch's status, looked up once per batch (a batch can be parked more than once)."""
    if parked.stream is None or parked.batch_id is None:
        return None
    key = (parked.stream, parked.batch_id)
    if key not in seen:
        seen[key] = table.status(*key)
    return seen[key]


# -- replay --------------------------------------------------------------------------------
@dataclass
class ReplayReport:
    replayed: list[Parked] = field(default_factory=list)
    invalid: list[Parked] = field(default_factory=list)
    """Selected messages that are not envelopes: never replayed, they stay in poison."""
    skipped: int = 0
    """Messages the selector did not pick, of the streams ``shown`` covers."""
    repeated: int = 0
    """Further copies of a batch this call already replayed, left in poison: the writer may
    have failed the replayed batch again at once, and that new copy must stay for the operator."""
    complete: bool = True
    """False if the call stopped before reading every poison queue to its end."""
    shown: Callable[[str | None], bool] = field(default=lambda stream: True, repr=False)
    """The streams whose messages the caller may hear of (an admin of some streams only is
    told nothing about the others, not even how many were skipped)."""

    _batches: set[tuple[str | None, str | None]] = field(default_factory=set, repr=False)

    def replayed_already(self, parked: Parked) -> bool:
        return (parked.stream, parked.batch_id) in self._batches

    def add_replayed(self, parked: Parked) -> None:
        self.replayed.append(parked)
        self._batches.add((parked.stream, parked.batch_id))

    def to_json(self) -> dict[str, Any]:
        return {
            "replayed": len(self.replayed),
            "invalid": len(self.invalid),
            "skipped": self.skipped,
            "repeated": self.repeated,
            "complete": self.complete,
            "batches": [p.to_json() for p in self.replayed],
            "invalid_messages": [p.to_json() for p in self.invalid],
        }


def replay(
    services: Services,
    selector: Selector | None = None,
    *,
    work_seconds: float = REPLAY_WORK_SECONDS,
    shown: Callable[[str | None], bool] | None = None,
) -> ReplayReport:
    """Send the selected poisoned batches back to their staging queues; each batch once per call.

    ``shown``: the streams the report may count skipped messages of (default: all)."""
    selector = selector or Selector()
    report = ReplayReport() if shown is None else ReplayReport(shown=shown)
    stop_at = time.monotonic() + work_seconds
    for q in services.queues:
        if not _replay_queue(services, q, selector, report, stop_at):
            report.complete = False
            break
    return report


def _replay_queue(
    services: Services, q: StagingQueue, selector: Selector, report: ReplayReport, stop_at: float
) -> bool:
    """Replay the selected batches of one poison queue; True once it has been read to its end."""
    held: list[QueuedMessage] = []  # received, still in poison: made visible again at the end
    try:
        while time.monotonic() < stop_at and len(held) < REPLAY_MAX_HELD:
            page = q.poison.receive(PAGE, REPLAY_VISIBILITY)  # one request
            if not page:
                return True
            held += page
            for m in page:
                if _replay_one(services, q, selector, m, report):
                    held.remove(m)
        return False
    finally:
        _release(q.poison, held)


def _replay_one(
    services: Services, q: StagingQueue, selector: Selector, m: QueuedMessage, report: ReplayReport
) -> bool:
    """Replay one received poison message if it is selected and valid; True if it left poison.

    The rejected status row is read before the send and turned back to ``staged`` only if it
    is unchanged after it: a writer that rejects the replayed batch again in between wins.
    """
    body = m.body
    parked = read_message(q, m.id, m.inserted, body)
    if not selector.matches(parked):
        if report.shown(parked.stream):
            report.skipped += 1
        return False
    if not parked.valid or parked.stream is None or parked.batch_id is None:
        report.invalid.append(parked)
        return False
    if report.replayed_already(parked):
        report.repeated += 1
        return False
    table = services.batch_table
    etag = table.rejected(parked.stream, parked.batch_id)
    q.staging.send(body)  # fresh (dequeue count 0), never expires
    _delete(q.poison, m)
    if etag is not None:
        table.unreject(parked.stream, parked.batch_id, etag)
    report.add_replayed(parked)
    return True


def _delete(queue: MessageQueue, m: QueuedMessage) -> None:
    try:
        queue.delete(m)
    except VaultError:
        pass  # it reappears in poison: a second copy, which a later replay appends at most once


def _release(queue: MessageQueue, messages: list[QueuedMessage]) -> None:
    for m in messages:
        try:
            queue.hide(m, 0)
        except VaultError:
            pass  # visible again anyway after REPLAY_VISIBILITY
