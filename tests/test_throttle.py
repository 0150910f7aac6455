"""The throttling front's contract: each of Azure's targets per partition, each error shape, the factor.

The front runs in-process in front of the session's Azurite with a manual clock, so a bucket
fills only when a test moves time: no test here waits or depends on the machine's speed.
"""

from __future__ import annotations

import json
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from typing import Any

import pytest
from azure.core.exceptions import HttpResponseError
from azure.data.tables import TableServiceClient
from azure.storage.blob import BlobServiceClient
from azure.storage.queue import QueueServiceClient

from vault_core.errors import StorageUnavailable
from vault_core.translation import error_code, translate_errors
from vault_local.azurite import Azurite
from vault_local.throttle import (
    Charge,
    Limiter,
    Targets,
    ThrottleProcess,
    ThrottlingFront,
    TokenBucket,
    charges,
    queue_operation,
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def front_for(azurite: Azurite, clock: Clock, **targets: float) -> ThrottlingFront:
    upstream = {"blob": azurite.blob_port, "queue": azurite.queue_port, "table": azurite.table_port}
    return ThrottlingFront(upstream, Targets(**targets), clock=clock)  # type: ignore[arg-type]


@pytest.fixture
def queue_front(azurite: Azurite, clock: Clock) -> Iterator[ThrottlingFront]:
    """Per queue 2,000 / 1,000 = 2 messages/s; the account's 20/s does not bind first."""
    with front_for(azurite, clock, factor=1000) as front:
        yield front


def name() -> str:
    return f"th{uuid.uuid4().hex[:10]}"


def test_a_queue_takes_its_target_then_answers_503_server_busy(
    queue_front: ThrottlingFront, clock: Clock
) -> None:
    service = QueueServiceClient.from_connection_string(queue_front.connection_string(), retry_total=0)
    hot, other = service.get_queue_client(name()), service.get_queue_client(name())
    hot.create_queue()  # 1 of the queue's 2 per second
    hot.send_message("a")
    with pytest.raises(HttpResponseError) as refused:
        hot.send_message("b")
    assert refused.value.status_code == 503
    assert error_code(refused.value) == "ServerBusy"
    other.create_queue()  # another queue is another partition
    clock.now += 0.5  # half a second: one more message
    hot.send_message("c")
    assert queue_front.limiter.stats()["queue_messages"][f"devstoreaccount1/{hot.queue_name}"] == {
        "admitted": 3,
        "refused": 1,
    }
    clock.now += 0.5
    assert hot.receive_message() is not None and other.receive_message() is None  # one has none
    assert queue_front.operations == {
        "send admitted": 2,
        "send refused": 1,
        "receive admitted": 1,
        "receive empty admitted": 1,
    }


@pytest.mark.parametrize(
    ("method", "path", "operation"),
    [
        ("POST", "/acct/q/messages?visibilitytimeout=5", "send"),
        ("GET", "/acct/q/messages?numofmessages=32", "receive"),
        ("GET", "/acct/q/messages?peekonly=true", None),
        ("DELETE", "/acct/q/messages/id-1?popreceipt=r", "delete"),
        ("PUT", "/acct/q/messages/id-1?popreceipt=r&visibilitytimeout=15", "update"),
        ("PUT", "/acct/q", None),  # creating the queue
        ("GET", "/acct/q?comp=metadata", None),
    ],
)
def test_queue_requests_are_counted_by_the_message_operation_they_are(
    method: str, path: str, operation: str | None
) -> None:
    assert queue_operation(method, path) == operation


def test_the_account_target_binds_across_its_queues(azurite: Azurite, clock: Clock) -> None:
    with front_for(azurite, clock, factor=1000, queue_messages=1e9) as front:  # account: 20/s
        service = QueueServiceClient.from_connection_string(front.connection_string(), retry_total=0)
        queues = [service.get_queue_client(name()) for _ in range(20)]
        for q in queues:
            q.create_queue()
        with pytest.raises(HttpResponseError) as refused:
            queues[0].send_message("x")
        assert (refused.value.status_code, error_code(refused.value)) == (503, "ServerBusy")
        assert "over the account limit" in str(refused.value.message)
        clock.now += 0.1  # 2 requests' worth
        queues[1].send_message("x")
        queues[2].send_message("x")
        with pytest.raises(HttpResponseError):
            queues[3].send_message("x")


def test_a_table_partition_takes_its_entities_and_a_batch_costs_one_per_entity(
    azurite: Azurite, clock: Clock
) -> None:
    with front_for(azurite, clock, factor=400) as front:  # a partition: 5 entities/s; the account 50/s
        service = TableServiceClient.from_connection_string(front.connection_string(), retry_total=0)
        table = service.create_table(name())
        table.submit_transaction([("upsert", {"PartitionKey": "hot", "RowKey": str(i)}) for i in range(4)])
        table.upsert_entity({"PartitionKey": "hot", "RowKey": "4"})  # the 5th entity
        with pytest.raises(HttpResponseError) as refused:
            table.get_entity("hot", "0")
        assert (refused.value.status_code, error_code(refused.value)) == (503, "ServerBusy")
        table.upsert_entity({"PartitionKey": "cold", "RowKey": "0"})  # another partition
        assert len(list(table.query_entities("PartitionKey eq 'cold'"))) == 1
        clock.now += 1.0
        assert table.get_entity("hot", "4")["RowKey"] == "4"
        stats = front.limiter.stats()["table_partition_entities"]
        assert stats[f"devstoreaccount1/{table.table_name}/hot"] == {"admitted": 3, "refused": 1}
        assert stats[f"devstoreaccount1/{table.table_name}/cold"] == {"admitted": 2, "refused": 0}


def test_a_blob_takes_its_requests_and_its_bytes(azurite: Azurite, clock: Clock) -> None:
    # Per blob 500 / 100 = 5 requests/s and 0.6 MiB/s.
    with front_for(azurite, clock, factor=100) as front:
        service = BlobServiceClient.from_connection_string(front.connection_string(), retry_total=0)
        container = service.create_container(name())
        hot = container.get_blob_client("hot")
        hot.upload_blob(b"x" * 10, overwrite=True)
        for _ in range(4):
            hot.get_blob_properties()
        with pytest.raises(HttpResponseError) as refused:
            hot.get_blob_properties()
        assert (refused.value.status_code, error_code(refused.value)) == (503, "ServerBusy")
        big = container.get_blob_client("big")
        big.upload_blob(b"y" * 1_000_000)  # more than a full bucket of bytes: let through, in debt
        with pytest.raises(HttpResponseError) as over_bytes:
            big.get_blob_properties()
        assert error_code(over_bytes.value) == "ServerBusy"
        clock.now += 0.2  # one request's worth, but the bytes are still owed
        with pytest.raises(HttpResponseError):
            big.get_blob_properties()
        hot.get_blob_properties()  # the other blob has its request again
        clock.now += 1.0
        big.get_blob_properties()


@pytest.mark.parametrize("service", ["blob", "queue"])
def test_blob_and_queue_refusals_carry_azure_headers_and_an_xml_error(
    azurite: Azurite, clock: Clock, service: str
) -> None:
    with front_for(azurite, clock, factor=1e9) as front:  # every bucket holds one token
        client = (
            QueueServiceClient.from_connection_string(
                front.connection_string(), retry_total=0
            ).get_queue_client(name())
            if service == "queue"
            else BlobServiceClient.from_connection_string(front.connection_string(), retry_total=0)
        )
        call = client.get_queue_properties if service == "queue" else client.get_service_properties  # type: ignore[union-attr]
        try:
            call()
        except HttpResponseError:
            pass  # the queue does not exist: admitted, Azurite's 404
        with pytest.raises(HttpResponseError) as refused:
            call()
    response: Any = refused.value.response
    assert response is not None
    assert response.status_code == 503
    assert response.headers["x-ms-error-code"] == "ServerBusy"
    assert response.headers["x-ms-request-id"]
    assert response.headers["Content-Type"] == "application/xml"
    error = ET.fromstring(response.text())
    assert error.findtext("Code") == "ServerBusy"
    assert (error.findtext("Message") or "").startswith(
        "Operations per second is over the account limit.\nRequestId:"
    )


def test_table_refusals_carry_an_odata_json_error(azurite: Azurite, clock: Clock) -> None:
    with front_for(azurite, clock, factor=1e9) as front:
        service = TableServiceClient.from_connection_string(front.connection_string(), retry_total=0)
        list(service.list_tables())
        with pytest.raises(HttpResponseError) as refused:
            list(service.list_tables())
    response: Any = refused.value.response
    assert response is not None
    assert (response.status_code, response.headers["x-ms-error-code"]) == (503, "ServerBusy")
    assert response.headers["Content-Type"].startswith("application/json;odata=minimalmetadata")
    error = json.loads(response.text())["odata.error"]
    assert error["code"] == "ServerBusy"
    assert error["message"]["lang"] == "en-US"
    assert error_code(refused.value) == "ServerBusy"


def test_every_nth_refusal_is_500_operation_timed_out_and_both_are_retriable(
    azurite: Azurite, clock: Clock
) -> None:
    with front_for(azurite, clock, factor=1e9, timeout_every=2) as front:
        queue = QueueServiceClient.from_connection_string(
            front.connection_string(), retry_total=0
        ).get_queue_client(name())
        queue.create_queue()
        answers = []
        for _ in range(4):
            with pytest.raises(HttpResponseError) as refused:
                queue.send_message("x")
            answers.append((refused.value.status_code, error_code(refused.value)))
            with pytest.raises(StorageUnavailable), translate_errors():
                raise refused.value
    assert answers == [(503, "ServerBusy"), (500, "OperationTimedOut")] * 2


def test_the_factor_divides_every_target_and_every_target_is_a_setting() -> None:
    targets = Targets.from_env({"MV_THROTTLE_FACTOR": "40", "MV_THROTTLE_QUEUE_MESSAGES": "1000"})
    assert targets.rate("queue_messages") == 25.0
    assert targets.rate("account_requests") == 500.0
    assert targets.rate("table_partition_entities") == 50.0
    assert targets.rate("blob_requests") == 12.5
    assert targets.rate("blob_bytes") == 60 * 1024 * 1024 / 40
    assert Targets.from_env({}, factor=10).rate("queue_messages") == 200.0
    with pytest.raises(ValueError):
        Targets.from_env({"MV_THROTTLE_FACTOR": "0"})


def test_a_bucket_refills_at_its_scaled_rate() -> None:
    now = [0.0]
    bucket = TokenBucket(rate=2560 / 20, burst=128, clock=lambda: now[0])
    admitted = 0
    for step in range(1280):  # 10 s in steps of 1/128 s, with 10 requests offered at each
        now[0] = step / 128
        for _ in range(10):
            if bucket.has(1):
                bucket.take(1)
                admitted += 1
    assert admitted == 128 + 1279  # the full bucket, then 128/s for 1279/128 s


def test_a_full_bucket_counts_the_tokens_nobody_asked_for() -> None:
    now = [0.0]
    bucket = TokenBucket(rate=2, burst=2, clock=lambda: now[0])
    now[0] = 3.0  # full from the start: 3 s of tokens lost
    assert bucket.unused_until_now() == 6
    bucket.take(2)
    now[0] = 4.0  # one second refills it exactly: nothing more lost
    assert bucket.unused_until_now() == 6
    now[0] = 4.5
    assert bucket.unused_until_now() == 7
    limiter = Limiter(Targets(factor=1000), clock=lambda: now[0])  # a queue 2 a second
    assert limiter.admit([Charge("queue_messages", "a/q")]) is None
    now[0] += 10
    assert limiter.unused()["queue_messages"]["a/q"] == 19  # 2 a second for 10 s, less the one taken


@pytest.mark.parametrize(
    ("service", "method", "path", "body", "expected"),
    [
        ("queue", "POST", "/acct/q1/messages?timeout=5", b"", [("queue_messages", "acct/q1", 1)]),
        ("queue", "GET", "/acct?comp=list", b"", []),
        (
            "blob",
            "PUT",
            "/acct/c/dir/b?comp=page",
            b"x" * 512,
            [("blob_requests", "acct/c/dir/b", 1), ("blob_bytes", "acct/c/dir/b", 512)],
        ),
        ("blob", "GET", "/acct/c?restype=container&comp=list", b"", []),
        (
            "table",
            "GET",
            "/acct/t(PartitionKey='p%201',RowKey='r')",
            b"",
            [("table_partition_entities", "acct/t/p 1", 1)],
        ),
        (
            "table",
            "POST",
            "/acct/t",
            b'{"PartitionKey":"p2","RowKey":"r"}',
            [("table_partition_entities", "acct/t/p2", 1)],
        ),
        (
            "table",
            "GET",
            "/acct/t()?$filter=PartitionKey%20eq%20'p3'",
            b"",
            [("table_partition_entities", "acct/t/p3", 1)],
        ),
        ("table", "GET", "/acct/t()", b"", [("table_partition_entities", "acct/t/*", 1)]),
        ("table", "POST", "/acct/Tables", b'{"TableName":"t"}', []),
    ],
)
def test_requests_are_charged_to_the_partitions_azure_defines(
    service: str, method: str, path: str, body: bytes, expected: list[tuple[str, str, float]]
) -> None:
    got = charges(service, method, path, {}, body)
    assert got[0] == Charge("account_requests", "acct")
    assert [(c.target, c.partition, c.cost) for c in got[1:]] == expected


def test_a_ranged_read_is_charged_its_length() -> None:
    got = charges("blob", "GET", "/acct/c/b", {"x-ms-range": "bytes=0-4194303"}, b"")
    assert got[-1] == Charge("blob_bytes", "acct/c/b", 4 * 1024 * 1024)


def test_a_refused_request_takes_no_tokens() -> None:
    now = [0.0]
    limiter = Limiter(Targets(factor=1000), clock=lambda: now[0])  # account 20, queue 2
    hot = [Charge("account_requests", "a"), Charge("queue_messages", "a/q")]
    assert [limiter.admit(hot) is None for _ in range(4)] == [True, True, False, False]
    other = [Charge("account_requests", "a"), Charge("queue_messages", "a/r")]
    assert all(limiter.admit(other) is None for _ in range(2))  # the refusals took no account tokens


def test_a_new_factor_rescales_the_buckets_made_so_far_and_keeps_their_counts() -> None:
    now = [0.0]
    limiter = Limiter(Targets(factor=1000), clock=lambda: now[0])  # account 20, queue 2
    hot = [Charge("account_requests", "a"), Charge("queue_messages", "a/q")]
    assert [limiter.admit(hot) is None for _ in range(3)] == [True, True, False]
    limiter.rescale(100)  # queue 20 a second
    now[0] = 0.5
    assert [limiter.admit(hot) is None for _ in range(11)] == [True] * 10 + [False]
    assert limiter.stats()["queue_messages"]["a/q"] == {"admitted": 12, "refused": 2}
    with pytest.raises(ValueError):
        limiter.rescale(0)


def test_the_front_runs_as_a_process_of_its_own_and_reports_its_counts(azurite: Azurite) -> None:
    upstream = {"blob": azurite.blob_port, "queue": azurite.queue_port, "table": azurite.table_port}
    front = ThrottleProcess(upstream, {"MV_THROTTLE_FACTOR": "1e9"}).start()  # one token per bucket
    try:
        queue = QueueServiceClient.from_connection_string(front.connection_string(), retry_total=0)
        client = queue.get_queue_client(name())
        client.create_queue()
        with pytest.raises(HttpResponseError) as refused:
            client.send_message("x")
        assert (refused.value.status_code, error_code(refused.value)) == (503, "ServerBusy")
        stats = front.stats()
        assert stats["account_requests"]["devstoreaccount1"] == {"admitted": 1, "refused": 1}
        assert stats["queue_messages"][f"devstoreaccount1/{client.queue_name}"] == {
            "admitted": 1,
            "refused": 0,
        }
        # A bucket of one token refills in 1e9 / 2,000 s: nothing it could not hold yet.
        assert front.unused()["queue_messages"][f"devstoreaccount1/{client.queue_name}"] == 0
        front.set_factor(1)  # Azure's own targets from now on, in the buckets already made too
        client.send_message("x")
        assert front.stats()["account_requests"]["devstoreaccount1"] == {"admitted": 2, "refused": 1}
    finally:
        front.stop()
    assert front.proc is None


def test_a_client_that_goes_away_mid_answer_is_not_reported_but_a_bug_is(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from http.server import BaseHTTPRequestHandler

    from vault_local.throttle import QuietServer

    with QuietServer(("127.0.0.1", 0), BaseHTTPRequestHandler) as server:
        for error in (
            BrokenPipeError(32, "Broken pipe"),
            ConnectionResetError(104, "reset"),
            KeyError("bug"),
        ):
            try:
                raise error
            except Exception:
                server.handle_error(None, ("127.0.0.1", 1))
    reported = capsys.readouterr().err
    assert "KeyError" in reported
    assert "BrokenPipe" not in reported and "ConnectionReset" not in reported
