"""Waiting consumers cost producers nothing: POST latency with and without 200 long polls.

``./dev bench long_polls``: Azurite and one local host (one worker process, as an Azure
instance runs by default). Producer threads POST batches as fast as they are answered (closed
loop) to their own streams the whole time, and a probe reads ``/health`` four times a second.
Phases of 15 s alternate, twice each:

* ``none``: producers alone (the baseline);
* ``polls-20``: plus 200 long polls (``wait=30``, re-issued as each ends, their starts spread
  over the first 30 s) on 20 idle streams;
* ``polls-200``: plus 200 long polls on 200 idle streams, one each (the most commit-record polls).

The long polls come from a separate process, so the client side of 200 connections does not
share the producers' GIL. Targets (issue #12): POST p50 and p99 within 20% of ``none``, and
``/health`` under 100 ms, with the long polls on; every long poll answered (none refused).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import statistics
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

import httpx
from azure.storage.queue import QueueClient

from bench.cluster import percentile
from bench.common import report
from vault_local.azurite import Azurite
from vault_local.process import HostProcess

PHASE_SECONDS = 15.0
ROUNDS = 2
PRODUCERS = 6
BATCH = 50
VALUE = "v" * 200
POLLERS = 200
POLL_WAIT = 30
PHASES = ("none", "polls-20", "polls-200")


def _body(i: int) -> bytes:
    return json.dumps({"messages": [{"key": str(i), "value": VALUE} for _ in range(BATCH)]}).encode()


class Producers:
    """Closed-loop producers; each POST's latency is kept with the phase it started in."""

    def __init__(self, host: HostProcess) -> None:
        self.host = host
        self.phase = "warmup"
        self.latencies: dict[str, list[float]] = {}
        self.statuses: dict[int, int] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(PRODUCERS)]

    def start(self) -> Producers:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            if t.is_alive():
                t.join(30)

    def _run(self, i: int) -> None:
        stream = f"lp-prod-{i}-{uuid.uuid4().hex[:6]}"
        body = _body(i)
        headers = {"x-functions-key": self.host.key, "content-type": "application/json"}
        with httpx.Client(base_url=self.host.url, headers=headers, timeout=60) as c:
            while not self._stop.is_set():
                phase = self.phase
                start = time.perf_counter()
                r = c.post(f"/streams/{stream}/messages", content=body)
                took = time.perf_counter() - start
                with self._lock:
                    self.statuses[r.status_code] = self.statuses.get(r.status_code, 0) + 1
                    if self.phase == phase:  # a POST across a phase change counts for neither
                        self.latencies.setdefault(phase, []).append(took)


