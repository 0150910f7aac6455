"""Acknowledged means kept: batch identity and idempotency, each with the real race or fault.

Real HTTP against the local host, real Azurite. A producer told 202 must find its batch in
its stream exactly once, with its own messages.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from conftest import isolated_host
from fault_proxy import FaultProxy
from test_app import read_all

from vault_app.config import load_settings
from vault_app.services import Services
from vault_core.azure import azurite_connection_string
from vault_core.recordformat import NewMessage
from vault_core.vault import Vault
from vault_core.writer import Batch, WriterSettings
from vault_local.azurite import Azurite
from vault_local.process import HostProcess, local_env


@pytest.fixture(scope="module")
def http(vault_host: HostProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=vault_host.url, timeout=60, params={"code": vault_host.key}) as client:
        yield client


def big(tag: str) -> list[dict[str, str]]:
    """About 70 KB: over the inline limit, so the batch travels as a claim-check blob."""
    return [{"key": tag, "value": f"{tag}-{i}-" + "x" * 10_000} for i in range(7)]


def at_once(calls: list[Callable[[], httpx.Response]]) -> list[httpx.Response]:
    """Run the calls in threads released together, so their storage requests interleave."""
    barrier = threading.Barrier(len(calls))
    out: list[httpx.Response | None] = [None] * len(calls)

    def run(i: int) -> None:
        barrier.wait()
        out[i] = calls[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r is not None for r in out)
    return [r for r in out if r is not None]


def committed(http: httpx.Client, stream: str, batch_id: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        doc = dict(http.get(f"/streams/{stream}/batches/{batch_id}").json())
        if doc.get("status") == "committed" or time.monotonic() > deadline:
            return doc
        time.sleep(0.2)


def values(http: httpx.Client, stream: str) -> list[str]:
    return [m["value"] for m in read_all(http, stream)]


TABLE_PREFIX = "mvproxy"
"""The tables of the host behind the fault proxy: its batch rows and stream index are its own."""


@pytest.fixture(scope="module")
def behind_a_proxy(
    azurite: Azurite, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[FaultProxy, httpx.Client]]:
    """A host of its own whose table requests (batch status, index) pass through a fault proxy;
    one for the module's fault tests (it runs on one worker), each with a rule of its own.

    Its storage timings are shorter than the product's, so that a fault costs seconds less and
    is handled the same: a request gives up retrying what the proxy fails once its storage
    budget is spent (2 s here, not 4), and a batch the writer could not append because of it
    is tried again after 1 s, not 5."""
    proxy = FaultProxy(azurite.table_port).start()
    via_proxy = azurite_connection_string(azurite.blob_port, azurite.queue_port, proxy.port)
    host = isolated_host(
        azurite,
        tmp_path_factory.mktemp("proxied"),
        settings={
            "VaultStorage": via_proxy,
            "VAULT_TABLE_PREFIX": TABLE_PREFIX,
            "VAULT_REQUEST_BUDGET_SECONDS": "2",
            "VAULT_UNAVAILABLE_RETRY_SECONDS": "1",
        },
    ).start()
    try:
        with httpx.Client(base_url=host.url, timeout=30, params={"code": host.key}) as client:
            yield proxy, client
    finally:
        host.stop()
        proxy.stop()


@pytest.fixture
def proxied(behind_a_proxy: tuple[FaultProxy, httpx.Client]) -> Iterator[tuple[FaultProxy, httpx.Client]]:
    """The module's proxied host, with no rule and no failures noted before and after each test."""
    proxy, client = behind_a_proxy
    proxy.rule = None
    proxy.failed.clear()
    yield proxy, client
    proxy.rule = None


