"""The Python client without the HTTP host: checkpoints, direct-blob reads, the producer on a mock
transport, and the CLI's argument handling. Storage is a real Azurite (tests/conftest.py)."""

from __future__ import annotations

import base64
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import cast

import httpx
import pytest
from azure.storage.blob import BlobSasPermissions, generate_blob_sas
from click.testing import CliRunner
from conftest import wait_until

from vault_client import (
    Access,
    AccessDenied,
    ApiClient,
    BufferFull,
    CheckpointConflict,
    CheckpointStore,
    Consumer,
    EndpointUnreachable,
    Producer,
    RetryPolicy,
)
from vault_client.batching import Accumulator
from vault_client.cli import cli
from vault_client.cli.inputs import read_messages
from vault_client.direct import SasBlob
from vault_client.errors import ApiBadRequest, ApiError, ApiNotFound
from vault_client.groups import GroupMember, group_lag
from vault_client.retry import parse_retry_after
from vault_client.verify import verify_log
from vault_client.wire import encode_message, to_millis
from vault_core.azure import StorageAccount
from vault_core.clock import ManualClock
from vault_core.errors import CorruptRecord, InvalidInput, InvalidOffset, MessageTooLarge
from vault_core.pageblob import StreamBlob
from vault_core.recordformat import HEADER_SIZE, NewMessage, encode
from vault_core.vault import Vault
from vault_core.writer import Batch, WriterSettings
from vault_local.azurite import Azurite

Sas = Callable[..., Callable[[], Access]]
FAST_RETRY = RetryPolicy(attempts=4, base=0.001, cap=0.01)


# -- helpers ---------------------------------------------------------------------------------------
def write(vault: Vault, stream: str, *batches: list[NewMessage], record_format: int = 2) -> None:
    with vault.writer(stream, WriterSettings(record_format=record_format)) as w:
        w.append([Batch(b) for b in batches])


def texts(n: int, tag: str = "m") -> list[NewMessage]:
    return [NewMessage(f"{tag}-{i}".encode(), f"k{i}") for i in range(n)]


@pytest.fixture
def sas(vault: Vault) -> Sas:
    """``sas(stream, expires_in=..., claims=...)`` → an access provider that counts its calls.

    ``expires_in`` is the SAS's real lifetime; ``claims`` the expiry it reports (a lie, to
    simulate a clock that disagrees with storage's).
    """
    settings = str(cast(StorageAccount, vault.account).connection_string).split(";")
    account_key = next(p.split("=", 1)[1] for p in settings if p.startswith("AccountKey="))

    def factory(
        stream: str,
        expires_in: list[timedelta] | timedelta = timedelta(minutes=10),
        claims: list[timedelta] | None = None,
    ) -> Callable[[], Access]:
        lifetimes = list(expires_in) if isinstance(expires_in, list) else [expires_in]
        calls: list[int] = []

        def provider() -> Access:
            i = min(len(calls), len(lifetimes) - 1)
            calls.append(i)
            now = datetime.now(timezone.utc)
            client = cast(StreamBlob, vault.blob(stream)).client
            token = generate_blob_sas(
                str(client.account_name),
                client.container_name,
                client.blob_name,
                account_key=account_key,
                permission=BlobSasPermissions(read=True),
                expiry=now + lifetimes[i],
                start=now - timedelta(minutes=5),
            )
            claimed = now + (claims[min(i, len(claims) - 1)] if claims else lifetimes[i])
            return Access(stream, client.url, token, claimed)

        provider.calls = calls  # type: ignore[attr-defined]
        return provider

    return factory


@pytest.fixture
def store(account: StorageAccount) -> CheckpointStore:
    return CheckpointStore.from_account(account).ensure()


# -- checkpoints -----------------------------------------------------------------------------------
def test_checkpoint_round_trips_offset_and_member(store: CheckpointStore, stream: str) -> None:
    saved = store.save("g-rt", stream, 1234, etag=None, now_ms=1_000, member="m1")
    got = store.get("g-rt", stream)
    assert got is not None and (got.offset, got.member, got.etag) == (1234, "m1", saved.etag)