class Probe:
    """``/health`` four times a second, timed per phase; and beside it the storage call it makes
    (a queue's properties, straight from the SDK): Azurite's own latency under the same load."""

    def __init__(self, host: HostProcess, producers: Producers) -> None:
        self.host = host
        self.producers = producers
        self.latencies: dict[str, list[float]] = {}
        self.raw: dict[str, list[float]] = {}
        self.queue = QueueClient.from_connection_string(host.connection_string, "mv-staging-0-poison")
        self.waiting: dict[str, list[int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Probe:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)

    def _run(self) -> None:
        with httpx.Client(base_url=self.host.url, headers={"x-functions-key": self.host.key}) as c:
            while not self._stop.wait(0.25):
                phase = self.producers.phase
                start = time.perf_counter()
                r = c.get("/health")
                took = time.perf_counter() - start
                start = time.perf_counter()
                self.queue.get_queue_properties()
                raw = time.perf_counter() - start
                if self.producers.phase == phase:
                    self.latencies.setdefault(phase, []).append(took)
                    self.raw.setdefault(phase, []).append(raw)
                    self.waiting.setdefault(phase, []).append(int(r.json().get("waiting", 0)))


# -- the long polls, in a process of their own ---------------------------------------------------
def _poll_forever(url: str, key: str, streams: Sequence[str], ends: dict[str, int], out: Any) -> None:
    async def one(client: httpx.AsyncClient, stream: str, counts: dict[int, int], i: int) -> None:
        await asyncio.sleep(POLL_WAIT * i / POLLERS)  # real consumers do not all wait in step
        while True:
            params = {"from": str(ends[stream]), "wait": str(POLL_WAIT)}
            try:
                r = await client.get(f"/streams/{stream}/messages", params=params)
                counts[r.status_code] = counts.get(r.status_code, 0) + 1
            except httpx.HTTPError:
                counts[0] = counts.get(0, 0) + 1

    async def main() -> None:
        limits = httpx.Limits(max_connections=POLLERS + 10, max_keepalive_connections=POLLERS + 10)
        counts: dict[int, int] = {}
        async with httpx.AsyncClient(
            base_url=url, headers={"x-functions-key": key}, timeout=POLL_WAIT + 30, limits=limits
        ) as client:
            tasks = [
                asyncio.create_task(one(client, streams[i % len(streams)], counts, i)) for i in range(POLLERS)
            ]
            while True:
                await asyncio.sleep(1)
                out.put(dict(counts))
            await asyncio.gather(*tasks)

    asyncio.run(main())


class Pollers:
    def __init__(self, host: HostProcess, streams: Sequence[str], ends: dict[str, int]) -> None:
        self.host = host
        self.streams = list(streams)
        self.out: Any = multiprocessing.get_context("spawn").Queue()
        self.proc = multiprocessing.get_context("spawn").Process(
            target=_poll_forever, args=(host.url, host.key, self.streams, ends, self.out), daemon=True
        )
        self.counts: dict[int, int] = {}

    def __enter__(self) -> Pollers:
        self.proc.start()
        return self

    def __exit__(self, *exc: object) -> None:
        while not self.out.empty():
            self.counts = self.out.get_nowait()
        self.proc.kill()
        self.proc.join(10)
        # The host still holds the killed process's waits: one message per stream ends them all.
        with httpx.Client(base_url=self.host.url, headers={"x-functions-key": self.host.key}) as c:
            for s in self.streams:
                c.post(f"/streams/{s}/messages", content=b'{"messages":[{"value":"end"}]}')


def _idle_streams(host: HostProcess, n: int) -> list[str]:
    """``n`` streams with one message each, committed."""
    tag = uuid.uuid4().hex[:6]
    streams = [f"lp-idle-{tag}-{i}" for i in range(n)]
    with httpx.Client(base_url=host.url, headers={"x-functions-key": host.key}, timeout=60) as c:
        for s in streams:
            r = c.post(f"/streams/{s}/messages", content=b'{"messages":[{"value":"x"}]}')
            assert r.status_code == 202, r.text
    deadline = time.monotonic() + 120
    while any(end == 0 for end in _ends_after(host, streams).values()):
        if time.monotonic() > deadline:
            raise RuntimeError("the idle streams were not committed within 2 minutes")
        time.sleep(1)
    return streams


def _wait_until_waiting(probe: Probe, host: HostProcess, n: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=host.url, headers={"x-functions-key": host.key}) as c:
        while time.monotonic() < deadline:
            if int(c.get("/health").json().get("waiting", 0)) >= n:
                return
            time.sleep(0.2)
    raise RuntimeError(f"the {n} long polls never all waited")


def _ends_after(host: HostProcess, streams: Sequence[str]) -> dict[str, int]:
    ends = {}
    with httpx.Client(base_url=host.url, headers={"x-functions-key": host.key}, timeout=60) as c:
        for s in streams:
            r = c.get(f"/streams/{s}/messages")
            ends[s] = int(r.headers["x-committed"]) if r.status_code == 200 else 0
    return ends


def main() -> None:
    azurite = Azurite().start()
    host = HostProcess(azurite.connection_string).start()
    producers = Producers(host)
    probe = Probe(host, producers)
    refused: dict[str, int] = {}
    answered: dict[str, int] = {}
    try:
        idle = {"polls-20": _idle_streams(host, 20), "polls-200": _idle_streams(host, 200)}
        producers.start()
        probe.start()
        time.sleep(5)  # warm up: connections, leases, the writer's open streams
        for _ in range(ROUNDS):
            for phase in PHASES:
                if phase == "none":
                    producers.phase = phase
                    time.sleep(PHASE_SECONDS)
                    producers.phase = "between"
                    continue
                streams = idle[phase]
                with Pollers(host, streams, _ends_after(host, streams)) as pollers:
                    _wait_until_waiting(probe, host, POLLERS)
                    producers.phase = phase
                    time.sleep(PHASE_SECONDS)
                    producers.phase = "between"
                for status, n in pollers.counts.items():
                    key = "answered" if status == 200 else "refused"
                    (answered if key == "answered" else refused)[f"{phase} {status}"] = n
    finally:  # the processes go whatever failed: a stop that raises must not keep the others
        producers.phase = "done"
        try:
            probe.stop()
            producers.stop()
        finally:
            try:
                host.stop()
            finally:
                azurite.cleanup()

    figures: dict[str, Any] = {}
    base = producers.latencies["none"]
    base_p50, base_p99 = statistics.median(base), percentile(base, 0.99)
    figures["POST p50 none (ms)"] = base_p50 * 1000
    figures["POST p99 none (ms)"] = base_p99 * 1000
    figures["POSTs none"] = len(base)
    for phase in PHASES[1:]:
        lat = producers.latencies[phase]
        figures[f"POST p50 {phase} (ms)"] = statistics.median(lat) * 1000
        figures[f"POST p99 {phase} (ms)"] = percentile(lat, 0.99) * 1000
        figures[f"POSTs {phase}"] = len(lat)
        figures[f"POST p50 ratio {phase}/none (target <= 1.2)"] = statistics.median(lat) / base_p50
        figures[f"POST p99 ratio {phase}/none (target <= 1.2)"] = percentile(lat, 0.99) / base_p99
    for phase in PHASES:
        h, raw = probe.latencies.get(phase, []), probe.raw.get(phase, [])
        if h:
            figures[f"/health p50 {phase} (ms)"] = statistics.median(h) * 1000
            figures[f"/health p99 {phase} (ms, target < 100)"] = percentile(h, 0.99) * 1000
            figures[f"/health max {phase} (ms)"] = max(h) * 1000
            figures[f"raw queue call p50 {phase} (ms)"] = statistics.median(raw) * 1000
            figures[f"raw queue call p99 {phase} (ms)"] = percentile(raw, 0.99) * 1000
    for phase in PHASES[1:]:
        figures[f"/health p99 ratio {phase}/none"] = percentile(probe.latencies[phase], 0.99) / percentile(
            probe.latencies["none"], 0.99
        )
    for phase in PHASES[1:]:
        figures[f"waiting during {phase} (min)"] = min(probe.waiting.get(phase, [0]))
    figures["POST statuses"] = json.dumps(dict(sorted(producers.statuses.items())))
    figures["long polls answered 200 (a 30 s wait each)"] = sum(answered.values())
    figures["long polls refused or failed"] = sum(refused.values())
    report("long_polls", "./dev bench long_polls", figures)


if __name__ == "__main__":
    main()
