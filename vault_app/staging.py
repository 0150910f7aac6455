"""Staging producer batches durably in the sharded queues, and tracking batch status.

A batch's status row (table ``<prefix>batches``, PartitionKey = batch id) says ``staged``
(or ``rejected`` once the writer gives up on it). "Committed" is not stored here: it is read
from the stream's own batch index, which the commit itself writes.

Order of a POST: queue message (claim-check blob first if large) → status row → 202. A retried
POST with the same batch id finds the row and does not stage again; if the first attempt died
before the row, it stages again and the writer's batch-id check drops whichever copy is second.
"""

from __future__ import annotations

import hashlib
import logging
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from azure.core.exceptions import ResourceNotFoundError
from azure.data.tables import UpdateMode

from vault_app import envelope
from vault_app.http import HttpError
from vault_app.services import Services
from vault_app.telemetry import event
from vault_core.azure import translate_errors
from vault_core.errors import StorageUnavailable, StreamNotFound, VaultError
from vault_core.format import NewMessage
from vault_core.names import validate_batch_id

log = logging.getLogger("vault_app.staging")
T = TypeVar("T")

STAGED, REJECTED, COMMITTED = "staged", "rejected", "committed"


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

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


def batch_id_for(stream: str, idempotency_key: str | None, producer_batch_id: str | None) -> str:
    """The producer's id, or one derived from its Idempotency-Key, or a fresh one."""
    if producer_batch_id is not None:
        return validate_batch_id(producer_batch_id)
    if idempotency_key:
        return hashlib.sha256(f"{stream}\n{idempotency_key}".encode()).hexdigest()[:32]
    return uuid.uuid4().hex


def with_retries(op: Callable[[], T], attempts: int = 4, base: float = 0.2) -> T:
    """Retry throttling (503/500) and connection errors with exponential back-off and jitter."""
    for attempt in range(attempts):
        try:
            return op()
        except StorageUnavailable:
            if attempt == attempts - 1:
                raise
            time.sleep(base * (2**attempt) * (0.5 + random.random()))
    raise AssertionError("unreachable")


class Stager:
    def __init__(self, services: Services, clock: Callable[[], int] | None = None) -> None:
        self.services = services
        self.clock = clock or (lambda: time.time_ns() // 1_000_000)

    def committed_status(self, stream: str, batch_id: str) -> BatchStatus | None:
        """The batch's offsets if it is committed to ``stream`` (needs no status row)."""
        committed = self.services.vault.index.committed_batches(stream, [batch_id]).get(batch_id)
        if committed is None:
            return None
        return BatchStatus(
            batch_id,
            stream,
            COMMITTED,
            committed.count,
            committed.first_offset,
            committed.next_offset,
            committed.timestamp,
        )

    def status(self, batch_id: str) -> BatchStatus | None:
        with translate_errors():
            try:
                row = self.services.batches.get_entity(batch_id, "")
            except ResourceNotFoundError:
                return None
        stream = str(row["Stream"])
        committed = self.committed_status(stream, batch_id)
        if committed:
            return committed
        state = str(row.get("State", STAGED))
        return BatchStatus(
            batch_id,
            stream,
            REJECTED if state == REJECTED else STAGED,
            int(row.get("Count", 0)),
            reason=row.get("Reason"),
        )

    def stage(
        self, stream: str, batch_id: str, messages: list[NewMessage], *, check_existing: bool
    ) -> BatchStatus:
        """Durably stage a batch; returns once it is in a queue (never before).

        ``check_existing`` (the producer named the batch) makes a retry stage it once: a status
        row means it was staged before. Without a producer id the id is fresh and needs no check.
        """
        if check_existing:
            existing = self._row(batch_id)
            if existing is not None:
                if existing.get("Stream") != stream:
                    raise HttpError(
                        409,
                        "conflict",
                        f"batch id {batch_id} was already used for stream {existing.get('Stream')!r}",
                    )
                found = self.status(batch_id)
                assert found is not None
                return found
        started = time.monotonic()
        now = self.clock()
        size = sum(len(m.value) for m in messages)
        claimed = size + 40 * len(messages) > envelope.INLINE_LIMIT  # cheap bound before encoding
        if not claimed:
            text = envelope.encode_messages(batch_id, stream, now, messages)
            claimed = len(text) > envelope.INLINE_LIMIT
        if claimed:
            blob = f"{batch_id}.records"
            body = envelope.encode_claim_body(messages, now)
            with_retries(lambda: self._upload_claim(blob, body))
            text = envelope.encode_claim(batch_id, stream, now, blob, len(messages))
        queue = self.services.queue_for(stream)
        with_retries(lambda: self._send(queue.client, text))
        # The status row comes after the queue message: a row always means "staged". If writing
        # it fails the batch is staged all the same (a retry would be dropped as a duplicate).
        try:
            self._put_row(batch_id, stream, STAGED, len(messages), now)
        except VaultError as exc:
            log.warning("batch %s staged, but its status row was not written: %s", batch_id, exc)
        event(
            log,
            "staged",
            stream=stream,
            batch_id=batch_id,
            messages=len(messages),
            bytes=size,
            queue=queue.name,
            account=queue.account,
            claim_check=claimed,
            duration_ms=round((time.monotonic() - started) * 1000, 1),
        )
        return BatchStatus(batch_id, stream, STAGED, len(messages))

    def reject(self, batch_id: str, stream: str, reason: str) -> None:
        with translate_errors():
            self.services.batches.upsert_entity(
                {
                    "PartitionKey": batch_id,
                    "RowKey": "",
                    "Stream": stream,
                    "State": REJECTED,
                    "Reason": reason[:1000],
                },
                mode=UpdateMode.MERGE,
            )

    def _row(self, batch_id: str) -> dict[str, Any] | None:
        with translate_errors():
            try:
                return dict(self.services.batches.get_entity(batch_id, ""))
            except ResourceNotFoundError:
                return None

    def _put_row(self, batch_id: str, stream: str, state: str, count: int, now: int) -> None:
        row = {
            "PartitionKey": batch_id,
            "RowKey": "",
            "Stream": stream,
            "State": state,
            "Count": count,
            "StagedMs": str(now),
        }

        def put() -> None:
            with translate_errors(stream):
                self.services.batches.upsert_entity(row, mode=UpdateMode.REPLACE)

        with_retries(put)

    def _upload_claim(self, blob: str, body: bytes) -> None:
        with translate_errors():
            self.services.claimcheck.upload_blob(blob, body, overwrite=True)

    @staticmethod
    def _send(client: Any, text: str) -> None:
        try:
            with translate_errors():
                # Never expire (the service default is 7 days): a staged batch waits for its writer.
                client.send_message(text, time_to_live=-1)
        except StreamNotFound as exc:  # infrastructure missing: the service is unavailable
            raise StorageUnavailable(f"staging queue {client.queue_name!r} does not exist") from exc
