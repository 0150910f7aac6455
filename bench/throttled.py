"""The staging tier at Azure's scalability targets, scaled down, through the throttling front (issue 24).

    ./dev bench throttled [--factor 800] [--seconds 8] [--sustain 45] [--quick] [--closed-only]
                                                                     (python -m bench.throttled)

One Azurite with three accounts behind one throttling front (``vault_local.throttle``, a process
of its own): ``devstoreaccount1`` is the vault account (tables, stream blobs), ``devstoreaccount2``
and ``devstoreaccount3`` the staging accounts. Every target is Azure's divided by ``--factor``
(per queue 2,000 / factor requests/s, per account 20,000 / factor). For each configuration of
1, 2, 4 and 8 queues in all, over 1 and 2 staging accounts (the queues split evenly), a host of
its own (2 language workers) takes POSTs of 20 messages of 100 bytes spread over 32 streams:

* **closed loop** first, on empty queues: ``IN_FLIGHT_PER_QUEUE`` producers per queue, each
  sending its next POST only while the tier holds fewer uncommitted batches than there are
  producers, which they learn by reading their streams back (``CommitWatch``; ``--wait``: each
  waits for its own last batch in its POST, ``?wait=``, as the runs before 5957c98 did), for ``--sustain``
  seconds; the steady window after ``--warm-up`` counts the messages committed (the streams'
  counts) and the staging queue operations (the front's): what the tier **sustains**, which the
  capacity model (``vault_client.capacity.staging_throughput``) predicts;
* **open loop**, offered at 0.5, 1, 2 and 3 × the configuration's capacity for ``--seconds``
  each: every answer is counted by status (202, 503, 500, other, timeouts), and every 503 must
  carry ``Retry-After``; the 3 × run also counts, in its last two thirds, the POSTs admitted
  (answered 202) and the messages committed meanwhile;
* **vault_client producers** at 3 × capacity (4 queues over 1 account, 8 over 2): producers
  with the client's retry policy (which honours ``Retry-After``) send each batch until it is
  accepted; goodput is the messages accepted per second;
* **read back**: every stream is read from the vault once the writer has drained; each
  accepted POST must be there exactly once and no refused one at all.

``--closed-only`` runs the closed loop alone on CLOSED_CONFIGS (1, 2, 4 and 8 queues over 1
account and 2 over 2 at ``--factor``; about 6 minutes instead of 27;
``--configs Q/A[/FACTOR[/PRODUCERS_PER_QUEUE]],...`` for others), then the read-back, into
``bench/results/throttled_closed.json``: the same ``settings`` (without the open loop's),
``runs`` and ``readback``, each run with more keys: ``factor`` (its front's),
``queue_operations``, the steady window's queue message operations as the front counted them
(``"send admitted"``, ``"receive empty admitted"``, ``"delete refused"``, ``"update
admitted"``: renewals...), ``writer_invocations``, the ``invocation`` events the host logged in
it (``count``, ``seconds``, ``backed_off_seconds``: the time they waited on refusing storage,
their storage retries' back-offs and their wait for their paced deletes; in results recorded
before 8af8e0d, the worker process's back-offs meanwhile, its HTTP functions' included: an
upper bound), and ``handed_back``, the batches the writers handed back in it (a stream's lease
held by another queue's writer, or storage refusing). Since c4c4bda also (docs/CAPACITY.md
§7.3): ``unused_queue_tokens``, the tokens the configuration's queues' full buckets could not
hold in the window (the front's ``/_throttle/unused``), over ``front_seconds``, and
``unused_queue_tokens_by_queue_state``, the same sampled once a second against whether batches
were waiting in the queue (``"batches waiting"``, ``"none waiting"``); ``cpu_seconds`` in the
window (``machine``: every core busy; ``host`` with its workers, ``azurite``, ``fronts``,
``producers``: this process); ``producer_seconds`` by what the producers did (a POST by its
answer, ``"Retry-After"``: asleep after a 503) and ``post_seconds``, the mean POST by answer;
``appends`` (``count``, ``batches``, ``median_ms``: the writers' ``appended`` events);
``vault_requests`` (``requests`` on the vault account, ``batch table entities``); and
``writer_invocations.seconds_by_queue``. Since 5957c98 (docs/CAPACITY.md §7.4):
``producers_confirm`` (``"by reading back"`` or ``"in the POST (?wait=)"``) and ``ceiling``, the
same host and producers for ``--ceiling`` seconds more with the front at Azure's own targets
(``PUT /_throttle/factor``), so that nothing throttles: ``factor``, ``statuses``,
``steady_seconds``, ``committed_msgs_per_s`` (this machine's ceiling for the configuration),
``queue_ops_per_committed_batch``, ``cpu_seconds``. Since the writer appends a round's streams side
by side (docs/CAPACITY.md §7.4): ``writer_invocations.rounds`` and ``.ended`` (the writer's
``rounds`` events: drain rounds run, and how many invocations ended because a round drained
none, the rounds' time ran out, or an append failed), ``unused_queue_tokens_by_writer`` (the
sampled unused tokens by whether the queue's writer was ``"in an invocation"`` or ``"between
invocations"`` then) and ``queue_seconds_between_invocations`` (the window's seconds with no
writer invocation running, summed over the queues). Since the host paces its triggers as the
Functions host does (docs/CAPACITY.md §7.4): ``host_pacing`` (``HOST_PACING``), and
``queue_seconds_sampled``, the queues' seconds the sampling covered, of which those between
invocations are a share; the forecast then leaves out the target unused between invocations.

Capacity, in POSTs/s, of Q queues over A accounts: ``min(Q × queue rate, A × account rate)``
staging requests/s divided by ``REQUESTS_PER_BATCH`` (each batch costs its queue one send and
one delete, plus a share of the writer's receives). The figures compare what was accepted with
it; the front's own counts (requests admitted per target) show what bound.

Results: ``bench/results/throttled.json``. Besides ``command``, ``recorded`` and the flat
``figures`` that BENCHMARKS.md shows, it holds, for the capacity model to check against:

``settings``
    ``factor``; ``targets`` (Azure's numbers, unscaled: ``account_requests``, ``queue_messages``,
    ``table_partition_entities``, ``blob_requests``, ``blob_bytes``); ``messages_per_post``,
    ``message_bytes``, ``streams``, ``seconds_per_load``, ``requests_per_batch``.
``runs``
    one object per configuration and load: ``queues``, ``accounts``, ``queues_per_account``,
    ``load`` (× capacity; ``"client"`` for the vault_client run), ``capacity_posts_per_s``,
    ``offered_posts_per_s``, ``accepted_posts_per_s``, ``accepted_msgs_per_s`` (every POST offered
    in the window counted, whenever its answer came), ``accepted_over_capacity``,
    ``accepted_over_offered_up_to_capacity`` (accepted ÷ min(offered, capacity): the issue's
    "≥ 0.9 up to capacity"), ``statuses`` (``{"202": n, "503": n, ...}``, ``"timeout"`` for
    a POST with no answer in 30 s), ``missing_retry_after``, ``staging_requests_per_s``
    (admitted by the front on the staging accounts), ``staging_requests_per_batch``,
    ``vault_requests_per_post`` (on the vault account), ``refused`` (``{target: n}``: which
    target the front refused requests on). The 3 × run and the closed-loop one (``load``
    ``"sustained"``, with ``in_flight``) add their steady window: ``steady_seconds``,
    ``committed_msgs_per_s``, ``admitted_msgs_per_s``, ``queue_ops_per_s`` (the configuration's
    staging queues, as the front admitted them), ``queue_ops_per_committed_batch``,
    ``busiest_queue_ops_per_s``.
``readback``
    per configuration: ``accepted`` POSTs, ``lost`` (accepted, not in the stream), ``duplicated``
    (in the stream more than once), ``still_queued`` (messages left in the queues when the
    read-back gave up waiting) with ``not_yet_committed`` (accepted POSTs not in a stream
    then: late, not lost), ``refused_but_staged`` (answered 503, yet in a stream: the send
    reached the queue but its reply came too late; a retry with the same key would dedup).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Any

import httpx
import psutil
from azure.storage.blob import ContainerClient
from azure.storage.queue import QueueServiceClient

from bench.common import RESULTS, cpu_seconds, report
from vault_client import capacity
from vault_client.api import ApiClient
from vault_client.retry import RetryPolicy
from vault_core.azure import AZURITE_CONNECTION_STRING, StorageAccount
from vault_core.errors import StreamNotFound
from vault_core.pagelog import CommitState
from vault_core.vault import Vault
from vault_local.azurite import Azurite
from vault_local.process import HostProcess
from vault_local.throttle import Targets, ThrottleProcess

VAULT_ACCOUNT = "devstoreaccount1"
STAGING_ACCOUNTS = ("devstoreaccount2", "devstoreaccount3")
CONFIGS = ((1, 1), (2, 1), (4, 1), (8, 1), (2, 2), (8, 2))
"""(queues in all, staging accounts)."""
LOADS = (0.5, 1.0, 2.0, 3.0)
OVERLOAD = 3.0
"""The open-loop load whose steady window (its last two thirds) also counts what the tier
commits while it admits all it can."""
MESSAGES_PER_POST = 20
HOST_PACING = "the Functions host's (vault_local.polling)"
"""How the runs' host paces its queue triggers, recorded in each closed-loop run since it polls
and retries as Azure's host does: their queues' target unused between invocations is then a
real cost, which the forecast takes from the run (``forecast``)."""
DEFAULT_FACTOR = 800.0
"""Azure's targets ÷ this (``--factor``): a queue 2.5 requests/s, an account 25."""
DEFAULT_SUSTAIN_SECONDS = 45.0
"""Seconds of closed-loop producers (``--sustain``)."""
MESSAGE_BYTES = 100
STREAMS = 32
REQUESTS_PER_BATCH = 2.0
"""Staging requests one batch costs its queue: the producer's send and the writer's delete
(the writer's receives, 32 messages each, add about 1/32 more, and an idle queue's polls)."""
POST_TIMEOUT = 30.0
IN_FLIGHT_PER_QUEUE = 8
"""Closed-loop producers per staging queue: enough batches waiting that each writer invocation
drains several (a saturated queue), few enough that none waits out its ``?wait=``."""


