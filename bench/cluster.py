"""Shared pieces of the multi-host benchmarks (``scaleout``, ``recovery``).

Several local hosts ("instances") on one Azurite and one queue prefix; producer threads that
POST uniquely tagged batches to them; a sampler that sees when batches become committed; and
the checks that read every stream back (lost or duplicated messages), count hand-backs in the
hosts' logs and look at the poison queues.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
import uuid
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import cast

import httpx
import psutil
from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError
from azure.storage.blob import BlobLeaseClient

from vault_app.batches import batch_id_for
from vault_core.azure import StorageAccount
from vault_core.pageblob import PageBlobs
from vault_core.vault import Vault
from vault_local.process import HostProcess

QUEUES = 4
"""Staging queues per host (``VAULT_STAGING_QUEUES``, the default)."""


# -- processes -------------------------------------------------------------------------------
def start_hosts(connection_string: str, count: int, prefix: str) -> list[HostProcess]:
    """``count`` hosts on one storage and one queue prefix: ``count`` instances of the app.

    Each runs one language-worker process, as an Azure instance should (docs/ARCHITECTURE.md §9).
    """
    hosts: list[HostProcess] = []
    try:
        for _ in range(count):
            hosts.append(HostProcess(connection_string, settings={"VAULT_QUEUE_PREFIX": prefix}).start())
    except BaseException:
        stop_hosts(hosts)
        raise
    return hosts


def stop_hosts(hosts: Iterable[HostProcess]) -> None:
    for host in hosts:
        try:
            host.stop()
        except Exception as exc:  # keep stopping the others
            print(f"stopping host on port {host.port}: {exc}")


def save_logs(directory: Path, name: str, hosts: Sequence[HostProcess]) -> None:
    """Keep every host's output: ``directory/name-hostI.log``."""
    directory.mkdir(parents=True, exist_ok=True)
    for i, host in enumerate(hosts):
        (directory / f"{name}-host{i}.log").write_text("".join(host.lines))


def process_tree_cpu(pid: int) -> float:
    """CPU seconds of a process and its live children (a host and its language worker)."""
    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def machine_busy_seconds() -> float:
    """CPU seconds all processes of the machine used so far (every core)."""
    t = psutil.cpu_times()
    return float(t.user + t.nice + t.system + t.irq + t.softirq + getattr(t, "steal", 0.0))


# -- storage ---------------------------------------------------------------------------------
def queue_names(prefix: str) -> list[str]:
    return [f"{prefix}-{i}" for i in range(QUEUES)]


def poison_count(account: StorageAccount, prefix: str) -> int:
    service = account.queue_service()
    total = 0
    for name in queue_names(prefix):
        try:
            props = service.get_queue_client(f"{name}-poison").get_queue_properties()
            total += props.approximate_message_count or 0
        except ResourceNotFoundError:
            pass
    return total


def delete_queues(account: StorageAccount, prefix: str) -> None:
    service = account.queue_service()
    for name in queue_names(prefix):
        for q in (name, f"{name}-poison"):
            try:
                service.delete_queue(q)
            except ResourceNotFoundError:
                pass


def drop_stream(vault: Vault, stream: str) -> None:
    """Delete a measured stream so the disk-backed Azurite stays small between configurations."""
    blob = cast(PageBlobs, vault.page_blobs).client.get_blob_client(stream)
    try:
        BlobLeaseClient(blob).break_lease(lease_break_period=0)
    except (ResourceExistsError, ResourceNotFoundError):  # no lease, or no blob
        pass
    try:
        blob.delete_blob()
    except ResourceNotFoundError:
        pass


