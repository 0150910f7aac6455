"""Recovery benchmark (issues 9 and 24): a killed writer instance, a killed language worker, and a
storage stall.

    ./dev bench recovery          (python -m bench.recovery)

**Kill.** Hosts A and B (two instances) on one disk-backed Azurite and one queue prefix; A
starts first and takes the staging queues (and stream leases) while the producers POST through
it; B starts after and polls the same queues. Under steady ingest into 4 streams, the
producers switch to B and A's whole process group is SIGKILLed, while A's writer holds the
queue and stream leases and drained messages. Measured: the time from the kill until every
batch acknowledged (202) before it is committed (the ``b`` rows ``GET /streams/{s}/batches/{id}``
reads, polled every 0.1 s), against a target of 30 s, which includes the 15 s for which A's
leases and drained messages stay locked; until B owns every staging queue (host log: A's owner
leases ran out; target 15 s, the lease); and until the first batch posted after the kill
commits. Repeated ``--kills`` times; then every stream is read back (lost or duplicated
messages).

**Worker kills.** One host under a lighter steady ingest (``--worker-rate``, 5 batches/s: what is
measured is the takeover, not a backlog's catch-up); the worker process that owns staging queues
0 and 2 (host log) is SIGKILLed ``--worker-kills`` times, the next kill once the previous one's
takeover is measured, the host has replaced the dead worker, and at least ``--kill-every``
seconds have passed (and a new warm spare is ready). Run once per ``--worker-modes`` entry, one
after the other: 1 or 2 language workers (``FUNCTIONS_WORKER_PROCESS_COUNT``), with the local
host's warm spare (``LOCAL_SPARE_WORKERS`` 1, the default) or without it (0: a fresh interpreter
starts after the kill), and host.json's ``visibilityTimeout`` at 10 s (before issue 24) or 1 s
(this app's host.json). With one worker the spare (or without it, the replacement) takes the
queues over; with two the survivor does, at once (docs/ARCHITECTURE.md §3.7). Measured per kill:
the time until another process owns both queues (host log), until the first batch posted after
the kill to a stream of those queues commits (the *takeover*; target 2 s), until the
replacement is ready (a spare: has taken the dead worker's place), and until a new spare is.
The takeover's commit is the writer's ``appended`` log line (logged just after it, with the
worker's clock); the time until ``GET .../batches/{id}`` reports it (its batch row, written in
the background after the commit, as the sampler polls every 0.1 s) is shown beside it. Over the
whole run: the seconds from each acknowledgement (202) to the commit (as the sampler sees it),
p50/p99/max, and lost, duplicated and poisoned batches.

**Stall.** One host under the same steady ingest; Azurite is frozen (SIGSTOP) for 10 s, then
resumed (SIGCONT). The committed rate is counted in 1 s buckets from the host's ``appended``
events; the steady rate is the median bucket of the 10 s before the stall. Measured from
SIGCONT: the first commit; the end of the first of three 1 s buckets in a row at >= 90% of the
steady rate; and when the commits missed during the stall are made up. Also every HTTP status
the producers got (202 and 503 expected, never 500). Repeated ``--stalls`` times.

The load is paced (``--rate`` batches/s of 100 x 1 KiB from 8 threads, well below what one host
sustains), so that "steady" is a rate the system keeps, not the edge of its capacity; POSTs
that fail (503 during the stall, or a connection cut by the kill) are retried after 0.5 s with
the same Idempotency-Key, and the schedule's late batches go out as soon as they can.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import sys
import tempfile
import time
import uuid
import zlib
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.cluster import (
    QUEUES,
    Append,
    Producers,
    Sampler,
    appends,
    audit,
    delete_queues,
    drop_stream,
    handbacks,
    percentile,
    poison_count,
    save_logs,
    settle,
    spread_streams,
    start_hosts,
    stop_hosts,
)
from bench.common import ROOT, report
from vault_core.azure import StorageAccount
from vault_core.vault import Vault
from vault_local.azurite import Azurite
from vault_local.process import HostProcess

STREAMS = 4
PER_BATCH = 100
RECOVERY_TARGET_SECONDS = 30.0
TAKEOVER_TARGET_SECONDS = 2.0
"""From a worker's kill until its replacement commits a batch of its queues (issue 24)."""
SPARE_READY = "warm spare language worker ready"
"""The host's log line when a new spare has started (vault_local.workers)."""
VICTIM_QUEUES = (0, 2)
"""The queues whose owner the worker-kill runs kill (with two workers, worker 0's at the start)."""