CEILING_FACTOR = 1.0
"""The front's factor in a configuration's ceiling phase: Azure's own targets (a queue 2,000
requests/s), which nothing here reaches, so that only this machine limits what commits."""
DEFAULT_CEILING_SECONDS = 20.0
"""Seconds of the ceiling phase's window (``--ceiling``; 0: none), after a warm-up of a third."""

POLLERS_START_SECONDS = 5.0
"""Seconds between a configuration's host start and its producers' first POST (``closed_only``)."""

Mark = tuple[float, int, dict[str, int]]
"""A point of a steady window: when, messages committed so far, each staging queue's admitted
requests so far."""
CLOSED_CONFIGS: tuple[tuple[int, int, float | None, int | None], ...] = (
    (1, 1, None, None),
    (2, 1, None, None),
    (4, 1, None, None),
    (8, 1, None, None),
    (2, 2, None, None),
)
"""The configurations of ``--closed-only``, the closed loop alone (about 6 minutes): queues,
accounts, and the factor and producers per queue when not ``--factor`` and IN_FLIGHT_PER_QUEUE.
``--configs`` runs others: bench/results/throttled_closed_scaled.json has the 2 to 8 queue tiers
again with every queue's target divided by its queues (the tier's total one queue's at 800) and
16 producers in all, ``2/1/1600/8,4/1/3200/4,8/1/6400/2,2/2/1600/8``."""


def parse_configs(text: str) -> tuple[tuple[int, int, float | None, int | None], ...]:
    """``Q/A[/FACTOR[/IN_FLIGHT]]``, comma-separated: ``1/1,8/1/6400/2``."""
    out = []
    for config in text.split(","):
        parts = config.split("/")
        factor = float(parts[2]) if len(parts) > 2 else None
        in_flight = int(parts[3]) if len(parts) > 3 else None
        out.append((int(parts[0]), int(parts[1]), factor, in_flight))
    return tuple(out)


def run_name(run: dict[str, Any], factor: float) -> str:
    """A run's configuration as the figures name it; its factor too where it is not ``factor``."""
    name = f"{run['queues']} q / {run['accounts']} acct"
    if run.get("factor", factor) != factor:
        name += f" ÷ {run['factor']:g}, {run['in_flight'] // run['queues']} in flight a queue"
    return name


def dev_key() -> str:
    """Azurite's well-known development key, from the one place the code keeps it."""
    return AZURITE_CONNECTION_STRING.split("AccountKey=", 1)[1].split(";", 1)[0]


def capacity_posts(targets: Targets, queues: int, accounts: int) -> float:
    requests = min(queues * targets.rate("queue_messages"), accounts * targets.rate("account_requests"))
    return requests / REQUESTS_PER_BATCH


def body(post: int) -> bytes:
    """A POST's messages; each value names its POST, so the read-back can count them."""
    pad = "x" * (MESSAGE_BYTES - 12)
    return json.dumps(
        {"messages": [{"key": f"k{i}", "value": f"{post:08d}:{i:02d}:{pad}"} for i in range(20)]}
    ).encode()


def admitted(stats: dict[str, dict[str, dict[str, int]]], target: str, prefixes: tuple[str, ...]) -> int:
    return sum(c["admitted"] for p, c in stats.get(target, {}).items() if p.startswith(prefixes))


def refused(stats: dict[str, dict[str, dict[str, int]]]) -> dict[str, int]:
    return {t: sum(c["refused"] for c in parts.values()) for t, parts in stats.items()}


def diff(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}


