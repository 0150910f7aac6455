"""The local host is as strict as the Functions front end: real requests, on real sockets."""

from __future__ import annotations

import asyncio
import json
import select
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import uvicorn
from conftest import OWN_HOST_QUEUES, WAKE_ON_WRITE, commit_directly, key_header, write_host_json
from helpers.host_template import forked

from vault_core.vault import Vault
from vault_local import http_limits
from vault_local.azurite import Azurite, free_port
from vault_local.process import HostProcess


def raw_request(port: int, head: bytes, body: bytes = b"", *, pause: float = 0.0) -> tuple[bytes, float]:
    """Send ``head`` then ``body`` (a byte every ``pause`` s if given); the answer and its time."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(head)
        if not pause:
            s.sendall(body)
        for i in range(len(body) if pause else 0):
            if select.select([s], [], [], pause)[0]:
                break  # the host answered: stop trickling
            s.sendall(body[i : i + 1])
        answer = b""
        while b"\r\n\r\n" not in answer or len(answer.split(b"\r\n\r\n", 1)[1]) < _length(answer):
            part = s.recv(65536)
            if not part:
                break
            answer += part
    return answer, time.monotonic() - started


def _length(answer: bytes) -> int:
    for line in answer.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":")[1])
    return 0


def test_a_large_body_on_a_read_route_is_refused_before_it_is_read(vault_host: HostProcess) -> None:
    head = b"GET /api/health HTTP/1.1\r\nHost: x\r\nContent-Length: 67108864\r\n\r\n"  # 64 MiB announced
    answer, took = raw_request(vault_host.port, head, b"x" * 1024)
    assert answer.startswith(b"HTTP/1.1 413") and b'"too_large"' in answer
    assert took < 5


def test_a_body_over_the_front_ends_100_mb_is_413(vault_host: HostProcess) -> None:
    head = (
        f"POST /api/streams/s/messages?code={vault_host.key} HTTP/1.1\r\nHost: x\r\n"
        f"Content-Length: {http_limits.MAX_REQUEST_BYTES + 1}\r\n\r\n"
    ).encode()
    answer, _ = raw_request(vault_host.port, head, b"{")
    assert answer.startswith(b"HTTP/1.1 413")


BODY_GRACE = 1.0
"""The minimum-rate grace (``--body-grace``) of the trickle test's host, instead of Kestrel's 5 s
(BODY_GRACE_SECONDS): the rate is enforced the same way once any grace is over."""


@pytest.fixture(scope="module")
def limited_host(azurite: Azurite, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostProcess]:
    """The module's host of its own, for the limits the session host keeps at the product's: a
    body grace of BODY_GRACE, and room for one request at a time and three outstanding. One host
    for both (the module runs on one worker): a host's start is over a CPU-second. Its messages
    all come through its own requests: it polls as the session host does."""
    directory = tmp_path_factory.mktemp("limits")
    host_json = write_host_json(directory, woken_on_write=True)
    doc = json.loads(host_json.read_text())
    doc["extensions"]["http"].update(maxOutstandingRequests=3, maxConcurrentRequests=1)
    host_json.write_text(json.dumps(doc))
    host = HostProcess(
        azurite.connection_string,
        settings={"VAULT_QUEUE_PREFIX": f"q{free_port()}", "VAULT_STAGING_QUEUES": str(OWN_HOST_QUEUES)},
        args=("--host-json", str(host_json), "--body-grace", str(BODY_GRACE), WAKE_ON_WRITE),
        launch=forked,
    ).start()
    yield host
    host.stop()


def test_a_body_that_trickles_in_is_408(limited_host: HostProcess) -> None:
    host = limited_host
    head = (
        f"POST /api/streams/s/messages?code={host.key} HTTP/1.1\r\nHost: x\r\n"
        "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
    ).encode()
    answer, took = raw_request(host.port, head, b"x" * 20, pause=0.5)
    assert answer.startswith(b"HTTP/1.1 408") and b'"request_timeout"' in answer
    assert BODY_GRACE <= took < BODY_GRACE + 5


def test_a_url_over_4_kib_is_414(vault_host: HostProcess) -> None:
    r = httpx.get(f"{vault_host.url}/streams/s/messages", params={"x": "y" * 5000})
    assert r.status_code == 414 and r.json()["error"] == "uri_too_long"


def test_an_anonymous_post_is_refused_before_its_body_is_read(vault_host: HostProcess) -> None:
    """No route takes a body from an anonymous caller: the 401 comes without a byte of the
    90 MiB announced (none is sent), as the app itself would answer it."""
    head = b"POST /api/streams/s/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 94371840\r\n\r\n"
    answer, took = raw_request(vault_host.port, head)
    assert answer.startswith(b"HTTP/1.1 401") and b'"unauthorized"' in answer, answer[:300]
    assert b'www-authenticate: bearer realm="message-vault"' in answer.lower()
    assert took < 5
    # A credential, even a wrong one, goes to the app, which judges it after the body.
    head = (
        b"POST /api/streams/s/messages HTTP/1.1\r\nHost: x\r\nx-functions-key: wrong\r\n"
        b"Content-Length: 2\r\n\r\n"
    )
    answer, _ = raw_request(vault_host.port, head, b"{}")
    assert answer.startswith(b"HTTP/1.1 401") and b"not one this app accepts" in answer


def test_request_headers_over_32_kib_together_are_431(vault_host: HostProcess) -> None:
    for headers in (
        [b"Authorization: Bearer " + b"a" * (1024 * 1024)],  # one huge header
        [b"X-Pad-%d: %s" % (i, b"b" * 1000) for i in range(40)],  # many that add up
    ):
        head = b"GET /api/health HTTP/1.1\r\nHost: x\r\n" + b"\r\n".join(headers) + b"\r\n\r\n"
        answer, took = raw_request(vault_host.port, head)
        assert answer.startswith(b"HTTP/1.1 431") and b'"header_too_large"' in answer, answer[:200]
        assert took < 5
    fits = b"GET /api/health HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"c" * 30_000 + b"\r\n\r\n"
    assert raw_request(vault_host.port, fits)[0].startswith(b"HTTP/1.1 200")
    # A body that arrives with the head, in the same reads, is no part of the head.
    body = b'{"messages": [{"value": "' + b"v" * 200_000 + b'"}]}'
    head = (
        f"POST /api/streams/s/messages?code={vault_host.key} HTTP/1.1\r\nHost: x\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", vault_host.port), timeout=30) as s:
        s.sendall(head + body)
        assert s.recv(65536).startswith(b"HTTP/1.1 202")


@pytest.mark.parametrize("char", ["%09", "%0D", "%0A", "%0d%0a", "%00", "%7F"])
def test_a_control_character_in_the_path_is_400_never_another_route_or_name(
    vault_host: HostProcess, char: str
) -> None:
    key = key_header(vault_host)
    for path in (
        f"streams/s{char}/messages",
        f"streams/s/messages{char}",
        f"streams/s{char}",
        f"health{char}",
    ):
        r = httpx.get(f"{vault_host.url}/{path}", headers=key)
        assert r.status_code == 400 and r.json()["error"] == "bad_request", (path, r.text)


def test_requests_over_max_outstanding_get_429_with_retry_after(
    limited_host: HostProcess, vault: Vault, stream: str
) -> None:
    # The stream is written from the test, not through the host: a POST would be one more request
    # for the full host to refuse, and the test ends the polls with a commit once it has its 429.
    tail = commit_directly(vault, stream, b"x")
    url = f"{limited_host.url}/streams/{stream}/messages"
    answers: list[httpx.Response] = []

    def long_poll() -> None:  # one runs (maxConcurrentRequests 1), the others wait their turn
        params: dict[str, str | int] = {"code": limited_host.key, "from": tail, "wait": 30}
        answers.append(httpx.get(url, params=params, timeout=60))

    polls = [threading.Thread(target=long_poll) for _ in range(3)]
    for t in polls:
        t.start()
    time.sleep(1)  # all three sent, and held: the first waits up to 30 s for a message
    r = httpx.get(f"{limited_host.url}/health", timeout=10)
    commit_directly(vault, stream, b"y")  # the running poll answers with it, then each one let in after it
    for t in polls:
        t.join()
    got = [(a.status_code, [m["value"] for m in a.json()["messages"]]) for a in answers]
    assert got == [(200, ["y"])] * 3  # each held until its turn, then answered as ever
    assert r.status_code == 429 and r.json()["error"] == "too_busy" and int(r.headers["retry-after"]) > 0
    assert httpx.get(f"{limited_host.url}/health", timeout=10).status_code == 200  # free again


def test_headers_that_do_not_arrive_in_time_close_the_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_limits, "HEADERS_TIMEOUT_SECONDS", 0.3)

    async def app(scope: dict[str, object], receive: object, send: object) -> None:
        raise AssertionError("no request ever completes its headers")

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            app, host="127.0.0.1", port=port, http=http_limits.HeadersTimeoutProtocol, log_level="error"
        )
    )
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.05)
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")  # and never the rest
            assert s.recv(1024) == b""  # closed by the server
        assert 0.3 <= time.monotonic() - started < 5
    finally:
        server.should_exit = True
        thread.join(10)
