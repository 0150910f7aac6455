"""Batch identity and status: which id a POST's batch gets, and what a producer can ask about it.

Ids (docs/API.md "Batch ids"): a producer's own ``batch_id`` is kept as it is (``A-Z a-z 0-9 _ -``);
an ``Idempotency-Key`` becomes ``key.<hash of stream and key>``; a batch with neither gets
``auto.<random>``. Only the vault's own ids contain ``.``, so a producer can never name (and so
never take over) a batch that another producer's key named.

Table ``<prefix>batches``, one row per batch, **PartitionKey = batch id, RowKey = stream**: a batch
id belongs to its stream, and the same id on two streams is two batches. Columns:

``State``    ``staging`` (a POST reserved the id; not known to be in a queue yet), ``staged``
             (in a queue: the POST answered 202), or ``rejected`` (the writer gave up; ``Reason``)
``Digest``   SHA-256 of the batch's keys and values: a retry must carry the same batch
``Count``, ``ReceivedMs``, ``Reason``

"Committed" is not stored here: the stream's commit record and batch index say it. A commit
record names the batches it made durable; the writer records them in the index right after, and
always before its next commit record (vault_core.writer). So a committed batch is named by the
latest commit record or by the index, and a status read asks the record first, then the index:
a batch a producer's ``?wait=`` saw committed (from the record) is never "staged" here after.

A committed batch's **pieces** (docs/FORMAT.md §11.6) say where its messages lie when it was
written as format 2 units: ``[offset, count]`` runs of consecutive offsets, one per unit it spans.
A producer computes each message's offset from them without reading the stream. The commit
record carries first and next offsets only, which are the pieces of a batch in one unit (its
offsets are then consecutive); the index's batch row carries them for a batch in several units,
and a status read from the record waits a moment for that row when it needs it.

A POST **reserves** the row with an insert that fails if it exists (never check-then-act), and
answers 202 only after the queue message is sent; the row exists before any 202, so every 202
has a status. A retry that finds ``staging`` (the first attempt died, or is still running)
stages the batch again: both copies carry the same id and the same messages, and the writer
appends whichever comes first and drops the other as a duplicate.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from vault_core.errors import InvalidInput
from vault_core.index import IndexTables
from vault_core.names import validate_producer_batch_id
from vault_core.pagelog import CommittedBatch, Pieces
from vault_core.recordformat import NewMessage
from vault_core.retry import poll, with_retries
from vault_core.rows import Fields, KeyRange, Row, Table

STAGING, STAGED, REJECTED, COMMITTED = "staging", "staged", "rejected", "committed"
REASON_MAX = 1000
BATCH_ROW_WAIT_SECONDS = 2.0
"""How long a status read waits for the index row of a batch the commit record names, when it
needs the row's pieces: the writer records it right after the commit (and before its next one)."""


class IdempotencyMismatch(InvalidInput):
    """The batch id (or Idempotency-Key) was already used for a different batch."""


@dataclass(frozen=True)
class BatchStatus:
    batch_id: str
    stream: str
    status: str
    count: int
    first_offset: int | None = None
    next_offset: int | None = None
    timestamp: int | None = None
    reason: str | None = None
    pieces: list[list[int]] | None = None
    """``[offset, count]`` runs of the batch's message offsets, if it is in format 2 units."""

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}

    @classmethod
    def of_commit(cls, stream: str, batch: CommittedBatch) -> BatchStatus:
        """A committed batch, as the commit record or the stream's ``b`` rows name it."""
        return cls(
            batch.batch_id,
            stream,
            COMMITTED,
            batch.count,
            batch.first_offset,
            batch.next_offset,
            batch.timestamp,
            pieces=[list(p) for p in pieces_known(batch)] or None,
        )


def pieces_known(batch: CommittedBatch) -> Pieces:
    """The batch's pieces as far as ``batch`` alone tells: its own, or the one run of a batch whose
    offsets are consecutive (a batch in one unit: a record is longer than one byte, so never one
    of records); none otherwise (records, or units whose pieces only the index row has)."""
    if batch.pieces:
        return batch.pieces
    if batch.count > 0 and batch.next_offset - batch.first_offset == batch.count:
        return ((batch.first_offset, batch.count),)
    return ()


def batch_id_for(stream: str, idempotency_key: str | None, producer_batch_id: str | None) -> str:
    """The producer's id, or one derived from its Idempotency-Key, or a fresh one."""
    if producer_batch_id is not None:
        return validate_producer_batch_id(producer_batch_id)
    if idempotency_key:
        return "key." + hashlib.sha256(f"{stream}\n{idempotency_key}".encode()).hexdigest()[:40]
    return "auto." + uuid.uuid4().hex


def digest(messages: Sequence[NewMessage]) -> str:
    """What makes two batches the same batch: every key and value, in order (length-prefixed)."""
    h = hashlib.sha256()
    for m in messages:
        key, flags = m.key_bytes()
        h.update(b"%d:%d:%d:" % (flags, len(key), len(m.value)))
        h.update(key)
        h.update(m.value)
    return h.hexdigest()


