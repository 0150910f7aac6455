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
from typing import Any

from vault_app.instruments import Commit, Span, Telemetry

__all__ = ["CONNECTION_SETTING", "Commit", "Span", "Telemetry", "current", "event", "flush", "use"]

CONNECTION_SETTING = "APPLICATIONINSIGHTS_CONNECTION_STRING"

log = logging.getLogger("vault_app.telemetry")


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
