"""The Python client and the ``vault`` command against the local Functions host on Azurite."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from click.testing import CliRunner
from conftest import wait_until

from vault_app.config import load_settings
from vault_app.services import Services
from vault_client import (
    ApiClient,
    CheckpointConflict,
    CheckpointStore,
    Consumer,
    EndpointUnreachable,
    Producer,
    RetryPolicy,
)
from vault_client.cli import cli
from vault_core.pageblob import StreamBlob
from vault_core.queueing import MessageQueue
from vault_core.recordformat import Message
from vault_local.azurite import free_port
from vault_local.dev_issuer import DevIssuer
from vault_local.process import HostProcess

COMMIT_WAIT = 30.0
FAST_RETRY = RetryPolicy(attempts=6, base=0.01, cap=0.1)


# -- helpers ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def api(vault_host: HostProcess) -> Iterator[ApiClient]:
    with ApiClient(vault_host.url, vault_host.key, retry=FAST_RETRY) as client:
        yield client


def produce(api: ApiClient, stream: str, values: list[str], **options: Any) -> list[int]:
    """Send ``values`` and wait until they are committed; their offsets."""
    with Producer(api=api, wait=COMMIT_WAIT, **options) as producer:
        results = [producer.send(stream, v, key=f"k{i}") for i, v in enumerate(values)]
    return [r.wait_committed(COMMIT_WAIT).offset for r in results]  # type: ignore[misc]


def staging_queue(host: HostProcess, stream: str) -> MessageQueue:
    """The staging queue that carries ``stream``'s batches on ``host``."""
    return Services(load_settings(host.env)).queue_for(stream).staging


def values(messages: list[Message]) -> list[str]:
    return [m.value.decode() for m in messages]


def read_all(api: ApiClient, stream: str) -> list[str]:
    return values(list(Consumer.connect(None, stream, api=api)))


class FlakyProxy:
    """A loopback proxy in front of the host that answers 503 to the first requests.

    ``reject`` requests get 503 without reaching the host; ``lose`` requests are forwarded
    (so the host stages them) and then answered 503, as if the answer was lost on the way.
    """

    def __init__(self, upstream: str, *, reject: int = 0, lose: int = 0) -> None:
        self.upstream = upstream.rstrip("/")
        self.reject, self.lose = reject, lose
        self.requests = 0
        self.keys: list[str] = []
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                proxy.handle(self, "GET")

            def do_POST(self) -> None:
                proxy.handle(self, "POST")

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.client = httpx.Client(timeout=60)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/api"

    def handle(self, req: http.server.BaseHTTPRequestHandler, method: str) -> None:
        body = req.rfile.read(int(req.headers.get("content-length") or 0))
        self.requests += 1
        if method == "POST":
            self.keys.append(req.headers.get("idempotency-key", ""))
        n = self.requests
        if n <= self.reject:
            return self.answer(req, 503, b'{"error":"unavailable","message":"injected"}')
        path = req.path[len("/api") :]
        headers = {k: v for k, v in req.headers.items() if k.lower() not in ("host", "content-length")}
        resp = self.client.request(method, self.upstream + path, headers=headers, content=body)
        if n <= self.reject + self.lose:
            return self.answer(req, 503, b'{"error":"unavailable","message":"answer lost"}')
        self.answer(req, resp.status_code, resp.content)

    @staticmethod
    def answer(req: http.server.BaseHTTPRequestHandler, status: int, body: bytes) -> None:
        req.send_response(status)
        req.send_header("Content-Type", "application/json")
        req.send_header("Content-Length", str(len(body)))
        if status == 503:
            req.send_header("Retry-After", "0")
        req.end_headers()
        req.wfile.write(body)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.client.close()


@pytest.fixture
def proxy_factory(vault_host: HostProcess) -> Iterator[Any]:
    proxies: list[FlakyProxy] = []

    def make(**kw: int) -> FlakyProxy:
        proxies.append(FlakyProxy(vault_host.url, **kw))
        return proxies[-1]

    yield make
    for p in proxies:
        p.close()