def test_one_batch_id_on_two_streams_at_once_is_two_batches_each_with_its_own_messages(
    http: httpx.Client,
) -> None:
    for _ in range(4):
        batch_id = f"shared-{uuid.uuid4().hex[:8]}"
        streams = [f"ack-{uuid.uuid4().hex[:8]}" for _ in range(2)]
        answers = at_once(
            [
                lambda s=s, b=batch_id: http.post(  # type: ignore[misc]
                    f"/streams/{s}/messages", json={"batch_id": b, "messages": big(s)}
                )
                for s in streams
            ]
        )
        assert [r.status_code for r in answers] == [202, 202], [r.text for r in answers]
        for s in streams:
            assert committed(http, s, batch_id)["status"] == "committed"
            assert values(http, s) == [m["value"] for m in big(s)]  # its own payload, once
        assert http.get(f"/batches/{batch_id}").status_code == 409  # ambiguous without the stream


@pytest.mark.parametrize("size", ["inline", "claim-check"])
def test_concurrent_retries_of_one_batch_commit_it_once(http: httpx.Client, stream: str, size: str) -> None:
    messages = big("r") if size == "claim-check" else [{"value": f"r-{i}"} for i in range(5)]

    def post() -> httpx.Response:
        return http.post(
            f"/streams/{stream}/messages", json={"messages": messages}, headers={"Idempotency-Key": "retry-1"}
        )

    answers = at_once([post] * 6)
    # a retry answered after the first copy committed gets the batch's status then: 200 committed
    assert {r.status_code for r in answers} <= {200, 202}, [r.text for r in answers]
    assert all(r.json()["status"] == "committed" for r in answers if r.status_code == 200)
    ids = {r.json()["batch_id"] for r in answers}
    assert len(ids) == 1
    assert committed(http, stream, ids.pop())["status"] == "committed"
    assert values(http, stream) == [m["value"] for m in messages]


def test_the_same_key_with_other_messages_is_422_and_stages_nothing(http: httpx.Client, stream: str) -> None:
    first = http.post(
        f"/streams/{stream}/messages",
        json={"messages": [{"value": "A"}]},
        headers={"Idempotency-Key": "k1"},
        params={"wait": 20},
    )
    assert first.status_code == 200
    other = http.post(
        f"/streams/{stream}/messages", json={"messages": [{"value": "B"}]}, headers={"Idempotency-Key": "k1"}
    )
    assert other.status_code == 422 and other.json()["error"] == "idempotency_mismatch"
    again = http.post(
        f"/streams/{stream}/messages", json={"messages": [{"value": "A"}]}, headers={"Idempotency-Key": "k1"}
    )
    assert again.status_code == 200 and again.json() == first.json()  # the original answer
    named = http.post(f"/streams/{stream}/messages", json={"batch_id": "b1", "messages": [{"value": "C"}]})
    assert named.status_code == 202
    clash = http.post(f"/streams/{stream}/messages", json={"batch_id": "b1", "messages": [{"value": "D"}]})
    assert clash.status_code == 422
    committed(http, stream, "b1")
    assert values(http, stream) == ["A", "C"]


def test_a_producer_id_cannot_take_over_another_producers_idempotency_key(
    http: httpx.Client, stream: str
) -> None:
    victim = http.post(
        f"/streams/{stream}/messages",
        json={"messages": [{"value": "victim"}]},
        headers={"Idempotency-Key": "v"},
    )
    derived = victim.json()["batch_id"]
    assert derived.startswith("key.")
    hijack = http.post(
        f"/streams/{stream}/messages", json={"batch_id": derived, "messages": [{"value": "attacker"}]}
    )
    assert hijack.status_code == 400 and "batch id" in hijack.json()["message"]
    lookalike = derived.split(".", 1)[1]  # the bare hash is an ordinary producer id: another batch
    other = http.post(
        f"/streams/{stream}/messages", json={"batch_id": lookalike, "messages": [{"value": "other"}]}
    )
    assert other.status_code == 202 and other.json()["batch_id"] == lookalike
    assert committed(http, stream, derived)["status"] == "committed"
    assert committed(http, stream, lookalike)["status"] == "committed"
    assert sorted(values(http, stream)) == ["other", "victim"]


