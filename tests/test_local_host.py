"""The local host's language workers: real host and worker processes on the session's Azurite."""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import psutil
import pytest
from azure.core.exceptions import HttpResponseError
from azure.storage.blob import BlobLeaseClient
from conftest import commit_directly, isolated_host, key_header, still_running
from helpers.host_template import TemplateClient, host_template

from vault_app.config import load_settings
from vault_app.instance import Instance, lock_directory
from vault_app.open_writers import OWNER_BLOB_PREFIX
from vault_app.services import Services
from vault_app.staging import Stager
from vault_core.blobs import BlobContainer
from vault_core.pageblob import StreamBlob
from vault_core.recordformat import NewMessage
from vault_core.vault import Vault
from vault_local.azurite import AZURITE_BIN, WITHOUT_SQL, WITHOUT_TELEMETRY, Azurite, free_port
from vault_local.channel import HTTP, Channel
from vault_local.host import create_until_done, idle_wait
from vault_local.process import HostProcess, local_env
from vault_local.workers import (
    ForkedProcess,
    QueueAffinity,
    WorkerFailed,
    WorkerProcess,
    Workers,
    least_busy,
    queue_worker,
    spare_workers,
    worker_settings,
)


def own_host(azurite: Azurite, tmp_path: Path, workers: str, *args: str, spares: str = "1") -> HostProcess:
    settings = {
        "VAULT_STAGING_QUEUES": "2",
        "FUNCTIONS_WORKER_PROCESS_COUNT": workers,
        "LOCAL_SPARE_WORKERS": spares,
    }
    return isolated_host(azurite, tmp_path, *args, settings=settings)


@pytest.fixture
def two_workers(azurite: Azurite, tmp_path: Path) -> Iterator[HostProcess]:
    """Two workers and no spare: a survivor takes over, and a fresh interpreter replaces the dead."""
    host = own_host(azurite, tmp_path, "2", spares="0").start()
    yield host
    host.stop()


def workers_of(host: HostProcess) -> list[psutil.Process]:
    """The host's language workers: its children but the worker template (vault_local.template)."""
    assert host.proc is not None
    return [p for p in psutil.Process(host.proc.pid).children() if p.pid != template_of(host)]


def template_of(host: HostProcess) -> int:
    """The pid of the host's worker template, as the host logged it."""
    marker = "language worker template ready (pid "
    [line] = [x for x in list(host.lines) if marker in x]
    return int(line.split(marker)[1].split(")")[0])


