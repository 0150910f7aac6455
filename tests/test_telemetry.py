"""Traces and metrics (docs/OPERATING.md): one trace from the POST to the commit, the metrics
per stream, and nothing of OpenTelemetry loaded without APPLICATIONINSIGHTS_CONNECTION_STRING.

The flow is real (the HTTP tier's staging code, Azurite's queue, the writer function's body);
only the exporters are in memory (OpenTelemetry SDK's), not Application Insights.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import isolated_host
from helpers.staged_flow import runtime_on, stage, write_next
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from vault_app import envelope, telemetry
from vault_app.claimcheck import claim_name
from vault_app.open_writers import OpenWriters
from vault_app.otel import COUNTERS, HISTOGRAMS, OtelTelemetry
from vault_app.runtime import Runtime
from vault_app.services import Services
from vault_core.recordformat import NewMessage
from vault_local.azurite import Azurite

HELPERS = Path(__file__).resolve().parent / "helpers"
OPERATING_MD = Path(__file__).resolve().parent.parent / "docs" / "OPERATING.md"


class Recorded:
    """The app's telemetry, recorded in memory for one test."""

    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.metrics = InMemoryMetricReader()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.meter_provider = MeterProvider(metric_readers=[self.metrics])

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans.get_finished_spans() if s.name == name]

    def points(self, metric: str) -> list[Any]:
        """The data points of one metric, across every scope that recorded it."""
        data = self.metrics.get_metrics_data()
        assert data is not None
        return [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for m in scope.metrics
            if m.name == metric
            for point in m.data.data_points
        ]


def test_the_metrics_docs_list_are_the_ones_the_app_creates() -> None:
    rows = re.findall(r"^\| `(vault\.[a-z.]+)` \| (counter|histogram) \|", OPERATING_MD.read_text(), re.M)
    assert sorted(rows) == sorted([(n, "counter") for n in COUNTERS] + [(n, "histogram") for n in HISTOGRAMS])


@pytest.fixture
def recorded() -> Iterator[Recorded]:
    rec = Recorded()
    telemetry.use(OtelTelemetry(rec.tracer_provider, rec.meter_provider))
    try:
        yield rec
    finally:
        telemetry.use(None)
        rec.tracer_provider.shutdown()
        rec.meter_provider.shutdown()


@pytest.fixture
def runtime(azurite: Azurite) -> Iterator[Runtime]:
    runtime = runtime_on(azurite.connection_string)
    yield runtime
    runtime.close()  # the writer's stream leases and queue ownership, as a process exit


@pytest.fixture
def services(runtime: Runtime) -> Services:
    return runtime.services


def test_one_trace_runs_from_each_post_to_its_commit(
    recorded: Recorded, runtime: Runtime, services: Services
) -> None:
    stream = f"tel-{uuid.uuid4().hex[:8]}"
    batches = [[NewMessage(b"a" * 10), NewMessage(b"b" * 20)], [NewMessage(b"c" * 30, "key")]]
    first_id, second_id = stage(services, stream, batches)
    write_next(runtime, stream)  # the first batch triggers; the second is drained with it

    posts = {s.attributes["vault.batch_id"]: s for s in recorded.named("vault.stage") if s.attributes}
    assert set(posts) == {first_id, second_id}
    [write] = recorded.named("vault.write")
    [append] = recorded.named("vault.append")
    commits = {s.attributes["vault.batch_id"]: s for s in recorded.named("vault.commit") if s.attributes}
    assert set(commits) == {first_id, second_id}
    for batch_id, commit in commits.items():
        post = posts[batch_id].context
        assert commit.context.trace_id == post.trace_id, "the commit continues the POST's trace"
        assert commit.parent is not None and commit.parent.span_id == post.span_id
        assert [link.context.span_id for link in commit.links] == [append.context.span_id]
        assert commit.attributes and commit.attributes["vault.stream"] == stream
    # The invocation is linked to its trigger's POST, the coalesced append to every POST.
    assert [link.context.span_id for link in write.links] == [posts[first_id].context.span_id]
    assert {link.context.span_id for link in append.links} == {p.context.span_id for p in posts.values()}
    assert append.parent is not None and append.parent.span_id == write.context.span_id
    assert append.attributes and append.attributes["vault.batches"] == 2
    first, second = commits[first_id].attributes or {}, commits[second_id].attributes or {}
    assert (first["vault.first_offset"], first["vault.next_offset"]) == (0, second["vault.first_offset"])
    assert (first["vault.messages"], second["vault.messages"]) == (2, 1)
    assert (posts[first_id].attributes or {})["vault.queue"] == services.queue_for(stream).name

    by_stream = {"vault.stream": stream}
    [messages] = recorded.points("vault.append.messages")
    [size] = recorded.points("vault.append.bytes")
    [lag] = recorded.points("vault.commit.lag")
    [duration] = recorded.points("vault.append.duration")
    assert messages.attributes == size.attributes == lag.attributes == duration.attributes == by_stream
    assert messages.value == 3
    assert size.value == second["vault.next_offset"] == services.vault.reader.state(stream).committed
    assert lag.count == 2 and 0 <= lag.min <= lag.max < 60_000, "one lag per batch, staging to commit"
    assert duration.count == 1 and duration.sum > 0