def spread_streams(tag: str, count: int) -> list[str]:
    """``count`` stream names spread evenly over the staging queues (crc32 mod queues, §2.3).

    Random names would put, say, three streams on one queue and none on another, and the
    figures would move with the draw rather than with the design.
    """
    per_queue = -(-count // QUEUES)
    taken: Counter[int] = Counter()
    names: list[str] = []
    for i in itertools.count():
        name = f"{tag}-{i}"
        q = zlib.crc32(name.encode()) % QUEUES
        if taken[q] < per_queue:
            taken[q] += 1
            names.append(name)
        if len(names) == count:
            return names
    raise AssertionError("unreachable")


# -- producing -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Acked:
    """A batch the service acknowledged (202), with its times (``time.perf_counter``)."""

    stream: str
    batch_id: str
    tag: str
    posted: float
    """When its first POST was sent."""
    acked: float


@dataclass
class Producers:
    """Producer threads posting batches of ``per_batch`` tagged messages until stopped.

    Each thread posts to one stream (thread ``i`` to ``streams[i % len(streams)]``), each POST
    to the next host of ``hosts`` in turn (a load balancer's round robin): back to back, or,
    with ``rate`` (batches/s, all threads together), on a fixed schedule, late posts going out
    at once.
    A 503 or a connection error is retried with the same ``Idempotency-Key`` after
    ``retry_delay`` (the project's client would wait out ``Retry-After``; a short fixed delay
    measures the service rather than the client's back-off).
    """

    hosts: list[HostProcess]
    streams: Sequence[str]
    threads: int
    per_batch: int = 100
    size: int = 1024
    retry_delay: float = 0.5
    rate: float | None = None
    acked: list[Acked] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)
    _stop: threading.Event = field(default_factory=threading.Event)
    _turn: Iterator[int] = field(default_factory=itertools.count)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _workers: list[threading.Thread] = field(default_factory=list)
    run: str = field(default_factory=lambda: uuid.uuid4().hex[:6])

    def start(self) -> Producers:
        for i in range(self.threads):
            t = threading.Thread(target=self._produce, args=(i,), name=f"producer-{i}", daemon=True)
            t.start()
            self._workers.append(t)
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._workers:
            t.join(timeout=60)

    def body(self, tag: str) -> bytes:
        messages = [{"value": f"{tag}/{i}/".ljust(self.size, "x")} for i in range(self.per_batch)]
        return json.dumps({"messages": messages}).encode()

    def _next_host(self) -> HostProcess:
        hosts = self.hosts  # swapped whole by the recovery benchmark
        return hosts[next(self._turn) % len(hosts)]

    def _produce(self, index: int) -> None:
        stream = self.streams[index % len(self.streams)]
        clients: dict[str, httpx.Client] = {}
        start = time.perf_counter()
        try:
            for n in itertools.count():
                if self.rate:  # thread i's n-th batch is due at (n + i / threads) * threads / rate
                    due = start + (n + index / self.threads) * self.threads / self.rate
                    self._stop.wait(max(0.0, due - time.perf_counter()))
                if self._stop.is_set():
                    return
                self._post(clients, stream, f"{self.run}.{index}.{n}")
        finally:
            for c in clients.values():
                c.close()

    def _post(self, clients: dict[str, httpx.Client], stream: str, tag: str) -> None:
        body = self.body(tag)
        posted = time.perf_counter()
        while not self._stop.is_set():
            host = self._next_host()
            client = clients.get(host.url)
            if client is None:
                client = clients[host.url] = httpx.Client(base_url=host.url, timeout=30)
            try:
                r = client.post(
                    f"/streams/{stream}/messages",
                    params={"code": host.key},
                    content=body,
                    headers={"Content-Type": "application/json", "Idempotency-Key": tag},
                )
                status = str(r.status_code)
            except httpx.HTTPError as exc:
                status = type(exc).__name__
            with self._lock:
                self.statuses[status] += 1
            if status in ("200", "202"):
                done = Acked(stream, batch_id_for(stream, tag, None), tag, posted, time.perf_counter())
                with self._lock:
                    self.acked.append(done)
                return
            self._stop.wait(self.retry_delay)

    def snapshot(self) -> list[Acked]:
        with self._lock:
            return list(self.acked)


# -- seeing commits --------------------------------------------------------------------------
class Sampler:
    """Watches batches until they are committed: the ``b`` rows ``GET .../batches/{id}`` reads.

    One table query per stream and round (15 ids per query), every ``interval`` seconds.
    ``latencies`` holds POST → committed seconds of every watched batch that committed.
    """

    def __init__(self, vault: Vault, interval: float = 0.1) -> None:
        self.vault = vault
        self.interval = interval
        self.pending: dict[str, dict[str, Acked]] = {}
        self.seen: dict[str, float] = {}
        """batch id → perf_counter when it was first seen committed."""
        self.latencies: list[float] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def watch(self, batches: Iterable[Acked]) -> None:
        with self._lock:
            for b in batches:
                if b.batch_id not in self.seen:
                    self.pending.setdefault(b.stream, {})[b.batch_id] = b

    def waiting(self) -> int:
        with self._lock:
            return sum(len(p) for p in self.pending.values())

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                work = {s: list(p.values()) for s, p in self.pending.items() if p}
            for stream, batches in work.items():
                self._check(stream, batches[:150])

    def _check(self, stream: str, batches: list[Acked]) -> None:
        try:
            found = self.vault.index.committed_batches(stream, [b.batch_id for b in batches])
        except Exception:  # storage stalled or down: try again next round
            return
        now = time.perf_counter()
        with self._lock:
            for b in batches:
                if b.batch_id in found:
                    self.seen[b.batch_id] = now
                    self.latencies.append(now - b.posted)
                    self.pending[stream].pop(b.batch_id, None)

    def wait_all(self, timeout: float) -> bool:
        """Block until every watched batch is committed (True) or ``timeout`` passes (False)."""
        deadline = time.monotonic() + timeout
        while self.waiting():
            if time.monotonic() > deadline:
                return False
            time.sleep(self.interval / 2)
        return True