@dataclass
class Env:
    azurite: Azurite
    account: StorageAccount
    vault: Vault
    args: argparse.Namespace


@dataclass
class Kill:
    seconds: float
    """From the kill until every batch acknowledged before it is committed."""
    pending: int
    """Batches acknowledged before the kill and not yet committed at the kill."""
    first_commit: float
    """From the kill until the first batch posted after it (through B) is committed."""
    owned: float
    """From the kill until B owned every staging queue (host log): A's leases ran out."""
    last_append: float
    """From A's last commit to the kill: A's writer was busy when it died."""
    lost: int
    duplicated: int
    poisoned: int
    handbacks: int
    statuses: Counter[str]


# -- the kill ----------------------------------------------------------------------------------
def feed(producers: Producers, sampler: Sampler, seconds: float) -> None:
    """Let the producers run for ``seconds``, watching every acknowledged batch."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        sampler.watch(producers.snapshot())
        time.sleep(0.1)


def tear_down(
    env: Env, prefix: str, hosts: list[HostProcess], producers: Producers | None, streams: list[str]
) -> None:
    """Stop what a run started and delete what it wrote, so the next run starts clean."""
    if producers:
        producers.stop()
    stop_hosts(hosts)
    if env.args.logs:
        save_logs(env.args.logs, prefix, hosts)
    delete_queues(env.account, prefix)
    for s in streams:
        drop_stream(env.vault, s)


def kill_once(env: Env) -> Kill:
    prefix = f"rk{uuid.uuid4().hex[:8]}"
    streams = spread_streams(f"rk-{uuid.uuid4().hex[:6]}", STREAMS)
    hosts: list[HostProcess] = []
    producers: Producers | None = None
    try:
        hosts += start_hosts(env.azurite.connection_string, 1, prefix)
        a = hosts[0]
        producers = Producers([a], streams, env.args.producers, per_batch=PER_BATCH, rate=env.args.rate)
        with Sampler(env.vault) as sampler:
            producers.start()
            feed(producers, sampler, 3)  # A's pollers awake, A owns the queues
            hosts += start_hosts(env.azurite.connection_string, 1, prefix)
            b = hosts[1]
            feed(producers, sampler, env.args.steady)
            before = producers.snapshot()
            sampler.watch(before)
            producers.hosts = [b]
            killed, killed_at = time.perf_counter(), time.time()
            a.stop(kill=True)
            pending = sampler.waiting()
            while not all(x.batch_id in sampler.seen for x in before):
                if time.perf_counter() - killed > 120:
                    raise TimeoutError("batches acknowledged before the kill not committed after 120 s")
                sampler.watch(producers.snapshot())
                time.sleep(0.05)
            recovered = max(sampler.seen[x.batch_id] for x in before) - killed
            after = _first_commit_after(producers, sampler, killed)
            producers.stop()
            acked = producers.snapshot()
            sampler.watch(acked)
            if not sampler.wait_all(timeout=60):
                raise TimeoutError("batches acknowledged by B not committed after 60 s")
        found = audit(env.vault, acked, streams, PER_BATCH)
        owned = owned_again(list(b.lines), [f"0/{prefix}-{q}" for q in range(QUEUES)], killed_at, victims={0})
        return Kill(
            recovered,
            pending,
            after,
            float("nan") if owned is None else owned,
            killed_at - max(e.at for e in appends([a])),
            found.lost,
            found.duplicated,
            poison_count(env.account, prefix),
            sum(handbacks(h) for h in hosts),
            producers.statuses,
        )
    finally:
        tear_down(env, prefix, hosts, producers, streams)


def _first_commit_after(producers: Producers, sampler: Sampler, killed: float) -> float:
    """Seconds from the kill until the first batch first posted after it was committed."""
    deadline = time.perf_counter() + 60
    while time.perf_counter() < deadline:
        acked = producers.snapshot()
        sampler.watch(acked)
        done = [sampler.seen[x.batch_id] for x in acked if x.posted > killed and x.batch_id in sampler.seen]
        if done:
            return min(done) - killed
        time.sleep(0.05)
    raise TimeoutError("nothing posted after the kill was committed within 60 s")


# -- killed workers ----------------------------------------------------------------------------
@dataclass(frozen=True)
class WorkerMode:
    """One worker-kill run's host: its language workers and the retry delay of a failed trigger."""

    name: str
    workers: int
    visibility: int
    """host.json ``visibilityTimeout`` (s): when the killed invocation's trigger is retried."""
    round_robin: bool = False
    """Queue invocations to the live workers in turn, as Azure's host sends them."""
    spares: int = 1
    """``LOCAL_SPARE_WORKERS``: 0, a replacement starts after the kill (before issue 24's spare)."""
    fresh: bool = False
    """No worker template (``--fresh-workers``): a new spare or a replacement is a fresh
    interpreter, as the Functions host starts a worker (before the template)."""
    double: bool = False
    """Each kill is two: the worker, then at once the spare that took its place, before a new
    spare is ready; measured from the second."""

    @property
    def label(self) -> str:
        workers = "1 worker" if self.workers == 1 else f"{self.workers} workers"
        # Said where it is not the host's default (a spare with one worker, none with more).
        spare = ", no spare" if self.spares == 0 and self.workers == 1 else ""
        spare = ", warm spare" if self.spares and self.workers > 1 else spare
        turns = ", round robin as on Azure" if self.round_robin else ""
        fresh = ", fresh interpreters" if self.fresh else ""
        double = ", killed twice in a row" if self.double else ""
        return f"{workers}{spare}{turns}{fresh}{double}, visibilityTimeout {self.visibility} s"