@pytest.fixture
def store(vault_host: HostProcess) -> CheckpointStore:
    return CheckpointStore.from_connection_string(vault_host.connection_string).ensure()


# -- producer --------------------------------------------------------------------------------------
def test_producer_batches_by_count_and_every_message_arrives_in_order(api: ApiClient, stream: str) -> None:
    sent = [f"m{i}" for i in range(25)]
    with Producer(api=api, batch_max_messages=10, linger=5, wait=COMMIT_WAIT) as producer:
        results = [producer.send(stream, v) for v in sent]
    assert len({r.result().batch_id for r in results}) == 3
    assert read_all(api, stream) == sent


def test_a_write_only_producer_gets_every_offset_of_a_batch_in_several_units(
    vault_host: HostProcess, dev_issuer: DevIssuer, api: ApiClient, stream: str
) -> None:
    token = dev_issuer.mint("writer-only", roles=[f"Vault.Write.{stream}"])
    sent = [f"{i:05d}" + "x" * 200 for i in range(2500)]  # one batch of two units (2,048 messages at most)
    options: dict[str, Any] = {"batch_max_messages": 2500, "linger": 5, "wait": COMMIT_WAIT}
    with Producer(vault_host.url, token=token, **options) as producer:
        results = [producer.send(stream, v) for v in sent]
    assert [r.result().offset for r in results] == [m.offset for m in Consumer.connect(None, stream, api=api)]
    assert len({r.result().offset for r in results}) == len(sent)


def test_producer_sends_after_linger_without_a_flush(api: ApiClient, stream: str) -> None:
    producer = Producer(api=api, linger=0.2)
    try:
        started = time.monotonic()
        delivery = producer.send(stream, "lonely").result(timeout=10)
        assert delivery.status == "staged" and time.monotonic() - started >= 0.2
    finally:
        producer.close()


def test_committed_results_carry_the_offsets_consumers_see(api: ApiClient, stream: str) -> None:
    offsets = produce(api, stream, ["a", "bb", "ccc"])
    assert offsets == [m.offset for m in Consumer.connect(None, stream, api=api)]


def test_injected_503s_are_retried_until_the_batch_is_staged(
    api: ApiClient, proxy_factory: Any, stream: str
) -> None:
    proxy = proxy_factory(reject=3)
    with Producer(proxy.url, api.key, retry=FAST_RETRY) as producer:
        result = producer.send(stream, "through")
    assert result.wait_committed(COMMIT_WAIT).status == "committed"
    assert proxy.requests >= 4 and read_all(api, stream) == ["through"]


def test_a_retry_after_a_lost_answer_appends_nothing_twice(
    api: ApiClient, proxy_factory: Any, vault_host: HostProcess, stream: str
) -> None:
    proxy = proxy_factory(lose=2)  # the host staged the batch twice over; the producer saw two 503s
    with Producer(proxy.url, api.key, retry=FAST_RETRY) as producer:
        results = [producer.send(stream, f"once-{i}") for i in range(5)]
    results[-1].wait_committed(COMMIT_WAIT)
    # Every copy staged has been settled: the writer deletes a queue message only once its batch
    # is committed (or found committed already), so a duplicate would be in the stream by now.
    queue = staging_queue(vault_host, stream)
    wait_until(lambda: queue.approximate_count() == 0, what="queue to drain")
    assert len(proxy.keys) == 3 and len(set(proxy.keys)) == 1  # one batch, sent three times
    assert read_all(api, stream) == [f"once-{i}" for i in range(5)]


# -- consumer -------------------------------------------------------------------------------------
def test_consumer_from_an_offset(api: ApiClient, stream: str) -> None:
    offsets = produce(api, stream, ["a", "b", "c", "d"])
    assert values(list(Consumer.connect(None, stream, api=api, start=offsets[2]))) == ["c", "d"]