def test_a_redelivered_batch_is_not_counted_twice(
    recorded: Recorded, runtime: Runtime, services: Services
) -> None:
    stream = f"tel-{uuid.uuid4().hex[:8]}"
    [batch_id] = stage(services, stream, [[NewMessage(b"once")]])
    queue = services.queue_for(stream)
    body = queue.staging.peek(1)[0].body
    write_next(runtime, stream)
    queue.staging.send(body)  # the same batch again: a redelivery after its commit
    write_next(runtime, stream)

    assert [p.value for p in recorded.points("vault.append.messages")] == [1]
    assert [p.count for p in recorded.points("vault.commit.lag")] == [1]
    assert len(recorded.named("vault.commit")) == 1 and len(recorded.named("vault.append")) == 2
    assert batch_id in str(recorded.named("vault.commit")[0].attributes)


def test_requeues_and_poisoned_batches_are_counted(
    recorded: Recorded, runtime: Runtime, services: Services
) -> None:
    stream = f"tel-{uuid.uuid4().hex[:8]}"
    queue = services.queue_for(stream)
    # Another instance owns the queue: the trigger's batch is passed back for it.
    stage(services, stream, [[NewMessage(b"x")]])
    other = OpenWriters()
    try:
        assert other.own(services, queue)
        write_next(runtime, stream)
        other.done(queue)
    finally:
        other.close_all()  # and so the queue is free for this process
    while passed_back := queue.staging.receive(32, 30):
        for m in passed_back:
            queue.staging.delete(m)
    # A claim-check blob missing for an uncommitted batch: permanent, the batch goes to poison.
    queue.staging.send(envelope.encode_claim("lost-1", stream, 1, claim_name(stream, "lost-1"), 3))
    write_next(runtime, stream)

    where = {"vault.queue": queue.name, "vault.account": queue.account}
    [poisoned] = recorded.points("vault.batches.poisoned")
    assert poisoned.value == 1 and poisoned.attributes == {**where, "vault.stream": stream}
    [requeued] = recorded.points("vault.batches.requeued")
    assert requeued.value == 1 and requeued.attributes == {**where, "vault.reason": "not_owner"}
    events = [e.name for s in recorded.named("vault.write") for e in s.events]
    assert sorted(events) == ["vault.poisoned", "vault.requeued"]
    assert not recorded.points("vault.append.messages"), "nothing was appended"


def test_the_envelope_carries_the_trace_and_stays_readable_without_one() -> None:
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    messages = [NewMessage(b"v", "k")]
    plain = envelope.encode_messages("b-1", "orders", 5, messages)
    assert "tp" not in json.loads(plain) and envelope.decode(plain).trace is None  # as before
    traced = envelope.encode_messages("b-1", "orders", 5, messages, parent)
    assert envelope.decode(traced).trace == parent and envelope.decode(traced).messages == messages
    claim = envelope.encode_claim("b-1", "orders", 5, "orders/b-1/x.records", 1, parent)
    assert envelope.decode(claim).trace == parent
    # A context that is no string, or far too long, is dropped: never a reason to poison a batch.
    for bad in (17, "x" * 1000, ""):
        doc = {**json.loads(plain), "tp": bad}
        decoded = envelope.decode(json.dumps(doc))
        assert decoded.trace is None and decoded.messages == messages


def test_an_unusable_trace_context_only_loses_the_link(
    recorded: Recorded, runtime: Runtime, services: Services
) -> None:
    stream = f"tel-{uuid.uuid4().hex[:8]}"
    queue = services.queue_for(stream)
    text = envelope.encode_messages("odd-1", stream, 1, [NewMessage(b"v")], "not-a-traceparent")
    queue.staging.send(text)
    write_next(runtime, stream)

    assert services.vault.reader.state(stream).count == 1
    [write] = recorded.named("vault.write")
    [commit] = recorded.named("vault.commit")
    assert not write.links and commit.context.trace_id == write.context.trace_id  # under the append