def test_missing_checkpoint_reads_as_none(store: CheckpointStore, stream: str) -> None:
    assert store.get("g-none", stream) is None


def test_second_member_creating_the_same_checkpoint_conflicts(store: CheckpointStore, stream: str) -> None:
    a, b = GroupMember(store, "g-create", stream, "a"), GroupMember(store, "g-create", stream, "b")
    assert a.load() is None and b.load() is None
    a.commit(100)
    with pytest.raises(CheckpointConflict, match="another member"):
        b.commit(50)
    assert store.get("g-create", stream).offset == 100  # type: ignore[union-attr]


def test_stale_etag_conflicts_instead_of_overwriting(store: CheckpointStore, stream: str) -> None:
    store.save("g-etag", stream, 10, etag=None, now_ms=1)
    a, b = GroupMember(store, "g-etag", stream, "a"), GroupMember(store, "g-etag", stream, "b")
    a.load(), b.load()
    a.commit(200)
    with pytest.raises(CheckpointConflict):
        b.commit(20)
    assert store.get("g-etag", stream).offset == 200  # type: ignore[union-attr]


def test_member_that_reloads_after_a_conflict_can_commit(store: CheckpointStore, stream: str) -> None:
    a, b = GroupMember(store, "g-reload", stream, "a"), GroupMember(store, "g-reload", stream, "b")
    a.load(), b.load()
    a.commit(300)
    with pytest.raises(CheckpointConflict):
        b.commit(10)
    assert b.reload() == 300
    b.commit(400)
    assert store.get("g-reload", stream).offset == 400  # type: ignore[union-attr]


def test_invalid_group_name_is_refused_before_storage(store: CheckpointStore, stream: str) -> None:
    with pytest.raises(InvalidInput, match="consumer group name"):
        store.save("bad/group", stream, 0, etag=None, now_ms=0)


def test_lag_is_committed_length_minus_checkpoint(vault: Vault, store: CheckpointStore, stream: str) -> None:
    write(vault, stream, texts(10))
    committed = vault.reader.state(stream).committed
    store.save("g-lag", stream, 72, etag=None, now_ms=0)
    [row] = group_lag(store, lambda s: vault.reader.state(s).committed, "g-lag")
    assert (row.offset, row.committed, row.lag) == (72, committed, committed - 72)


def test_lag_of_a_vanished_stream_is_unknown(store: CheckpointStore, stream: str) -> None:
    from vault_core.errors import StreamNotFound

    def gone(s: str) -> int:
        raise StreamNotFound(s)

    store.save("g-gone", stream, 5, etag=None, now_ms=0)
    [row] = group_lag(store, gone, "g-gone")
    assert row.committed is None and row.lag is None


# -- direct blob reads -----------------------------------------------------------------------------
def test_direct_consumer_reads_every_message_with_keys(vault: Vault, stream: str, sas: Sas) -> None:
    write(vault, stream, [NewMessage(b"text", "key"), NewMessage(b"\x00\xff", b"\x01")], texts(3))
    got = list(Consumer.direct(stream, sas(stream)))
    assert [(m.key, m.value, m.key_is_text) for m in got[:2]] == [
        (b"key", b"text", True),
        (b"\x01", b"\x00\xff", False),
    ]
    assert [m.value for m in got[2:]] == [b"m-0", b"m-1", b"m-2"]


def test_direct_consumer_starts_at_a_record_offset(vault: Vault, stream: str, sas: Sas) -> None:
    write(vault, stream, texts(5))
    third = list(Consumer.direct(stream, sas(stream)))[2]
    got = list(Consumer.direct(stream, sas(stream), start=third.offset))
    assert [m.value for m in got] == [b"m-2", b"m-3", b"m-4"]


def test_direct_consumer_refuses_an_offset_inside_a_record(vault: Vault, stream: str, sas: Sas) -> None:
    write(vault, stream, texts(3))
    with pytest.raises(InvalidOffset):
        list(Consumer.direct(stream, sas(stream), start=5))