class Config:
    """One host on ``queues`` queues over ``accounts`` staging accounts, and what it accepted."""

    def __init__(
        self,
        azurite: Azurite,
        front: ThrottleProcess,
        vault_front: ThrottleProcess,
        targets: Targets,
        queues: int,
        accounts: int,
    ) -> None:
        self.front = front
        self.vault_front = vault_front
        self.targets = targets
        self.queues = queues
        self.accounts = accounts
        self.capacity = capacity_posts(targets, queues, accounts)
        prefix = self.prefix = f"tq{uuid.uuid4().hex[:6]}"
        settings = {
            "VaultStorage": vault_front.connection_string(VAULT_ACCOUNT),
            "AzureWebJobsStorage": azurite.connection_string,
            "VAULT_STAGING_ACCOUNTS": str(accounts),
            "VAULT_STAGING_QUEUES": str(queues // accounts),
            "VAULT_QUEUE_PREFIX": prefix,
            "FUNCTIONS_WORKER_PROCESS_COUNT": "2",
        }
        for i in range(accounts):
            settings[f"VaultStaging{i}"] = front.connection_string(STAGING_ACCOUNTS[i])
        self.host = HostProcess(azurite.connection_string, settings=settings)
        assert azurite.process is not None
        self.azurite_pid = azurite.process.pid
        self.azurite_connection = azurite.connection_string
        self.streams = [f"th-{prefix}-{i}" for i in range(STREAMS)]
        self.container = ContainerClient.from_connection_string(azurite.connection_string, "streams")
        self.accepted: dict[int, str] = {}  # post -> stream
        self.refused: set[int] = set()
        self.windows: list[tuple[IdleBudget, int]] = []
        """Each closed-loop window's sampled unused tokens, and the host's output line it began at."""
        self._next = 0
        self._lock = threading.Lock()

    def committed_listed(self) -> int:
        """Messages committed so far over this configuration's streams, from one listing of
        their blobs with metadata (the commit record), straight from Azurite."""
        total = 0
        for blob in self.container.list_blobs(name_starts_with=f"th-{self.prefix}-", include=["metadata"]):
            total += CommitState.from_metadata(dict(blob.metadata or {}), blob.etag, blob.size or 0).count
        return total

    def new_post(self) -> tuple[int, str]:
        with self._lock:
            post = self._next
            self._next += 1
        return post, self.streams[post % STREAMS]

    def snapshot(self) -> tuple[int, int, dict[str, int]]:
        stats = self.front.stats()
        staging = admitted(stats, "account_requests", STAGING_ACCOUNTS)
        vault = admitted(self.vault_front.stats(), "account_requests", (VAULT_ACCOUNT,))
        return staging, vault, refused(stats)

    def committed(self, vault: Vault) -> int:
        """Messages committed so far over this configuration's streams (read from the vault
        account directly, not through the fronts, so counting costs no target anything)."""
        total = 0
        for stream in self.streams:
            try:
                total += vault.reader.state(stream).count
            except StreamNotFound:
                pass
        return total

    def open_loop(
        self, load: float, seconds: float, *, vault: Vault | None = None, warm_up: float = 0.0
    ) -> dict[str, Any]:
        """POSTs offered at ``load`` × capacity for ``seconds``, whatever the answers.

        With ``vault``, the run also measures the **steady window**, from ``warm_up`` seconds in
        to the end of the offering: the messages committed in it (the streams' counts at both
        ends), the POSTs answered 202 in it, and the staging requests the front admitted in it,
        so that what the tier sustains is compared with what the model predicts."""
        rate = load * self.capacity
        total = max(1, round(rate * seconds))
        statuses: Counter[str] = Counter()
        missing_retry_after = 0
        accepted_in_window = 0
        accepted_at: list[float] = []
        before = self.snapshot()
        marks: dict[str, Mark] = {}

        def mark(name: str) -> None:
            assert vault is not None
            marks[name] = (time.monotonic(), self.committed(vault), self.front_queue_ops())

        client = httpx.Client(
            base_url=self.host.url,
            headers={"x-functions-key": self.host.key, "Content-Type": "application/json"},
            timeout=POST_TIMEOUT,
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=64),
        )

        def one(_: int) -> None:
            nonlocal missing_retry_after, accepted_in_window
            post, stream = self.new_post()
            try:
                r = client.post(f"/streams/{stream}/messages", content=body(post))
            except httpx.TimeoutException:
                with self._lock:
                    statuses["timeout"] += 1
                return
            with self._lock:
                statuses[str(r.status_code)] += 1
                if r.status_code == 202:
                    self.accepted[post] = stream
                    accepted_in_window += 1
                    accepted_at.append(time.monotonic())
                else:
                    self.refused.add(post)
                    if r.status_code == 503 and not r.headers.get("Retry-After"):
                        missing_retry_after += 1

        start = time.monotonic()
        sampler = None
        if vault is not None:
            sampler = threading.Timer(warm_up, mark, ("from",))
            sampler.start()
        with ThreadPoolExecutor(64) as pool:
            for i in range(total):
                delay = start + i / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                pool.submit(one, i)
            if sampler is not None:
                time.sleep(max(0.0, start + total / rate - time.monotonic()))
                sampler.join()
                mark("to")
        client.close()
        window = total / rate  # every POST offered in it is counted, whenever its answer came
        run = self._run(load, before, statuses, missing_retry_after, rate, accepted_in_window, window)
        if sampler is not None:
            run.update(self._steady(marks["from"], marks["to"], accepted_at))
        return run

    def _steady(self, first: Mark, last: Mark, at: list[float]) -> dict[str, Any]:
        """The steady window's figures: committed and admitted messages/s, and the staging
        queues' operations per committed batch (each queue's, as the front counted them)."""
        seconds = last[0] - first[0]
        committed = last[1] - first[1]
        admitted = sum(1 for t in at if first[0] <= t <= last[0])
        ops = diff(last[2], first[2])
        return {
            "steady_seconds": seconds,
            "committed_msgs_per_s": committed / seconds,
            "admitted_msgs_per_s": admitted * MESSAGES_PER_POST / seconds,
            "queue_ops_per_s": sum(ops.values()) / seconds,
            "queue_ops_per_committed_batch": (
                sum(ops.values()) / (committed / MESSAGES_PER_POST) if committed else None
            ),
            "busiest_queue_ops_per_s": max(ops.values(), default=0) / seconds,
        }

    def front_queue_ops(self) -> dict[str, int]:
        """Requests the front admitted so far on each of this configuration's staging queues."""
        stats = self.front.stats().get("queue_messages", {})
        return {p: c["admitted"] for p, c in stats.items() if p.split("/", 1)[-1].startswith(self.prefix)}

    def closed_loop(
        self, seconds: float, warm_up: float, in_flight: int, *, wait: bool = False
    ) -> dict[str, Any]:
        """What the tier **sustains**: ``in_flight`` producers, each sending its next POST only
        once the tier holds fewer than ``in_flight`` uncommitted batches (``CommitWatch``: the
        producers confirm their commits by reading the streams back; with ``wait``, each waits
        for its own last one in its POST, ``?wait=``, as the runs recorded before did); a 503 waits
        out its ``Retry-After``. So the tier never holds more than ``in_flight`` batches and every
        staged batch is also drained. The steady window (after ``warm_up``, to the end) counts
        the messages committed in it."""
        statuses: Counter[str] = Counter()
        before = self.snapshot()
        client = httpx.Client(
            base_url=self.host.url,
            headers={"x-functions-key": self.host.key, "Content-Type": "application/json"},
            timeout=POST_TIMEOUT + 10,
            limits=httpx.Limits(max_connections=in_flight, max_keepalive_connections=in_flight),
        )
        start = time.monotonic()
        stop = start + seconds
        watch = CommitWatch(self, in_flight)

        spans: list[tuple[float, float, str]] = []
        """What each producer did when: a POST by its answer, a sleep on its ``Retry-After``, or
        a wait for the tier's commits (``"commits awaited"``)."""

        def producer(_: int) -> None:
            while time.monotonic() < stop:
                if not wait:
                    asked = time.monotonic()
                    if not watch.reserve(stop):
                        break
                    with self._lock:
                        spans.append((asked, time.monotonic(), "commits awaited"))
                post, stream = self.new_post()
                sent = time.monotonic()
                try:
                    r = client.post(
                        f"/streams/{stream}/messages",
                        params={"wait": POST_TIMEOUT} if wait else {},
                        content=body(post),
                        headers={"Idempotency-Key": f"c{self.prefix}{post}"},
                    )
                except httpx.TimeoutException:
                    with self._lock:
                        statuses["timeout"] += 1
                        spans.append((sent, time.monotonic(), "timeout"))
                    if not wait:
                        watch.release()
                    continue
                with self._lock:
                    statuses[str(r.status_code)] += 1
                    spans.append((sent, time.monotonic(), str(r.status_code)))
                    if r.status_code in (200, 202):
                        self.accepted[post] = stream
                    else:
                        self.refused.add(post)
                if r.status_code not in (200, 202) and not wait:
                    watch.release()
                if r.status_code == 503:
                    if not r.headers.get("Retry-After"):
                        statuses["503 without Retry-After"] += 1
                    slept = time.monotonic()
                    time.sleep(float(r.headers.get("Retry-After") or 1))
                    with self._lock:
                        spans.append((slept, time.monotonic(), "Retry-After"))

        marks: dict[str, Mark] = {}
        operations: dict[str, dict[str, int]] = {}
        lines: dict[str, int] = {}
        unused: dict[str, float] = {}
        front_at: dict[str, float] = {}
        vault_requests: dict[str, dict[str, int]] = {}
        machine: dict[str, dict[str, float]] = {}

        def mark(name: str) -> None:
            # The front's counts first, together (a few fast requests), then the streams' counts
            # (32 reads, seconds on a busy machine), each window timed by the middle of its reads:
            # a window whose ends took unequal times to read is not counted as longer than it was.
            at = time.monotonic()
            queue_ops = self.front_queue_ops()
            operations[name] = self.front.operations()
            unused[name] = self.front_unused()
            front_at[name] = (at + time.monotonic()) / 2
            lines[name] = len(self.host.lines)
            machine[name] = self.machine_cpu()
            vault_requests[name] = self.vault_counts()
            at = time.monotonic()
            committed = self.committed_listed()
            marks[name] = ((at + time.monotonic()) / 2, committed, queue_ops)

        idle = IdleBudget(self)

        def open_window() -> None:
            mark("from")
            idle.start()
            self.windows.append((idle, lines["from"]))

        sampler = threading.Timer(warm_up, open_window)
        sampler.start()
        with watch, ThreadPoolExecutor(in_flight) as pool:
            for n in range(in_flight):
                pool.submit(producer, n)
            time.sleep(max(0.0, stop - time.monotonic()))
            sampler.join()
            idle.stop()
            mark("to")
        client.close()
        refusals = self.snapshot()[2]
        return {
            "queues": self.queues,
            "accounts": self.accounts,
            "queues_per_account": self.queues // self.accounts,
            "load": "sustained",
            "factor": self.targets.factor,
            "in_flight": in_flight,
            "producers_confirm": "in the POST (?wait=)" if wait else "by reading back",
            "host_pacing": HOST_PACING,
            "statuses": dict(sorted(statuses.items())),
            "refused": diff(refusals, before[2]),
            **self._steady(marks["from"], marks["to"], []),
            "queue_operations": diff(operations["to"], operations["from"]),
            "writer_invocations": self.invocations(lines["from"], lines["to"]),
            "appends": self.appends(lines["from"], lines["to"]),
            "handed_back": sum(
                1 for line in self.host.lines[lines["from"] : lines["to"]] if "handed back to" in line
            ),
            "unused_queue_tokens": unused["to"] - unused["from"],
            "front_seconds": front_at["to"] - front_at["from"],
            "vault_requests": diff(vault_requests["to"], vault_requests["from"]),
            "cpu_seconds": {k: v - machine["from"][k] for k, v in machine["to"].items()},
            "producer_seconds": _clipped(spans, marks["from"][0], marks["to"][0]),
            "unused_queue_tokens_by_queue_state": idle.by_state,
            "post_seconds": _durations(spans, marks["from"][0], marks["to"][0]),
        }

    def ceiling(self, seconds: float, in_flight: int, *, wait: bool = False) -> dict[str, Any]:
        """This machine's ceiling for the configuration, measured right after its throttled
        window: the same host, streams and producers, with the front lifted to Azure's own
        targets (CEILING_FACTOR), so that no target binds and what commits is what this host's
        share of the machine's CPU serves (docs/CAPACITY.md §7.4). The front's factor is put
        back at the end."""
        self.front.set_factor(CEILING_FACTOR)
        try:
            run = self.closed_loop(seconds * 4 / 3, seconds / 3, in_flight, wait=wait)
        finally:
            self.front.set_factor(self.targets.factor)
        keep = ("steady_seconds", "committed_msgs_per_s", "queue_ops_per_committed_batch", "cpu_seconds")
        return {"factor": CEILING_FACTOR, "statuses": run["statuses"], **{k: run[k] for k in keep}}

    def vault_counts(self) -> dict[str, int]:
        """Requests so far on the vault account (its front at Azure's targets never refuses
        here), and the entities of them on the batch-status table: the producers' ``?wait=``
        reads of their batches' rows, the status rows written at staging and at commit."""
        stats = self.vault_front.stats()
        rows = stats.get("table_partition_entities", {})
        return {
            "requests": admitted(stats, "account_requests", (VAULT_ACCOUNT,)),
            "batch table entities": sum(
                c["admitted"] for p, c in rows.items() if p.split("/")[1:2] == ["mvbatches"]
            ),
        }

    def front_unused(self) -> float:
        """Tokens this configuration's staging queues' full buckets could not hold so far."""
        found = self.front.unused().get("queue_messages", {})
        return sum(v for p, v in found.items() if self.is_staging_queue(p))

    def is_staging_queue(self, partition: str) -> bool:
        """Whether a front's queue partition (``account/queue``) is one of this configuration's
        staging queues (``<prefix>-<i>``; not their poison queues, which nobody uses here)."""
        name = partition.split("/", 1)[-1]
        return name.startswith(f"{self.prefix}-") and name[len(self.prefix) + 1 :].isdigit()

    def machine_cpu(self) -> dict[str, float]:
        """CPU seconds so far: the machine's (every core, busy), and of it the host with its
        workers, Azurite, the fronts and this process (the producers)."""
        times = psutil.cpu_times()  # guest time is in user time already
        busy = sum(times) - times.idle - getattr(times, "iowait", 0.0) - getattr(times, "guest", 0.0)
        busy -= getattr(times, "guest_nice", 0.0)
        assert self.host.proc is not None
        host = psutil.Process(self.host.proc.pid)
        procs = [host, *host.children(recursive=True)]
        return {
            "machine": busy,
            "host": sum(p.cpu_times().user + p.cpu_times().system for p in procs if p.is_running()),
            "azurite": cpu_seconds(self.azurite_pid),
            "fronts": sum(cpu_seconds(f.proc.pid) for f in (self.front, self.vault_front) if f.proc),
            "producers": cpu_seconds(os.getpid()),
        }

    def unused_by_writer(self, window: int = 0) -> dict[str, Any]:
        """A closed-loop window's sampled unused tokens by whether its queue's writer was in an
        invocation (``IdleBudget.by_writer``), and the queues' seconds with none running, once
        the invocations running at its end have ended and been logged (after the ceiling
        phase, say)."""
        idle, first = self.windows[window]
        found = [
            json.loads(line[line.index('{"event":"invocation"') :])
            for line in self.host.lines[first:]
            if '{"event":"invocation"' in line
        ]
        timed = [f for f in found if "started_ms" in f]
        return {
            "unused_queue_tokens_by_writer": idle.by_writer(timed),
            "queue_seconds_between_invocations": idle.between_invocations(timed),
            "queue_seconds_sampled": len(idle.queues) * (idle.ended - idle.began),
        }

    def invocations(self, first: int, last: int) -> dict[str, Any]:
        """The writer invocations the host logged between two of its output lines: how many,
        their seconds in all, and the seconds of it they waited on storage that refused them
        (vault_app.writer_fn's ``invocation`` event)."""
        found = [
            json.loads(line[line.index('{"event":"invocation"') :])
            for line in self.host.lines[first:last]
            if '{"event":"invocation"' in line
        ]
        by_queue: dict[str, float] = {}
        for f in found:
            by_queue[f["queue"]] = by_queue.get(f["queue"], 0.0) + f["seconds"]
        rounds = [
            json.loads(line[line.index('{"event":"rounds"') :])
            for line in self.host.lines[first:last]
            if '{"event":"rounds"' in line
        ]
        return {
            "count": len(found),
            "seconds": sum(f["seconds"] for f in found),
            "backed_off_seconds": sum(f["backed_off"] for f in found),
            "seconds_by_queue": dict(sorted(by_queue.items())),
            "rounds": sum(r["rounds"] for r in rounds),
            "ended": dict(sorted(Counter(r["ended"] for r in rounds).items())),
        }

    def appends(self, first: int, last: int) -> dict[str, float]:
        """The writers' appends (one stream's commit each) the host logged between two of its
        output lines: how many, the batches in them, and the median of their wall time."""
        found = [
            json.loads(line[line.index('{"event":"appended"') :])
            for line in self.host.lines[first:last]
            if '{"event":"appended"' in line
        ]
        return {
            "count": len(found),
            "batches": sum(len(f["batch_ids"]) for f in found),
            "median_ms": statistics.median(f["duration_ms"] for f in found) if found else 0.0,
        }

    def client_producers(self, load: float, seconds: float, producers: int = 24) -> dict[str, Any]:
        """vault_client producers offering ``load`` × capacity, each batch retried until accepted."""
        rate_each = load * self.capacity / producers
        statuses: Counter[str] = Counter()
        accepted_at: list[float] = []
        before = self.snapshot()
        counting = httpx.HTTPTransport()

        class Counting(httpx.BaseTransport):
            def handle_request(self, request: httpx.Request) -> httpx.Response:
                try:
                    response = counting.handle_request(request)
                except httpx.TimeoutException:
                    statuses["timeout"] += 1
                    raise
                statuses[str(response.status_code)] += 1
                return response

        api = ApiClient(
            self.host.url,
            self.host.key,
            timeout=POST_TIMEOUT,
            retry=RetryPolicy(attempts=1000, deadline=None, max_retry_after=10),
            transport=Counting(),
            max_connections=producers,
        )
        start = time.monotonic()
        stop = start + seconds

        def producer(n: int) -> None:
            due = start + n / (rate_each * producers)
            while due < stop:
                time.sleep(max(0.0, due - time.monotonic()))
                post, stream = self.new_post()
                api.produce(stream, body(post), idempotency_key=f"p{post}")
                with self._lock:
                    self.accepted[post] = stream
                    accepted_at.append(time.monotonic())
                due = max(due + 1 / rate_each, time.monotonic())

        with ThreadPoolExecutor(producers) as pool:
            list(pool.map(producer, range(producers)))
        elapsed = time.monotonic() - start
        api.close()
        in_window = sum(1 for t in accepted_at if t <= stop)
        run = self._run("client", before, statuses, 0, load * self.capacity, in_window, seconds)
        run["producers"] = producers
        run["elapsed_with_last_retries_s"] = elapsed
        return run

    def _run(
        self,
        load: float | str,
        before: tuple[int, int, dict[str, int]],
        statuses: Counter[str],
        missing_retry_after: int,
        offered: float,
        accepted: int,
        seconds: float,
    ) -> dict[str, Any]:
        staging, vault, refusals = self.snapshot()
        staging_requests = staging - before[0]
        return {
            "queues": self.queues,
            "accounts": self.accounts,
            "queues_per_account": self.queues // self.accounts,
            "load": load,
            "capacity_posts_per_s": self.capacity,
            "offered_posts_per_s": offered,
            "accepted_posts_per_s": accepted / seconds,
            "accepted_msgs_per_s": accepted * MESSAGES_PER_POST / seconds,
            "accepted_over_capacity": accepted / seconds / self.capacity,
            "accepted_over_offered_up_to_capacity": accepted / seconds / min(offered, self.capacity),
            "statuses": dict(sorted(statuses.items())),
            "missing_retry_after": missing_retry_after,
            "staging_requests_per_s": staging_requests / seconds,
            "staging_requests_per_batch": staging_requests / accepted if accepted else None,
            "vault_requests_per_post": (vault - before[1]) / sum(statuses.values()) if statuses else None,
            "refused": diff(refusals, before[2]),
        }

    def read_back(self, vault: Vault, azurite: Azurite, timeout: float = 120.0) -> dict[str, int]:
        """Wait for the writer to commit every accepted POST (it drains at the queues' rate, so a
        backlog built over capacity takes a while), then read every stream. A POST not in its
        stream while its queue still holds messages is ``still_queued``, not lost."""
        expected = Counter(self.accepted.values())
        deadline = time.monotonic() + timeout

        def committed(stream: str) -> int:
            try:
                return vault.reader.state(stream).count
            except StreamNotFound:
                return 0

        while time.monotonic() < deadline:
            if all(committed(s) >= expected[s] * MESSAGES_PER_POST for s in self.streams):
                break
            time.sleep(2.0)
        seen: Counter[int] = Counter()
        for stream in self.streams:
            try:
                for m in vault.reader.scan(stream):
                    post, index = m.value.decode().split(":")[:2]
                    if index == "00":
                        seen[int(post)] += 1
            except StreamNotFound:
                pass
        missing = sum(1 for p in self.accepted if seen[p] == 0)
        queued = self.queued(azurite)
        return {
            "accepted": len(self.accepted),
            "lost": missing if queued == 0 else 0,
            "still_queued": queued,
            "not_yet_committed": missing if queued else 0,
            "duplicated": sum(1 for p in self.accepted if seen[p] > 1),
            "refused_but_staged": sum(1 for p in seen if p not in self.accepted),
        }

    def queued(self, azurite: Azurite) -> int:
        """Messages still in this configuration's staging queues (straight from Azurite)."""
        total = 0
        for account in STAGING_ACCOUNTS[: self.accounts]:
            text = azurite.connection_string.replace(VAULT_ACCOUNT, account)
            service = QueueServiceClient.from_connection_string(text)
            for q in range(self.queues // self.accounts):
                props = service.get_queue_client(f"{self.prefix}-{q}").get_queue_properties()
                total += props.approximate_message_count or 0
        return total


class CommitWatch:
    """Producers that confirm their commits by reading the streams back, rather than waiting in
    their POSTs (``?wait=``, which holds a host thread and polls the stream's commit record
    through the host, the vault account's requests and the host's CPU that the writers need):
    one listing of the configuration's stream blobs with their commit records, every
    POLL_SECONDS, straight from Azurite (free of every target and of the host), counts the
    batches committed; a producer sends its next batch only while fewer than ``in_flight`` of
    those admitted are not yet committed, so that the tier holds at most ``in_flight`` batches,
    as many as closed-loop producers each waiting for its own."""

    POLL_SECONDS = 0.2

    def __init__(self, config: Config, in_flight: int) -> None:
        self.config = config
        self.in_flight = in_flight
        self.admitted = 0
        """Batches admitted (or being sent) in this loop."""
        self.base = config.committed_listed()
        self.committed = 0
        """Batches committed since the loop began."""
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="commit-watch", daemon=True)

    def __enter__(self) -> CommitWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.POLL_SECONDS):
            committed = (self.config.committed_listed() - self.base) // MESSAGES_PER_POST
            with self._changed:
                self.committed = committed
                self._changed.notify_all()

    def reserve(self, until: float) -> bool:
        """Wait for room for one more batch in flight; False if ``until`` came first."""
        with self._changed:
            while self.admitted - self.committed >= self.in_flight:
                if time.monotonic() >= until:
                    return False
                self._changed.wait(self.POLL_SECONDS)
            self.admitted += 1
            return True

    def release(self) -> None:
        """The reserved batch was refused: its room is free again."""
        with self._changed:
            self.admitted -= 1
            self._changed.notify_all()


