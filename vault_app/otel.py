"""Traces and metrics with OpenTelemetry, exported by the Azure Monitor distro (docs/OPERATING.md).

Imported only by :func:`vault_app.telemetry.current` when ``APPLICATIONINSIGHTS_CONNECTION_STRING``
is set. Spans (all INTERNAL but the POST's, which sends a queue message: PRODUCER):

``vault.stage``   the HTTP tier stages one batch; its context goes into the envelope (``tp``)
``vault.write``   one writer invocation; linked to its trigger batch's POST
``vault.append``  the append and commit of one stream's coalesced batches; linked to each POST
``vault.commit``  one batch made durable: a child of the POST that staged it (so one trace runs
                  from the POST to the commit), linked to its ``vault.append``

Metrics (attribute ``vault.stream``, or ``vault.queue`` and ``vault.account``): see :class:`OtelTelemetry`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from vault_app.instruments import Commit, Span, Telemetry
from vault_core.errors import InvalidInput

INSTRUMENTATION = "vault_app"
SERVICE_NAME = "message-vault"
"""The service (App Insights role) name outside Azure, where there is no WEBSITE_SITE_NAME."""
_W3C = TraceContextTextMapPropagator()

COUNTERS = {  # name: (unit, description); attributes as docs/OPERATING.md says
    "vault.append.messages": ("{message}", "Messages appended to streams (duplicates not counted)"),
    "vault.append.bytes": ("By", "Log bytes appended to streams"),
    "vault.batches.requeued": ("{batch}", "Batches handed back to their queue"),
    "vault.batches.poisoned": ("{batch}", "Batches parked in a poison queue"),
}
HISTOGRAMS = {
    "vault.append.duration": ("ms", "Append of coalesced batches to durable commit"),
    "vault.commit.lag": ("ms", "Staging (the POST; the envelope's ts) to durable commit, per batch"),
}


def start() -> OtelTelemetry:
    """Telemetry on the process's global OpenTelemetry providers, configuring them if nobody has.

    In Azure, the Python worker configures the distro itself when the app setting
    ``PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY`` is true; then its providers are used as
    they are. Otherwise (the default deployment, and the local host) the app configures it.
    """
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        # Log records stay with the Functions host, which already sends them to Application
        # Insights (``traces``): exporting them here as well would write every line twice.
        os.environ.setdefault("OTEL_LOGS_EXPORTER", "none")
        from azure.monitor.opentelemetry import configure_azure_monitor
        from opentelemetry.sdk.resources import Resource

        # Connection string and Entra ID credential (APPLICATIONINSIGHTS_AUTHENTICATION_STRING)
        # come from the environment, as the Functions host reads them. The service name is the
        # app's name, the host's cloud_RoleName, so both land under one role in App Insights.
        service = os.environ.get("WEBSITE_SITE_NAME") or SERVICE_NAME
        configure_azure_monitor(resource=Resource.create({"service.name": service}))
    return OtelTelemetry()


class _OtelSpan(Span):
    def __init__(self, span: trace.Span) -> None:
        self._span = span

    @property
    def traceparent(self) -> str | None:
        carrier: dict[str, str] = {}
        _W3C.inject(carrier, context=trace.set_span_in_context(self._span))
        return carrier.get("traceparent")

    def set(self, **attributes: str | int | float | bool) -> None:
        self._span.set_attributes({f"vault.{k}": v for k, v in attributes.items()})


class OtelTelemetry(Telemetry):
    """Spans and metrics on the given providers (tests: in-memory ones), or the global ones.

    The metrics are :data:`COUNTERS` and :data:`HISTOGRAMS` (docs/OPERATING.md lists them with
    their attributes).
    """

    enabled = True

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
    ) -> None:
        self._tracer_provider = tracer_provider
        self._meter_provider = meter_provider
        self._tracer = trace.get_tracer(INSTRUMENTATION, tracer_provider=tracer_provider)
        meter = metrics.get_meter(INSTRUMENTATION, meter_provider=meter_provider)
        self._counters = {
            name: meter.create_counter(name, unit=unit, description=text)
            for name, (unit, text) in COUNTERS.items()
        }
        self._histograms = {
            name: meter.create_histogram(name, unit=unit, description=text)
            for name, (unit, text) in HISTOGRAMS.items()
        }

    # -- spans -------------------------------------------------------------------------------
    @contextmanager
    def staging(self, stream: str, batch_id: str) -> Iterator[Span]:
        attributes = {"vault.stream": stream, "vault.batch_id": batch_id}
        with self._span("vault.stage", SpanKind.PRODUCER, attributes) as span:
            yield span

    @contextmanager
    def writing(self, queue: str, account: int) -> Iterator[Span]:
        with self._span(
            "vault.write", SpanKind.INTERNAL, {"vault.queue": queue, "vault.account": account}
        ) as s:
            yield s

    def link(self, traceparent: str | None) -> None:
        staged = _span_context(traceparent)
        if staged is not None:
            trace.get_current_span().add_link(staged)

    @contextmanager
    def appending(self, stream: str, traces: Sequence[str | None]) -> Iterator[Span]:
        links = [Link(c) for c in map(_span_context, traces) if c is not None]
        attributes = {"vault.stream": stream, "vault.batches": len(traces)}
        with self._span("vault.append", SpanKind.INTERNAL, attributes, links=links) as span:
            yield span

    def appended(self, stream: str, commits: Sequence[Commit], started_ns: int, committed_ns: int) -> None:
        by_stream = {"vault.stream": stream}
        self._histograms["vault.append.duration"].record((committed_ns - started_ns) / 1e6, by_stream)
        fresh = [c for c in commits if not c.duplicate]
        if fresh:
            self._counters["vault.append.messages"].add(sum(c.count for c in fresh), by_stream)
            self._counters["vault.append.bytes"].add(
                sum(c.next_offset - c.first_offset for c in fresh), by_stream
            )
        committed_ms = committed_ns // 1_000_000
        append = trace.get_current_span().get_span_context()
        links = [Link(append)] if append.is_valid else None
        for c in fresh:
            lag = max(0, committed_ms - c.received_ms)
            self._histograms["vault.commit.lag"].record(lag, by_stream)
            # Under the POST's context when the batch carries one (else under the append).
            parent = _context(c.trace)
            commit = self._tracer.start_span(
                "vault.commit",
                context=parent,
                kind=SpanKind.INTERNAL,
                start_time=started_ns,
                links=links,
                attributes={
                    "vault.stream": stream,
                    "vault.batch_id": c.batch_id or "",
                    "vault.messages": c.count,
                    "vault.first_offset": c.first_offset,
                    "vault.next_offset": c.next_offset,
                    "vault.lag_ms": lag,
                },
            )
            commit.end(end_time=committed_ns)

    # -- metrics -----------------------------------------------------------------------------
    def requeued(self, queue: str, account: int, reason: str, count: int = 1) -> None:
        attributes: dict[str, str | int] = {
            "vault.queue": queue,
            "vault.account": account,
            "vault.reason": reason,
        }
        self._counters["vault.batches.requeued"].add(count, attributes)
        trace.get_current_span().add_event("vault.requeued", {**attributes, "vault.batches": count})

    def poisoned(self, queue: str, account: int, stream: str | None) -> None:
        attributes: dict[str, str | int] = {"vault.queue": queue, "vault.account": account}
        if stream is not None:
            attributes["vault.stream"] = stream
        self._counters["vault.batches.poisoned"].add(1, attributes)
        trace.get_current_span().add_event("vault.poisoned", attributes)

    # -- plumbing ----------------------------------------------------------------------------
    def trace_id(self) -> str | None:
        context = trace.get_current_span().get_span_context()
        return trace.format_trace_id(context.trace_id) if context.is_valid else None

    def flush(self, timeout_seconds: float) -> None:
        millis = int(timeout_seconds * 1000)
        for provider in (
            self._tracer_provider or trace.get_tracer_provider(),
            self._meter_provider or metrics.get_meter_provider(),
        ):
            force_flush = getattr(provider, "force_flush", None)  # the API's no-op providers have none
            if force_flush is not None:
                force_flush(timeout_millis=millis)

    @contextmanager
    def _span(
        self,
        name: str,
        kind: SpanKind,
        attributes: Mapping[str, Any],
        links: Sequence[Link] | None = None,
    ) -> Iterator[Span]:
        with self._tracer.start_as_current_span(
            name,
            kind=kind,
            attributes=attributes,
            links=links,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield _OtelSpan(span)
            except BaseException as exc:
                span.record_exception(exc)
                if not isinstance(exc, InvalidInput):  # the caller's mistake (a 4xx) is no failure here
                    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
                raise


def _context(traceparent: str | None) -> Context | None:
    """The context a staged batch carried; None if it carried none (or a malformed one)."""
    if not traceparent:
        return None
    context = _W3C.extract({"traceparent": traceparent})
    return context if trace.get_current_span(context).get_span_context().is_valid else None


def _span_context(traceparent: str | None) -> trace.SpanContext | None:
    context = _context(traceparent)
    return None if context is None else trace.get_current_span(context).get_span_context()
