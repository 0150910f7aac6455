"""The producer: buffers messages, sends them in batches from background threads, retries safely.

::

    with Producer("http://127.0.0.1:7071/api", key) as producer:
        result = producer.send("orders", '{"total": 42}', key="order-1")
    result.result()            # Delivery(batch_id=..., status="staged")
    result.wait_committed()    # Delivery(..., status="committed", offset=...)

A batch is cut when it holds ``batch_max_messages`` messages or ``batch_max_bytes`` of body,
or when its first message has waited ``linger`` seconds. Each batch gets an
``Idempotency-Key`` when it is cut; retries (429, any 5xx, a connection refused or dropped)
reuse it, so a batch whose answer was lost is staged once however often it is sent.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal

from vault_client.api import DEFAULT_TIMEOUT, ApiClient
from vault_client.auth import TokenCredential
from vault_client.batching import Accumulator, OpenBatch
from vault_client.errors import BufferFull, ProducerClosed
from vault_client.results import SendResult
from vault_client.retry import RetryPolicy
from vault_client.wire import batch_body, encode_message
from vault_core import limits
from vault_core.errors import MessageTooLarge
from vault_core.names import validate_stream_name
from vault_core.recordformat import HEADER_SIZE, MAX_KEY_BYTES, MAX_VALUE_BYTES

YIELD_EVERY = 64
"""send() offers the GIL to the sender threads this often (see send)."""
MIN_BATCH_BYTES = 1024
MAX_LINGER_SECONDS = 60.0
MAX_IN_FLIGHT = 64
"""Sender threads at most: past a few, more threads only wait on the same connections."""
"""The smallest ``batch_max_bytes`` a producer takes (1 KiB); the largest is the API's MAX_BATCH_BYTES."""


@dataclass(frozen=True)
class ProducerStats:
    messages: int
    """Messages the server accepted."""
    batches: int
    bytes: int
    """Body bytes of the accepted batches."""
    failed: int
    """Messages whose batch failed for good (their results carry the error)."""
    retries: int
    buffered_bytes: int