class IdleBudget:
    """Samples, once a second in a steady window, each staging queue's tokens unused (its bucket
    full) and whether batches were waiting in it then (visible messages, peeked straight from
    Azurite: free of any target), so that a queue's unused budget says who was idle: its writer,
    with batches waiting for it, or the producers, with none waiting (every batch in flight
    inside the writer's round or on its way to its producer)."""

    INTERVAL = 1.0

    def __init__(self, config: Config) -> None:
        self.config = config
        self.by_state: dict[str, float] = {"batches waiting": 0.0, "none waiting": 0.0}
        self.samples: list[tuple[float, str, float]] = []
        """Each queue's unused tokens of each second (Unix time at its middle, queue, tokens)."""
        self.began = self.ended = 0.0
        """The sampled window (Unix time)."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        services = {
            a: QueueServiceClient.from_connection_string(config.azurite_connection.replace(VAULT_ACCOUNT, a))
            for a in STAGING_ACCOUNTS[: config.accounts]
        }
        self.queues = {
            f"{a}/{config.prefix}-{q}": services[a].get_queue_client(f"{config.prefix}-{q}")
            for a in services
            for q in range(config.queues // config.accounts)
        }

    def start(self) -> None:
        self.began = time.time()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.ended = time.time()

    def _run(self) -> None:
        last = self.config.front.unused().get("queue_messages", {})
        while not self._stop.wait(self.INTERVAL):
            now = self.config.front.unused().get("queue_messages", {})
            for partition, client in self.queues.items():
                lost = now.get(partition, 0.0) - last.get(partition, 0.0)
                if lost > 0:
                    waiting = bool(client.peek_messages(max_messages=1))
                    self.by_state["batches waiting" if waiting else "none waiting"] += lost
                    self.samples.append((time.time() - self.INTERVAL / 2, partition, lost))
            last = now

    def by_writer(self, invocations: list[dict[str, Any]]) -> dict[str, float]:
        """The sampled unused tokens split by whether the queue's writer was in an invocation
        then (``invocations``: the host's ``invocation`` events, with when each started): time
        between invocations is the host's (its delete of the trigger, its poll and their
        back-offs on a refusing queue), time in one the writer's rounds (docs/CAPACITY.md §7.4)."""
        spans: dict[str, list[tuple[float, float]]] = {}
        for i in invocations:
            key = f"{STAGING_ACCOUNTS[i['account']]}/{i['queue']}"
            start = i["started_ms"] / 1000
            spans.setdefault(key, []).append((start, start + i["seconds"]))
        out = {"in an invocation": 0.0, "between invocations": 0.0}
        for at, partition, lost in self.samples:
            inside = any(a <= at <= b for a, b in spans.get(partition, []))
            out["in an invocation" if inside else "between invocations"] += lost
        return out

    def between_invocations(self, invocations: list[dict[str, Any]]) -> float:
        """Seconds of the window the configuration's queues spent with no writer invocation
        running, summed over the queues (the host's delete of a trigger, its poll and their
        back-offs, its idle waits)."""
        running = 0.0
        for i in invocations:
            if f"{STAGING_ACCOUNTS[i['account']]}/{i['queue']}" in self.queues:
                start = i["started_ms"] / 1000
                running += max(0.0, min(start + i["seconds"], self.ended) - max(start, self.began))
        return len(self.queues) * (self.ended - self.began) - running