WORKER_MODES = {
    m.name: m
    for m in (
        # Azure's default worker count, host.json before issue 24, no warm spare
        WorkerMode("one-10", 1, 10, spares=0),
        WorkerMode("two-10", 2, 10, spares=0),  # a survivor takes over; its trigger retried as before
        WorkerMode("one-1-nospare", 1, 1, spares=0),  # a replacement starts after the kill
        WorkerMode("one-1", 1, 1),  # the local host's default: the warm spare takes over
        WorkerMode("two-1", 2, 1, spares=0),  # this app's host.json; a survivor takes over
        WorkerMode("two-1-spare", 2, 1),  # a spare too (not the host's default with two workers)
        WorkerMode("two-1-rr", 2, 1, round_robin=True, spares=0),
        # Later workers as fresh interpreters, as before the worker template (and as on Azure)
        WorkerMode("one-1-fresh", 1, 1, fresh=True),
        WorkerMode("one-1-nospare-fresh", 1, 1, spares=0, fresh=True),
        WorkerMode("two-1-fresh", 2, 1, spares=0, fresh=True),
        # A second death before the new spare is ready: a replacement forked by the template
        WorkerMode("one-1-double", 1, 1, double=True),
    )
}


@dataclass
class WorkerKills:
    mode: WorkerMode
    replaced: list[float]
    """Per kill: s from the kill until the host logged a replacement ready (a spare: promoted)."""
    spared: list[float]
    """Per kill: s from the kill until a new warm spare was ready (nan: no spares)."""
    owned: list[float]
    """Per kill: s from the kill until another process logged owning both victim queues."""
    takeovers: list[float]
    """Per kill: s from the kill until the first batch posted after it to a stream of the
    victim queues is committed (the writer's ``appended`` log line, just after the commit)."""
    seen: list[float]
    """The same, until ``GET .../batches/{id}`` says so (the batch rows, written after the commit
    in the background, as the sampler polls them)."""
    lags: list[float]
    """Every acknowledged batch: s from its 202 until it was seen committed."""
    seconds: float
    lost: int
    duplicated: int
    poisoned: int
    statuses: Counter[str]
    unspared: int = 0
    """Deaths that found no warm spare ready, so a replacement started (host log)."""


