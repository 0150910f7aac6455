"""Long polls hold no thread: waiting consumers cost a coroutine, and are bounded per instance.

Real requests to a real local host: the HTTP functions are ``async def``, so a request waiting
on ``?wait=`` must neither hold one of the worker's threads (a producer's POST and ``/health``
stay fast however many consumers wait) nor be unbounded (past ``VAULT_MAX_WAITING`` a long poll
gets 429 with ``Retry-After`` at once, while a producer's ``?wait=`` still gets its 202).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from conftest import commit_directly
from helpers.host_template import forked

from vault_core.vault import Vault
from vault_local.azurite import Azurite
from vault_local.process import HostProcess

MAX_WAITING = 40
WAIT_SECONDS = 30
"""Long enough that the last of 40 waiters arrives before the first one's wait runs out on a
loaded machine; the tests wake them with a commit, so passing never waits it out. A wait that
held a thread would hold what queues behind it for this long: the tests' bounds are a third."""
PROMPT = WAIT_SECONDS / 3


@pytest.fixture(scope="module")
def host(azurite: Azurite) -> Iterator[HostProcess]:
    """One worker process with the Python worker's default threads (6 on this machine), and room
    for MAX_WAITING waiting requests: far more waiters than threads. The product's queue polling
    (its write requests wake the pollers) on one staging queue."""
    proc = HostProcess(
        azurite.connection_string,
        settings={
            "VAULT_MAX_WAITING": str(MAX_WAITING),
            "VAULT_QUEUE_PREFIX": f"lp{uuid.uuid4().hex[:6]}",
            "VAULT_STAGING_QUEUES": "1",
        },
        args=("--wake-pollers-on-write",),
        launch=forked,
    ).start()
    yield proc
    proc.stop()


def _client(host: HostProcess) -> httpx.Client:
    return httpx.Client(base_url=host.url, headers={"x-functions-key": host.key}, timeout=60)


def _post(client: httpx.Client, stream: str, values: list[str], **params: str) -> httpx.Response:
    body = json.dumps({"messages": [{"value": v} for v in values]})
    return client.post(f"/streams/{stream}/messages", content=body, params=params)


class _Waiters:
    """``n`` long polls at the end of ``stream``, each in a thread of the test, all at once.

    On one client of their own, with a connection each (its pool holds up to 100): making a
    client costs ~20 ms of CPU (its TLS context), forty of them most of a second."""

    def __init__(self, host: HostProcess, stream: str, offset: int, n: int) -> None:
        self.responses: list[httpx.Response] = []
        self._lock = threading.Lock()
        self._client = _client(host)
        self._threads = [
            threading.Thread(target=self._one, args=(stream, offset), daemon=True) for _ in range(n)
        ]

    def _one(self, stream: str, offset: int) -> None:
        params = {"from": str(offset), "wait": str(WAIT_SECONDS)}
        r = self._client.get(f"/streams/{stream}/messages", params=params)
        with self._lock:
            self.responses.append(r)

    def __enter__(self) -> _Waiters:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for t in self._threads:
            t.join(WAIT_SECONDS + 30)
        self._client.close()


