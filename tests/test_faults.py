"""Fault injection: everything at once, and every acknowledged batch still lands exactly once.

Producers retry with the same Idempotency-Key (alternating between two hosts on the same
storage) while the test SIGKILLs a language worker, SIGKILLs a whole host and restarts it,
and stops Azurite gracefully and restarts it on the same data (an outage; never SIGKILL of
Azurite, which keeps recent writes only in memory). The hosts use conftest's fast-retry
host.json (poison after 3 failed deliveries), so any good batch counted towards poison
would show. Bounded to about 90 s; about 20 s when it passes (its leases run out for real).
"""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest
from conftest import isolated_host, key_header, wait_until
from leases import owner_blobs
from test_app import read_all

from vault_app import envelope
from vault_core.azure import StorageAccount
from vault_core.recordformat import NewMessage
from vault_core.vault import Vault
from vault_local.azurite import Azurite
from vault_local.process import HostProcess

QUEUES = 2
"""Staging queues the two hosts share: one owned by each, so a killed host's queue (and what its
writer had drained) is taken over by the other. More queues only add idle polling."""


@dataclass(frozen=True)
class Acked:
    stream: str
    batch_id: str
    values: tuple[str, ...]


def kill_a_worker(host: HostProcess) -> bool:
    if host.proc is None:
        return False
    workers = psutil.Process(host.proc.pid).children()
    if not workers:
        return False
    # The busiest: a worker that runs the writer, not an idle warm spare.
    os.kill(max(workers, key=lambda w: sum(w.cpu_times()[:2])).pid, signal.SIGKILL)
    return True


@pytest.mark.slow  # the killed writers' leases run out for real: 15 s
def test_kills_and_outages_lose_nothing_duplicate_nothing_and_poison_nothing(tmp_path: Path) -> None:
    streams = [f"f-{uuid.uuid4().hex[:6]}" for _ in range(3)]
    prefix = f"q{uuid.uuid4().hex[:8]}"
    storage = Azurite(location=tmp_path / "storage")
    storage.location.mkdir()
    storage.start()
    # A batch the writer hands back because storage is down is hidden for 1 s, not 5: after the
    # outage, such batches are in before the killed writers' leases have run out.
    retry_soon = {"VAULT_UNAVAILABLE_RETRY_SECONDS": "1"}
    hosts = [
        isolated_host(storage, tmp_path, prefix=prefix, settings=retry_soon, queues=QUEUES) for _ in range(2)
    ]
    acked: list[Acked] = []
    statuses: dict[int | str, int] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def note(status: int | str) -> None:
        with lock:
            statuses[status] = statuses.get(status, 0) + 1

    def progress(batches: int = 8) -> None:
        """Until the producers have ``batches`` more acknowledged: the load goes on between
        faults (what a fixed pause hoped for), and the next fault need not wait longer."""
        target = len(acked) + batches
        wait_until(lambda: len(acked) >= target, what=f"{batches} more acknowledged batches")

    def producer(p: int) -> None:
        turn = itertools.count(p)
        for n in itertools.count():
            if stop.is_set():
                return
            stream = streams[n % len(streams)]
            values = tuple(f"p{p}-b{n}-m{i}" for i in range(1 + n % 7))
            key = f"p{p}-b{n}"
            while True:  # the same key until acknowledged, on whichever host answers
                host = hosts[next(turn) % len(hosts)]
                try:
                    r = httpx.post(
                        f"{host.url}/streams/{stream}/messages",
                        params={"code": host.key},
                        json={"messages": [{"key": f"p{p}", "value": v} for v in values]},
                        headers={"Idempotency-Key": key},
                        timeout=30,
                    )
                    if r.status_code in (200, 202):
                        note(r.status_code)
                        with lock:
                            acked.append(Acked(stream, r.json()["batch_id"], values))
                        time.sleep(0.2)  # a steady load, not a flood: the faults are the point
                        break
                    note(f"{r.status_code} {r.json().get('error')}")
                except httpx.TransportError:
                    note("connection error")
                if stop.is_set():
                    return  # never acknowledged: may or may not land, but at most once
                time.sleep(0.2)

    try:
        for h in hosts:
            h.start()
        threads = [threading.Thread(target=producer, args=(p,), daemon=True) for p in range(4)]
        for t in threads:
            t.start()
        faults = []
        # Each fault once the load has gone on past the previous one. The kills come first and
        # soon: what the end waits for is the killed writers' leases (15 s from the last kill).
        progress(16)  # about a second of load: writers hold stream leases and queues by then
        faults.append(("SIGKILL a worker of host 0", kill_a_worker(hosts[0])))
        progress()
        hosts[1].stop(kill=True)
        faults.append(("SIGKILL host 1", True))
        progress()
        hosts[1].start()
        progress()
        # The last kill before the outage: its leases run out meanwhile, not after the end.
        faults.append(("SIGKILL a worker of host 1", kill_a_worker(hosts[1])))
        progress()
        storage.stop()
        faults.append(("Azurite stopped", True))
        time.sleep(5)  # longer than a request's storage budget (4 s)
        storage.start()
        progress()  # the producers are acknowledged again
        stop.set()
        for t in threads:
            t.join(60)

        client = httpx.Client(base_url=hosts[0].url, timeout=30, headers=key_header(hosts[0]))
        deadline = time.monotonic() + 60  # a killed writer's lease (15 s) must run out first
        pending = list(acked)
        while pending and time.monotonic() < deadline:
            status = client.get(f"/streams/{pending[0].stream}/batches/{pending[0].batch_id}").json()
            assert status.get("status") != "rejected", status
            if status.get("status") == "committed":
                pending.pop(0)
            else:
                time.sleep(0.1)
        assert not pending, f"{len(pending)} acknowledged batches not committed"

        logs = {s: [m["value"] for m in read_all(client, s)] for s in streams}
        for s, got in logs.items():
            assert len(got) == len(set(got)), f"duplicates in {s}"
        for a in acked:
            got = logs[a.stream]
            start = got.index(a.values[0])
            assert tuple(got[start : start + len(a.values)]) == a.values  # contiguous, in order
        queues = StorageAccount(connection_string=storage.connection_string).queue_service()
        poisoned = sum(
            queues.get_queue_client(f"{prefix}-{i}-poison").get_queue_properties().approximate_message_count
            or 0
            for i in range(QUEUES)
        )
        print(
            f"\nfaults: {faults}\nanswers: {statuses}\nacknowledged batches: {len(acked)} "
            f"({sum(len(a.values) for a in acked)} messages), in the streams: "
            f"{sum(len(v) for v in logs.values())} messages, poisoned: {poisoned}"
        )
        assert all(done for _, done in faults)
        assert poisoned == 0
        # Refusals are 503: storage, or a language worker that died under the request (the
        # local host's worker_failed, with Retry-After); never a 500.
        assert set(statuses) <= {200, 202, "503 unavailable", "503 worker_failed", "connection error"}
    finally:
        stop.set()
        for h in hosts:
            h.stop()
        storage.cleanup()