def test_consumer_from_a_time(api: ApiClient, stream: str) -> None:
    produce(api, stream, ["old-1", "old-2"])
    time.sleep(0.05)
    between = datetime.now(timezone.utc)
    time.sleep(0.05)
    produce(api, stream, ["new-1"])
    assert values(list(Consumer.connect(None, stream, api=api, at=between))) == ["new-1"]


def test_consumer_from_the_end_sees_only_later_messages(api: ApiClient, stream: str) -> None:
    produce(api, stream, ["old"])
    consumer = Consumer.connect(None, stream, api=api, start="end", follow=True, wait=2)
    assert consumer.poll(wait=0) == []
    produce(api, stream, ["new"])
    assert values(consumer.poll(wait=10)) == ["new"]


def test_follow_delivers_messages_produced_while_it_waits(api: ApiClient, stream: str) -> None:
    produce(api, stream, ["first"])
    got: list[str] = []
    consumer = Consumer.connect(None, stream, api=api, follow=True, wait=5)

    def read() -> None:
        for m in consumer:
            got.append(m.value.decode())
            if len(got) == 3:
                consumer.stop()

    reader = threading.Thread(target=read)
    reader.start()
    wait_until(lambda: got == ["first"], what="first message")  # it has caught up: now it waits
    produce(api, stream, ["second", "third"])
    reader.join(30)
    assert got == ["first", "second", "third"]


def test_direct_path_reads_the_same_messages_with_the_api_sas(api: ApiClient, stream: str) -> None:
    produce(api, stream, [f"m{i}" for i in range(20)])
    over_http = list(Consumer.connect(None, stream, api=api))
    direct = list(Consumer.connect(None, stream, api=api, direct=True))
    assert [(m.offset, m.value) for m in direct] == [(m.offset, m.value) for m in over_http]


def test_direct_path_seeks_a_time_through_the_api_index(api: ApiClient, stream: str) -> None:
    produce(api, stream, ["old"])
    time.sleep(0.05)
    between = int(time.time() * 1000)
    time.sleep(0.05)
    produce(api, stream, ["new"])
    assert values(list(Consumer.connect(None, stream, api=api, direct=True, at=between))) == ["new"]


def test_two_members_of_a_group_cannot_overwrite_each_other(
    api: ApiClient, store: CheckpointStore, stream: str
) -> None:
    produce(api, stream, ["a", "b", "c"])
    first = Consumer.connect(None, stream, api=api, group="g-two", checkpoints=store, member="first")
    second = Consumer.connect(None, stream, api=api, group="g-two", checkpoints=store, member="second")
    first.poll(wait=0), second.poll(wait=0)  # both start before either commits
    first.commit()
    with pytest.raises(CheckpointConflict, match="another member"):
        second.commit()


def test_group_member_resumes_where_the_group_committed(
    api: ApiClient, store: CheckpointStore, stream: str
) -> None:
    produce(api, stream, ["a", "b", "c"])
    with Consumer.connect(None, stream, api=api, group="g-resume", checkpoints=store) as c:
        assert next(iter(c)).value == b"a"
    with Consumer.connect(None, stream, api=api, group="g-resume", checkpoints=store) as c:
        assert values(list(c)) == ["b", "c"]