def victim_streams(streams: Sequence[str]) -> set[str]:
    """The streams of the victim queues (0 and 2; with two workers, worker 0's at the start)."""
    return {s for s in streams if zlib.crc32(s.encode()) % QUEUES in VICTIM_QUEUES}


def _logged_at(line: str) -> float:
    """A host log line's time (its asctime, local time) as a Unix time."""
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def _owners(lines: Sequence[str], queue: str) -> list[tuple[float, int]]:
    """(time, pid) of each process that logged taking ``queue`` over."""
    marker = f"now owns staging queue {queue} (process "
    return [(_logged_at(x), int(x.split(marker)[1].split(")")[0])) for x in lines if marker in x]


def owned_again(
    lines: Sequence[str], queues: Sequence[str], killed: float, victims: Collection[int]
) -> float | None:
    """Seconds from the kill (Unix time) until a process not killed owned every one of
    ``queues`` (0 for a queue that another process owned already)."""
    times = []
    for q in queues:
        owners = _owners(lines, q)
        before = [pid for t, pid in owners if t < killed]
        if before and before[-1] not in victims:
            times.append(killed)
            continue
        after = [t for t, pid in owners if t >= killed and pid not in victims]
        if not after:
            return None
        times.append(min(after))
    return max(times) - killed


_APPENDED = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*?(\{\"event\":\"appended\".*\})\s*$")


def commit_times(lines: Sequence[str]) -> dict[str, float]:
    """Batch id → Unix time of the writer's ``appended`` log line that first carried it (logged
    right after the commit, with the worker's own timestamp)."""
    times: dict[str, float] = {}
    for line in lines:
        m = _APPENDED.match(line)
        if m:
            for batch_id in json.loads(m.group(2))["batch_ids"]:
                times.setdefault(batch_id, _logged_at(m.group(1)))
    return times


def host_json(visibility: int, directory: Path) -> Path:
    """This app's host.json with another ``visibilityTimeout``."""
    doc = json.loads((ROOT / "host.json").read_text())
    doc["extensions"]["queues"]["visibilityTimeout"] = f"00:00:{visibility:02d}"
    path = directory / f"host-visibility-{visibility}.json"
    path.write_text(json.dumps(doc))
    return path


def worker_kills_once(env: Env, mode: WorkerMode, scratch: Path) -> WorkerKills:
    prefix = f"rw{uuid.uuid4().hex[:8]}"
    streams = spread_streams(f"rw-{uuid.uuid4().hex[:6]}", STREAMS)
    victims = victim_streams(streams)
    queues = [f"0/{prefix}-{q}" for q in VICTIM_QUEUES]
    settings = {
        "VAULT_QUEUE_PREFIX": prefix,
        "FUNCTIONS_WORKER_PROCESS_COUNT": str(mode.workers),
        "LOCAL_SPARE_WORKERS": str(mode.spares),
    }
    args: tuple[str, ...] = ("--host-json", str(host_json(mode.visibility, scratch)))
    args += ("--round-robin-queues",) if mode.round_robin else ()
    args += ("--fresh-workers",) if mode.fresh else ()
    hosts: list[HostProcess] = []
    producers: Producers | None = None
    try:
        hosts.append(HostProcess(env.azurite.connection_string, settings=settings, args=args).start())
        host = hosts[0]
        producers = Producers(
            hosts, streams, env.args.producers, per_batch=PER_BATCH, rate=env.args.worker_rate
        )
        replaced: list[float] = []
        spared: list[float] = []
        owned: list[float] = []
        takeovers: list[float] = []
        seen: list[float] = []
        started = time.perf_counter()
        with Sampler(env.vault) as sampler:
            producers.start()
            feed(producers, sampler, 3 + env.args.steady)
            for _ in range(env.args.worker_kills):
                # The worker that owns the victim queues now (the first kill: worker 0's; later,
                # with two workers, the survivor that took them over).
                victim = _owners(list(host.lines), queues[0])[-1][1]
                before = sum("replaced (pid" in x for x in list(host.lines))
                spares_before = sum(SPARE_READY in x for x in list(host.lines))
                os.kill(victim, signal.SIGKILL)
                killed, killed_at = time.perf_counter(), time.time()
                dead = {victim}
                if mode.double:
                    victim = _kill_the_spare(host, before)
                    dead.add(victim)
                    before = sum("replaced (pid" in x for x in list(host.lines))
                    killed, killed_at = time.perf_counter(), time.time()
                ready: float | None = None
                spare: float | None = None if mode.spares else float("nan")
                took: float | None = None
                takeover: float | None = None
                reads: float | None = None
                while (
                    ready is None
                    or spare is None
                    or takeover is None
                    or reads is None
                    or time.perf_counter() < killed + env.args.kill_every
                ):
                    if time.perf_counter() - killed > 120:
                        raise TimeoutError("no batch of the victim queues committed after 120 s")
                    acked = producers.snapshot()
                    sampler.watch(acked)
                    lines = list(host.lines)
                    if ready is None and sum("replaced (pid" in x for x in lines) > before:
                        ready = time.perf_counter() - killed
                    if spare is None and sum(SPARE_READY in x for x in lines) > spares_before:
                        spare = time.perf_counter() - killed
                    if took is None:
                        took = owned_again(lines, queues, killed_at, dead)
                    after = [x for x in acked if x.stream in victims and x.posted > killed]
                    if takeover is None:
                        times = commit_times(lines)
                        logged = [times[x.batch_id] for x in after if x.batch_id in times]
                        takeover = min(logged) - killed_at if logged else None
                    if reads is None:
                        done = [sampler.seen[x.batch_id] for x in after if x.batch_id in sampler.seen]
                        reads = min(done) - killed if done else None
                    time.sleep(0.05)
                replaced.append(ready)
                spared.append(spare)
                takeovers.append(takeover)
                seen.append(reads)
                owned.append(took if took is not None else float("nan"))
            feed(producers, sampler, 5)
            producers.stop()
            acked = producers.snapshot()
            sampler.watch(acked)
            if not sampler.wait_all(timeout=120):
                raise TimeoutError("acknowledged batches not committed after 120 s")
        found = audit(env.vault, acked, streams, PER_BATCH)
        return WorkerKills(
            mode,
            replaced,
            spared,
            owned,
            takeovers,
            seen,
            [sampler.seen[x.batch_id] - x.acked for x in acked],
            time.perf_counter() - started,
            found.lost,
            found.duplicated,
            poison_count(env.account, prefix),
            producers.statuses,
            sum("; starting a replacement" in x for x in host.lines),
        )
    finally:
        tear_down(env, prefix, hosts, producers, streams)


def _kill_the_spare(host: HostProcess, replaced_before: int) -> int:
    """Once the warm spare has taken the killed worker's place, kill it too: its pid."""
    deadline = time.perf_counter() + 30
    while time.perf_counter() < deadline:
        promoted = [x for x in list(host.lines) if "replaced (pid" in x][replaced_before:]
        if promoted:
            pid = int(promoted[0].split("replaced (pid ")[1].split(")")[0])
            os.kill(pid, signal.SIGKILL)
            return pid
        time.sleep(0.005)
    raise TimeoutError("the warm spare did not take the killed worker's place within 30 s")


def worker_figures(runs: list[WorkerKills]) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for r in runs:
        label = r.mode.label
        figures |= {
            f"worker kill, {label}: s until the queues are owned again, each kill": _each(r.owned, "{:.2f}"),
            f"worker kill, {label}: takeover s (kill to first commit), each kill": _each(
                r.takeovers, "{:.1f}"
            ),
            f"worker kill, {label}: takeover max s (target <= {TAKEOVER_TARGET_SECONDS:g})": max(r.takeovers),
            f"worker kill, {label}: s until GET .../batches/{{id}} says committed, each kill": _each(
                r.seen, "{:.1f}"
            ),
            f"worker kill, {label}: s until the replacement is ready, each kill": _each(r.replaced, "{:.1f}"),
            **(
                {
                    f"worker kill, {label}: s until a new warm spare is ready, each kill": _each(
                        r.spared, "{:.1f}"
                    )
                }
                if r.mode.spares
                else {}
            ),
            **(
                {f"worker kill, {label}: deaths with no spare ready (a replacement started)": r.unspared}
                if r.mode.spares
                else {}
            ),
            f"worker kill, {label}: ack to commit s, p50 / p99 / max (all batches)": (
                f"{percentile(r.lags, 0.5):.2f} / {percentile(r.lags, 0.99):.2f} / {max(r.lags):.2f}"
            ),
            f"worker kill, {label}: batches acknowledged; run s": f"{len(r.lags):,}; {r.seconds:.0f}",
            f"worker kill, {label}: poisoned / lost / duplicated": (
                f"{r.poisoned} / {r.lost} / {r.duplicated}"
            ),
            f"worker kill, {label}: HTTP answers": _statuses([r.statuses]),
        }
    by_name = {r.mode.name: r for r in runs}
    if "one-10" in by_name and "two-1" in by_name:
        before, after = by_name["one-10"], by_name["two-1"]
        figures["worker kill: takeover max, 2 workers 1 s / 1 worker 10 s"] = max(after.takeovers) / max(
            before.takeovers
        )
        figures["worker kill: ack to commit p99, 2 workers 1 s / 1 worker 10 s"] = percentile(
            after.lags, 0.99
        ) / percentile(before.lags, 0.99)
    if "one-1" in by_name and "one-1-nospare" in by_name:
        spare, alone = by_name["one-1"], by_name["one-1-nospare"]
        figures["worker kill, 1 worker: takeover max, warm spare / no spare"] = max(spare.takeovers) / max(
            alone.takeovers
        )
        figures["worker kill, 1 worker: ack to commit p99, warm spare / no spare"] = percentile(
            spare.lags, 0.99
        ) / percentile(alone.lags, 0.99)
    for name, fresh_name, what in (
        ("one-1", "one-1-fresh", "1 worker, warm spare"),
        ("one-1-nospare", "one-1-nospare-fresh", "1 worker, no spare"),
        ("two-1", "two-1-fresh", "2 workers"),
    ):
        if name in by_name and fresh_name in by_name:
            forked, fresh = by_name[name], by_name[fresh_name]
            figures[f"worker kill, {what}: takeover max, template / fresh interpreters"] = max(
                forked.takeovers
            ) / max(fresh.takeovers)
            figures[f"worker kill, {what}: ack to commit p99, template / fresh interpreters"] = percentile(
                forked.lags, 0.99
            ) / percentile(fresh.lags, 0.99)
    if "two-1-spare" in by_name and "two-1" in by_name:
        spare, alone = by_name["two-1-spare"], by_name["two-1"]
        figures["worker kill, 2 workers: takeover max, warm spare / no spare"] = max(spare.takeovers) / max(
            alone.takeovers
        )
    return figures


# -- the stall ---------------------------------------------------------------------------------
@dataclass
class Stall:
    steady: float
    """Median committed msgs/s of the 1 s buckets before the stall."""
    seconds: float
    """From SIGCONT until three 1 s buckets in a row reach 90% of ``steady`` (1 s resolution)."""
    first_commit: float
    """From SIGCONT until the first commit."""
    made_up: float
    """From SIGCONT until the stall's shortfall of commits is made up (see :func:`made_up`)."""
    buckets: list[int]
    before: list[int]
    lost: int
    duplicated: int
    poisoned: int
    statuses: Counter[str]


def buckets(events: Sequence[Append], start: float, seconds: int) -> list[int]:
    """Committed messages in each second from ``start`` (wall clock)."""
    out = [0] * seconds
    for e in events:
        k = int(e.at - start)
        if 0 <= k < seconds:
            out[k] += e.messages
    return out


def back_to_steady(after: list[int], steady: float, hold: int = 3) -> float:
    for k in range(len(after) - hold + 1):
        if all(n >= 0.9 * steady for n in after[k : k + hold]):
            return float(k + 1)  # by the end of the first good bucket
    return float("inf")


def made_up(events: Sequence[Append], stopped: float, resumed: float, steady: float) -> float:
    """Seconds from ``resumed`` until the messages committed since ``stopped`` reach ``steady``
    times the time since ``stopped``, less half a second's worth: the stall's shortfall is
    made up (the producers' late batches are written)."""
    total = 0
    for e in sorted(events, key=lambda e: e.at):
        if e.at < stopped:
            continue
        total += e.messages
        if e.at >= resumed and total >= steady * (e.at - stopped - 0.5):
            return e.at - resumed
    return float("inf")


def stall_once(env: Env) -> Stall:
    prefix = f"rs{uuid.uuid4().hex[:8]}"
    streams = spread_streams(f"rs-{uuid.uuid4().hex[:6]}", STREAMS)
    hosts: list[HostProcess] = []
    producers: Producers | None = None
    process = env.azurite.process
    assert process is not None
    try:
        hosts += start_hosts(env.azurite.connection_string, 1, prefix)
        producers = Producers(hosts, streams, env.args.producers, per_batch=PER_BATCH, rate=env.args.rate)
        producers.start()
        time.sleep(3)  # warm: pollers awake, writers open
        calm = time.time()
        time.sleep(env.args.steady)
        stopped = time.time()
        process.send_signal(signal.SIGSTOP)
        try:
            time.sleep(env.args.stall)
        finally:
            process.send_signal(signal.SIGCONT)
        resumed = time.time()
        time.sleep(env.args.after)
        producers.stop()
        events = appends(hosts)
        before = buckets(events, calm, int(stopped - calm))
        steady = statistics.median(before)
        after = buckets(events, resumed, int(env.args.after))
        later = [e.at - resumed for e in events if e.at >= resumed]
        settle(env.vault, producers.snapshot(), timeout=120)
        found = audit(env.vault, producers.snapshot(), streams, PER_BATCH)
        return Stall(
            steady,
            back_to_steady(after, steady),
            min(later) if later else float("inf"),
            made_up(events, stopped, resumed, steady),
            after,
            before,
            found.lost,
            found.duplicated,
            poison_count(env.account, prefix),
            producers.statuses,
        )
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)  # never leave it frozen
        tear_down(env, prefix, hosts, producers, streams)