class Producer:
    """Thread-safe: any number of threads may call :meth:`send`."""

    def __init__(
        self,
        url: str | None = None,
        key: str | None = None,
        *,
        api: ApiClient | None = None,
        token: str | None = None,
        credential: TokenCredential | None = None,
        scope: str | None = None,
        batch_max_messages: int = 1000,
        batch_max_bytes: int = 1024 * 1024,
        linger: float = 0.05,
        max_buffer_bytes: int = 64 * 1024 * 1024,
        on_full: Literal["block", "raise"] = "block",
        block_timeout: float | None = None,
        max_in_flight: int = 1,
        ordered: bool = True,
        wait: float = 0.0,
        retry: RetryPolicy | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        """Producer for the vault at ``url`` with a function ``key``, a bearer ``token``, or a
        ``credential`` and its ``scope`` (see :class:`ApiClient`), or an existing ``api`` client.

        ``max_in_flight`` sender threads post batches concurrently; with ``ordered`` (the
        default) at most one batch per stream is in flight, so a stream's batches are staged
        in the order they were sent. ``wait`` (0-60 s) asks the server to answer only once a
        batch is committed, so every result carries its offset (at the cost of throughput).
        A full buffer (``max_buffer_bytes``) blocks :meth:`send` (up to ``block_timeout``) or
        raises :class:`BufferFull` at once, as ``on_full`` says.
        """
        if api is None and url is None:
            raise ValueError("give the vault's url (and key) or an ApiClient")
        if not 1 <= batch_max_messages <= limits.MAX_BATCH_MESSAGES:
            raise ValueError(f"batch_max_messages must be 1-{limits.MAX_BATCH_MESSAGES}")
        if not MIN_BATCH_BYTES <= batch_max_bytes <= limits.MAX_BATCH_BYTES:
            raise ValueError(f"batch_max_bytes must be 1 KiB-{limits.MAX_BATCH_BYTES} bytes")
        if not 0 <= linger <= MAX_LINGER_SECONDS:
            raise ValueError(f"linger must be 0-{MAX_LINGER_SECONDS:g} seconds")
        if not 1 <= max_in_flight <= MAX_IN_FLIGHT:
            raise ValueError(f"max_in_flight must be 1-{MAX_IN_FLIGHT}")
        if not 0 <= wait <= limits.MAX_WAIT_SECONDS:
            raise ValueError(f"wait must be 0-{limits.MAX_WAIT_SECONDS} seconds")
        if on_full not in ("block", "raise"):
            raise ValueError('on_full must be "block" or "raise"')
        self._owns_api = api is None
        self.api = api or ApiClient(
            str(url), key, token=token, credential=credential, scope=scope, timeout=timeout, retry=retry
        )
        self.wait = wait
        self.ordered = ordered
        self.max_buffer_bytes = max_buffer_bytes
        self.on_full = on_full
        self.block_timeout = block_timeout
        self._acc = Accumulator(batch_max_messages, batch_max_bytes, linger, self._batch_status)
        # send() takes the bare lock (a C-level context manager, cheaper per message than the
        # Condition's Python-level one); waiting and notifying go through the Condition on it.
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._busy: set[str] = set()
        self._inflight = 0
        self._flushing = 0
        self._closing = False
        self._closed = False
        self._known_streams: set[str] = set()
        self._sent_since_yield = 0
        self._sent_messages = self._sent_batches = self._sent_bytes = self._failed = 0
        self.last_error: BaseException | None = None
        """The error that failed the most recent failed batch (each result carries its own)."""
        self._threads = [
            threading.Thread(target=self._run, name=f"vault-producer-{i}", daemon=True)
            for i in range(max_in_flight)
        ]
        for t in self._threads:
            t.start()

    # -- the caller's side -------------------------------------------------------------------
    def send(self, stream: str, value: bytes | str, key: bytes | str | None = None) -> SendResult:
        """Buffer one message for ``stream``; returns at once (unless the buffer is full)."""
        if stream not in self._known_streams:
            validate_stream_name(stream)
            self._known_streams.add(stream)
        fragment, key_len, value_len = encode_message(value, key)
        if key_len > MAX_KEY_BYTES:
            raise MessageTooLarge(f"key is {key_len} bytes; the maximum is {MAX_KEY_BYTES}")
        if value_len > MAX_VALUE_BYTES:
            raise MessageTooLarge(f"value is {value_len} bytes; the maximum is {MAX_VALUE_BYTES}")
        with self._lock:
            if self._closing:
                raise ProducerClosed("the producer is closed")
            if self._acc.buffered_bytes + len(fragment) > self.max_buffer_bytes:
                self._make_room(len(fragment))
            batch, delta, cut = self._acc.add(
                stream, fragment, HEADER_SIZE + key_len + value_len, time.monotonic()
            )
            index = batch.count - 1
            if cut or batch.count == 1:  # a sender may have a batch to take, or a new linger deadline
                self._cv.notify()
            self._sent_since_yield += 1
            yield_now = self._sent_since_yield >= YIELD_EVERY
        if yield_now:
            # A caller sending in a tight loop holds the GIL; a sender whose response just arrived
            # would wait up to the interpreter's switch interval (5 ms) for it, per socket read.
            # sleep(0) hands the GIL over now, so posting overlaps with encoding instead.
            self._sent_since_yield = 0
            time.sleep(0)
        return SendResult(batch.outcome, delta, index)

    def _make_room(self, size: int) -> None:
        acc = self._acc
        if acc.buffered_bytes == 0 or acc.buffered_bytes + size <= self.max_buffer_bytes:
            return
        if self.on_full == "raise":
            raise BufferFull(
                f"the producer buffer holds {acc.buffered_bytes} bytes (max_buffer_bytes "
                f"{self.max_buffer_bytes}); wait for results or flush()"
            )
        acc.cut_due(time.monotonic(), force=True)  # lingering makes no sense with a full buffer
        self._cv.notify_all()
        if not self._cv.wait_for(
            lambda: (
                self._closing or acc.buffered_bytes == 0 or acc.buffered_bytes + size <= self.max_buffer_bytes
            ),
            self.block_timeout,
        ):
            raise BufferFull(f"the producer buffer stayed full for {self.block_timeout}s")
        if self._closing:
            raise ProducerClosed("the producer was closed while send() waited for buffer space")

    def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered now (ignoring linger) and wait until every batch is answered."""
        with self._cv:
            self._flushing += 1
            self._cv.notify_all()
            try:
                done = self._cv.wait_for(lambda: self._acc.empty and self._inflight == 0, timeout)
            finally:
                self._flushing -= 1
        if not done:
            raise TimeoutError(f"flush did not finish within {timeout}s")

    def close(self, timeout: float | None = None) -> None:
        """Flush, stop the sender threads and release the connection pool. Idempotent."""
        if self._closed:
            return
        try:
            self.flush(timeout)
        finally:
            with self._cv:
                self._closing = True
                self._cv.notify_all()
            for t in self._threads:
                t.join(timeout)
            if self._owns_api:
                self.api.close()
            self._closed = True

    def _batch_status(self, stream: str, batch_id: str) -> dict[str, Any]:
        """A batch's status for SendResult.wait_committed, which may run after close()."""
        if not (self._closed and self._owns_api):
            return self.api.batch(batch_id, stream)
        with self.api.copy() as api:
            return api.batch(batch_id, stream)

    def stats(self) -> ProducerStats:
        with self._cv:
            return ProducerStats(
                self._sent_messages,
                self._sent_batches,
                self._sent_bytes,
                self._failed,
                self.api.retries,
                self._acc.buffered_bytes,
            )

    def __enter__(self) -> Producer:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- the senders' side -------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cv:
                batch = self._take()
                while batch is None:
                    if self._closing and self._acc.empty:
                        return
                    deadline = self._acc.next_deadline()
                    self._cv.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
                    batch = self._take()
            try:
                self._send(batch)
            finally:
                with self._cv:
                    self._busy.discard(batch.stream)
                    self._acc.release(batch)
                    self._inflight -= 1
                    self._cv.notify_all()

    def _take(self) -> OpenBatch | None:
        # Called under the lock. Flushing and closing send open batches without lingering.
        self._acc.cut_due(time.monotonic(), force=self._flushing > 0 or self._closing)
        batch = self._acc.take(self._busy if self.ordered else set())
        if batch is not None:
            self._inflight += 1
            if self.ordered:
                self._busy.add(batch.stream)
        return batch

    def _send(self, batch: OpenBatch) -> None:
        body = batch_body(batch.fragments)
        batch.fragments = []  # the body holds the bytes now; do not keep them twice
        try:
            ack: dict[str, Any] = self.api.produce(
                batch.stream, body, idempotency_key=batch.idempotency_key, wait=self.wait
            )
        except Exception as exc:  # every failure must reach the messages' results, never kill the sender
            with self._cv:
                self._failed += batch.count
                self.last_error = exc
            batch.outcome.fail(exc)
            return
        with self._cv:
            self._sent_messages += batch.count
            self._sent_batches += 1
            self._sent_bytes += len(body)
        batch.outcome.log_bytes = batch.log_bytes
        batch.outcome.resolve(ack)