def _clipped(spans: list[tuple[float, float, str]], start: float, end: float) -> dict[str, float]:
    """Producer-seconds within [start, end] by what the producers did (a POST by its answer, a
    sleep on Retry-After)."""
    out: dict[str, float] = {}
    for a, b, kind in spans:
        inside = min(b, end) - max(a, start)
        if inside > 0:
            out[kind] = out.get(kind, 0.0) + inside
    return {k: round(v, 3) for k, v in sorted(out.items())}


def _durations(spans: list[tuple[float, float, str]], start: float, end: float) -> dict[str, float]:
    """The mean seconds of the POSTs answered in [start, end], by answer (a 200's is its batch's
    time from send to commit, seen by its producer)."""
    found: dict[str, list[float]] = {}
    for a, b, kind in spans:
        if kind != "Retry-After" and start <= b <= end:
            found.setdefault(kind, []).append(b - a)
    return {k: round(statistics.mean(v), 3) for k, v in sorted(found.items())}


HOTSPOTS = (
    # name, POSTs/s, streams, messages per POST, message bytes, tailing consumers
    ("hot stream, 1-message POSTs", 10.0, 1, 1, 100, 0),
    ("many small streams, 1-message POSTs", 10.0, 500, 1, 100, 0),
    ("claim-check batches of 1,000 x 1 KiB", 1.0, 4, 1000, 1024, 0),
    ("40 consumers tailing one stream, 2 POSTs/s of 10", 2.0, 1, 10, 100, 40),
)


def hotspot(
    config: Config, front: ThrottleProcess, scenario: tuple[Any, ...], seconds: float
) -> dict[str, Any]:
    """Run one workload well below every target on a front at Azure's own targets (factor 1),
    and count the requests per partition: the partition with the highest share of its target
    binds first, at ``binds_at`` times this workload."""
    name, rate, streams, per_post, size, consumers = scenario
    names = [f"hs-{uuid.uuid4().hex[:6]}-{i}" for i in range(streams)]
    value = "v" * size
    payload = json.dumps({"messages": [{"key": f"k{i}", "value": value} for i in range(per_post)]}).encode()
    headers = {"x-functions-key": config.host.key, "Content-Type": "application/json"}
    stop = threading.Event()
    with httpx.Client(base_url=config.host.url, headers=headers, timeout=POST_TIMEOUT) as client:
        client.post(f"/streams/{names[0]}/messages", params={"wait": 30}, content=payload)  # opened

        def tail() -> None:
            with httpx.Client(base_url=config.host.url, headers=headers, timeout=POST_TIMEOUT) as reader:
                offset = reader.get(f"/streams/{names[0]}/messages").headers["x-committed"]
                while not stop.is_set():
                    r = reader.get(f"/streams/{names[0]}/messages", params={"from": offset, "wait": 5})
                    offset = r.headers.get("x-next-offset", offset)

        tails = [threading.Thread(target=tail, daemon=True) for _ in range(consumers)]
        for t in tails:
            t.start()
        time.sleep(1.0 if consumers else 0.0)
        before = front.stats()
        start = time.monotonic()
        with ThreadPoolExecutor(16) as pool:
            for i in range(round(rate * seconds)):
                time.sleep(max(0.0, start + i / rate - time.monotonic()))
                pool.submit(client.post, f"/streams/{names[i % streams]}/messages", content=payload)
        elapsed = time.monotonic() - start
        time.sleep(2.0)  # the writer's share of the last POSTs
        after = front.stats()
        stop.set()
    elapsed += 2.0
    shares = []
    for target, partitions in after.items():
        for partition, counts in partitions.items():
            done = counts["admitted"] - before.get(target, {}).get(partition, {"admitted": 0})["admitted"]
            if done > 0:
                per_s = done / elapsed
                shares.append((per_s / Targets(factor=1).rate(target), target, partition, per_s))
    shares.sort(reverse=True)
    return {
        "scenario": name,
        "posts_per_s": rate,
        "streams": streams,
        "messages_per_post": per_post,
        "message_bytes": size,
        "consumers": consumers,
        "busiest": [
            {
                "target": t,
                "partition": _kind(p, names, config),
                "per_s": round(r, 2),
                "share_of_target": round(x, 5),
            }
            for x, t, p, r in shares[:5]
        ],
        "binds_at": 1 / shares[0][0] if shares else None,
    }