def test_direct_consumer_from_the_end_yields_nothing_old(vault: Vault, stream: str, sas: Sas) -> None:
    write(vault, stream, texts(3))
    assert list(Consumer.direct(stream, sas(stream), start="end")) == []


def test_direct_consumer_seeks_to_a_time(account: StorageAccount, stream: str, sas: Sas) -> None:
    clock = ManualClock(1_800_000_000_000)
    v = Vault(account, clock=clock)
    with v.writer(stream) as w:
        w.append([Batch(texts(3, "early"))])
        clock.advance(60_000)
        w.append([Batch(texts(2, "late"))])
    halfway = datetime.fromtimestamp(1_800_000_030, timezone.utc)
    got = list(Consumer.direct(stream, sas(stream), at=halfway))
    assert [m.value for m in got] == [b"late-0", b"late-1"]


def test_direct_follow_delivers_messages_committed_later(vault: Vault, stream: str, sas: Sas) -> None:
    write(vault, stream, texts(1, "before"))
    consumer = Consumer.direct(stream, sas(stream), start="end", follow=True, wait=1)
    got: list[bytes] = []

    def read() -> None:
        for m in consumer:
            got.append(m.value)
            if len(got) == 2:
                consumer.stop()

    reader = threading.Thread(target=read)
    reader.start()
    # Write only once the consumer has taken the end as its start: "after" is then after it.
    wait_until(lambda: consumer.position is not None, what="consumer to resolve the end")
    write(vault, stream, texts(2, "after"))
    reader.join(10)
    assert got == [b"after-0", b"after-1"]


def test_direct_group_consumer_resumes_from_its_checkpoint(
    vault: Vault, store: CheckpointStore, stream: str, sas: Sas
) -> None:
    write(vault, stream, texts(6))
    with Consumer.direct(stream, sas(stream), group="g-resume", checkpoints=store) as first:
        for i, _ in enumerate(first):
            if i == 3:
                break  # four messages handed out and processed
    with Consumer.direct(stream, sas(stream), group="g-resume", checkpoints=store) as second:
        assert [m.value for m in second] == [b"m-4", b"m-5"]


def test_group_consumer_does_not_commit_when_processing_failed(
    vault: Vault, store: CheckpointStore, stream: str, sas: Sas
) -> None:
    write(vault, stream, texts(3))
    with (
        pytest.raises(RuntimeError),
        Consumer.direct(stream, sas(stream), group="g-fail", checkpoints=store) as consumer,
    ):
        for _ in consumer:
            raise RuntimeError("handler failed")
    assert store.get("g-fail", stream) is None


def test_sas_reported_as_expired_is_renewed_before_reading(vault: Vault, stream: str, sas: Sas) -> None:
    write(vault, stream, texts(2))
    provider = sas(stream, claims=[timedelta(seconds=-1), timedelta(minutes=10)])
    blob = SasBlob(stream, provider)
    assert blob.state().count == 2
    assert blob.refreshes == 1


def test_refused_sas_is_refreshed_through_the_callback(vault: Vault, stream: str, sas: Sas) -> None:
    write(vault, stream, texts(2))
    # The first SAS is already expired but claims ten minutes: only storage's 403 tells.
    provider = sas(
        stream, expires_in=[timedelta(minutes=-1), timedelta(minutes=10)], claims=[timedelta(minutes=10)]
    )
    got = list(Consumer.direct(stream, provider))
    assert [m.value for m in got] == [b"m-0", b"m-1"]
    assert len(provider.calls) == 2  # type: ignore[attr-defined]


def test_sas_refused_again_after_renewal_is_access_denied(vault: Vault, stream: str, sas: Sas) -> None:
    write(vault, stream, texts(1))
    provider = sas(stream, expires_in=timedelta(minutes=-1), claims=[timedelta(minutes=10)])
    with pytest.raises(AccessDenied, match="even after renewing"):
        SasBlob(stream, provider).state()