# -- report ------------------------------------------------------------------------------------
def _statuses(counts: Sequence[Counter[str]]) -> str:
    total: Counter[str] = Counter()
    for c in counts:
        total.update(c)
    return ", ".join(f"{k}: {v:,}" for k, v in sorted(total.items()))


def kill_figures(kills: list[Kill]) -> dict[str, Any]:
    times = [k.seconds for k in kills]
    return {
        "kill: seconds to commit every batch acknowledged before it, each run": _each(times, "{:.1f}"),
        "kill: median s": statistics.median(times),
        "kill: max s (< 30)": max(times),
        "kill: batches acknowledged, not yet committed at the kill, each run": _each(
            [k.pending for k in kills], "{}"
        ),
        "kill: s from A's last commit to the kill, each run": _each([k.last_append for k in kills], "{:.2f}"),
        "kill: s until B owns every staging queue (A's leases ran out), each run": _each(
            [k.owned for k in kills], "{:.1f}"
        ),
        "kill: s until the first batch posted after the kill commits, each run": _each(
            [k.first_commit for k in kills], "{:.1f}"
        ),
        "kill: hand-backs, all runs": sum(k.handbacks for k in kills),
        "kill: poisoned / lost / duplicated, all runs": (
            f"{sum(k.poisoned for k in kills)} / {sum(k.lost for k in kills)} / "
            f"{sum(k.duplicated for k in kills)}"
        ),
        "kill: HTTP answers (all runs)": _statuses([k.statuses for k in kills]),
    }