def _kind(partition: str, streams: list[str], config: Config) -> str:
    """A partition named by its kind: the stream names of a run are replaced by ``<stream>``."""
    for s in streams:
        partition = partition.replace(s, "<stream>")
    return partition.replace(config.prefix, "<prefix>")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--factor", type=float, default=DEFAULT_FACTOR, help="Azure's targets divided by this"
    )
    parser.add_argument("--seconds", type=float, default=8.0, help="seconds of offered load per point")
    parser.add_argument(
        "--sustain",
        type=float,
        default=DEFAULT_SUSTAIN_SECONDS,
        help="seconds of closed-loop producers (what a tier sustains)",
    )
    parser.add_argument(
        "--warm-up", type=float, default=15.0, help="seconds of the closed loop before its window opens"
    )
    parser.add_argument("--quick", action="store_true", help="1 and 8 queues over 1 account only")
    parser.add_argument(
        "--closed-only",
        action="store_true",
        help="the closed loop alone on 1 q / 1 acct, 8 q / 1 acct and 2 q / 2 acct"
        " (bench/results/throttled_closed.json)",
    )
    parser.add_argument(
        "--configs",
        type=parse_configs,
        default=CLOSED_CONFIGS,
        help="with --closed-only: queues/accounts[/factor[/producers per queue]], comma-separated"
        " (default CLOSED_CONFIGS)",
    )
    parser.add_argument(
        "--ceiling",
        type=float,
        default=DEFAULT_CEILING_SECONDS,
        help="with --closed-only: seconds of each configuration's window with the front at Azure's own"
        " targets, this machine's ceiling (0: none)",
    )
    parser.add_argument(
        "--wait",
        action="store_true",
        help="closed-loop producers wait for each commit in their POST (?wait=) rather than reading back",
    )
    parser.add_argument("--hotspots-only", action="store_true", help="only the hot-spot workloads")
    parser.add_argument("--no-hotspots", action="store_true", help="the sweep only (a trial run)")
    parser.add_argument(
        "--summarize",
        action="store_true",
        help="recompute the figures of bench/results/throttled.json from its runs",
    )
    args = parser.parse_args()
    if args.summarize:
        resummarize()
        return
    if args.closed_only:
        closed_only(
            args.factor, args.sustain, args.warm_up, args.configs, ceiling=args.ceiling, wait=args.wait
        )
        return
    t0 = time.monotonic()
    key = dev_key()
    os.environ["AZURITE_ACCOUNTS"] = ";".join(f"{a}:{key}" for a in (VAULT_ACCOUNT, *STAGING_ACCOUNTS))
    targets = Targets(factor=args.factor)
    azurite = Azurite(in_memory=True).start()
    upstream = {"blob": azurite.blob_port, "queue": azurite.queue_port, "table": azurite.table_port}
    front = ThrottleProcess(upstream, {"MV_THROTTLE_FACTOR": str(args.factor)}).start()
    # The vault account at Azure's own targets: counted, never binding here, so that the
    # staging tier is what the sweep measures (the hot spots below say where the vault binds).
    vault_front = ThrottleProcess(upstream, {"MV_THROTTLE_FACTOR": "1"}).start()
    vault = Vault(StorageAccount(connection_string=azurite.connection_string), container="streams")
    runs: list[dict[str, Any]] = []
    readback: list[dict[str, Any]] = []
    hotspots: list[dict[str, Any]] = []
    cpu: Counter[str] = Counter()
    configs = () if args.hotspots_only else ((1, 1), (8, 1)) if args.quick else CONFIGS
    try:
        for queues, accounts in configs:
            config = Config(azurite, front, vault_front, targets, queues, accounts)
            config.host.start()
            before = processes_cpu(config, azurite, front, vault_front)
            try:
                # First what the tier sustains, on empty queues; then the open loop, whose
                # overload leaves a backlog behind.
                in_flight = IN_FLIGHT_PER_QUEUE * queues
                runs.append(config.closed_loop(args.sustain, args.warm_up, in_flight, wait=args.wait))
                print(json.dumps(runs[-1]), flush=True)
                for load in LOADS:
                    time.sleep(2.0)  # cool-downs end, buckets refill: the next load starts fresh
                    steady = {"vault": vault, "warm_up": args.seconds / 3} if load == OVERLOAD else {}
                    runs.append(config.open_loop(load, args.seconds, **steady))
                    print(json.dumps(runs[-1]), flush=True)
                if (queues, accounts) in ((4, 1), (8, 2)):
                    runs.append(config.client_producers(3.0, args.seconds * 1.5))
                    print(json.dumps(runs[-1]), flush=True)
                cpu.update(diff(processes_cpu(config, azurite, front, vault_front), before))
                checked = {"queues": queues, "accounts": accounts, **config.read_back(vault, azurite)}
                readback.append(checked)
                print(json.dumps(checked), flush=True)
            finally:
                config.host.stop()
        # Hot spots: staging and vault both at Azure's own targets, counted by partition.
        config = Config(azurite, vault_front, vault_front, targets, 4, 1)
        config.host.start()
        try:
            for scenario in () if args.no_hotspots else HOTSPOTS:
                hotspots.append(hotspot(config, vault_front, scenario, args.seconds))
                print(json.dumps(hotspots[-1]), flush=True)
        finally:
            config.host.stop()
        figures = summarize(targets, runs, readback, cpu, time.monotonic() - t0)
        figures.update(hotspot_figures(hotspots))
        command = "./dev bench throttled" + (" --quick" if args.quick else "")
        report("throttled", command, figures)
        path = RESULTS / "throttled.json"
        doc = json.loads(path.read_text())
        doc["settings"] = {
            "factor": args.factor,
            "targets": {
                k: v
                for k, v in asdict(Targets()).items()
                if k not in ("factor", "burst_seconds", "timeout_every")
            },
            "messages_per_post": MESSAGES_PER_POST,
            "message_bytes": MESSAGE_BYTES,
            "streams": STREAMS,
            "seconds_per_load": args.seconds,
            "requests_per_batch": REQUESTS_PER_BATCH,
        }
        doc["runs"] = runs
        doc["readback"] = readback
        doc["hotspots"] = hotspots
        path.write_text(json.dumps(doc, indent=2) + "\n")
    finally:
        front.stop()
        vault_front.stop()
        azurite.cleanup()