def _corrupt_first_value(vault: Vault, stream: str) -> None:
    client = cast(StreamBlob, vault.blob(stream)).client
    page = bytearray(client.download_blob(offset=0, length=512).readall())
    page[40] ^= 0xFF  # inside the first record's value: the checksum no longer matches
    client.upload_page(bytes(page), offset=0, length=512)


def test_direct_consumer_raises_on_a_corrupt_record(vault: Vault, stream: str, sas: Sas) -> None:
    write(vault, stream, [NewMessage(b"a-long-enough-value", "k")])
    _corrupt_first_value(vault, stream)
    with pytest.raises(CorruptRecord, match="checksum"):
        list(Consumer.direct(stream, sas(stream)))


# -- verify ---------------------------------------------------------------------------------------
def test_verify_counts_every_record_of_a_healthy_stream(vault: Vault, stream: str, sas: Sas) -> None:
    write(vault, stream, texts(7), texts(5))
    report = verify_log(SasBlob(stream, sas(stream)))
    assert report.ok and report.records == report.expected_count == 12
    assert report.record_bytes == report.committed


def test_verify_reports_a_corrupt_record_and_reads_past_it(vault: Vault, stream: str, sas: Sas) -> None:
    # format 1: one record per message, so the four after the damaged one survive (a damaged
    # format 2 unit is lost whole: tests/test_unitformat.py)
    write(vault, stream, [NewMessage(b"a-long-enough-value", "k"), *texts(4)], record_format=1)
    _corrupt_first_value(vault, stream)
    report = verify_log(SasBlob(stream, sas(stream)))
    assert not report.ok and report.records == 4
    assert report.problems[0].offset == 0 and "corrupt" in report.problems[0].what


# -- producer on a mock transport ------------------------------------------------------------------
class FakeVault:
    """A mock transport answering POSTs like the API does; it can fail the first requests."""

    def __init__(self, fail_first: int = 0, status: int = 503, retry_after: str | None = "0") -> None:
        self.fail_first = fail_first
        self.status = status
        self.retry_after = retry_after
        self.requests: list[httpx.Request] = []
        self.staged: dict[str, list[dict[str, object]]] = {}
        self.lock = threading.Lock()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        with self.lock:
            self.requests.append(request)
            if len(self.requests) <= self.fail_first:
                headers = {"Retry-After": self.retry_after} if self.retry_after is not None else {}
                code = "unavailable" if self.status in (429, 503) else "bad_request"
                return httpx.Response(self.status, json={"error": code, "message": "no"}, headers=headers)
            key = request.headers["idempotency-key"]
            messages = json.loads(request.content)["messages"]
            self.staged.setdefault(key, messages)
        return httpx.Response(
            202, json={"batch_id": key[:32], "stream": "s", "status": "staged", "count": len(messages)}
        )

    def api(self, retry: RetryPolicy = FAST_RETRY) -> ApiClient:
        return ApiClient("http://vault.test", "k", transport=httpx.MockTransport(self), retry=retry)

    @property
    def values(self) -> list[object]:
        return [m["value"] for batch in self.staged.values() for m in batch]


@pytest.fixture
def fake() -> Iterator[FakeVault]:
    yield FakeVault()


def test_producer_cuts_batches_by_message_count(fake: FakeVault) -> None:
    with Producer(api=fake.api(), batch_max_messages=10, linger=5) as producer:
        for i in range(25):
            producer.send("s", f"v{i}")
    assert [len(b) for b in fake.staged.values()] == [10, 10, 5]


def test_producer_cuts_batches_by_body_size(fake: FakeVault) -> None:
    with Producer(api=fake.api(), batch_max_bytes=2048, linger=5) as producer:
        for _ in range(10):
            producer.send("s", "x" * 500)
    assert all(len(r.content) <= 2048 for r in fake.requests) and len(fake.requests) >= 3


def test_producer_sends_a_lingering_batch_without_flush(fake: FakeVault) -> None:
    producer = Producer(api=fake.api(), linger=0.05)
    result = producer.send("s", "lonely")
    assert result.result(timeout=5).status == "staged"
    producer.close()