def stall_figures(stalls: list[Stall], frozen: float) -> dict[str, Any]:
    times = [s.seconds for s in stalls]
    return {
        "stall: seconds frozen": frozen,
        "stall: steady committed msgs/s before, each run": _each([s.steady for s in stalls], "{:,.0f}"),
        "stall: s from SIGCONT to 3 s in a row at >= 90% of steady, each run": _each(times, "{:g}"),
        "stall: median s": statistics.median(times),
        "stall: s from SIGCONT to the first commit, each run": _each(
            [s.first_commit for s in stalls], "{:.1f}"
        ),
        "stall: s from SIGCONT until the commits missed in the stall are made up, each run": _each(
            [s.made_up for s in stalls], "{:.1f}"
        ),
        "stall: committed msgs in each second before the stall (first run)": _each(
            stalls[0].before, "{}", " "
        ),
        "stall: committed msgs in each second after SIGCONT (first run)": _each(stalls[0].buckets, "{}", " "),
        "stall: poisoned / lost / duplicated, all runs": (
            f"{sum(s.poisoned for s in stalls)} / {sum(s.lost for s in stalls)} / "
            f"{sum(s.duplicated for s in stalls)}"
        ),
        "stall: HTTP answers (all runs; 202 and 503 only)": _statuses([s.statuses for s in stalls]),
    }