@pytest.fixture
def stopped_host_url() -> Iterator[str]:
    """The API address of a host that is not running: its port is held by a socket that never
    listens, so a connection is refused as after the host stopped (and the session's host is
    not restarted for it, ~1 CPU-s and 4 s each time)."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{held.getsockname()[1]}/api"


def test_stopped_host_makes_sends_fail_with_unreachable(stopped_host_url: str, stream: str) -> None:
    with Producer(stopped_host_url, "any-key", retry=RetryPolicy(attempts=2, base=0.01)) as producer:
        result = producer.send(stream, "nowhere")
    with pytest.raises(EndpointUnreachable, match="cannot reach the vault"):
        result.result()


# -- the vault command -------------------------------------------------------------------------------
@pytest.fixture
def vault_cli(vault_host: HostProcess) -> Any:
    runner = CliRunner()
    env = {
        "VAULT_URL": vault_host.url,
        "VAULT_KEY": vault_host.key,
        "VAULT_STORAGE_CONNECTION": vault_host.connection_string,
    }

    def invoke(*args: str, input: str | bytes | None = None) -> Any:
        return runner.invoke(cli, list(args), env=env, input=input, prog_name="vault")

    return invoke


def test_cli_produce_reads_ndjson_from_stdin_and_summarises(
    vault_cli: Any, api: ApiClient, stream: str
) -> None:
    lines = "".join(json.dumps({"key": f"k{i}", "value": f"v{i}"}) + "\n" for i in range(50))
    result = vault_cli("produce", stream, "-", "--wait", "30", input=lines)
    assert result.exit_code == 0, result.stderr
    assert "produced 50 messages" in result.stdout and "msg/s" in result.stdout
    assert read_all(api, stream) == [f"v{i}" for i in range(50)]


def test_cli_produce_reads_plain_lines_from_a_file(
    vault_cli: Any, api: ApiClient, stream: str, tmp_path: Path
) -> None:
    source = tmp_path / "lines.txt"
    source.write_text("alpha\nbeta\n\ngamma\n")
    result = vault_cli("produce", stream, str(source), "--message-key", "K", "--wait", "30")
    assert result.exit_code == 0, result.stderr
    got = list(Consumer.connect(None, stream, api=api))
    assert [(m.key, m.value) for m in got] == [(b"K", b"alpha"), (b"K", b"beta"), (b"K", b"gamma")]


def test_cli_consume_prints_ndjson_from_an_offset(vault_cli: Any, api: ApiClient, stream: str) -> None:
    offsets = produce(api, stream, ["a", "b", "c"])
    result = vault_cli("consume", stream, "--from", str(offsets[1]))
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert result.exit_code == 0 and [(r["offset"], r["value"]) for r in rows] == [
        (offsets[1], "b"),
        (offsets[2], "c"),
    ]


def test_cli_consume_text_with_a_limit(vault_cli: Any, api: ApiClient, stream: str) -> None:
    produce(api, stream, ["a", "b", "c"])
    result = vault_cli("consume", stream, "--format", "text", "--limit", "2")
    assert result.exit_code == 0 and result.stdout == "a\nb\n"


def test_cli_consume_raw_direct_writes_value_bytes(vault_cli: Any, api: ApiClient, stream: str) -> None:
    produce(api, stream, ["x", "y"])
    result = vault_cli("consume", stream, "--format", "raw", "--direct")
    assert result.exit_code == 0 and result.stdout_bytes == b"xy"


def test_cli_consume_at_a_time(vault_cli: Any, api: ApiClient, stream: str) -> None:
    produce(api, stream, ["old"])
    time.sleep(0.05)
    between = datetime.now(timezone.utc).isoformat()
    time.sleep(0.05)
    produce(api, stream, ["new"])
    result = vault_cli("consume", stream, "--at", between, "--format", "text")
    assert result.exit_code == 0 and result.stdout == "new\n"


def test_cli_consume_group_resumes_after_its_commit(vault_cli: Any, api: ApiClient, stream: str) -> None:
    produce(api, stream, ["a", "b", "c"])
    first = vault_cli("consume", stream, "--group", "cli-g", "--limit", "2", "--format", "text")
    second = vault_cli("consume", stream, "--group", "cli-g", "--format", "text")
    assert (first.stdout, second.stdout) == ("a\nb\n", "c\n")


def test_cli_consume_follow_stops_at_the_limit(vault_cli: Any, api: ApiClient, stream: str) -> None:
    produce(api, stream, ["a"])
    threading.Timer(1.0, lambda: produce(api, stream, ["b"])).start()
    result = vault_cli("consume", stream, "--follow", "--wait", "5", "--limit", "2", "--format", "text")
    assert result.exit_code == 0 and result.stdout == "a\nb\n"


def test_cli_streams_lists_a_stream(vault_cli: Any, api: ApiClient, stream: str) -> None:
    produce(api, stream, ["a"])
    result = vault_cli("streams", "--json")
    assert result.exit_code == 0 and stream in {s["stream"] for s in json.loads(result.stdout)}


def test_cli_streams_table(vault_cli: Any, api: ApiClient, stream: str) -> None:
    produce(api, stream, ["a"])
    result = vault_cli("streams")
    assert result.exit_code == 0 and stream in result.stdout


def test_cli_info_shows_count_and_committed(vault_cli: Any, api: ApiClient, stream: str) -> None:
    produce(api, stream, ["a", "b"])
    result = vault_cli("info", stream)
    committed = api.committed(stream)
    assert result.exit_code == 0 and f"{committed:,} bytes" in result.stdout
    assert "messages       2" in result.stdout


def test_cli_info_of_a_missing_stream_is_one_line(vault_cli: Any, stream: str) -> None:
    result = vault_cli("info", stream)
    assert result.exit_code == 1 and result.stderr.count("\n") == 1 and "vault: error:" in result.stderr


def test_cli_groups_shows_lag(vault_cli: Any, api: ApiClient, stream: str) -> None:
    produce(api, stream, ["a", "b"])
    vault_cli("consume", stream, "--group", "lag-g", "--limit", "1")
    result = vault_cli("groups", "lag-g", "--json")
    [row] = [r for r in json.loads(result.stdout) if r["stream"] == stream]
    assert row["lag"] == api.committed(stream) - row["checkpoint"] > 0


def test_cli_export_parquet_holds_every_message(
    vault_cli: Any, api: ApiClient, stream: str, tmp_path: Path
) -> None:
    import pyarrow.parquet as pq

    produce(api, stream, [f"m{i}" for i in range(30)])
    target = tmp_path / "out.parquet"
    result = vault_cli("export", stream, "--to", str(target))
    table = pq.read_table(target)
    assert result.exit_code == 0 and table.num_rows == 30
    assert table.column("value").to_pylist()[-1] == b"m29"


def test_cli_export_ndjson_direct(vault_cli: Any, api: ApiClient, stream: str, tmp_path: Path) -> None:
    produce(api, stream, ["a", "b"])
    target = tmp_path / "out.ndjson"
    result = vault_cli("export", stream, "--to", str(target), "--direct")
    rows = [json.loads(line) for line in target.read_text().splitlines()]
    assert result.exit_code == 0 and [r["value"] for r in rows] == ["a", "b"]


def test_cli_verify_passes_a_healthy_stream(vault_cli: Any, api: ApiClient, stream: str) -> None:
    produce(api, stream, [f"m{i}" for i in range(10)])
    result = vault_cli("verify", stream)
    assert result.exit_code == 0 and "10 verified" in result.stdout and "OK" in result.stdout


def test_cli_verify_fails_a_corrupt_stream(
    vault_cli: Any, api: ApiClient, vault_host: HostProcess, stream: str
) -> None:
    from azure.storage.blob import BlobLeaseClient

    from vault_core.azure import StorageAccount
    from vault_core.vault import Vault

    produce(api, stream, ["a-long-enough-value", "b"])
    client = cast(
        StreamBlob, Vault(StorageAccount(connection_string=vault_host.connection_string)).blob(stream)
    ).client
    BlobLeaseClient(client).break_lease(0)  # the host keeps an idle writer (and its lease) open a while
    page = bytearray(client.download_blob(offset=0, length=512).readall())
    page[40] ^= 0xFF
    client.upload_page(bytes(page), offset=0, length=512)
    result = vault_cli("verify", stream)
    assert result.exit_code == 1 and "problem" in result.stdout and "failed verification" in result.stderr


def test_cli_against_a_stopped_host_is_one_line(vault_cli: Any, stopped_host_url: str) -> None:
    result = vault_cli("--url", stopped_host_url, "--retries", "0", "streams")
    assert result.exit_code == 1 and result.stderr.count("\n") == 1
    assert "cannot reach the vault" in result.stderr