def test_flush_sends_before_linger_is_up(fake: FakeVault) -> None:
    producer = Producer(api=fake.api(), linger=60)
    producer.send("s", "now")
    started = time.monotonic()
    producer.flush(timeout=5)
    assert time.monotonic() - started < 5 and fake.values == ["now"]
    producer.close()


def test_retried_batch_keeps_its_idempotency_key(fake: FakeVault) -> None:
    fake.fail_first = 2
    with Producer(api=fake.api()) as producer:
        result = producer.send("s", "once")
    assert result.result().status == "staged"
    assert len({r.headers["idempotency-key"] for r in fake.requests}) == 1 and len(fake.requests) == 3


@pytest.mark.parametrize("status", [500, 501, 505])
def test_any_5xx_under_a_post_is_retried_with_the_same_key(fake: FakeVault, status: int) -> None:
    """A worker that dies under a POST makes the host answer 500: the batch may or may not be
    staged, and the key makes a retry safe either way."""
    fake.fail_first, fake.status = 1, status
    with Producer(api=fake.api()) as producer:
        result = producer.send("s", "once")
    assert result.result().status == "staged" and fake.values == ["once"]
    assert len(fake.requests) == 2 and len({r.headers["idempotency-key"] for r in fake.requests}) == 1


def test_a_post_whose_connection_drops_is_retried_with_the_same_key(fake: FakeVault) -> None:
    def drop_the_first(request: httpx.Request) -> httpx.Response:
        if not fake.requests:
            fake.requests.append(request)
            raise httpx.RemoteProtocolError(
                "Server disconnected without sending a response.", request=request
            )
        return fake(request)

    api = ApiClient("http://vault.test", "k", transport=httpx.MockTransport(drop_the_first), retry=FAST_RETRY)
    with Producer(api=api) as producer:
        assert producer.send("s", "once").result().status == "staged"
    assert len(fake.requests) == 2 and len({r.headers["idempotency-key"] for r in fake.requests}) == 1