def _each(values: Sequence[float], fmt: str, sep: str = ", ") -> str:
    return sep.join(fmt.format(v) for v in values)


def summarise(
    kills: list[Kill],
    stalls: list[Stall],
    args: argparse.Namespace,
    seconds: float,
    workers: Sequence[WorkerKills] = (),
) -> dict[str, Any]:
    figures: dict[str, Any] = {
        "load: producer threads; batches/s of 100 x 1 KiB (in the worker kills); streams": (
            f"{args.producers}; {args.rate:g} ({args.worker_rate:g}); {STREAMS}"
        ),
    }
    if kills:
        figures |= kill_figures(kills)
    if workers:
        figures |= worker_figures(list(workers))
    if stalls:
        figures |= stall_figures(stalls, args.stall)
    figures["benchmark seconds"] = seconds
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--stalls", type=int, default=3)
    parser.add_argument("--worker-kills", type=int, default=3, help="kills per worker-kill run (0: none)")
    parser.add_argument("--kill-every", type=float, default=10, help="least seconds between worker kills")
    parser.add_argument(
        "--worker-modes",
        default=",".join(WORKER_MODES),
        help=f"worker-kill runs, in order, from {', '.join(WORKER_MODES)} (workers - visibilityTimeout s)",
    )
    parser.add_argument(
        "--worker-rate", type=float, default=5, help="batches/s of 100 x 1 KiB in the worker-kill runs"
    )
    parser.add_argument("--producers", type=int, default=8)
    parser.add_argument("--rate", type=float, default=20, help="batches/s of 100 x 1 KiB, all threads")
    parser.add_argument("--steady", type=float, default=10, help="seconds of steady ingest before the fault")
    parser.add_argument("--stall", type=float, default=10, help="seconds Azurite stays frozen")
    parser.add_argument("--after", type=float, default=20, help="seconds of ingest after SIGCONT")
    parser.add_argument("--logs", type=Path, help="keep every host's output in this directory")
    parser.add_argument("--name", default="recovery", help="results file: bench/results/NAME.json")
    args = parser.parse_args()
    t0 = time.monotonic()
    azurite = Azurite().start()  # on disk: never SIGKILLed, only frozen and resumed
    try:
        account = StorageAccount(connection_string=azurite.connection_string)
        env = Env(azurite, account, Vault(account).ensure(), args)
        kills, stalls, workers = [], [], []
        for _ in range(args.kills):
            kills.append(kill_once(env))
            print("kill:", kills[-1], flush=True)
        if args.worker_kills:
            with tempfile.TemporaryDirectory() as scratch:
                for name in args.worker_modes.split(","):
                    workers.append(worker_kills_once(env, WORKER_MODES[name], Path(scratch)))
                    w = workers[-1]
                    print(
                        "worker kills:",
                        w.mode.label,
                        w.owned,
                        w.takeovers,
                        f"p99 {percentile(w.lags, 0.99):.2f}",
                        flush=True,
                    )
        for _ in range(args.stalls):
            stalls.append(stall_once(env))
            print("stall:", stalls[-1], flush=True)
        given = [a for a in sys.argv[1:] if not a.startswith("--logs=")]
        if "--logs" in given:  # where the logs went is no part of the run
            del given[given.index("--logs") : given.index("--logs") + 2]
        command = " ".join(["./dev bench recovery", *given])
        report(args.name, command, summarise(kills, stalls, args, time.monotonic() - t0, workers))
    finally:
        azurite.cleanup()


if __name__ == "__main__":
    main()
