"""What ``Producer.send`` returns: a future-like handle on one message's fate.

Results of one batch share one :class:`BatchOutcome` (one event per batch, not per message).
Every message gets its exact offset from the one batch answer, without reading the stream. In
format 2 (docs/FORMAT.md §11.6) offsets depend on how the writer cut the batch into compressed
units, and the answer says how: its ``pieces``, ``[offset, count]`` runs of consecutive offsets,
one per unit the batch spans. In format 1 (an answer without pieces) a message's offset is the
batch's first offset plus the record sizes (header + key + value) of the messages before it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vault_client.errors import ApiError
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


def batch_status(answer: dict[str, Any]) -> dict[str, Any]:
    """``answer`` if it is a batch's status (a string ``batch_id`` and ``status``), else an
    :class:`ApiError`: a message's result never shows a missing id as the text "None"."""
    if isinstance(answer.get("batch_id"), str) and isinstance(answer.get("status"), str):
        return answer
    raise ApiError(200, "bad_answer", f"the vault's answer is not a batch status: {str(answer)[:200]}")


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
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []

    def resolve(self, ack: dict[str, Any]) -> None:
        try:
            self.ack = batch_status(ack)
        except ApiError as exc:
            self.error = exc
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

    def update(self, ack: dict[str, Any]) -> None:
        """A later status (``committed`` after polling) replaces the first answer."""
        checked = batch_status(ack)
        with self._lock:
            self.ack = checked


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
        pieces = ack.get("pieces")
        span = None if first is None or nxt is None else int(nxt) - int(first)
        records = outcome.log_bytes  # what the batch takes as format 1 records
        if pieces is not None:  # format 2 units
            offset = offset_in_pieces(pieces, self._index)
        elif span is not None and records is not None and span != records:
            offset = None  # not format 1 records, and the answer does not say where units put it
        return Delivery(
            stream=outcome.stream,
            batch_id=ack["batch_id"],
            status=ack["status"],
            offset=offset,
            timestamp=ack.get("timestamp"),
        )


def offset_in_pieces(pieces: list[list[int]], index: int) -> int | None:
    """The offset of a batch's message ``index`` from the batch's ``pieces`` (docs/API.md)."""
    for offset, count in pieces:
        if index < count:
            return int(offset) + index
        index -= count
    return None
