"""What the app tells operators: structured log lines, and (when configured) traces and metrics.

**Log lines.** :func:`event` writes one JSON line per event through the standard ``logging``
module. The Functions host forwards ``logging`` records to Application Insights (``traces``),
so a Kusto query can ``parse_json(message)`` them (stream, batch ids, messages, bytes, timings).

**Traces and metrics** (docs/OPERATING.md) are on only when ``APPLICATIONINSIGHTS_CONNECTION_STRING``
is set: then :mod:`vault_app.otel` starts the Azure Monitor OpenTelemetry distro, with the first
call of :func:`current` in a process (the first invocation), not at import, so a process that
imports the app without running it (the local host's own) starts nothing. Without the setting,
:func:`current` is the do-nothing :class:`Telemetry` below and nothing of OpenTelemetry is ever
imported: the cost is one attribute read per call.

The POST's span context travels to the writer inside the staging envelope (``tp``, a W3C
``traceparent``), so each batch's commit span continues the trace of the POST that staged it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

CONNECTION_SETTING = "APPLICATIONINSIGHTS_CONNECTION_STRING"

log = logging.getLogger("vault_app.telemetry")


@dataclass(frozen=True)
class Commit:
    """One batch of an append, as telemetry sees it once the commit is durable."""

    batch_id: str | None
    trace: str | None
    """The ``traceparent`` of the POST that staged it (None: staged without telemetry)."""
    staged_ms: int
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
OFF = Telemetry()
_active: Telemetry | None = None
_lock = threading.Lock()


def current() -> Telemetry:
    """The process's telemetry: started on first use if the setting is present, else :data:`OFF`."""
    active = _active
    if active is None:
        active = _start_once()
    return active


def use(telemetry: Telemetry | None) -> None:
    """Replace the process's telemetry (tests: one with in-memory exporters); None starts over
    from the environment on the next :func:`current`."""
    global _active
    with _lock:
        _active = telemetry


def _start_once() -> Telemetry:
    global _active
    with _lock:
        if _active is None:
            _active = _start()
        return _active


def _start() -> Telemetry:
    if not os.environ.get(CONNECTION_SETTING, "").strip():
        return OFF
    try:
        from vault_app import otel  # only here: without the setting, OpenTelemetry is never imported

        return otel.start()
    except Exception:  # telemetry must never stop the app: run without it, and say so
        log.exception("telemetry could not start; the app runs without traces and metrics")
        return OFF


def flush(timeout_seconds: float) -> None:
    """Export pending spans and metrics, if telemetry has started in this process: for a process
    about to end without ``atexit`` (the local host's workers end with ``os._exit``)."""
    active = _active
    if active is not None:
        active.flush(timeout_seconds)


def event(logger: logging.Logger, name: str, **fields: Any) -> None:
    """One JSON log line; with telemetry on, it names the trace it belongs to (``trace``)."""
    trace = current().trace_id()
    if trace is not None:
        fields["trace"] = trace
    logger.info("%s", json.dumps({"event": name, **fields}, separators=(",", ":")))