def closed_only(
    factor: float,
    sustain: float,
    warm_up: float,
    configs: tuple[tuple[int, int, float | None, int | None], ...] = CLOSED_CONFIGS,
    *,
    ceiling: float = DEFAULT_CEILING_SECONDS,
    wait: bool = False,
) -> None:
    """What each configuration (CLOSED_CONFIGS) sustains with closed-loop producers, where its
    queues' operations go, and how long its writer invocations waited; then, with ``ceiling``
    seconds, what the same host and producers commit with the front at Azure's own targets
    (``Config.ceiling``); then the read-back."""
    t0 = time.monotonic()
    key = dev_key()
    os.environ["AZURITE_ACCOUNTS"] = ";".join(f"{a}:{key}" for a in (VAULT_ACCOUNT, *STAGING_ACCOUNTS))
    targets = Targets(factor=factor)
    azurite = Azurite(in_memory=True).start()
    upstream = {"blob": azurite.blob_port, "queue": azurite.queue_port, "table": azurite.table_port}
    fronts = {factor: ThrottleProcess(upstream, {"MV_THROTTLE_FACTOR": str(factor)}).start()}
    vault_front = ThrottleProcess(upstream, {"MV_THROTTLE_FACTOR": "1"}).start()
    vault = Vault(StorageAccount(connection_string=azurite.connection_string), container="streams")
    runs: list[dict[str, Any]] = []
    readback: list[dict[str, Any]] = []
    cpu: Counter[str] = Counter()
    load_average = os.getloadavg()[0]
    try:
        for queues, accounts, its_factor, per_queue in configs:
            f = its_factor or factor
            if f not in fronts:  # a front of its own: each front has one factor
                fronts[f] = ThrottleProcess(upstream, {"MV_THROTTLE_FACTOR": str(f)}).start()
            front = fronts[f]
            config = Config(azurite, front, vault_front, Targets(factor=f), queues, accounts)
            config.host.start()
            # The host's queue pollers create their queues as they start, through the front; a
            # create refused while the producers' first sends take a slow queue's few tokens
            # ends that poller (vault_local.host), and its queue is never drained.
            time.sleep(POLLERS_START_SECONDS)
            before = processes_cpu(config, azurite, front, vault_front)
            in_flight = (per_queue or IN_FLIGHT_PER_QUEUE) * queues
            try:
                runs.append(config.closed_loop(sustain, warm_up, in_flight, wait=wait))
                if ceiling:
                    runs[-1]["ceiling"] = config.ceiling(ceiling, in_flight, wait=wait)
                runs[-1].update(config.unused_by_writer())
                print(json.dumps(runs[-1]), flush=True)
                cpu.update(diff(processes_cpu(config, azurite, front, vault_front), before))
                checked = {"queues": queues, "accounts": accounts, **config.read_back(vault, azurite)}
                readback.append(checked)
                print(json.dumps(checked), flush=True)
            finally:
                config.host.stop()
    finally:
        for front in fronts.values():
            front.stop()
        vault_front.stop()
        azurite.cleanup()
    figures: dict[str, Any] = {
        "scale factor (Azure's targets ÷)": factor,
        "load average (1 min) at the start": load_average,
    }
    figures.update(model_figures(targets, runs))
    for r in runs:
        name = f"{run_name(r, factor)}, sustained"
        ops = r["queue_operations"]
        batches = r["committed_msgs_per_s"] * r["steady_seconds"] / MESSAGES_PER_POST
        for kind in ("send", "receive", "receive empty", "delete", "update"):
            figures[f"{name}: {kind} admitted per committed batch"] = (
                ops.get(f"{kind} admitted", 0) / batches if batches else None
            )
        figures[f"{name}: queue operations refused per committed batch"] = (
            sum(v for k, v in ops.items() if k.endswith("refused")) / batches if batches else None
        )
        figures[f"{name}: batches handed back (a lease held elsewhere, a refusal) per committed batch"] = (
            r.get("handed_back", 0) / batches if batches else None
        )
        inv = r["writer_invocations"]
        figures[f"{name}: writer invocations"] = inv["count"]
        figures[f"{name}: committed batches per invocation"] = (
            batches / inv["count"] if inv["count"] else None
        )
        if "queue_seconds_sampled" in r:
            # Every invocation's time inside the window, not only that of those that ended in it.
            running = 1 - r["queue_seconds_between_invocations"] / r["queue_seconds_sampled"]
        else:
            running = inv["seconds"] / (r["steady_seconds"] * r["queues"])
        figures[f"{name}: writer invocations' share of the window (per queue)"] = running
        figures[f"{name}: invocations' share of their time waiting on refusals"] = (
            inv["backed_off_seconds"] / inv["seconds"] if inv["seconds"] else None
        )
        ended = inv.get("ended", {})
        if ended:  # recorded since the writer logs its rounds (docs/CAPACITY.md §7.4)
            figures[f"{name}: drain rounds per invocation"] = inv["rounds"] / sum(ended.values())
            for why, count in ended.items():
                figures[f"{name}: invocations ended by {why}"] = count
        figures.update(where_the_time_went(name, r))
    figures["accepted POSTs read back"] = sum(c["accepted"] for c in readback)
    figures["lost"] = sum(c["lost"] for c in readback)
    figures["duplicated"] = sum(c["duplicated"] for c in readback)
    figures["accepted POSTs still queued at the end (not lost)"] = sum(
        c["not_yet_committed"] for c in readback
    )
    figures["host CPU s (with its workers)"] = cpu["host"] / 1000
    figures["Azurite CPU s"] = cpu["azurite"] / 1000
    figures["throttling fronts CPU s"] = cpu["fronts"] / 1000
    figures["benchmark seconds"] = time.monotonic() - t0
    command = "./dev bench throttled --closed-only"
    if configs != CLOSED_CONFIGS:
        command += " --configs " + ",".join("/".join(f"{x:g}" for x in c if x is not None) for c in configs)
    if factor != DEFAULT_FACTOR:
        command += f" --factor {factor:g}"
    if sustain != DEFAULT_SUSTAIN_SECONDS:
        command += f" --sustain {sustain:g}"
    if ceiling != DEFAULT_CEILING_SECONDS:
        command += f" --ceiling {ceiling:g}"
    if wait:
        command += " --wait"
    report("throttled_closed", command, figures)
    path = RESULTS / "throttled_closed.json"
    doc = json.loads(path.read_text())
    doc["settings"] = {
        "factor": factor,
        "targets": {
            k: v
            for k, v in asdict(Targets()).items()
            if k not in ("factor", "burst_seconds", "timeout_every")
        },
        "messages_per_post": MESSAGES_PER_POST,
        "message_bytes": MESSAGE_BYTES,
        "streams": STREAMS,
        "sustain_seconds": sustain,
        "warm_up_seconds": warm_up,
    }
    doc["runs"] = runs
    doc["readback"] = readback
    path.write_text(json.dumps(doc, indent=2) + "\n")


def where_the_time_went(name: str, run: dict[str, Any]) -> dict[str, Any]:
    """What bound a closed-loop run, as its window measured it (recorded since the front counts
    its buckets' unused tokens): each queue's budget that nobody asked for, what the producers
    were doing, and the machine's CPU and who used it."""
    if "unused_queue_tokens" not in run:
        return {}
    window = run["steady_seconds"]
    budget = queue_budget(run)
    producer_seconds = run["in_flight"] * window
    cores = psutil.cpu_count() or 1
    figures: dict[str, Any] = {
        f"{name}: queues' budget unused (their buckets full) ÷ target": run["unused_queue_tokens"] / budget,
    }
    for state, tokens in run.get("unused_queue_tokens_by_queue_state", {}).items():
        figures[f"{name}: queues' budget unused with {state} in them ÷ target"] = tokens / budget
    for state, tokens in run.get("unused_queue_tokens_by_writer", {}).items():
        figures[f"{name}: queues' budget unused with their writer {state} ÷ target"] = tokens / budget
    if "queue_seconds_between_invocations" in run:
        figures[f"{name}: queues' time with no writer invocation running"] = run[
            "queue_seconds_between_invocations"
        ] / (run["queues"] * window)
    for kind, seconds in run["producer_seconds"].items():
        figures[f"{name}: producers' time in {kind}"] = seconds / producer_seconds
    figures[f"{name}: POST answered 200, mean seconds from send to commit"] = run["post_seconds"].get("200")
    cpu = run["cpu_seconds"]
    figures[f"{name}: machine CPU busy ÷ its {cores} cores"] = cpu["machine"] / (cores * window)
    for who in ("host", "azurite", "fronts", "producers"):
        figures[f"{name}: {who} CPU (cores)"] = cpu[who] / window
    batches = run["committed_msgs_per_s"] * window / MESSAGES_PER_POST
    figures[f"{name}: host CPU ms per committed batch"] = 1000 * cpu["host"] / batches if batches else None
    appends = run.get("appends")
    if appends and appends["count"]:
        figures[f"{name}: writers' appends, median wall seconds"] = appends["median_ms"] / 1000
        figures[f"{name}: writers' appends, batches in one"] = appends["batches"] / appends["count"]
    for kind, count in run.get("vault_requests", {}).items():
        figures[f"{name}: vault account {kind} per committed batch"] = count / batches if batches else None
    return figures


def resummarize() -> None:
    """The figures again from the runs kept in bench/results/throttled.json (same runs, same
    provenance): for a change in what is summarized, without running the load again."""
    path = RESULTS / "throttled.json"
    doc = json.loads(path.read_text())
    old = doc["figures"]
    cpu = Counter(
        {"host": old["host CPU s (with its workers)"] * 1000, "azurite": old["Azurite CPU s"] * 1000}
    )
    cpu["fronts"] = old["throttling fronts CPU s"] * 1000
    targets = Targets(factor=doc["settings"]["factor"])
    figures = summarize(targets, doc["runs"], doc["readback"], cpu, old["benchmark seconds"])
    figures.update(hotspot_figures(doc["hotspots"]))
    doc["figures"] = figures
    path.write_text(json.dumps(doc, indent=2) + "\n")


def hotspot_figures(hotspots: list[dict[str, Any]]) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for h in hotspots:
        top = h["busiest"][0]
        figures[f"hot spot: {h['scenario']}: binds first"] = f"{top['target']} {top['partition']}"
        figures[f"hot spot: {h['scenario']}: at × this load"] = h["binds_at"]
    return figures


def predicted(
    targets: Targets, run: dict[str, Any], measured: capacity.Measured | None = None
) -> capacity.Throughput:
    """The capacity model's figures for a run's configuration, at its front's factor; with
    ``measured``, the run's own operations a batch and unused share (docs/CAPACITY.md §7.3)."""
    w = capacity.Workload(1.0, MESSAGE_BYTES, MESSAGES_PER_POST, streams=STREAMS, key_bytes=2)
    staging = capacity.Staging(run["accounts"], run["queues_per_account"], steered=True)
    scaled = capacity.Targets().scaled(1 / run.get("factor", targets.factor))
    waiting = run["in_flight"] / run["queues"] if "in_flight" in run else None
    return capacity.staging_throughput(w, staging, scaled, batches_per_invocation=waiting, measured=measured)


def measured_in(run: dict[str, Any]) -> capacity.Measured | None:
    """A closed-loop run's operations a committed batch and its queues' unused share, as its
    front counted them (runs recorded since the front counts unused tokens)."""
    if "unused_queue_tokens" not in run or not run["queue_ops_per_committed_batch"]:
        return None
    return capacity.Measured(
        run["queue_ops_per_committed_batch"], run["unused_queue_tokens"] / queue_budget(run)
    )


def queue_budget(run: dict[str, Any]) -> float:
    """The requests a closed-loop run's queues could take in the window the front counted."""
    seconds = run.get("front_seconds", run["steady_seconds"])
    return float(run["queues"] * Targets(factor=run["factor"]).rate("queue_messages") * seconds)


