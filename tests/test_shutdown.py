"""SIGTERM drains: the local host and the demo stop gracefully and leave no process behind.

Real processes, real Azurite, real signals. Azure stops instances with SIGTERM (scale-in,
deploys); these tests hold the local host to what the Functions host does then.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import httpx
import psutil
import pytest
from conftest import isolated_host, key_header, still_running

from vault_core.azure import StorageAccount
from vault_core.errors import StreamNotFound
from vault_core.vault import Vault
from vault_local.azurite import ROOT, Azurite, free_port
from vault_local.host import DRAIN_GRACE
from vault_local.process import HostProcess

EXIT_WITHIN = 20.0
"""Seconds from SIGTERM to exit that the issue allows."""
GRACE = 2.0
"""The drain grace (``--drain-grace``) of a host whose invocation hangs: what follows the grace
(the workers told to terminate, uvicorn's close) takes as long after 2 s as after the product's
DRAIN_GRACE, so the test waits out 2 s and adds the difference, instead of waiting out 12 s."""


# -- processes -------------------------------------------------------------------------------


def group_members(pgid: int) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid:
                found.append(p)
        except ProcessLookupError:
            pass
    return still_running(found)


def end_leftovers(procs: list[psutil.Process]) -> None:
    """Cleanup after a failed test: SIGTERM whatever is left, SIGKILL only what ignores it
    (never Azurite, which gets time to shut down instead)."""
    alive = still_running(procs)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.terminate()
    _, alive = psutil.wait_procs(alive, timeout=25)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            if "azurite" not in " ".join(p.cmdline()):
                p.kill()


# -- the host under ingest -------------------------------------------------------------------


@dataclass(frozen=True)
class Post:
    stream: str
    values: list[str]
    started: float
    answered: float
    status: int | None
    """None: a connection error (refused, or closed without an answer)."""
    body: dict[str, object] | None
    retry_after: str | None


class Producers:
    """Producer threads POSTing small batches (no ``?wait=``) round robin over some streams,
    each until its first connection error: that is how they notice that the host is gone."""

    def __init__(self, url: str, key: str, streams: list[str], count: int) -> None:
        self.url, self.key, self.streams = url, key, streams
        self.posts: list[Post] = []
        self.changed = threading.Condition()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(p,)) for p in range(count)]

    def __enter__(self) -> Producers:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)

    def _run(self, p: int) -> None:
        with httpx.Client(timeout=30) as client:
            for b in itertools.count():
                if self.stop.is_set():
                    return
                post = self._post(client, self.streams[(p + b) % len(self.streams)], f"p{p}-b{b}")
                with self.changed:
                    self.posts.append(post)
                    self.changed.notify_all()
                if post.status is None:
                    return

    def _post(self, client: httpx.Client, stream: str, batch: str) -> Post:
        values = [f"{batch}-m{i}" for i in range(20)]
        started = time.monotonic()
        try:
            r = client.post(
                f"{self.url}/streams/{stream}/messages",
                params={"code": self.key},
                json={"messages": [{"value": v} for v in values]},
            )
        except httpx.TransportError:
            return Post(stream, values, started, time.monotonic(), None, None, None)
        body = r.json() if r.headers.get("content-type", "").startswith("application/json") else None
        retry_after = r.headers.get("retry-after")
        return Post(stream, values, started, time.monotonic(), r.status_code, body, retry_after)

    def wait_for(self, check: Callable[[list[Post]], bool], timeout: float = 60) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: check(self.posts), timeout), "producers: timed out"


def wait_until(check: Callable[[], bool], timeout: float = 60) -> None:
    """Poll a condition that only storage can answer (no event announces a commit)."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def committed_count(vault: Vault, stream: str) -> int:
    try:
        return vault.reader.state(stream).count
    except StreamNotFound:
        return 0


def read_back(client: httpx.Client, stream: str, expected: set[str], timeout: float = 90) -> list[str]:
    """Every value of ``stream``, long-polling until all of ``expected`` are among them."""
    values: list[str] = []
    offset = 0
    deadline = time.monotonic() + timeout
    while True:
        waiting = not expected <= set(values)
        assert not waiting or time.monotonic() < deadline, f"{stream}: {len(expected - set(values))} missing"
        params = {"from": offset, "limit": 5000, "wait": 5 if waiting else 0}
        r = client.get(f"/streams/{stream}/messages", params=params)
        assert r.status_code == 200, r.text
        doc = r.json()
        values += [m["value"] for m in doc["messages"]]
        offset = doc["next_offset"]
        if not waiting and offset == doc["committed"]:
            return values


def test_sigterm_under_ingest_drains_releases_leases_and_loses_nothing(
    azurite: Azurite, vault: Vault, tmp_path: Path
) -> None:
    prefix = f"q{uuid.uuid4().hex[:8]}"
    streams = [f"t-{uuid.uuid4().hex[:10]}" for _ in range(3)]
    settings = {"VAULT_STAGING_QUEUES": "2"}
    host = isolated_host(azurite, tmp_path, prefix=prefix, settings=settings).start()
    assert host.proc is not None
    pgid = host.proc.pid
    tree = [psutil.Process(pgid), *psutil.Process(pgid).children(recursive=True)]
    second: HostProcess | None = None
    try:
        with Producers(host.url, host.key, streams, count=3) as producers:
            # Under way: batches acknowledged, and every stream committed to (its writer open).
            producers.wait_for(lambda posts: sum(p.status == 202 for p in posts) >= 30)
            wait_until(lambda: all(committed_count(vault, s) > 0 for s in streams))
            signalled = time.monotonic()
            os.killpg(pgid, signal.SIGTERM)  # the whole group, as Ctrl-C would: workers wait for the host
            code = host.proc.wait(EXIT_WITHIN)
            took = time.monotonic() - signalled
        assert code == 0 and took < EXIT_WITHIN, (code, took, "".join(host.lines[-30:]))

        # Right after exit: nothing of the host left, leases released, and the catalog row
        # equal to the commit record (which is what GET /streams/{s} reports as committed/count).
        assert not still_running(tree) and not group_members(pgid)
        blobs = StorageAccount(connection_string=azurite.connection_string).blob_service()
        for s in streams:
            assert blobs.get_blob_client("streams", s).get_blob_properties().lease.state == "available"
            state, entry = vault.reader.state(s), vault.index.catalog_entry(s)
            assert entry is not None and (entry.committed, entry.count) == (state.committed, state.count)

        # Once draining began, new POSTs were refused (503, then connection errors), never taken.
        posts = sorted(producers.posts, key=lambda p: p.started)
        refused = [p for p in posts if p.status == 503]
        assert refused, "no POST was answered 503 while the host drained"
        for p in refused:
            assert p.body and p.body["error"] == "unavailable" and p.retry_after, p
        after = [p for p in posts if p.started > min(r.answered for r in refused)]
        assert all(p.status in (503, None) for p in after), [p.status for p in after]
        assert all(p.status in (202, 503, None) for p in posts), (
            [(p.status, p.body) for p in posts if p.status not in (202, 503, None)],
            "".join(host.lines[-40:]),
        )
        assert all(p.status is not None for p in posts if p.answered < signalled)

        # Every acknowledged batch was committed or is still staged: a new host commits the
        # rest, and each acknowledged message is there exactly once.
        acked = [p for p in posts if p.status == 202]
        second = isolated_host(azurite, tmp_path, prefix=prefix, settings=settings).start()
        with httpx.Client(base_url=second.url, timeout=60, headers=key_header(second)) as client:
            for s in streams:
                expected = {v for p in acked if p.stream == s for v in p.values}
                values = read_back(client, s, expected)
                assert expected <= set(values)
                assert max(Counter(values).values()) == 1, "a message was appended twice"
    finally:
        host.stop()
        if second:
            second.stop()
        end_leftovers(tree)


@pytest.mark.slow  # waits out a drain's grace period (GRACE)
def test_an_invocation_that_outlives_the_grace_period_does_not_hold_the_exit(
    azurite: Azurite, tmp_path: Path, stream: str
) -> None:
    # --fault after-commit: the writer stops dead inside its invocation, as a hung function would.
    host = isolated_host(
        azurite, tmp_path, "--fault", "after-commit", "--drain-grace", str(GRACE), woken_on_write=True
    ).start()
    assert host.proc is not None
    tree = [psutil.Process(host.proc.pid), *psutil.Process(host.proc.pid).children(recursive=True)]
    try:
        body = {"messages": [{"value": "x"}]}
        r = httpx.post(f"{host.url}/streams/{stream}/messages", params={"code": host.key}, json=body)
        assert r.status_code == 202
        host.wait_for("FAULT after-commit", 30)
        signalled = time.monotonic()
        os.killpg(host.proc.pid, signal.SIGTERM)
        code = host.proc.wait(EXIT_WITHIN)
        took = time.monotonic() - signalled
        assert code == 0 and GRACE <= took < EXIT_WITHIN, (code, took)
        # With the product's grace, the same stop after it: still within EXIT_WITHIN.
        assert DRAIN_GRACE + (took - GRACE) < EXIT_WITHIN, (took, "".join(host.lines[-30:]))
        assert not still_running(tree)
    finally:
        host.stop()
        end_leftovers(tree)


# -- the demo --------------------------------------------------------------------------------


class Output:
    """A child's stdout, read line by line in a thread; a test waits for a line."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._ended = False
        threading.Thread(target=self._drain, args=(stream,), daemon=True).start()

    def _drain(self, stream: IO[str]) -> None:
        for line in stream:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def wait_for(self, text: str, timeout: float) -> None:
        def seen() -> bool:
            return self._ended or any(text in line for line in self.lines)

        with self._changed:
            self._changed.wait_for(seen, timeout)
            assert any(text in line for line in self.lines), f"no {text!r} in:\n" + "".join(self.lines[-40:])


@dataclass
class Demo:
    proc: subprocess.Popen[str]
    out: Output
    seen: list[psutil.Process]
    """Every descendant :meth:`processes` found: the cleanup ends those still running."""

    def processes(self) -> list[psutil.Process]:
        found = psutil.Process(self.proc.pid).children(recursive=True)
        self.seen += found
        return found


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[Demo]:
    args = ["demo", "--port", str(free_port()), "--data", str(tmp_path / "azurite")]
    proc = subprocess.Popen(
        [sys.executable, "-m", "vault_local", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},  # as ./dev sets it: lines arrive as printed
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    run = Demo(proc, Output(proc.stdout), [])
    try:
        yield run
    finally:
        if proc.poll() is None:
            run.processes()
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        end_leftovers(run.seen)


@pytest.mark.slow  # the whole demo, as shipped: its Azurite, host and 2 s queue polling
@pytest.mark.parametrize("when", ["Tailing clicks", "Press Ctrl-C to stop"], ids=["mid-demo", "serving"])
def test_sigterm_stops_the_demo_with_azurite_host_and_workers(demo: Demo, when: str) -> None:
    demo.out.wait_for(when, timeout=120)
    if when == "Press Ctrl-C to stop":  # the demo ran with authentication on, and showed it
        shown = "".join(demo.out.lines)
        assert "Authorization: Bearer $PRODUCER_TOKEN" in shown and "x-functions-key: $VAULT_KEY" in shown
        assert '"error":"unauthorized"' in shown and '"error":"forbidden"' in shown
        assert '"status":"committed"' in shown and "eyJ" not in shown  # tokens shown by name only
    tree = demo.processes()
    commands = [" ".join(p.cmdline()) for p in tree]
    assert any("azurite" in c for c in commands), commands
    # The host and its language workers: its children, forked from it, so with its command line.
    host_and_workers = [p for p, c in zip(tree, commands, strict=True) if "vault_local host" in c]
    assert len(host_and_workers) >= 2 and any(p.children() for p in host_and_workers), commands
    signalled = time.monotonic()
    demo.proc.send_signal(signal.SIGTERM)  # to the demo alone, as `kill PID` or a supervisor would
    code = demo.proc.wait(EXIT_WITHIN)
    took = time.monotonic() - signalled
    assert code == 0 and took < EXIT_WITHIN, (code, took)
    assert not still_running(tree), [" ".join(p.cmdline()) for p in still_running(tree)]