class BatchTable:
    """The ``<prefix>batches`` table, read together with the stream index for "committed"."""

    def __init__(
        self, table: Table, index: IndexTables, latest_commit: Callable[[str], Sequence[CommittedBatch]]
    ) -> None:
        """``latest_commit(stream)``: the batches the stream's commit record names (none if no blob)."""
        self.table = table
        self.index = index
        self.latest_commit = latest_commit

    def reserve(
        self, stream: str, batch_id: str, batch_digest: str, count: int, now_ms: int
    ) -> BatchStatus | None:
        """Claim ``batch_id`` on ``stream`` for this batch.

        None: the caller must stage it (a new id, or a reservation whose POST never confirmed
        staging). A status: the batch was staged before; that is the answer to give again.
        Raises :class:`IdempotencyMismatch` if the id names a different batch.
        """
        row: Fields = {"State": STAGING, "Digest": batch_digest, "Count": count, "ReceivedMs": now_ms}

        def insert() -> Row | None:
            if self.table.insert(batch_id, stream, row) is not None:
                return None
            # Taken: what is there (a row deleted in between is "none", so the POST stages it).
            return self.table.get(batch_id, stream)

        existing = with_retries(insert)
        if existing is None:
            return None
        # A row without a digest was written by the writer's reject() for a batch staged
        # outside this API: nothing to compare with.
        if existing.get("Digest") not in (None, batch_digest):
            raise IdempotencyMismatch(
                f"batch id {batch_id} was already used on stream {stream!r} for a different batch "
                "(other messages); send a new batch with a new id or Idempotency-Key"
            )
        if existing.get("State") == STAGING:
            return None
        return self._status(batch_id, stream, existing)

    def mark_staged(self, stream: str, batch_id: str) -> None:
        with_retries(lambda: self.table.update(batch_id, stream, {"State": STAGED}))

    def reject(self, stream: str, batch_id: str, reason: str) -> None:
        self.table.upsert(batch_id, stream, {"State": REJECTED, "Reason": reason[:REASON_MAX]})

    def rejected(self, stream: str, batch_id: str) -> str | None:
        """The ETag of the batch's row if it says ``rejected``, else None: what :meth:`unreject` needs."""
        row = self.table.get(batch_id, stream)
        return row.etag if row is not None and row.get("State") == REJECTED else None

    def unreject(self, stream: str, batch_id: str, etag: str) -> bool:
        """A rejected batch replayed from poison is staged again; False if its row changed meanwhile.

        Conditional on ``etag``, read before the replay was sent: if the writer has rejected the
        replayed batch again in the meantime, that newer verdict and its reason stand. Never
        creates a row: one without the batch's digest would make a producer's retry of the
        batch look like a different batch.
        """
        return self.table.update(batch_id, stream, {"State": STAGED, "Reason": ""}, etag=etag) is not None

    def status(self, stream: str, batch_id: str) -> BatchStatus | None:
        """The batch's status on ``stream``: committed (from the index) or its row; None if unknown."""
        committed = self.committed(stream, batch_id)
        if committed is not None:
            return committed
        row = self.table.get(batch_id, stream)
        return None if row is None else self._status(batch_id, stream, row, check_index=False)

    def find(self, batch_id: str, visible: Callable[[str], bool] = lambda stream: True) -> list[BatchStatus]:
        """The batch ``batch_id`` on every ``visible`` stream that has one (usually one stream).

        The streams are filtered before any further lookup, so the work (and the time) spent
        on an id does not depend on the streams that are not visible."""
        return [
            self._status(batch_id, r.key, r) for r in self.table.query(KeyRange(batch_id)) if visible(r.key)
        ]

    def committed(
        self,
        stream: str,
        batch_id: str,
        *,
        row_wait: float = BATCH_ROW_WAIT_SECONDS,
        record: Sequence[CommittedBatch] | None = None,
    ) -> BatchStatus | None:
        """The batch's offsets if it is committed to ``stream`` (needs no status row).

        The commit record before the index: read in the other order, a commit landing in
        between could move the batch out of the record after the index was found without it.
        ``record``: the batches of a commit record the caller has just read (a long poll's), so
        as not to read it again; an older record than the latest can only make the answer come
        at a later check, never a wrong one. A batch the record names whose pieces it cannot
        tell is looked up in the index too, waiting up to ``row_wait`` seconds for the writer to
        record it."""
        batches = self.latest_commit(stream) if record is None else record
        found = next((b for b in batches if b.batch_id == batch_id), None)
        if found is None:
            found = self.index.committed_batches(stream, [batch_id]).get(batch_id)
        elif not pieces_known(found):
            found = self.indexed(stream, found, row_wait) or found
        return None if found is None else BatchStatus.of_commit(stream, found)

    def indexed(self, stream: str, batch: CommittedBatch, wait: float = 0.0) -> CommittedBatch | None:
        """The index's row of a batch a commit record named (with its pieces, if in units),
        polled for up to ``wait`` seconds: the writer records it right after the commit."""
        return poll(
            lambda: self.index.committed_batches(stream, [batch.batch_id]).get(batch.batch_id),
            lambda row: row is not None,
            wait,
        )

    def _status(self, batch_id: str, stream: str, row: Row, *, check_index: bool = True) -> BatchStatus:
        if check_index and (committed := self.committed(stream, batch_id)) is not None:
            return committed
        state = row.text("State", STAGED)
        return BatchStatus(
            batch_id,
            stream,
            state if state in (STAGING, STAGED, REJECTED) else STAGED,
            row.number("Count"),
            reason=(row.text("Reason") or None) if state == REJECTED else None,
        )