def test_a_500_to_a_read_is_not_retried() -> None:
    calls: list[httpx.Request] = []

    def fail(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(500, json={"error": "internal", "message": "no"})

    api = ApiClient("http://vault.test", "k", transport=httpx.MockTransport(fail), retry=FAST_RETRY)
    with pytest.raises(ApiError):
        api.stream("s")
    assert len(calls) == 1


def test_retry_after_is_honoured(fake: FakeVault) -> None:
    fake.fail_first, fake.retry_after = 1, "0.3"
    started = time.monotonic()
    with Producer(api=fake.api()) as producer:
        producer.send("s", "later").result(timeout=5)
    assert time.monotonic() - started >= 0.3


def test_batch_fails_once_retries_are_spent(fake: FakeVault) -> None:
    fake.fail_first = 100
    with Producer(api=fake.api(RetryPolicy(attempts=2, base=0.001))) as producer:
        result = producer.send("s", "doomed")
    assert isinstance(result.exception(), Exception) and producer.stats().failed == 1


def test_bad_request_is_not_retried(fake: FakeVault) -> None:
    fake.fail_first, fake.status = 1, 400
    with Producer(api=fake.api()) as producer:
        result = producer.send("s", "bad")
    with pytest.raises(ApiBadRequest):
        result.result()
    assert len(fake.requests) == 1


def test_message_offsets_follow_record_sizes_in_the_batch() -> None:
    sizes = [
        len(encode([m], 0, 0))
        for m in (NewMessage(b"a", "k1"), NewMessage(b"bb", ""), NewMessage(b"\xff", b"\x00"))
    ]
    answer = {
        "batch_id": "b",
        "stream": "s",
        "status": "committed",
        "count": 3,
        "first_offset": 1000,
        "next_offset": 1000 + sum(sizes),  # format 1 records: the offsets follow from their sizes
        "timestamp": 1,
    }
    committed = httpx.MockTransport(lambda r: httpx.Response(200, json=answer))
    api = ApiClient("http://vault.test", transport=committed)
    with Producer(api=api, wait=5) as producer:
        results = [producer.send("s", v, key=k) for v, k in (("a", "k1"), ("bb", None), (b"\xff", b"\x00"))]
    assert [r.result().offset for r in results] == [1000, 1000 + sizes[0], 1000 + sizes[0] + sizes[1]]


def test_message_offsets_follow_the_pieces_of_a_format_2_batch_without_a_read() -> None:
    answer = {
        "batch_id": "b",
        "stream": "s",
        "status": "committed",
        "count": 3,
        "first_offset": 1000,
        "next_offset": 1250,
        "timestamp": 1,
        "pieces": [[1000, 2], [1200, 1]],  # two units: the second begins at 1200
    }
    asked: list[str] = []

    def committed(request: httpx.Request) -> httpx.Response:
        asked.append(request.method)
        return httpx.Response(200, json=answer)

    api = ApiClient("http://vault.test", transport=httpx.MockTransport(committed))
    with Producer(api=api, wait=5) as producer:
        results = [producer.send("s", v) for v in ("a", "b", "c")]
    assert [r.result().offset for r in results] == [1000, 1001, 1200]
    assert asked == ["POST"]


def test_an_answer_that_is_not_a_batch_status_fails_the_messages_clearly() -> None:
    odd = httpx.MockTransport(lambda r: httpx.Response(202, json={"stream": "s", "count": 1}))
    with Producer(api=ApiClient("http://vault.test", transport=odd)) as producer:
        result = producer.send("s", "a")
    with pytest.raises(ApiError, match="not a batch status") as caught:
        result.result()
    assert caught.value.code == "bad_answer" and result.batch_id is None


@pytest.mark.parametrize(
    "setting, fragment",
    [
        ({"linger": -1}, "linger must be 0-60 seconds"),
        ({"linger": 61}, "linger must be 0-60 seconds"),
        ({"max_in_flight": 0}, "max_in_flight must be 1-64"),
        ({"max_in_flight": 65}, "max_in_flight must be 1-64"),
        ({"wait": 61}, "wait must be 0-60 seconds"),
    ],
)
def test_producer_settings_out_of_range_are_refused_as_the_cli_refuses_them(
    fake: FakeVault, setting: dict[str, float], fragment: str
) -> None:
    with pytest.raises(ValueError, match=fragment):
        Producer(api=fake.api(), **setting)  # type: ignore[arg-type]


def test_full_buffer_raises_when_asked_not_to_block() -> None:
    gate = threading.Event()

    def slow(request: httpx.Request) -> httpx.Response:
        gate.wait(5)
        return httpx.Response(202, json={"batch_id": "b", "status": "staged"})

    api = ApiClient("http://vault.test", transport=httpx.MockTransport(slow))
    producer = Producer(api=api, max_buffer_bytes=1024, on_full="raise", linger=0)
    with pytest.raises(BufferFull):
        for _ in range(100):
            producer.send("s", "x" * 100)
    gate.set()
    producer.close()


def test_full_buffer_blocks_until_space_frees() -> None:
    gate = threading.Event()

    def slow(request: httpx.Request) -> httpx.Response:
        gate.wait(5)
        return httpx.Response(202, json={"batch_id": "b", "status": "staged"})

    api = ApiClient("http://vault.test", transport=httpx.MockTransport(slow))
    producer = Producer(api=api, max_buffer_bytes=1024, linger=0, block_timeout=5)
    threading.Timer(0.3, gate.set).start()
    started = time.monotonic()
    for _ in range(30):
        producer.send("s", "x" * 100)
    assert time.monotonic() - started >= 0.25
    producer.close()


def test_oversized_value_is_refused_at_send(fake: FakeVault) -> None:
    with Producer(api=fake.api()) as producer, pytest.raises(MessageTooLarge):
        producer.send("s", b"x" * (1024 * 1024 + 1))


def test_unreachable_endpoint_fails_the_batch_with_a_clear_error() -> None:
    from vault_local.azurite import free_port

    api = ApiClient(f"http://127.0.0.1:{free_port()}", retry=RetryPolicy(attempts=2, base=0.001))
    with Producer(api=api) as producer:
        result = producer.send("s", "x")
    with pytest.raises(EndpointUnreachable, match="cannot reach the vault"):
        result.result()


def test_api_not_found_is_also_stream_not_found() -> None:
    from vault_core.errors import StreamNotFound

    answer = httpx.Response(404, json={"error": "not_found", "message": "stream 'x' does not exist"})
    api = ApiClient("http://vault.test", transport=httpx.MockTransport(lambda r: answer))
    with pytest.raises(StreamNotFound) as caught:
        api.stream("x")
    assert isinstance(caught.value, ApiNotFound) and caught.value.status == 404


# -- small pure parts ------------------------------------------------------------------------------
def test_accumulator_keeps_batches_of_a_busy_stream_in_order() -> None:
    acc = Accumulator(max_messages=1, max_bytes=1 << 20, linger=0, status=lambda stream, batch_id: {})
    for i in range(3):
        acc.add("a", f'{{"value":"{i}"}}'.encode(), 33, 0.0)
    first = acc.take(set())
    assert first is not None and acc.take({"a"}) is None
    second = acc.take(set())
    assert second is not None and second.fragments == [b'{"value":"1"}']


def test_encoded_record_size_matches_the_log_format() -> None:
    for value, key in (("héllo", "clé"), (b"\x00\xff", b"\x01\x02"), ("v", None)):
        body, key_len, value_len = encode_message(value, key)
        new = NewMessage(value.encode() if isinstance(value, str) else value, key if key is not None else "")
        assert HEADER_SIZE + key_len + value_len == len(encode([new], 0, 0))
        doc = json.loads(body)
        sent = base64.b64decode(doc["value"]) if doc.get("encoding") == "base64" else doc["value"].encode()
        assert sent == new.value


def test_times_parse_from_millis_iso_and_datetime() -> None:
    assert to_millis("1700000000000") == 1_700_000_000_000
    assert to_millis("2023-11-14T22:13:20Z") == 1_700_000_000_000
    assert to_millis(datetime(2023, 11, 14, 22, 13, 20)) == 1_700_000_000_000


def test_retry_after_parses_seconds_and_http_dates() -> None:
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # in the past
    assert parse_retry_after("soon") is None


def test_ndjson_input_is_detected_from_the_first_line() -> None:
    lines = [b'{"key": "k", "value": "v"}\n', b'{"value": {"n": 1}}\n', b"\n"]
    assert [(m.key, m.value) for m in read_messages(lines)] == [("k", "v"), (None, '{"n":1}')]


def test_plain_lines_are_messages_with_the_given_key() -> None:
    assert [(m.key, m.value) for m in read_messages([b"a\n", b"\n", b"b\r\n"], key="K")] == [
        ("K", b"a"),
        ("K", b"b"),
    ]


# -- CLI argument handling -------------------------------------------------------------------------
@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def run(
    runner: CliRunner, *args: str, env: dict[str, str] | None = None, input: str | None = None
) -> tuple[int, str, str]:
    # The caller's environment must not leak in: unset the vault's variables unless a test sets them.
    clean: dict[str, str | None] = {"VAULT_URL": None, "VAULT_KEY": None, "VAULT_STORAGE_CONNECTION": None}
    result = runner.invoke(cli, list(args), env={**clean, **(env or {})}, input=input, prog_name="vault")
    return result.exit_code, result.stdout, result.stderr


COMMANDS = [
    "",
    "produce",
    "consume",
    "streams",
    "info",
    "groups",
    "export",
    "verify",
    "poison",
    "poison list",
    "poison replay",
    "capacity",
    "whoami",
]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_naming_what_each_value_is(runner: CliRunner, command: str) -> None:
    code, out, _ = run(runner, *command.split(), "--help")
    assert code == 0 and "Usage: " in out
    # click's fallbacks ("INTEGER RANGE", "FLOAT") say a value's type, not what it is
    assert not re.search(r"\b(INTEGER|FLOAT)\b|\bRANGE\b", out), out


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["consume"], "Missing argument 'STREAM'"),
        (["consume", "bad/name", "--url", "http://x"], "invalid stream name"),
        (["consume", "s", "--from", "-3", "--url", "http://x"], "is not an offset"),
        (["consume", "s", "--at", "yesterday", "--url", "http://x"], "nor ISO 8601"),
        (["consume", "s", "--from", "1", "--at", "5", "--url", "http://x"], "--from or --at, not both"),
        (["consume", "s", "--format", "xml", "--url", "http://x"], "Invalid value for '--format'"),
        (["consume", "s"], "no vault URL"),
        (["consume", "s", "--group", "g", "--url", "http://x"], "need the checkpoint storage"),
        (["streams", "--url", "ftp://x"], "invalid vault URL"),
        (["export", "s", "--to", "out.csv", "--url", "http://x"], "cannot tell the export format"),
        (["frobnicate"], "No such command"),
        (["poison", "replay", "--stream", "bad/name", "--url", "http://x"], "invalid stream name"),
        (["poison", "list", "--batch", "a:b", "--url", "http://x"], "invalid batch id"),
        (["poison", "replay"], "no vault URL"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(runner: CliRunner, args: list[str], fragment: str) -> None:
    code, out, err = run(runner, *args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("vault: error: ") and fragment in err


def test_a_connection_option_after_the_command_wins_and_defaults_change_nothing(runner: CliRunner) -> None:
    import click

    from vault_client.cli.settings import connection_options, settings

    @click.group()
    @connection_options(top=True)
    def group() -> None:
        pass

    @group.command()
    @connection_options()
    def show() -> None:
        s = settings()
        click.echo(f"{s.timeout} {s.retries} {s.checkpoint_table} {s.quiet}")

    def shown(*args: str, env: dict[str, str] | None = None) -> str:
        return runner.invoke(group, list(args), env=env).output

    assert shown("show") == "30.0 3 mvcheckpoints False\n"
    assert (
        shown("--timeout", "5", "--retries", "1", "-q", "show", "--retries", "2")
        == "5.0 2 mvcheckpoints True\n"
    )
    assert shown("show", env={"VAULT_CHECKPOINT_TABLE": "t"}) == "30.0 3 t False\n"
    assert shown("--checkpoint-table", "u", "show", env={"VAULT_CHECKPOINT_TABLE": "t"}) == "30.0 3 u False\n"


def test_unreachable_endpoint_is_one_line_and_exit_1(runner: CliRunner) -> None:
    from vault_local.azurite import free_port

    code, _, err = run(runner, "--retries", "0", "info", "s", "--url", f"http://127.0.0.1:{free_port()}")
    assert code == 1 and err.count("\n") == 1 and "cannot reach the vault" in err


def test_url_comes_from_the_environment(runner: CliRunner) -> None:
    from vault_local.azurite import free_port

    port = free_port()
    code, _, err = run(runner, "--retries", "0", "streams", env={"VAULT_URL": f"http://127.0.0.1:{port}"})
    assert code == 1 and f"127.0.0.1:{port}/api" in err


def test_groups_lists_lag_from_checkpoint_storage(
    runner: CliRunner, azurite: Azurite, store: CheckpointStore, stream: str
) -> None:
    store.save("g-cli", stream, 10, etag=None, now_ms=0)
    answer = httpx.Response(200, json={"stream": stream, "committed": 110, "count": 3})
    ApiClient_init = ApiClient.__init__

    def with_mock(self: ApiClient, *a: object, **kw: object) -> None:
        kw["transport"] = httpx.MockTransport(lambda r: answer)
        ApiClient_init(self, *a, **kw)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ApiClient, "__init__", with_mock)
        code, out, _ = run(
            runner,
            "groups",
            "g-cli",
            "--json",
            "--url",
            "http://vault.test",
            env={"VAULT_STORAGE_CONNECTION": azurite.connection_string},
        )
    [row] = json.loads(out)
    assert code == 0 and (row["checkpoint"], row["committed"], row["lag"]) == (10, 110, 100)