@pytest.mark.slow  # waits out the killed writer's real 15 s leases: tests/leases.py breaks them elsewhere
def test_batches_a_killed_writer_had_drained_are_committed_by_another_within_30_seconds(
    azurite: Azurite, tmp_path: Path, vault: Vault, stream: str
) -> None:
    prefix = f"q{uuid.uuid4().hex[:8]}"
    one_queue = {"VAULT_STAGING_QUEUES": "1"}
    queue = (
        StorageAccount(connection_string=azurite.connection_string)
        .queue_service()
        .get_queue_client(f"{prefix}-0")
    )
    queue.create_queue()
    ids = [f"drained-{i}" for i in range(20)]
    for i, batch_id in enumerate(ids):  # a backlog: the writer takes one and drains the rest
        queue.send_message(envelope.encode_messages(batch_id, stream, 0, [NewMessage(b"v%d" % i, "k")]))
    faulty = isolated_host(azurite, tmp_path, "--fault", "after-drain", prefix=prefix, settings=one_queue)
    faulty.start()
    try:
        faulty.wait_for("FAULT after-drain", 30)
    finally:
        faulty.stop(kill=True)  # kill -9 while it holds the drained batches and the lease
    killed = time.monotonic()
    # What this test waits out for real: the dead owner's lease of the queue, and the drained
    # batches' invisibility (15 s each).
    assert [b.get_blob_properties().lease.state for b in owner_blobs(azurite.connection_string, prefix)] == [
        "leased"
    ]
    healthy = isolated_host(azurite, tmp_path, prefix=prefix, settings=one_queue).start()
    try:
        while len(vault.index.committed_batches(stream, ids)) < len(ids):
            assert time.monotonic() - killed < 30, "drained batches still invisible"
            time.sleep(0.2)
        print(f"\nall {len(ids)} batches committed {time.monotonic() - killed:.1f}s after the kill")
    finally:
        healthy.stop()
