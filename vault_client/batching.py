"""The producer's buffer: messages grouped per stream into batches, cut by count, size or age.

Pure bookkeeping, no threads and no I/O: the producer calls it under its own lock, which
keeps the batching rules testable on their own.
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vault_client.results import BatchOutcome

BODY_OVERHEAD = len(b'{"messages":[]}')


@dataclass(slots=True)
class OpenBatch:
    """Messages of one stream that will travel in one POST."""

    stream: str
    created: float
    """Monotonic time of its first message: the linger clock starts here."""
    outcome: BatchOutcome
    fragments: list[bytes] = field(default_factory=list)
    payload_bytes: int = 0
    """Bytes of the encoded messages: what the batch holds of the producer's memory bound."""
    count: int = 0
    log_bytes: int = 0
    """Bytes its records will take in the log: the offset delta of the next message."""
    idempotency_key: str = field(default_factory=lambda: uuid.uuid4().hex)
    """Chosen once, so every retry of this batch carries the same key and is staged once."""

    @property
    def body_bytes(self) -> int:
        """Size of the POST body: the messages, the commas between them and the envelope."""
        return BODY_OVERHEAD + self.payload_bytes + max(0, self.count - 1)


class Accumulator:
    def __init__(
        self, max_messages: int, max_bytes: int, linger: float, status: Callable[[str, str], dict[str, Any]]
    ) -> None:
        self.status = status
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.linger = linger
        self.open: dict[str, OpenBatch] = {}
        self.ready: deque[OpenBatch] = deque()
        self.buffered_bytes = 0
        """Body bytes accepted and not yet answered (open, ready and in-flight batches)."""

    def add(self, stream: str, fragment: bytes, record_size: int, now: float) -> tuple[OpenBatch, int, bool]:
        """Buffer one encoded message: its batch, its offset delta in it, and whether a batch became ready.

        Runs once per message under the producer's lock, hence the inlined size arithmetic.
        """
        size = len(fragment)
        cut = False
        batch = self.open.get(stream)
        # With this message the body grows by its bytes and one comma: body_bytes + size + 1.
        if batch is not None and BODY_OVERHEAD + batch.payload_bytes + batch.count + size > self.max_bytes:
            self.ready.append(self.open.pop(stream))  # this message would not fit: send the batch as is
            batch, cut = None, True
        if batch is None:
            batch = self.open[stream] = OpenBatch(stream, now, BatchOutcome(stream, self.status))
        delta = batch.log_bytes
        batch.fragments.append(fragment)
        batch.count += 1
        batch.payload_bytes += size
        batch.log_bytes += record_size
        self.buffered_bytes += size
        if batch.count >= self.max_messages or batch.body_bytes >= self.max_bytes:
            self.ready.append(self.open.pop(stream))
            cut = True
        return batch, delta, cut

    def _cut(self, stream: str) -> None:
        self.ready.append(self.open.pop(stream))

    def cut_due(self, now: float, force: bool = False) -> None:
        """Move batches that lingered long enough (or all of them, when forced) to the ready queue."""
        for stream in [s for s, b in self.open.items() if force or now - b.created >= self.linger]:
            self._cut(stream)

    def next_deadline(self) -> float | None:
        """When the oldest open batch's linger time is up (None: nothing open)."""
        return min((b.created + self.linger for b in self.open.values()), default=None)

    def take(self, busy: set[str]) -> OpenBatch | None:
        """The oldest ready batch of a stream not in ``busy`` (which keeps each stream's batches in order)."""
        for i, batch in enumerate(self.ready):
            if batch.stream not in busy:
                del self.ready[i]
                return batch
        return None

    def release(self, batch: OpenBatch) -> None:
        """The batch was answered (or failed): its bytes no longer count against the bound."""
        self.buffered_bytes -= batch.payload_bytes

    @property
    def empty(self) -> bool:
        return not self.open and not self.ready