def test_without_the_setting_nothing_of_opentelemetry_is_imported(azurite: Azurite) -> None:
    env = {k: v for k, v in os.environ.items() if k != telemetry.CONNECTION_SETTING}
    done = subprocess.run(
        [sys.executable, str(HELPERS / "staged_flow.py"), azurite.connection_string],
        env={**env, "PYTHONPATH": str(HELPERS.parent.parent)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


class _Ingestion(BaseHTTPRequestHandler):
    """Application Insights' ingestion endpoint, on loopback: keeps what the exporter sends."""

    received: list[dict[str, Any]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        items = json.loads(body) if self.path.endswith("/track") else []
        self.received.extend(items)
        answer = json.dumps({"itemsReceived": len(items), "itemsAccepted": len(items), "errors": []})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(answer.encode())

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _base(item: dict[str, Any]) -> dict[str, Any]:
    return dict(item.get("data", {}).get("baseData", {}))


def test_the_local_host_exports_with_the_distro_when_the_setting_is_present(
    azurite: Azurite, tmp_path: Path
) -> None:
    """The setting in the environment is all it takes, in the local host's worker processes too:
    the distro's own exporter sends the spans and metrics (here to a loopback ingestion)."""
    received: list[dict[str, Any]] = []
    handler = type("Ingestion", (_Ingestion,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}/"
    settings = {
        telemetry.CONNECTION_SETTING: (
            f"InstrumentationKey=00000000-0000-0000-0000-000000000000;"
            f"IngestionEndpoint={endpoint};LiveEndpoint={endpoint}"
        ),
        # Nothing for Microsoft's endpoints (statistics, dynamic configuration).
        "APPLICATIONINSIGHTS_STATSBEAT_DISABLED_ALL": "true",
        "APPLICATIONINSIGHTS_CONTROLPLANE_DISABLED": "true",
        "OTEL_TRACES_SAMPLER": "always_on",  # not the default 5 traces a second: this one trace
        "OTEL_BSP_SCHEDULE_DELAY": "200",
        "OTEL_METRIC_EXPORT_INTERVAL": "1000",
        "TMPDIR": str(tmp_path),  # the exporter's retry files, if any
    }
    host = isolated_host(azurite, tmp_path, settings=settings, woken_on_write=True).start()
    try:
        stream = f"tel-{uuid.uuid4().hex[:8]}"
        deadline = time.monotonic() + 60
        while True:  # as a producer does: a 503 (storage slow on a loaded machine) is retried
            r = httpx.post(
                f"{host.url}/streams/{stream}/messages",
                params={"code": host.key, "wait": 20},
                json={"messages": [{"value": "hello"}]},
                headers={"Idempotency-Key": "telemetry-1"},
                timeout=30,
            )
            if r.status_code != 503 or time.monotonic() > deadline:
                break
            time.sleep(float(r.headers.get("retry-after", "1")))
        assert r.status_code == 200, r.text
        batch_id = r.json()["batch_id"]

        def exported() -> tuple[list[dict[str, Any]], list[str]]:
            ours = [
                i for i in list(received) if _base(i).get("properties", {}).get("vault.batch_id") == batch_id
            ]
            metrics = [m["name"] for i in list(received) for m in _base(i).get("metrics", [])]
            return ours, metrics

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            ours, metrics = exported()
            if {_base(i).get("name") for i in ours} >= {"vault.stage", "vault.commit"} and (
                "vault.append.messages" in metrics
            ):
                break
            time.sleep(0.3)
        names = {_base(i)["name"]: i for i in ours}
        assert set(names) >= {"vault.stage", "vault.commit"}, [
            (i["name"], _base(i).get("name")) for i in received
        ] + host.lines[-40:]
        stage_tags, commit_tags = names["vault.stage"]["tags"], names["vault.commit"]["tags"]
        assert stage_tags["ai.operation.id"] == commit_tags["ai.operation.id"], "one trace, two invocations"
        assert commit_tags["ai.operation.parentId"] == _base(names["vault.stage"])["id"]
        assert stage_tags["ai.cloud.role"] == "message-vault"
        assert "vault.append.messages" in metrics and "vault.commit.lag" in metrics
        staged = [line for line in host.lines if '"event":"staged"' in line]
        assert staged and f'"trace":"{stage_tags["ai.operation.id"]}"' in staged[0], (
            "log lines name the trace"
        )
    finally:
        host.stop()
        server.shutdown()
        server.server_close()


def test_operating_md_names_every_span_and_metric_the_app_records(recorded: Recorded) -> None:
    tel = telemetry.current()
    with tel.writing("q-0", 0):
        with tel.staging("s", "b-1") as span:
            trace = span.traceparent
        with tel.appending("s", [trace]):
            tel.appended("s", [telemetry.Commit("b-1", trace, 1, 1, 0, 40, False)], 1, 2)
        tel.requeued("q-0", 0, "leased")
        tel.poisoned("q-0", 0, "s")
    spans = {s.name for s in recorded.spans.get_finished_spans()}
    data = recorded.metrics.get_metrics_data()
    assert data is not None
    metrics = {m.name for r in data.resource_metrics for sc in r.scope_metrics for m in sc.metrics}

    doc = (Path(__file__).resolve().parent.parent / "docs" / "OPERATING.md").read_text(encoding="utf-8")

    def first_column(header: str) -> set[str]:
        rows = doc.split(f"| {header} |", 1)[1].split("\n\n", 1)[0].splitlines()[2:]
        return {row.split("|")[1].strip().strip("`") for row in rows}

    assert first_column("Span") == spans
    assert first_column("Metric") == metrics
