"""What the app records (batches staged, appended, committed, handed back, poisoned), as an
interface whose default implementation records nothing: :mod:`vault_app.telemetry` picks the
implementation (:mod:`vault_app.otel` when Application Insights is configured)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class Commit:
    """One batch of an append, as telemetry sees it once the commit is durable."""

    batch_id: str | None
    trace: str | None
    """The ``traceparent`` of the POST that staged it (None: staged without telemetry)."""
    received_ms: int
    count: int
    first_offset: int
    next_offset: int
    duplicate: bool


class Span:
    """A span the app code holds while it works; this one records nothing."""

    @property
    def traceparent(self) -> str | None:
        """The span's W3C ``traceparent``, for a staging envelope to carry (None: nothing to carry)."""
        return None

    def set(self, **attributes: str | int | float | bool) -> None:
        """Add attributes (named without the ``vault.`` prefix the spans give them)."""


class Telemetry:
    """Spans and metrics of the app: every method does nothing here (telemetry off);
    :class:`vault_app.otel.OtelTelemetry` records them."""

    enabled = False

    @contextmanager
    def staging(self, stream: str, batch_id: str) -> Iterator[Span]:
        """The HTTP tier stages one batch (the POST): a span whose context the envelope carries."""
        yield _NO_SPAN

    @contextmanager
    def writing(self, queue: str, account: int) -> Iterator[Span]:
        """One writer invocation of a staging queue."""
        yield _NO_SPAN

    def link(self, traceparent: str | None) -> None:
        """Link the current span to a staged batch's POST (the trigger message of a writer)."""

    @contextmanager
    def appending(self, stream: str, traces: Sequence[str | None]) -> Iterator[Span]:
        """The append and commit of a stream's coalesced batches, linked to their POSTs."""
        yield _NO_SPAN

    def appended(self, stream: str, commits: Sequence[Commit], started_ns: int, committed_ns: int) -> None:
        """The batches are durable: per-batch commit spans, message, byte, lag and duration metrics.

        ``started_ns`` and ``committed_ns`` are ``time.time_ns()`` before the append and after
        its commit."""

    def requeued(self, queue: str, account: int, reason: str, count: int = 1) -> None:
        """Batches handed back to their queue for later (``reason``: why)."""

    def poisoned(self, queue: str, account: int, stream: str | None) -> None:
        """A batch rejected and parked in the queue's poison queue."""

    def trace_id(self) -> str | None:
        """The current span's trace id (hex), for log lines to name; None when there is none."""
        return None

    def flush(self, timeout_seconds: float) -> None:
        """Export what is pending (a process about to end without ``atexit``)."""


_NO_SPAN = Span()
