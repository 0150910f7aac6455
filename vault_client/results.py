"""What ``Producer.send`` returns: a future-like handle on one message's fate.

Results of one batch share one :class:`BatchOutcome` (one event per batch, not per message).
A message's offset is its batch's first offset plus the record sizes of the messages before
it in the batch: the client knows those sizes (header + key + value), so every message gets
its exact offset from the one batch answer. That holds for format 1 records. In format 2
(docs/FORMAT.md §11.6) offsets depend on how the writer cut the batch into compressed units,
which the answer does not say: when the batch's bytes are not its records' sizes, the offsets
are read back once per batch (one read of its messages) and shared by its results.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vault_client.errors import Unauthorized
from vault_core.retry import poll as poll_until

COMMITTED = "committed"
REJECTED = "rejected"


@dataclass(frozen=True)
class Delivery:
    """A message's fate as far as the server has told us."""

    stream: str
    batch_id: str
    status: str
    """``staged`` (durable in a staging queue) or ``committed`` (in the log, with an offset)."""
    offset: int | None = None
    timestamp: int | None = None


class BatchOutcome:
    """The server's answer for one batch (or the error that ended it), shared by its messages."""

    def __init__(self, stream: str, status: Callable[[str, str], dict[str, Any]]) -> None:
        self.stream = stream
        self.status = status
        """Looks up a batch's current status by stream and id, for wait_committed."""
        self.ack: dict[str, Any] | None = None
        self.error: BaseException | None = None
        self.log_bytes: int | None = None
        """What the batch's records take in format 1 (set when it is sent)."""
        self.read_offsets: Callable[[str, int, int], list[int]] | None = None
        """Reads the offsets of ``count`` messages from a first offset (for a format 2 batch)."""
        self._offsets: list[int] | None = None
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []

    def resolve(self, ack: dict[str, Any]) -> None:
        self.ack = ack
        self._finish()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self._finish()

    def _finish(self) -> None:
        with self._lock:
            self._done.set()
            callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            cb()

    def on_done(self, cb: Callable[[], None]) -> None:
        with self._lock:
            if not self._done.is_set():
                self._callbacks.append(cb)
                return
        cb()

    def wait(self, timeout: float | None) -> bool:
        return self._done.wait(timeout)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def message_offsets(self, first: int, count: int) -> list[int] | None:
        """The offsets of the batch's messages, read back once (None if they cannot be read).

        A producer that may write the stream but not read it cannot read them back: its
        committed results carry no offset rather than failing a batch that was written."""
        if self._offsets is None and self.read_offsets is not None:
            try:
                self._offsets = self.read_offsets(self.stream, first, count)
            except Unauthorized:
                self.read_offsets = None
        return self._offsets

    def update(self, ack: dict[str, Any]) -> None:
        """A later status (``committed`` after polling) replaces the first answer."""
        with self._lock:
            self.ack = ack


class SendResult:
    """Future-like result of :meth:`Producer.send`."""

    # One of these per message: two slots and no per-message event keep send() cheap.
    __slots__ = ("_delta", "_index", "_outcome")

    def __init__(self, outcome: BatchOutcome, delta: int, index: int = 0) -> None:
        self._outcome = outcome
        self._delta = delta  # bytes of the records before this message in its batch (format 1)
        self._index = index  # messages before it in its batch

    def done(self) -> bool:
        return self._outcome.done

    @property
    def batch_id(self) -> str | None:
        """The server's id of this message's batch, once it answered."""
        ack = self._outcome.ack
        return str(ack["batch_id"]) if ack else None

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if not self._outcome.wait(timeout):
            raise TimeoutError("the message's batch was not answered in time")
        return self._outcome.error

    def result(self, timeout: float | None = None) -> Delivery:
        """Wait for the batch's answer; raise the error that failed it, if one did."""
        error = self.exception(timeout)
        if error is not None:
            raise error
        return self._delivery()

    def wait_committed(self, timeout: float = 30.0, poll: float = 0.05) -> Delivery:
        """Wait until the message is in the log and return it with its offset.

        Polls ``GET /streams/{stream}/batches/{id}`` (once per batch, whichever of its messages
        asks first).
        """
        deadline = time.monotonic() + timeout
        answered = [self.result(timeout)]  # the POST's answer is the first status: no request for it

        def status() -> Delivery:
            if answered:
                return answered.pop()
            outcome = self._outcome
            outcome.update(outcome.status(outcome.stream, str((outcome.ack or {}).get("batch_id"))))
            return self._delivery()

        settled = (COMMITTED, REJECTED)
        left = max(0.0, deadline - time.monotonic())
        delivery = poll_until(status, lambda d: d.status in settled, left, first=poll, each_within=None)
        if delivery.status == REJECTED:
            raise RuntimeError(
                f"batch {delivery.batch_id} was rejected by the writer: "
                f"{(self._outcome.ack or {}).get('reason', 'no reason given')}"
            )
        if delivery.status != COMMITTED:
            raise TimeoutError(f"batch {delivery.batch_id} was not committed within {timeout}s")
        return delivery

    def add_done_callback(self, fn: Callable[[SendResult], None]) -> None:
        self._outcome.on_done(lambda: fn(self))

    def _delivery(self) -> Delivery:
        outcome = self._outcome
        ack = outcome.ack or {}
        first, nxt = ack.get("first_offset"), ack.get("next_offset")
        offset = None if first is None else int(first) + self._delta
        records = outcome.log_bytes  # what the batch takes as format 1 records
        if first is not None and nxt is not None and records is not None and int(nxt) - int(first) != records:
            # not format 1 records: format 2 units, whose offsets only the log can tell
            offsets = outcome.message_offsets(int(first), int(ack.get("count") or 0))
            offset = offsets[self._index] if offsets and self._index < len(offsets) else None
        return Delivery(
            stream=outcome.stream,
            batch_id=str(ack.get("batch_id")),
            status=str(ack.get("status")),
            offset=offset,
            timestamp=ack.get("timestamp"),
        )