def wait_until(check: Any, timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while not (got := check()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
    return got


def logged(host: HostProcess, text: str) -> bool:
    return any(text in line for line in host.lines)


def owners(host: HostProcess) -> list[tuple[str, int]]:
    """(queue, pid) of each process that logged taking a staging queue over, in order."""
    marker = "now owns staging queue "
    found = [line.split(marker)[1].split(" (process ") for line in list(host.lines) if marker in line]
    return [(queue, int(pid.rstrip().rstrip(")"))) for queue, pid in found]


def post_and_wait(host: HostProcess, stream: str, values: list[str]) -> httpx.Response:
    return httpx.post(
        f"{host.url}/streams/{stream}/messages",
        params={"code": host.key, "wait": 20},
        json={"messages": [{"value": v} for v in values]},
        timeout=60,
    )


# -- pure ------------------------------------------------------------------------------------


def test_http_goes_to_the_least_busy_live_worker_and_ties_rotate() -> None:
    assert least_busy([2, 0, 1], 0) == 1
    assert [least_busy([0, 0, 0], turn) for turn in range(4)] == [0, 1, 2, 0]
    assert least_busy([None, 3, 3], 0) == 1 and least_busy([1, None, 1], 1) == 2
    with pytest.raises(LookupError):
        least_busy([None, None], 0)


def test_an_idle_poller_looks_again_when_a_failed_invocations_message_is_due_back() -> None:
    """A dead worker's trigger comes back after visibilityTimeout: the poller of its queue looks
    then, not at the end of a longer idle back-off (nor later than the back-off says)."""
    assert idle_wait(1.6, None, now=10.0) == 1.6
    assert idle_wait(1.6, 10.5, now=10.0) == 0.5
    assert idle_wait(0.2, 10.5, now=10.0) == 0.2
    assert idle_wait(1.6, 9.0, now=10.0) == 0.0  # due already: at once


def test_a_queue_whose_create_storage_refuses_at_start_is_created_once_storage_answers() -> None:
    """A refused create (a throttled account at start) is tried again, not the end of the queue's
    poller; a host that stops meanwhile stops trying."""
    refusals = iter([HttpResponseError("ServerBusy"), HttpResponseError("ServerBusy")])
    made: list[str] = []

    def create() -> None:
        refusal = next(refusals, None)
        if refusal is not None:
            raise refusal
        made.append("q")

    assert create_until_done((create, lambda: made.append("q-poison")), threading.Event(), 0.2, "q")
    assert made == ["q", "q-poison"]
    stopped = threading.Event()
    stopped.set()
    assert not create_until_done((create,), stopped, 0.2, "q")


def test_each_queue_function_stays_on_one_worker() -> None:
    assert [queue_worker(i, 2) for i in range(5)] == [0, 1, 0, 1, 0]
    assert {queue_worker(i, 1) for i in range(8)} == {0}
    assert [QueueAffinity(3).worker(i, [0, 5, 0]) for i in range(4)] == [0, 1, 2, 0]


def test_a_dead_workers_queue_functions_move_at_once_to_a_live_one_and_stay_there() -> None:
    queues = QueueAffinity(3)
    assert queues.worker(0, [None, 2, 1]) == 2  # the least busy live worker, not the replacement
    assert queues.worker(3, [None, 2, 1]) == 2
    assert queues.worker(1, [None, 2, 1]) == 1  # a live worker keeps its own
    # Replaced: the moved functions stay with the survivor, which owns their queues now.
    assert queues.worker(0, [0, 2, 1]) == 2 and queues.worker(3, [0, 2, 1]) == 2
    assert queues.worker(0, [0, 2, None]) == 0  # that one dies in turn
    assert queues.worker(0, [None, None, None]) is None  # the host waits for a replacement


def test_a_dead_workers_queue_functions_go_to_a_warm_survivor_not_to_the_spare_in_its_slot() -> None:
    queues = QueueAffinity(2)
    assert queues.worker(0, [0, 0]) == 0
    queues.vacate(0)  # worker 0 died, and a spare took its slot at once
    assert queues.worker(0, [0, 3]) == 1 and queues.worker(0, [0, 0]) == 1  # moved, and stays
    alone = QueueAffinity(1)
    alone.vacate(0)
    assert alone.worker(0, [0]) == 0  # no survivor: the spare takes the queue over
    assert alone.worker(0, [None]) is None


def test_round_robin_queue_dispatch_takes_the_live_workers_in_turn_as_the_functions_host_does() -> None:
    queues = QueueAffinity(3, round_robin=True)
    assert [queues.worker(0, [0, 0, 0]) for _ in range(4)] == [0, 1, 2, 0]
    assert [queues.worker(0, [0, None, 0]) for _ in range(2)] == [0, 2]
    assert queues.worker(0, [None, None, None]) is None


def test_worker_settings_default_like_the_functions_host_and_validate() -> None:
    assert worker_settings({}) == (1, min(32, (os.cpu_count() or 1) + 4))
    env = {"FUNCTIONS_WORKER_PROCESS_COUNT": "10", "PYTHON_THREADPOOL_THREAD_COUNT": "3"}
    assert worker_settings(env) == (10, 3)
    for bad in ("0", "11", "two", "1.5"):
        with pytest.raises(ValueError, match=r"FUNCTIONS_WORKER_PROCESS_COUNT must be a whole number from 1"):
            worker_settings({"FUNCTIONS_WORKER_PROCESS_COUNT": bad})
    with pytest.raises(ValueError, match="PYTHON_THREADPOOL_THREAD_COUNT"):
        worker_settings({"PYTHON_THREADPOOL_THREAD_COUNT": "0"})


def test_spare_workers_default_to_one_for_a_lone_worker_and_validate() -> None:
    assert spare_workers({}, 1) == 1 and spare_workers({}, 2) == 0  # a survivor needs no spare
    assert [spare_workers({"LOCAL_SPARE_WORKERS": n}, 2) for n in ("0", "2", " 1 ")] == [0, 2, 1]
    for bad in ("3", "-1", "one", "1.5"):
        with pytest.raises(ValueError, match=r"LOCAL_SPARE_WORKERS must be a whole number from 0 to 2"):
            spare_workers({"LOCAL_SPARE_WORKERS": bad}, 1)


class _Idle:
    """A worker process that never ends: what :class:`Workers` needs of one, for in-process tests."""

    pid = 0

    def wait(self, timeout: float | None = None) -> int:
        raise subprocess.TimeoutExpired("idle", timeout or 0)

    def kill(self) -> None:
        pass


def test_an_invocation_its_dead_worker_never_received_waits_for_the_spare_that_takes_its_place() -> None:
    workers = Workers(1, 1, app_dir=Path.cwd(), spares=1)
    dead, gone = socket.socketpair()
    gone.close()  # the worker died; the host has not read its end of file yet
    ours, spare_end = socket.socketpair()
    workers._slots = [WorkerProcess(0, _Idle(), Channel(dead))]
    workers._spares = [WorkerProcess(1, _Idle(), Channel(ours))]
    promotion = threading.Timer(0.2, workers._promote, args=(0,))  # as the reader thread does
    promotion.start()
    sent = workers.invoke_http({"function": "f"}, b"body")  # the send fails: on to the spare
    assert Channel(spare_end).recv()[::2] == (HTTP, {"function": "f"})
    assert not sent.done() and workers._slots[0].channel.sock is ours and workers._spares == []
    promotion.join()
    with pytest.raises(WorkerFailed, match="no language worker is running"):  # none: 503 (the host)
        Workers(1, 1, app_dir=Path.cwd())._send(None, HTTP, {}, b"", wait=0.1)
    for sock in (dead, ours, spare_end):
        sock.close()


def test_frames_carry_large_bodies_unchanged_both_ways() -> None:
    a, b = socket.socketpair()
    left, right = Channel(a), Channel(b)
    body = os.urandom(16 * 1024 * 1024 + 1)
    meta = {"function": "f", "headers": {"content-type": "application/json"}}

    def send_both() -> None:
        left.send(2, 7, meta, body)
        left.send(4, 8, {}, b"")

    sender = threading.Thread(target=send_both)
    sender.start()
    assert right.recv() == (2, 7, meta, body)
    assert right.recv() == (4, 8, {}, b"")
    sender.join()
    left.close()
    with pytest.raises(EOFError):
        right.recv()
    right.close()


# -- real processes --------------------------------------------------------------------------


def test_a_websocket_upgrade_is_answered_as_plain_http(vault_host: HostProcess) -> None:
    """The host serves no WebSocket (nor does a Functions HTTP trigger): a request asking for an
    upgrade reaches its route as any other request, and gets that route's answer."""
    upgrade = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13"}
    r = httpx.get(f"{vault_host.url}/health", headers={**upgrade, "Sec-WebSocket-Key": "dGhlIHNhbXBsZQ=="})
    assert r.status_code == 200 and r.json()["status"] == "ok", r.text


def test_two_workers_serve_http_run_the_writer_and_exit_with_their_host(
    two_workers: HostProcess, stream: str
) -> None:
    """One host for both: how its workers end is seen after they have served (a host's start
    with two workers is about two CPU-seconds)."""
    host = two_workers
    workers = workers_of(host)
    assert host.proc is not None and len(workers) == 2
    assert all(os.getpgid(w.pid) == host.proc.pid for w in workers)  # killed with the host's group
    for i in range(3):
        r = post_and_wait(host, stream, [f"b{i}-0", f"b{i}-1"])
        assert r.status_code == 200, r.text
        assert r.json()["status"] == "committed" and r.json()["count"] == 2
    doc = httpx.get(
        f"{host.url}/streams/{stream}/messages", params={"from": 0}, headers=key_header(host)
    ).json()
    assert [m["value"] for m in doc["messages"]] == [f"b{i}-{j}" for i in range(3) for j in range(2)]
    # The writer ran in a worker, and its structured log lines still reach the host's stdout.
    assert wait_until(lambda: logged(host, '"event":"appended"'))
    assert httpx.get(f"{host.url}/nothing").json()["error"] == "not_found"

    orphans = [*workers_of(host), psutil.Process(template_of(host))]  # the template too
    assert len(orphans) == 3
    host.proc.send_signal(signal.SIGKILL)  # only the host: its workers see their socket close
    host.proc.wait(10)
    # Exited is enough: orphans, their zombies wait to be reaped by whoever adopted them, in
    # its own time (PID 1, or the host template, which adopts them: helpers/host_template.py).
    wait_until(lambda: not still_running(orphans), timeout=10)


def test_a_test_process_whose_connection_to_the_host_template_closes_leaves_no_host_behind() -> None:
    """The run's host template (helpers/host_template.py) is the parent of every host it forks:
    when the test process that asked for one ends, or dies, without stopping it, the template
    ends it. (A development issuer stands in for a host: the template runs any
    ``python -m vault_local`` command, and the issuer's start is a fraction of a host's.)"""
    template = host_template()
    if template is None:
        pytest.skip("no host template off Linux")
    own = TemplateClient(template.address)
    try:
        argv = [sys.executable, "-m", "vault_local", "issuer", "--port", str(free_port())]
        issuer = own.launch(argv, dict(os.environ))
        assert issuer.stdout is not None and issuer.stdout.readline().startswith("Development issuer at")
        process = psutil.Process(issuer.pid)
        assert "host_template.py" in " ".join(process.parent().cmdline()) and issuer.poll() is None
    finally:
        own.close()
    wait_until(lambda: not still_running([process]), timeout=10)


def test_an_invalid_worker_count_stops_the_host_with_a_clear_message(
    azurite: Azurite, tmp_path: Path
) -> None:
    """The wiring, once: which counts are invalid is proved in process, by
    test_worker_settings_default_like_the_functions_host_and_validate."""
    host = own_host(azurite, tmp_path, "11")
    clear = "vault_local host: FUNCTIONS_WORKER_PROCESS_COUNT must be a whole number from 1 to 10"
    with pytest.raises(RuntimeError, match=clear):
        host.start()
    assert host.proc is not None and host.proc.wait(10) != 0


def test_a_killed_worker_fails_its_requests_is_replaced_and_a_survivor_takes_its_queue_at_once(
    two_workers: HostProcess, vault: Vault, stream: str
) -> None:
    host = two_workers
    # Written from the test, which then ends the surviving long poll with a commit rather than
    # letting it wait out its time; no worker ever writes it, so the kill leaves no lease behind.
    end = commit_directly(vault, stream, b"before")
    answers: list[httpx.Response] = []

    def long_poll() -> None:
        answers.append(
            httpx.get(
                f"{host.url}/streams/{stream}/messages",
                params={"from": end, "wait": 30},
                headers=key_header(host),
                timeout=60,
            )
        )

    # Two long polls in flight: the least busy dispatch puts one on each worker.
    polls = [threading.Thread(target=long_poll) for _ in range(2)]
    for t in polls:
        t.start()
        time.sleep(0.5)  # each in flight before the next is dispatched (and before the kill)
    victim, survivor = workers_of(host)
    # The first workers are forked from the host (no exec, so the host's command line).
    assert host.proc is not None
    assert victim.cmdline() == survivor.cmdline() == psutil.Process(host.proc.pid).cmdline()
    victim.send_signal(signal.SIGKILL)
    wait_until(lambda: answers)  # the dead worker's, at once; the other one still waits
    commit_directly(vault, stream, b"after the kill")
    for t in polls:
        t.join(60)
    failed = [r for r in answers if r.status_code == 503]
    assert len(failed) == 1 and failed[0].json()["error"] == "worker_failed", [r.text for r in answers]
    assert "killed by SIGKILL" in failed[0].json()["message"] and failed[0].headers["Retry-After"] == "1"
    served = [[m["value"] for m in r.json()["messages"]] for r in answers if r.status_code == 200]
    assert served == [["after the kill"]]
    # A replacement takes the dead worker's place, and the host keeps serving.
    wait_until(lambda: logged(host, "replaced"))
    now = {w.pid: w for w in workers_of(host)}
    assert len(now) == 2 and survivor.pid in now and victim.pid not in now
    # A replacement is forked by the worker template, not by the host (which has threads by now,
    # and a fork copies whatever locks they hold), and adopted by the host.
    [replacement] = [w for pid, w in now.items() if pid != survivor.pid]
    assert replacement.cmdline() == survivor.cmdline() and replacement.ppid() == host.proc.pid
    assert post_and_wait(host, stream, ["through the host"]).status_code == 200
    # Kill the worker that owns the stream's queue (and holds the stream's lease): the host sends
    # the queue's next invocation to the live worker rather than waiting for a replacement, and
    # that survivor takes the queue and the stream over at once (same instance: the dead one's
    # lease id, its file locks gone with it; docs/ARCHITECTURE.md §3.7).
    [(queue, owner)] = owners(host)
    survivor = next(w.pid for w in workers_of(host) if w.pid != owner)
    os.kill(owner, signal.SIGKILL)
    wait_until(lambda: logged(host, f"(pid {owner}) died"))
    r = post_and_wait(host, stream, ["after the owner's kill"])
    assert r.status_code == 200 and r.json()["status"] == "committed", r.text
    assert (queue, survivor) in owners(host)
    doc = httpx.get(
        f"{host.url}/streams/{stream}/messages", params={"from": 0}, headers=key_header(host)
    ).json()
    values = ["before", "after the kill", "through the host", "after the owner's kill"]
    assert [m["value"] for m in doc["messages"]] == values


def test_a_worker_dying_mid_invocation_fails_the_queue_invocation_and_the_warm_spare_takes_over_at_once(
    azurite: Azurite, tmp_path: Path
) -> None:
    """The warm spare takes the dead worker's place at once, and a fresh spare starts behind it.
    It runs on the same instance, so it takes over what the dead worker held
    (docs/ARCHITECTURE.md §3.7) while it is still held: the queue's owner lease and the lease of
    the stream it had just committed to (kept from running out here, as if no time passed), and
    the batch of another stream it had drained. How fast: BENCHMARKS.md, Recovery."""
    prefix = f"q{uuid.uuid4().hex[:8]}"
    instance = f"dying-{uuid.uuid4().hex[:8]}"
    settings = {
        "VAULT_STAGING_QUEUES": "2",
        "FUNCTIONS_WORKER_PROCESS_COUNT": "1",
        "VAULT_QUEUE_PREFIX": prefix,
        "WEBSITE_INSTANCE_ID": instance,
    }
    services = Services(
        load_settings({**local_env(azurite.connection_string, "stager-key-0123456789"), **settings})
    )
    services.ensure()
    tag = uuid.uuid4().hex[:6]
    names = (f"dying-{tag}-{i}" for i in itertools.count())
    first = next(names)
    second = next(n for n in names if services.queue_for(n) == services.queue_for(first))
    # Both staged before the host polls: one invocation takes one as its trigger and drains the
    # other, appends the trigger's stream and stops dead (the fault) before the drained one's.
    for stream, value in ((first, b"x"), (second, b"y")):
        Stager(services).stage(stream, f"batch-{value.decode()}", [NewMessage(value, "")])
    queue = services.queue_for(first)
    leased = [
        cast(BlobContainer, services.claimcheck).client.get_blob_client(f"{OWNER_BLOB_PREFIX}0/{queue.name}")
    ]
    leased += [cast(StreamBlob, services.vault.blob(s)).client for s in (first, second)]
    host = isolated_host(
        azurite, tmp_path, "--fault", "after-commit", prefix=prefix, settings=settings
    ).start()
    done = threading.Event()
    kept: list[tuple[int, str]] = []

    def keep_held() -> None:  # what the dead worker held stays held until the replacement commits
        for n in itertools.count():
            if done.wait(0.0 if n == 0 else 1.0):
                return
            for blob in leased:
                with contextlib.suppress(HttpResponseError):  # the stream without a lease
                    BlobLeaseClient(blob, lease_id=Instance.from_env(settings).lease_id).renew()
                    kept.append((n, blob.blob_name))

    keeper = threading.Thread(target=keep_held)
    try:
        client = httpx.Client(base_url=host.url, params={"code": host.key}, timeout=30)
        host.wait_for("FAULT after-commit", 30)  # printed by the worker, seen on the host's stdout
        [(_, worker)] = owners(host)
        [spare] = [w.pid for w in workers_of(host) if w.pid != worker]
        os.kill(worker, signal.SIGKILL)
        keeper.start()
        wait_until(lambda: logged(host, "failed (dequeue count 1): language worker 0"))
        assert wait_until(lambda: logged(host, f"language worker 0 replaced (pid {spare}) by the warm spare"))

        def values() -> list[list[str]]:
            pages = [client.get(f"/streams/{s}/messages", params={"from": 0}) for s in (first, second)]
            return [[m["value"] for m in p.json()["messages"]] if p.status_code == 200 else [] for p in pages]

        wait_until(lambda: values() == [["x"], ["y"]], timeout=60)  # x once: a duplicate
        # Right after the kill, the owner lease was live and held under the instance's id.
        assert (0, leased[0].blob_name) in kept
        # The spare's line may reach the host's stdout after "y" can be read (see "drained" below).
        assert wait_until(lambda: owners(host)[-1][1] == spare)
        wait_until(lambda: logged(host, "warm spare language worker ready"), timeout=60)
        # The promoted spare, and a new one behind it, forked by the template and the host's child
        assert host.proc is not None and len(workers_of(host)) == 2
        assert all(w.cmdline() == psutil.Process(host.proc.pid).cmdline() for w in workers_of(host))
        # Logged by the spare as it took the queue over; a worker's log lines reach the host's stdout
        # through the host's reader of its socket, on a loaded machine after "y" can be read.
        drained = f"1 messages a dead process had drained from 0/{queue.name} are visible again"
        assert wait_until(lambda: logged(host, drained))
    finally:
        done.set()
        if keeper.is_alive():
            keeper.join()
        host.stop(kill=True)
        shutil.rmtree(lock_directory(instance), ignore_errors=True)


def test_a_worker_template_that_fails_is_dropped_and_later_workers_start_as_fresh_interpreters() -> None:
    class Gone:
        pid = 1
        closed = False

        def spawn(self, argv: list[str], fd: int) -> int:
            raise OSError("the worker template (pid 1) did not fork the worker: b''")

        def close(self) -> None:
            self.closed = True

    workers = Workers(1, 1, app_dir=Path.cwd())
    gone = Gone()
    workers._template = cast(Any, gone)
    ours, theirs = socket.socketpair()
    try:
        assert workers._from_template(["--fd", str(theirs.fileno())], theirs) is None
        assert workers._template is None and gone.closed
    finally:
        ours.close()
        theirs.close()


def test_a_forked_process_reports_its_exit_as_popen_does() -> None:
    """The handle of a forked worker: exit code, the signal that ended it (negative), a timeout."""

    def child(body: str) -> ForkedProcess:
        pid = os.fork()
        if pid == 0:
            try:
                exec(body)
            finally:
                os._exit(1)
        return ForkedProcess(pid)

    assert child("os._exit(3)").wait(10) == 3
    sleeper = child("time.sleep(60)")
    with pytest.raises(subprocess.TimeoutExpired):
        sleeper.wait(0.1)
    assert sleeper.poll() is None
    sleeper.kill()
    assert sleeper.wait(10) == -signal.SIGKILL
    sleeper.kill()  # once it has ended: nothing to do


def test_azurite_starts_without_loading_its_telemetry_client_or_its_sql_stores_orm() -> None:
    """Azurite runs with telemetry off and no SQL database, so the preloads leave its telemetry
    client and the SQL stores' ORM unloaded (most of its start's CPU): ``--version`` loads every
    module Azurite's start does, and no more. (Azurite then serving is every other test.)"""
    preloads = ["--require", str(WITHOUT_TELEMETRY), "--require", str(WITHOUT_SQL)]
    args = ["node", *preloads, str(AZURITE_BIN), "--version"]
    env = {**os.environ, "NODE_DEBUG": "module"}
    env.pop("AZURITE_DB", None)
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=60, check=True)
    loaded = [line for line in done.stderr.splitlines() if " load " in line]
    assert done.stdout.strip() and any("/azurite/" in line for line in loaded)
    left_out = ("/applicationinsights/", "/@opentelemetry/", "/sequelize/")
    assert not [line for line in loaded if any(package in line for package in left_out)]