def _wait_until_waiting(
    client: httpx.Client,
    stream: str,
    offset: int,
    n: int,
    waiters: _Waiters | None = None,
    timeout: float = WAIT_SECONDS - 5,
) -> None:
    """Until the app holds ``n`` waiting requests: one more is then refused (limit = n), or,
    below the limit, until the instance reports them. Positive signal, no sleep-and-hope."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = client.get("/health")
        if r.json().get("waiting", 0) >= n:
            return
        time.sleep(0.05)
    answered = [f"{r.status_code} {r.text[:200]}" for r in (waiters.responses if waiters else [])]
    raise AssertionError(f"{n} long polls never waited at once; answered meanwhile: {answered}")


def test_many_waiting_consumers_do_not_slow_producers_or_health(host: HostProcess) -> None:
    stream = f"t-{uuid.uuid4().hex[:12]}"
    idle = f"t-{uuid.uuid4().hex[:12]}"
    with _client(host) as c:
        assert _post(c, idle, ["x"], wait="10").status_code == 200
        end = int(c.get(f"/streams/{idle}/messages").headers["x-committed"])
        with _Waiters(host, idle, end, MAX_WAITING - 5) as w:
            _wait_until_waiting(c, idle, end, MAX_WAITING - 5, w)
            start = time.monotonic()
            r = c.get("/health")
            health_seconds = time.monotonic() - start
            assert r.status_code == 200 and r.json()["status"] == "ok"
            start = time.monotonic()
            posted = _post(c, stream, ["a", "b"])
            post_seconds = time.monotonic() - start
            assert posted.status_code == 202, posted.text
            # Thirty-five consumers wait on 6 threads: if a wait held a thread, both would queue
            # behind them for the whole wait.
            assert health_seconds < PROMPT and post_seconds < PROMPT, (health_seconds, post_seconds)
            _post(c, idle, ["wake"])  # one commit wakes every waiter
        print(f"/health {health_seconds * 1000:.0f} ms, POST {post_seconds * 1000:.0f} ms, 35 long polls")


def test_every_waiter_wakes_with_the_message_that_ends_its_wait(host: HostProcess) -> None:
    stream = f"t-{uuid.uuid4().hex[:12]}"
    with _client(host) as c:
        assert _post(c, stream, ["first"], wait="10").status_code == 200
        end = int(c.get(f"/streams/{stream}/messages").headers["x-committed"])
        with _Waiters(host, stream, end, 10) as waiters:
            _wait_until_waiting(c, stream, end, 10)
            started = time.monotonic()
            assert _post(c, stream, ["second"]).status_code == 202
        took = time.monotonic() - started
    assert len(waiters.responses) == 10
    for r in waiters.responses:
        assert r.status_code == 200
        assert [m["value"] for m in r.json()["messages"]] == ["second"]
        assert r.json()["messages"][0]["offset"] == end
    assert took < PROMPT, f"the waiters answered only when their wait ran out ({took:.1f} s)"


def test_past_the_bound_a_long_poll_gets_429_and_a_producer_its_202(host: HostProcess) -> None:
    stream = f"t-{uuid.uuid4().hex[:12]}"
    with _client(host) as c:
        assert _post(c, stream, ["x"], wait="10").status_code == 200
        end = int(c.get(f"/streams/{stream}/messages").headers["x-committed"])
        with _Waiters(host, stream, end, MAX_WAITING):
            _wait_until_waiting(c, stream, end, MAX_WAITING)
            start = time.monotonic()
            r = c.get(f"/streams/{stream}/messages", params={"from": str(end), "wait": str(WAIT_SECONDS)})
            assert time.monotonic() - start < PROMPT  # refused at once, not after its wait
            assert r.status_code == 429, r.text
            assert r.json()["error"] == "busy" and "VAULT_MAX_WAITING" in r.json()["message"]
            assert int(r.headers["retry-after"]) > 0
            # Without a wait, a read is no waiter: it is answered as ever.
            assert c.get(f"/streams/{stream}/messages", params={"from": str(end)}).status_code == 200
            # A producer's batch is staged before it would wait: it gets its 202, never a 429
            # that would invite a resend.
            posted = _post(c, f"t-{uuid.uuid4().hex[:12]}", ["y"], wait="5")
            assert posted.status_code in (200, 202), posted.text
            _post(c, stream, ["wake"])
        # The slots are given back: a long poll waits again, and gets the empty page.
        end = int(c.get(f"/streams/{stream}/messages").headers["x-committed"])
        r = c.get(f"/streams/{stream}/messages", params={"from": str(end), "wait": "0.2"})
        assert r.status_code == 200 and r.json()["messages"] == []


def test_with_many_streams_watched_each_waiter_wakes_for_its_own_stream(
    host: HostProcess, vault: Vault
) -> None:
    """Past SWEEP_ABOVE watched streams, one listing serves every watch: a commit on one stream
    still answers exactly the waiters of that stream, promptly."""
    streams = [f"t-{uuid.uuid4().hex[:12]}" for _ in range(12)]
    with _client(host) as c, ThreadPoolExecutor(len(streams)) as pool:
        # Created from the test, side by side: through the host, each would wait for its commit.
        [end] = set(pool.map(lambda s: commit_directly(vault, s, b"x"), streams))  # same size each
        waiters = [_Waiters(host, s, end, 1) for s in streams]
        for w in waiters:
            w.__enter__()
        try:
            _wait_until_waiting(c, streams[0], end, len(streams))
            started = time.monotonic()
            assert _post(c, streams[5], ["for five"]).status_code == 202
            waiters[5].__exit__()
            took = time.monotonic() - started
            [r] = waiters[5].responses
            assert [m["value"] for m in r.json()["messages"]] == ["for five"]
            assert took < PROMPT
            assert all(not w.responses for i, w in enumerate(waiters) if i != 5)  # still waiting
        finally:
            list(pool.map(lambda s: _post(c, s, ["end"]), [s for i, s in enumerate(streams) if i != 5]))
            for w in waiters:
                w.__exit__()
