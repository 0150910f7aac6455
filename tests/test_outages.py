"""Storage outages and stalls: fail fast with 503, never 500, and lose or poison nothing.

Every fault here is real: Azurite stopped gracefully and restarted on the same data (an
outage), or frozen with SIGSTOP (a stall: connections hang, as a storage account under
trouble does). Never SIGKILL: Azurite keeps recent writes only in memory.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from conftest import fast_host, isolated_host, key_header, wait_until
from test_app import read_all

from vault_core.azure import StorageAccount
from vault_local.azurite import Azurite
from vault_local.process import HostProcess

# The module runs on one worker, and its tests share one Azurite of their own (on disk, so that it
# can be stopped and started again), which each leaves as it found it: up, not frozen. Each test
# holds an outage or a stall of it for seconds; the outage of any length has its staging queues
# on the session's Azurite, which stays up.
pytestmark = pytest.mark.slow

FAIL_FAST_SECONDS = 5.0
QUEUES = 2
"""Staging queues of the host of the outage of any length: writers on two queues meet it at once
(each queue polled every 200 ms: more would only add idle polling)."""
BUDGET = 2.0
"""The request storage budget of the hosts that only need one shorter than their faults."""


@contextmanager
def own_storage(tmp_path: Path, name: str) -> Iterator[Azurite]:
    storage = Azurite(location=tmp_path / name)
    storage.location.mkdir()
    storage.start()
    try:
        yield storage
    finally:
        if storage.process and storage.process.poll() is None:
            storage.process.send_signal(signal.SIGCONT)  # never leave it frozen
        storage.cleanup()


def timed(call: object) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = call()  # type: ignore[operator]
    return response, time.monotonic() - started


def assert_read_back_once(client: httpx.Client, acked: dict[str, list[str]], timeout: float) -> None:
    """Every acknowledged value of every stream is read back exactly once (waiting for the writer)."""
    deadline = time.monotonic() + timeout
    for stream, expected in acked.items():
        while True:
            got = [m["value"] for m in read_all(client, stream)]
            if len(got) >= len(expected) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert sorted(got) == sorted(expected)


@pytest.fixture(scope="module")
def module_storage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    """The module's Azurite, which its tests stop or freeze and then restart or resume: one start
    for every fault of the module (an Azurite's start is about a CPU-second)."""
    with own_storage(tmp_path_factory.mktemp("outages"), "s") as started:
        yield started


@pytest.fixture
def storage(module_storage: Azurite) -> Iterator[Azurite]:
    """The module's Azurite, left up and running for the next test even when this one fails."""
    yield module_storage
    if module_storage.process is None or module_storage.process.poll() is not None:
        module_storage.start()
    else:
        module_storage.process.send_signal(signal.SIGCONT)


@pytest.fixture(scope="module")
def faulted_host(module_storage: Azurite, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostProcess]:
    host_dir = tmp_path_factory.mktemp("faulted")
    host = fast_host(module_storage.connection_string, host_dir, woken_on_write=True).start()
    yield host
    host.stop()


@pytest.fixture
def faulted(storage: Azurite, faulted_host: HostProcess) -> tuple[Azurite, HostProcess]:
    """A host of its own on the module's Azurite for the 503 and /health test, which leaves the
    storage as it found it (restarted, or resumed): one start for every fault."""
    return storage, faulted_host


@pytest.mark.parametrize("fault", ["stopped", "stalled"])
def test_storage_down_or_stalled_answers_503_with_retry_after_within_5_seconds(
    faulted: tuple[Azurite, HostProcess], stream: str, fault: str
) -> None:
    """And /health, while storage is down, still answers 200 at once: degraded, with the counts
    it cannot read as null (a storage outage must not fail a probe). The host has not read the
    counts before, so none is at hand from earlier: its first read is during the outage."""
    storage, host = faulted
    client = httpx.Client(base_url=host.url, timeout=60, params={"code": host.key})
    up = client.post(f"/streams/{stream}/messages", json={"messages": [{"value": "up"}]}, params={"wait": 20})
    assert up.status_code == 200
    batch = up.json()["batch_id"]
    if fault == "stopped":
        storage.stop()
    else:
        assert storage.process is not None
        storage.process.send_signal(signal.SIGSTOP)
    calls = {
        "POST": lambda: client.post(f"/streams/{stream}/messages", json={"messages": [{"value": "x"}]}),
        "GET messages": lambda: client.get(f"/streams/{stream}/messages", params={"from": 0}),
        "GET stream": lambda: client.get(f"/streams/{stream}"),
        "GET batch": lambda: client.get(f"/streams/{stream}/batches/{batch}"),
    }
    try:
        # All at once: each must fail fast on its own, so none waits for another's 5 s.
        with ThreadPoolExecutor(len(calls)) as pool:
            answers = dict(zip(calls, pool.map(timed, calls.values()), strict=True))
        # Admin: with the counts. (It stopped the storage once more as a test of its own.)
        health = (
            httpx.get(f"{host.url}/health", headers=key_header(host), timeout=30)
            if fault == "stopped"
            else None
        )
    finally:  # the storage as it was found, for the other fault
        if fault == "stopped":
            storage.start()
        else:
            assert storage.process is not None
            storage.process.send_signal(signal.SIGCONT)
    for what, (r, took) in answers.items():
        assert r.status_code == 503, f"{what}: {r.status_code} {r.text}"
        assert r.json()["error"] == "unavailable" and int(r.headers["retry-after"]) > 0
        assert took < FAIL_FAST_SECONDS, f"{what} took {took:.1f}s"
    if health is not None:
        doc = health.json()
        assert health.status_code == 200 and health.elapsed.total_seconds() < 5
        assert doc["status"] == "degraded" and doc["poison_messages"] is None
        assert [q["poison_messages"] for q in doc["queues"]] == [None]
    back = client.post(
        f"/streams/{stream}/messages", json={"messages": [{"value": "back"}]}, params={"wait": 30}
    )
    assert back.status_code == 200
    assert [m["value"] for m in read_all(client, stream)] == ["up", "back"]


def test_a_storage_stall_under_load_answers_503_never_500_and_loses_nothing(
    storage: Azurite, tmp_path: Path
) -> None:
    streams = [f"stall-{uuid.uuid4().hex[:6]}" for _ in range(3)]
    # A request's storage budget of 2 s, not the product's 4: the stall that must outlast
    # it is held for half as long. (Answering within the product's budget is the test above.)
    # Its own staging queues: the module's other host polls the app's own.
    host = fast_host(
        storage.connection_string,
        tmp_path,
        settings={
            "VAULT_REQUEST_BUDGET_SECONDS": str(BUDGET),
            "VAULT_QUEUE_PREFIX": f"q{uuid.uuid4().hex[:8]}",
        },
    ).start()
    statuses: list[int] = []
    failures: list[str] = []
    acked: dict[str, list[str]] = {s: [] for s in streams}
    last_ack: dict[int, float] = {}  # producer: when it was last told 202
    consumed: list[int] = []  # messages the consumer read, per read that succeeded
    stop = threading.Event()

    def producer(p: int) -> None:
        client = httpx.Client(base_url=host.url, timeout=60, params={"code": host.key})
        n = 0
        while not stop.is_set():
            stream = streams[n % len(streams)]
            value = f"p{p}-{n}"
            key = f"p{p}-{n}"
            while True:  # retry with the same key until acknowledged, as a client should
                r = client.post(
                    f"/streams/{stream}/messages",
                    json={"messages": [{"value": value}]},
                    headers={"Idempotency-Key": key},
                )
                statuses.append(r.status_code)
                if r.status_code >= 500 and r.status_code != 503:
                    failures.append(f"POST {r.status_code} {r.text}")
                if r.status_code == 202:
                    acked[stream].append(value)
                    last_ack[p] = time.monotonic()
                    break
                time.sleep(0.2)
            n += 1
            time.sleep(0.1)  # a steady load, not a flood: the stall is the point

    def consumer() -> None:
        client = httpx.Client(base_url=host.url, timeout=60, headers=key_header(host))
        while not stop.is_set():
            r = client.get(f"/streams/{streams[0]}/messages", params={"from": 0})
            statuses.append(r.status_code)
            if r.status_code >= 500 and r.status_code != 503:
                failures.append(f"GET {r.status_code} {r.text}")
            if r.status_code == 200:
                consumed.append(len(r.json()["messages"]))
            time.sleep(0.1)

    threads = [threading.Thread(target=producer, args=(p,)) for p in range(3)]
    threads.append(threading.Thread(target=consumer))
    try:
        for t in threads:
            t.start()
        # Load end to end before the stall: every producer acknowledged, the writer committing.
        wait_until(lambda: len(last_ack) == 3 and any(consumed), what="load before the stall")
        assert storage.process is not None
        storage.process.send_signal(signal.SIGSTOP)
        time.sleep(BUDGET + 1)  # longer than a request's storage budget: answers must be 503
        resumed = time.monotonic()
        storage.process.send_signal(signal.SIGCONT)
        wait_until(
            lambda: all(last_ack.get(p, 0.0) > resumed for p in range(3)),
            what="every producer acknowledged after the stall",
        )
    finally:
        if storage.process is not None:
            storage.process.send_signal(signal.SIGCONT)  # never leave it frozen for the next test
        stop.set()
        for t in threads:
            t.join()
    try:
        assert 503 in statuses, "the stall was not seen"
        traces = [ln for ln in host.lines if "Error" in ln or "Traceback" in ln or "failed" in ln]
        assert not failures, failures + traces[-40:]
        client = httpx.Client(base_url=host.url, timeout=60, headers=key_header(host))
        assert_read_back_once(client, acked, timeout=60)
    finally:
        host.stop()


def test_a_vault_outage_of_any_length_poisons_nothing_and_every_acknowledged_batch_lands_once(
    storage: Azurite, azurite: Azurite, tmp_path: Path
) -> None:
    """The vault account (blobs, tables) stops for OUTAGE s while staging queues stay up.

    The host retries fast and poisons after 3 deliveries (conftest's FAST_RETRY_HOST_JSON),
    so before the writer handed transient failures back, a few seconds of outage were enough
    to poison good batches. 12 s outlasts the writer's retries of one blob call (about 7.5 s)
    and many times the old failure; MV_OUTAGE_SECONDS=180 runs the 3-minute version. This host
    hides a handed-back batch for 1 s (VAULT_UNAVAILABLE_RETRY_SECONDS), not the product's 5:
    the outage outlasts more hand-backs, and the wait for the batches after it is shorter.
    """
    outage = float(os.environ.get("MV_OUTAGE_SECONDS", "12"))
    streams = [f"out-{uuid.uuid4().hex[:6]}" for _ in range(3)]
    # The vault account is the module's Azurite; the staging queues, of their own, are on the
    # session's, which stays up.
    vault, staging = storage, azurite
    prefix = f"q{uuid.uuid4().hex[:8]}"
    host = isolated_host(
        staging,
        tmp_path,
        prefix=prefix,
        settings={
            "VaultStorage": vault.connection_string,
            "VaultStaging0": staging.connection_string,
            "VAULT_UNAVAILABLE_RETRY_SECONDS": "1",
        },
        queues=QUEUES,
    ).start()
    try:
        client = httpx.Client(base_url=host.url, timeout=60, params={"code": host.key})
        acked: dict[str, list[str]] = {s: [] for s in streams}

        def post(stream: str, value: str) -> int:
            r = client.post(f"/streams/{stream}/messages", json={"messages": [{"value": value}]})
            if r.status_code == 202:
                acked[stream].append(value)
            return r.status_code

        for i in range(30):  # a backlog, so the outage catches batches in the queues
            assert post(streams[i % 3], f"before-{i}") == 202
        vault.stop()
        stopped = time.monotonic()
        assert post(streams[0], "during") == 503  # the batch table is in the vault account
        time.sleep(max(0.0, outage - (time.monotonic() - stopped)))  # the 503 took a few of them
        vault.start()
        for i in range(10):
            assert post(streams[i % 3], f"after-{i}") == 202
        assert_read_back_once(client, acked, timeout=90)
        queues = StorageAccount(connection_string=staging.connection_string).queue_service()
        poisoned = [queues.get_queue_client(f"{prefix}-{i}-poison") for i in range(QUEUES)]
        assert sum(q.get_queue_properties().approximate_message_count or 0 for q in poisoned) == 0
        for stream in streams:
            r = client.get(f"/streams/{stream}")
            assert r.json()["count"] == len(acked[stream])
    finally:
        host.stop()