def settle(vault: Vault, acked: Sequence[Acked], timeout: float) -> None:
    """Wait until every batch of ``acked`` is committed; TimeoutError if that takes too long."""
    with Sampler(vault) as sampler:
        sampler.watch(acked)
        if not sampler.wait_all(timeout):
            raise TimeoutError(f"{sampler.waiting()} acknowledged batches not committed after {timeout} s")


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


# -- checking --------------------------------------------------------------------------------
@dataclass
class Audit:
    acked_messages: int = 0
    lost: int = 0
    duplicated: int = 0
    unacked_committed: int = 0
    """Messages of batches whose POST got no 202 (stopped, or a connection error) but committed."""


def audit(vault: Vault, acked: Sequence[Acked], streams: Iterable[str], per_batch: int) -> Audit:
    """Read every stream back: each acknowledged message exactly once?"""
    tags = {b.tag for b in acked}
    copies: Counter[tuple[bytes, bytes]] = Counter()
    for stream in streams:
        for m in vault.reader.scan(stream):
            tag, i, _ = bytes(m.value).split(b"/", 2)
            copies[(tag, i)] += 1
    result = Audit(acked_messages=len(tags) * per_batch)
    wanted = {(t.encode(), str(i).encode()) for t in tags for i in range(per_batch)}
    result.lost = sum(1 for k in wanted if copies[k] == 0)
    result.duplicated = sum(c - 1 for k, c in copies.items() if c > 1)
    result.unacked_committed = sum(1 for k in copies if k not in wanted)
    return result


HANDED_BACK = "handed back"


def handbacks(host: HostProcess) -> int:
    return sum(1 for line in host.lines if HANDED_BACK in line)


_EVENT = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*?(\{\"event\":\"appended\".*\})\s*$")


@dataclass(frozen=True)
class Append:
    at: float
    """Wall-clock seconds (``time.time()``) of the log line."""
    host: int
    stream: str
    messages: int
    lag_ms: int
    """From the staging of the oldest batch in the append to its commit."""


def appends(hosts: Sequence[HostProcess]) -> list[Append]:
    """Every ``appended`` event of the hosts' logs, in time order."""
    found: list[Append] = []
    for i, host in enumerate(hosts):
        for line in list(host.lines):
            m = _EVENT.match(line)
            if not m:
                continue
            at = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            doc = json.loads(m.group(2))
            found.append(Append(at, i, str(doc["stream"]), int(doc["messages"]), int(doc["lag_ms"])))
    found.sort(key=lambda a: a.at)
    return found


def holder_changes(events: Sequence[Append]) -> int:
    """How often a stream's appends moved to another host: lease holder churn."""
    last: dict[str, int] = {}
    changes = 0
    for e in events:
        if e.stream in last and last[e.stream] != e.host:
            changes += 1
        last[e.stream] = e.host
    return changes


@contextmanager
def cpu_meter(azurite_pid: int, hosts: Sequence[HostProcess]) -> Iterator[dict[str, float]]:
    """CPU seconds used inside the block: Azurite, the hosts, this process, the whole machine."""
    pids = [h.proc.pid for h in hosts if h.proc]
    me = psutil.Process()

    def now() -> dict[str, float]:
        t = me.cpu_times()
        return {
            "azurite": process_tree_cpu(azurite_pid),
            "hosts": sum(process_tree_cpu(p) for p in pids),
            "bench": t.user + t.system,
            "machine": machine_busy_seconds(),
            "wall": time.perf_counter(),
        }

    before = now()
    used: dict[str, float] = {}
    try:
        yield used
    finally:
        after = now()
        used.update({k: after[k] - before[k] for k in before})
        used["other"] = used["machine"] - used["azurite"] - used["hosts"] - used["bench"]
