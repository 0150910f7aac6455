"""Staging a producer's batch durably in its stream's queue: the HTTP tier's half of ingest.

Order of a POST (docs/ARCHITECTURE.md "Ingest"): reserve the batch id in the status table
(:mod:`vault_app.batches`), upload the claim-check blob if the batch needs one
(:mod:`vault_app.claimcheck`), send the queue message, mark the row ``staged``, answer 202.
Nothing is acknowledged before the queue message is stored, and the row that answers
``GET .../batches/{id}`` exists before the 202.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from vault_app import telemetry
from vault_app.batches import STAGED, BatchStatus, digest
from vault_app.services import Services, StagingQueue
from vault_app.steering import send_steered
from vault_app.telemetry import event
from vault_core.errors import VaultError
from vault_core.recordformat import NewMessage
from vault_core.retry import with_retries

log = logging.getLogger("vault_app.staging")


class Stager:
    def __init__(
        self,
        services: Services,
        clock: Callable[[], int] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.services = services
        self.clock = clock or (lambda: time.time_ns() // 1_000_000)
        self.sleep = sleep
        """How a send waits between its attempts on a busy queue (vault_app.steering)."""

    def stage(self, stream: str, batch_id: str, messages: list[NewMessage]) -> BatchStatus:
        """Durably stage a batch; returns once it is in a queue (never before).

        A batch id that was staged before answers as it did then (the batch is not staged
        twice); one that names other messages raises ``IdempotencyMismatch``.
        """
        with telemetry.current().staging(stream, batch_id) as span:
            return self._stage(stream, batch_id, messages, span)

    def _stage(
        self, stream: str, batch_id: str, messages: list[NewMessage], span: telemetry.Span
    ) -> BatchStatus:
        started = time.monotonic()
        now = self.clock()
        table = self.services.batch_table
        earlier = table.reserve(stream, batch_id, digest(messages), len(messages), now)
        if earlier is not None:
            span.set(earlier=earlier.status)  # staged before: answered as then, not staged again
            return earlier
        text, claimed = self.services.claims.queue_text(batch_id, stream, now, messages, span.traceparent)
        queue = self._send(stream, text)
        span.set(messages=len(messages), queue=queue.name, account=queue.account, claim_check=claimed)
        try:
            table.mark_staged(stream, batch_id)
        except VaultError as exc:  # staged all the same: the row says "staging" until it commits
            log.warning("batch %s staged, but its status row still says staging: %s", batch_id, exc)
        event(
            log,
            "staged",
            stream=stream,
            batch_id=batch_id,
            messages=len(messages),
            bytes=sum(len(m.value) for m in messages),
            queue=queue.name,
            account=queue.account,
            claim_check=claimed,
            duration_ms=round((time.monotonic() - started) * 1000, 1),
        )
        return BatchStatus(batch_id, stream, STAGED, len(messages))

    def _send(self, stream: str, text: str) -> StagingQueue:
        """Put the envelope on the stream's first healthy queue (vault_app.steering)."""
        queues = self.services.queues
        index = send_steered(
            self.services.steering,
            stream,
            lambda i: queues[i].staging.send(text, retry=False),
            retry_alone=lambda i: with_retries(lambda: queues[i].staging.send(text)),
            sleep=self.sleep,
        )
        return queues[index]