def model_figures(targets: Targets, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Measured against the capacity model (docs/CAPACITY.md §7): what each configuration
    committed with closed-loop producers, and what it admitted at 3 x in the open loop."""
    figures: dict[str, Any] = {}
    for r in runs:
        name = run_name(r, targets.factor)
        if r["load"] == "sustained":
            p = predicted(targets, r)
            figures[f"{name}, sustained: committed msgs/s (model: {p.committed_binding})"] = r[
                "committed_msgs_per_s"
            ]
            figures[f"{name}, sustained: committed ÷ model"] = r["committed_msgs_per_s"] / p.committed
            figures[
                f"{name}, sustained: queue ops per committed batch (model {p.operations_per_batch:.2f})"
            ] = r["queue_ops_per_committed_batch"]
            its = Targets(factor=r.get("factor", targets.factor))
            figures[f"{name}, sustained: queue operations ÷ the queues' target"] = r["queue_ops_per_s"] / (
                r["queues"] * its.rate("queue_messages")
            )
            m = measured_in(r)
            if m is not None:
                ops_only = predicted(targets, r, capacity.Measured(m.operations_per_batch))
                figures[f"{name}, sustained: committed ÷ model with the run's operations a batch"] = (
                    r["committed_msgs_per_s"] / ops_only.committed
                )
                figures[f"{name}, sustained: queues' target unused (buckets full)"] = m.unused_share
                both = f"{name}, sustained: committed ÷ model with the run's operations and unused target"
                figures[both] = r["committed_msgs_per_s"] / predicted(targets, r, m).committed
            figures.update(ceiling_figures(targets, name, r))
        elif r["load"] == OVERLOAD and "admitted_msgs_per_s" in r:
            p = predicted(targets, r)
            figures[f"{name}, {OVERLOAD:g}x open loop: admitted ÷ model"] = (
                r["admitted_msgs_per_s"] / p.admitted
            )
            figures[f"{name}, {OVERLOAD:g}x open loop: committed ÷ admitted"] = (
                r["committed_msgs_per_s"] / r["admitted_msgs_per_s"] if r["admitted_msgs_per_s"] else None
            )
    return figures


def forecast(targets: Targets, run: dict[str, Any]) -> capacity.Throughput | None:
    """The model's forecast for a closed-loop run with a ceiling phase (docs/CAPACITY.md §7.4):
    its queues' target over the operations a committed batch cost them (every kind, as the
    front counted them), or this machine's ceiling measured right after, whichever is less.
    Runs whose host paces its trigger as the Functions host does (``host_pacing``) leave out of
    the target what went unused while no writer invocation ran (``host_idle_share``): the
    host's settle and poll between invocations, a cost Azure's host has too. What went unused
    while a writer was in an invocation is what it forecasts, not an input."""
    if "ceiling" not in run or not run["queue_ops_per_committed_batch"]:
        return None
    measured = capacity.Measured(
        run["queue_ops_per_committed_batch"],
        host_idle_share(run),
        ceiling=run["ceiling"]["committed_msgs_per_s"],
    )
    return predicted(targets, run, measured)


def host_idle_share(run: dict[str, Any]) -> float:
    """The share of a run's queues' target left unused while no writer invocation ran on them,
    in runs whose host paces as the Functions host does; 0 in the runs before."""
    if run.get("host_pacing") != HOST_PACING or "unused_queue_tokens_by_writer" not in run:
        return 0.0
    return float(run["unused_queue_tokens_by_writer"]["between invocations"] / queue_budget(run))


def ceiling_figures(targets: Targets, name: str, run: dict[str, Any]) -> dict[str, Any]:
    """A closed-loop run against its machine's ceiling and the forecast (docs/CAPACITY.md §7.4)."""
    found = forecast(targets, run)
    if found is None:
        return {}
    ceiling = run["ceiling"]
    counted = predicted(targets, run)
    batches = ceiling["committed_msgs_per_s"] * ceiling["steady_seconds"] / MESSAGES_PER_POST
    return {
        f"{name}, sustained: ceiling, committed msgs/s with the front at Azure's targets": ceiling[
            "committed_msgs_per_s"
        ],
        f"{name}, sustained: ceiling ÷ counted model": ceiling["committed_msgs_per_s"] / counted.committed,
        f"{name}, sustained: ceiling, host CPU ms per committed batch": (
            1000 * ceiling["cpu_seconds"]["host"] / batches if batches else None
        ),
        f"{name}, sustained: forecast's target unused between invocations (the host's, measured)": (
            host_idle_share(run)
        ),
        f"{name}, sustained: forecast msgs/s (binds: {found.committed_binding})": found.committed,
        f"{name}, sustained: committed ÷ forecast": run["committed_msgs_per_s"] / found.committed,
    }


def processes_cpu(config: Config, azurite: Azurite, *fronts: ThrottleProcess) -> dict[str, int]:
    """CPU so far, in ms: the host with its workers, Azurite, the fronts."""
    assert config.host.proc is not None and azurite.process is not None
    host = psutil.Process(config.host.proc.pid)
    host_cpu = sum(p.cpu_times().user + p.cpu_times().system for p in [host, *host.children(recursive=True)])
    fronts_cpu = sum(cpu_seconds(f.proc.pid) for f in fronts if f.proc is not None)
    return {
        "host": round(host_cpu * 1000),
        "azurite": round(cpu_seconds(azurite.process.pid) * 1000),
        "fronts": round(fronts_cpu * 1000),
    }


def summarize(
    targets: Targets,
    runs: list[dict[str, Any]],
    readback: list[dict[str, Any]],
    cpu: Counter[str],
    seconds: float,
) -> dict[str, Any]:
    figures: dict[str, Any] = {
        "scale factor (Azure's targets ÷)": targets.factor,
        "queue target, scaled (requests/s)": targets.rate("queue_messages"),
        "staging account target, scaled (requests/s)": targets.rate("account_requests"),
    }
    open_runs = [r for r in runs if isinstance(r["load"], float)]
    for r in open_runs:
        figures[
            f"{r['queues']} q / {r['accounts']} acct, {r['load']:g}x: accepted ÷ min(offered, capacity)"
        ] = r["accepted_over_offered_up_to_capacity"]
    total = Counter[str]()
    for r in runs:
        total.update(r["statuses"])
    figures["POSTs answered 202"] = total["202"]
    figures["POSTs answered 200 (closed loop: committed within ?wait=)"] = total["200"]
    figures["POSTs answered 503"] = total["503"]
    figures["503 without Retry-After"] = (
        sum(r["missing_retry_after"] for r in open_runs) + total["503 without Retry-After"]
    )
    figures["POSTs answered 500"] = total["500"]
    figures["POSTs answered otherwise"] = sum(
        v
        for k, v in total.items()
        if k not in ("200", "202", "503", "500", "timeout", "503 without Retry-After")
    )
    figures["POST timeouts (30 s)"] = total["timeout"]
    for r in runs:
        if r["load"] == "client":
            figures[f"{r['queues']} q / {r['accounts']} acct, vault_client at 3x: goodput ÷ capacity"] = r[
                "accepted_over_capacity"
            ]
    figures.update(model_figures(targets, runs))
    by_load = {(r["queues"], r["accounts"], r["load"]): r for r in open_runs}
    for many in ((8, 1), (8, 2)):
        one, more = by_load.get((1, 1, 1.0)), by_load.get((*many, 1.0))
        if one and more:  # offered = capacity: what each accepts when it is full, not more
            figures[f"{many[0]} q / {many[1]} acct ÷ 1 q, accepted at 1x (≥ 6.4)"] = (
                more["accepted_posts_per_s"] / one["accepted_posts_per_s"]
            )
        one, more = by_load.get((1, 1, 3.0)), by_load.get((*many, 3.0))
        if one and more:  # over capacity: the staging requests each tier admitted
            figures[f"{many[0]} q / {many[1]} acct ÷ 1 q, staging requests admitted at 3x"] = (
                more["staging_requests_per_s"] / one["staging_requests_per_s"]
            )
            figures[f"{many[0]} q / {many[1]} acct ÷ 1 q, accepted at 3x"] = (
                more["accepted_posts_per_s"] / one["accepted_posts_per_s"]
            )
    per_batch = [
        r["staging_requests_per_batch"]
        for r in open_runs
        if r["load"] == 0.5 and r["staging_requests_per_batch"]
    ]
    if per_batch:
        figures["staging requests per accepted batch at 0.5x (median)"] = statistics.median(per_batch)
    per_post = [
        r["vault_requests_per_post"] for r in open_runs if r["load"] == 0.5 and r["vault_requests_per_post"]
    ]
    if per_post:
        figures["vault account requests per POST at 0.5x (median)"] = statistics.median(per_post)
    figures["accepted POSTs read back"] = sum(c["accepted"] for c in readback)
    figures["lost"] = sum(c["lost"] for c in readback)
    figures["duplicated"] = sum(c["duplicated"] for c in readback)
    figures["accepted POSTs still queued at the end (not lost)"] = sum(
        c["not_yet_committed"] for c in readback
    )
    figures["refused POSTs found in a stream (503 after the send; a retry would dedup)"] = sum(
        c["refused_but_staged"] for c in readback
    )
    figures["host CPU s (with its workers)"] = cpu["host"] / 1000
    figures["Azurite CPU s"] = cpu["azurite"] / 1000
    figures["throttling fronts CPU s"] = cpu["fronts"] / 1000
    figures["benchmark seconds"] = seconds
    return figures


if __name__ == "__main__":
    main()