def test_a_202_whose_status_row_could_not_be_marked_still_has_a_status(
    proxied: tuple[FaultProxy, httpx.Client], stream: str
) -> None:
    proxy, client = proxied
    # Every update of a batch status row fails: the row stays as reserved, before the 202.
    proxy.rule = lambda method, path: 503 if method in ("PATCH", "MERGE") and "batches" in path else None
    r = client.post(f"/streams/{stream}/messages", json={"messages": [{"value": "kept"}]})
    assert r.status_code == 202
    assert proxy.failed, "the fault was not injected"
    batch_id = r.json()["batch_id"]
    status = client.get(f"/streams/{stream}/batches/{batch_id}").json()
    assert status["status"] in ("staging", "committed")  # never 404
    assert committed(client, stream, batch_id)["status"] == "committed"
    assert values(client, stream) == ["kept"]


def test_the_catalog_reports_the_commit_record_even_when_the_writer_died_before_refreshing_it(
    http: httpx.Client, vault: Vault, stream: str
) -> None:
    writer = vault.writer(stream, WriterSettings(lease_seconds=15))
    writer.append([Batch([NewMessage(b"one", "k")])])
    writer.append([Batch([NewMessage(b"two", "k"), NewMessage(b"three", "k")])])
    # The writer is now abandoned, as if killed: its catalog row was refreshed after the first
    # commit only (at most once a second), so it is behind the commit record.
    writer._wait_recorded()
    behind = vault.index.catalog_entry(stream)
    assert behind is not None and behind.count == 1
    truth = vault.blob(stream).state()
    listed = {s["stream"]: s for s in http.get("/streams").json()["streams"]}[stream]
    single = http.get(f"/streams/{stream}").json()
    for doc in (listed, single):
        assert (doc["committed"], doc["count"]) == (truth.committed, 3)
        assert doc["last_timestamp"] == truth.last_ts
    writer.close()


def test_a_staged_batch_whose_wait_cannot_read_storage_answers_202_not_503(
    proxied: tuple[FaultProxy, httpx.Client], stream: str
) -> None:
    proxy, client = proxied
    # Staging works; every read of the stream index (where ?wait= looks for the commit) fails.
    index = f"{TABLE_PREFIX}index"
    proxy.rule = lambda method, path: 503 if method == "GET" and index in path else None
    r = client.post(f"/streams/{stream}/messages", json={"messages": [{"value": "w"}]}, params={"wait": 2})
    assert r.status_code == 202 and r.json()["status"] == "staged", r.text
    assert proxy.failed
    proxy.rule = None
    assert committed(client, stream, r.json()["batch_id"])["status"] == "committed"
    assert values(client, stream) == ["w"]


def test_a_batch_its_commit_record_names_is_committed_before_the_index_rows_land(
    azurite: Azurite, stream: str
) -> None:
    """The writer records a commit's batch ids in the index just after its commit record, and a
    ``?wait=`` answers 200 from the record: a status read in between must say committed too
    (vault_app.batches asks the record first), never "staged" after a 200."""
    env = {
        **local_env(azurite.connection_string, "status-test-key-0123456789"),
        "VAULT_QUEUE_PREFIX": "qstatus",
    }
    services = Services(load_settings(env))
    services.ensure()
    with services.vault.writer(stream) as w:
        [first] = w.append([Batch([NewMessage(b"a")], batch_id="first")])
    services.vault.index.index.delete(stream, "bfirst")  # the window: in the record, not yet indexed
    status = services.batch_table.status(stream, "first")
    assert status is not None and status.status == "committed"
    assert (status.first_offset, status.next_offset) == (first.first_offset, first.next_offset)
    # A writer opening the stream records the last commit's batch ids before committing its own.
    with services.vault.writer(stream) as w:
        w.append([Batch([NewMessage(b"b")], batch_id="second")])
    again = services.batch_table.committed(stream, "first")
    assert again is not None and again.first_offset == first.first_offset
    assert services.batch_table.status(stream, "never") is None
