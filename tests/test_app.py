"""The Function App end to end: real HTTP against the local host, real Azurite."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import SESSION_HOST_QUEUES, app_http_functions, isolated_host, key_header, wait_until
from leases import end_dead_host_leases

from vault_app.config import load_settings
from vault_app.envelope import INLINE_LIMIT
from vault_app.instance import lock_directory
from vault_app.open_writers import OpenWriters
from vault_app.services import Services
from vault_core.azure import StorageAccount
from vault_core.recordformat import NewMessage, decode
from vault_core.writer import Batch
from vault_local.azurite import Azurite
from vault_local.process import HostProcess, local_env

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def http(vault_host: HostProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=vault_host.url, timeout=60, headers=key_header(vault_host)) as client:
        yield client


def post(
    http: httpx.Client, key: str, stream: str, messages: list[dict[str, Any]], **kw: Any
) -> httpx.Response:
    params = {"code": key, **kw.pop("params", {})}
    return http.post(f"/streams/{stream}/messages", params=params, json={"messages": messages}, **kw)


def read_all(http: httpx.Client, stream: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    offset = 0
    while True:
        r = http.get(f"/streams/{stream}/messages", params={"from": offset, "limit": 5000})
        if r.status_code == 404:
            return out  # not written yet
        doc = r.json()
        out += doc["messages"]
        if doc["next_offset"] == doc["committed"]:
            return out
        offset = doc["next_offset"]


def wait_committed(http: httpx.Client, batch_id: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        doc = http.get(f"/batches/{batch_id}").json()
        if doc.get("status") in ("committed", "rejected"):
            return dict(doc)
        time.sleep(0.05)
    raise TimeoutError(f"batch {batch_id} not committed")


def test_concurrent_producers_every_acknowledged_message_is_read_back_once(
    http: httpx.Client, vault_host: HostProcess
) -> None:
    streams = [f"e2e-{uuid.uuid4().hex[:8]}" for _ in range(3)]

    def producer(p: int) -> list[tuple[str, str]]:
        acked = []
        for b in range(6):
            stream = streams[(p + b) % len(streams)]
            values = [f"p{p}-b{b}-m{i}" for i in range(50)]
            r = post(http, vault_host.key, stream, [{"key": f"p{p}", "value": v} for v in values])
            assert r.status_code == 202, r.text
            acked += [(stream, v) for v in values]
        return acked

    with ThreadPoolExecutor(4) as pool:
        acked = [a for result in pool.map(producer, range(4)) for a in result]
    deadline = time.monotonic() + 60
    for stream in streams:
        expected = sorted(v for s, v in acked if s == stream)
        while True:
            got = read_all(http, stream)
            if len(got) >= len(expected) or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert sorted(m["value"] for m in got) == expected  # each exactly once
        offsets = [m["offset"] for m in got]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
        # Within a batch: contiguous and in the order sent.
        by_batch: dict[str, list[int]] = {}
        for m in got:
            by_batch.setdefault(m["value"].rsplit("-", 1)[0], []).append(int(m["value"].rsplit("m", 1)[1]))
        assert all(seq == list(range(50)) for seq in by_batch.values())


def test_batches_of_one_producer_that_waits_for_commit_keep_their_order(
    http: httpx.Client, vault_host: HostProcess, stream: str
) -> None:
    for b in range(5):
        r = post(
            http, vault_host.key, stream, [{"value": f"b{b}-{i}"} for i in range(3)], params={"wait": 20}
        )
        assert r.status_code == 200 and r.json()["status"] == "committed"
    assert [m["value"] for m in read_all(http, stream)] == [f"b{b}-{i}" for b in range(5) for i in range(3)]


def test_wait_answers_200_with_offsets_once_committed(
    http: httpx.Client, vault_host: HostProcess, stream: str
) -> None:
    r = post(http, vault_host.key, stream, [{"value": "a"}, {"value": "b"}], params={"wait": 20})
    doc = r.json()
    assert r.status_code == 200 and doc["first_offset"] == 0 and doc["count"] == 2 and doc["next_offset"] > 0
    assert http.get(f"/batches/{doc['batch_id']}").json()["status"] == "committed"


@pytest.mark.parametrize("how", ["header", "batch_id"])
def test_a_retried_post_is_staged_and_committed_once(
    http: httpx.Client, vault_host: HostProcess, stream: str, how: str
) -> None:
    token = uuid.uuid4().hex
    ids = set()
    for _ in range(3):
        if how == "header":
            r = post(http, vault_host.key, stream, [{"value": "once"}], headers={"Idempotency-Key": token})
        else:
            r = http.post(
                f"/streams/{stream}/messages",
                params={"code": vault_host.key},
                json={"batch_id": token, "messages": [{"value": "once"}]},
            )
        assert r.status_code in (200, 202), r.text
        ids.add(r.json()["batch_id"])
    assert len(ids) == 1
    wait_committed(http, ids.pop())
    assert [m["value"] for m in read_all(http, stream)] == ["once"]


def test_long_poll_returns_as_soon_as_data_arrives(
    http: httpx.Client, vault_host: HostProcess, stream: str
) -> None:
    post(http, vault_host.key, stream, [{"value": "first"}], params={"wait": 20})
    tail = http.get(f"/streams/{stream}/messages", params={"from": 0}).json()["next_offset"]
    got: dict[str, Any] = {}

    def poll() -> None:
        got["sent"] = time.monotonic()
        r = http.get(f"/streams/{stream}/messages", params={"from": tail, "wait": 30})
        got.update(r.json(), answered=time.monotonic())

    t = threading.Thread(target=poll)
    t.start()
    # Posted once the poll waits (the host's count of waiting requests says so, not a sleep):
    # the message is what ends the wait.
    wait_until(lambda: "sent" in got and http.get("/health").json()["waiting"] > 0, 10, "long poll")
    posted = time.monotonic()
    post(http, vault_host.key, stream, [{"value": "second"}])
    t.join(40)
    assert [m["value"] for m in got["messages"]] == ["second"]
    assert got["sent"] < posted < got["answered"] < got["sent"] + 25


def test_long_poll_with_nothing_new_returns_empty_after_the_wait(
    http: httpx.Client, vault_host: HostProcess, stream: str
) -> None:
    post(http, vault_host.key, stream, [{"value": "x"}], params={"wait": 20})
    end = http.get(f"/streams/{stream}/messages").json()["next_offset"]
    start = time.monotonic()
    doc = http.get(f"/streams/{stream}/messages", params={"from": end, "wait": 0.3}).json()
    assert doc["messages"] == [] and doc["next_offset"] == end and time.monotonic() - start >= 0.3


def test_range_reads_serve_the_documented_format(
    http: httpx.Client, vault_host: HostProcess, stream: str
) -> None:
    """And an NDJSON read's type and offset headers cross the host (what they hold: test_app_memory.py)."""
    post(
        http, vault_host.key, stream, [{"key": "k", "value": f"v{i}"} for i in range(20)], params={"wait": 20}
    )
    committed = http.get(f"/streams/{stream}").json()["committed"]
    ndjson = http.get(f"/streams/{stream}/messages", headers={"Accept": "application/x-ndjson"})
    assert (
        ndjson.headers["content-type"].startswith("application/x-ndjson")
        and len(ndjson.text.splitlines()) == 20
    )
    assert int(ndjson.headers["x-next-offset"]) == int(ndjson.headers["x-committed"]) == committed
    r = http.get(f"/streams/{stream}/log", headers={"Range": f"bytes=0-{committed - 1}"})
    assert r.status_code == 206 and r.headers["content-range"] == f"bytes 0-{committed - 1}/{committed}"
    records, end = decode(r.content, 0, complete=True)
    assert [m.value for m in records] == [f"v{i}".encode() for i in range(20)] and end == committed
    part = http.get(f"/streams/{stream}/log", headers={"Range": "bytes=10-19"})
    assert part.status_code == 206 and part.content == r.content[10:20]
    assert http.get(f"/streams/{stream}/log", headers={"Range": "bytes=-5"}).content == r.content[-5:]
    beyond = http.get(f"/streams/{stream}/log", headers={"Range": f"bytes={committed}-"})
    assert beyond.status_code == 416 and beyond.headers["content-range"] == f"bytes */{committed}"


@pytest.mark.parametrize("values", ["compressible", "random"])
def test_batches_over_the_inline_limit_commit_and_leave_no_blob(
    http: httpx.Client, vault_host: HostProcess, stream: str, values: str
) -> None:
    """Compressible, they travel as compressed units inside the queue message; random, as a
    claim-check blob of units, deleted after the commit (docs/ARCHITECTURE.md §2.2; which way
    each goes is pinned in tests/test_app_memory.py, where the queue message can be looked at)."""
    rng = random.Random(stream)
    big = [
        {"value": ("z" * 2000 if values == "compressible" else rng.randbytes(1000).hex()) + str(i)}
        for i in range(3 * INLINE_LIMIT // 2000)
    ]
    r = post(http, vault_host.key, stream, big, params={"wait": 30})
    assert r.status_code == 200, r.text
    assert [m["value"] for m in read_all(http, stream)] == [m["value"] for m in big]
    account = StorageAccount(connection_string=vault_host.connection_string)
    claims = account.blob_service().get_container_client("mv-claimcheck")
    assert not [b.name for b in claims.list_blobs(name_starts_with=f"{stream}/")]


def test_catalog_lists_streams_and_queue_depths(
    http: httpx.Client, vault_host: HostProcess, stream: str
) -> None:
    post(http, vault_host.key, stream, [{"value": "c"}], params={"wait": 20})
    doc = http.get("/streams").json()
    assert stream in [s["stream"] for s in doc["streams"]]
    assert len(doc["queues"]) == SESSION_HOST_QUEUES
    assert all("approximate_messages" in q and "poison_messages" in q for q in doc["queues"])
    one = http.get(f"/streams/{stream}").json()
    assert one["count"] == 1 and one["committed"] > 0 and one["first_timestamp"] == one["last_timestamp"]


def test_access_hands_out_a_read_only_sas_for_the_stream_blob(
    http: httpx.Client, vault_host: HostProcess, stream: str
) -> None:
    post(http, vault_host.key, stream, [{"value": "direct"}], params={"wait": 20})
    doc = http.get(f"/streams/{stream}/access").json()
    from azure.storage.blob import BlobClient

    blob = BlobClient.from_blob_url(f"{doc['blob_url']}?{doc['sas']}")
    data = blob.download_blob(offset=0, length=doc["committed"]).readall()
    assert decode(data, 0, complete=True)[0][0].value == b"direct"
    with pytest.raises(Exception, match=r"not authorized|AuthorizationPermissionMismatch|403"):
        blob.upload_page(b"\0" * 512, offset=0, length=512)


@pytest.mark.parametrize("auth", [{}, {"code": "wrong"}])
def test_writes_without_the_function_key_get_401(
    vault_host: HostProcess, stream: str, auth: dict[str, str]
) -> None:
    url = f"{vault_host.url}/streams/{stream}/messages"
    r = httpx.post(url, params=auth, json={"messages": [{"value": "x"}]})
    assert r.status_code == 401 and r.json()["error"] == "unauthorized"


BAD_POSTS = [
    ("malformed JSON", b'{"messages": [', "application/json", 400),
    ("malformed NDJSON", b'{"value": "ok"}\n{nope', "application/x-ndjson", 400),
    ("no messages", b'{"messages": []}', "application/json", 400),
    ("missing value", b'{"messages": [{"key": "k"}]}', "application/json", 400),
    (
        "bad base64",
        b'{"messages": [{"value": "ok"}, {"value": "!!", "encoding": "base64"}]}',
        "application/json",
        400,
    ),
    ("unknown encoding", b'{"messages": [{"value": "x", "encoding": "rot13"}]}', "application/json", 400),
    ("bad batch id", b'{"batch_id": "a:b", "messages": [{"value": "x"}]}', "application/json", 400),
    (
        "oversize message",
        json.dumps({"messages": [{"value": "ok"}, {"value": "v" * (1024 * 1024 + 1)}]}).encode(),
        "application/json",
        413,
    ),
    (
        "oversize key",
        json.dumps({"messages": [{"value": "v", "key": "k" * 1025}]}).encode(),
        "application/json",
        413,
    ),
    (
        "too many messages",
        json.dumps({"messages": [{"value": "v"}] * 10_001}).encode(),
        "application/json",
        413,
    ),
    ("body too large", b"x" * (16 * 1024 * 1024 + 1), "application/json", 413),
    (
        "deeply nested JSON",
        b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        "application/json",
        400,
    ),
    ("deeply nested NDJSON", b"[" * 100_000 + b"]" * 100_000, "application/x-ndjson", 400),
    ("lone surrogate in a value", b'{"messages": [{"value": "a\\ud800"}]}', "application/json", 400),
    ("lone surrogate in a key", b'{"messages": [{"key": "\\udfff", "value": "v"}]}', "application/json", 400),
    (
        "unknown key_encoding",
        b'{"messages": [{"key": "k", "key_encoding": "hex", "value": "v"}]}',
        "application/json",
        400,
    ),
]


BAD_POSTS_OVER_HTTP = [c for c in BAD_POSTS if c[0] in ("malformed NDJSON", "body too large")]
"""Over real HTTP, once each: a refusal's status and JSON error crossing the host (the body's
Content-Type, a body of 16 MiB through the worker's socket); every case is proved in process
(test_app_memory.py)."""


@pytest.mark.parametrize(
    ("case", "body", "ctype", "status"), BAD_POSTS_OVER_HTTP, ids=[c[0] for c in BAD_POSTS_OVER_HTTP]
)
def test_bad_input_gets_a_clear_4xx_and_stages_nothing(
    http: httpx.Client, vault_host: HostProcess, stream: str, case: str, body: bytes, ctype: str, status: int
) -> None:
    r = http.post(
        f"/streams/{stream}/messages",
        params={"code": vault_host.key},
        content=body,
        headers={"Content-Type": ctype},
    )
    assert r.status_code == status, r.text
    doc = r.json()
    assert doc["error"] in ("bad_request", "too_large") and doc["message"]
    assert http.get(f"/streams/{stream}").status_code == 404  # nothing was staged, so nothing written


BAD_READS = [
    ("invalid stream name", "/streams/bad%20name/messages", {}, 400, "invalid_stream"),
    ("negative offset", "/streams/{s}/messages", {"from": "-1"}, 400, "bad_request"),
    ("offset not a number", "/streams/{s}/messages", {"from": "abc"}, 400, "bad_request"),
    ("offset between records", "/streams/{s}/messages", {"from": "3"}, 400, "invalid_offset"),
    ("offset past the end", "/streams/{s}/messages", {"from": "999999"}, 416, "invalid_offset"),
    ("bad time", "/streams/{s}/messages", {"at": "yesterday"}, 400, "bad_request"),
    ("limit out of range", "/streams/{s}/messages", {"limit": "0"}, 400, "bad_request"),
    ("wait too long", "/streams/{s}/messages", {"wait": "3600"}, 400, "bad_request"),
    ("unknown stream", "/streams/nope-{s}/messages", {}, 404, "not_found"),
    ("unknown batch", "/batches/0123456789abcdef", {}, 404, "not_found"),
    ("bad range", "/streams/{s}/log", {}, 400, "bad_request"),
    ("time of 4,000 digits", "/streams/{s}/messages", {"at": "9" * 4000}, 400, "bad_request"),
    ("range of 5,000 digits", "/streams/{s}/log", {}, 400, "bad_request"),
]


BAD_READS_OVER_HTTP = [
    c
    for c in BAD_READS
    if c[0] in ("invalid stream name", "offset past the end", "unknown batch", "bad range")
]
"""Over real HTTP: the route's decoding (``bad%20name``), a 416, a route of its own and a Range
header reaching their handlers; every case is proved in process (test_app_memory.py)."""


@pytest.fixture(scope="module")
def one_message_stream(http: httpx.Client, vault_host: HostProcess) -> str:
    """A stream holding one committed message, which the bad reads only read: one for them all."""
    stream = f"t-{uuid.uuid4().hex[:12]}"
    r = post(http, vault_host.key, stream, [{"value": "something"}], params={"wait": 20})
    assert r.status_code == 200, r.text
    return stream


@pytest.mark.parametrize(
    ("case", "path", "params", "status", "code"), BAD_READS_OVER_HTTP, ids=[c[0] for c in BAD_READS_OVER_HTTP]
)
def test_bad_reads_get_a_clear_4xx(
    http: httpx.Client,
    one_message_stream: str,
    case: str,
    path: str,
    params: dict[str, str],
    status: int,
    code: str,
) -> None:
    stream = one_message_stream
    bad_range = f"bytes={'9' * 5000}-" if "digits" in case else "lines=1-2"
    headers = {"Range": bad_range} if path.endswith("/log") else {}
    r = http.get(path.replace("{s}", stream), params=params, headers=headers)
    assert r.status_code == status, r.text
    assert r.json()["error"] == code
    assert r.headers["x-content-type-options"] == "nosniff"


def test_unknown_routes_and_methods_get_json_errors(http: httpx.Client) -> None:
    missing = http.get("/nothing-here")
    assert missing.json()["error"] == "not_found" and missing.headers["x-content-type-options"] == "nosniff"
    r = http.delete("/streams/x/messages")
    assert r.status_code == 405 and "GET" in r.headers["allow"]


def test_openapi_documents_every_route_of_the_app(http: httpx.Client) -> None:
    spec = http.get("/openapi.json").json()
    http_functions = app_http_functions()
    documented = {(p, m.upper()) for p, ops in spec["paths"].items() for m in ops}
    for f in http_functions:
        path = "/" + re.sub(r"\{\*(\w+)\}", r"{\1}", f.route)  # a catch-all {*p} is {p} in OpenAPI
        for method in f.methods:
            assert (path, method) in documented, f"{method} /{f.route} is not in openapi.json"


def test_health(http: httpx.Client) -> None:
    doc = http.get("/health").json()
    assert doc["status"] == "ok" and len(doc["queues"]) == SESSION_HOST_QUEUES
    assert doc["poison_messages"] == sum(q["poison_messages"] for q in doc["queues"])


# -- faults: each test gets its own host (and queues) so killing it disturbs nothing else -------


def own_host(azurite: Azurite, tmp_path: Path, *args: str, prefix: str | None = None) -> HostProcess:
    return isolated_host(azurite, tmp_path, *args, prefix=prefix, settings={"VAULT_STAGING_QUEUES": "1"})


def test_writer_killed_after_commit_before_delete_appends_the_batch_exactly_once(
    azurite: Azurite, tmp_path: Path, stream: str
) -> None:
    prefix = f"q{uuid.uuid4().hex[:8]}"
    # Its queue message kept invisible 1 s at a time (after isolated_host's 3 s, this one wins):
    # back for the healthy host within 1 s of the kill instead of 3.
    visibility = ("--inflight-visibility", "1")
    faulty = own_host(azurite, tmp_path, "--fault", "after-commit", *visibility, prefix=prefix).start()
    try:
        r = httpx.post(
            f"{faulty.url}/streams/{stream}/messages",
            params={"code": faulty.key},
            json={"messages": [{"value": f"m{i}"} for i in range(10)]},
        )
        assert r.status_code == 202
        faulty.wait_for("FAULT after-commit", 30)
    finally:
        faulty.stop(kill=True)  # kill -9: committed, queue message not deleted
    # Its stream and queue owner leases would run out within 15 s: end them now (tests/leases.py).
    assert end_dead_host_leases(azurite.connection_string, prefix, [stream]) == 2
    healthy = own_host(azurite, tmp_path, prefix=prefix).start()
    try:
        doc = wait_committed(
            httpx.Client(base_url=healthy.url, headers=key_header(healthy)), r.json()["batch_id"]
        )
        queue = (
            StorageAccount(connection_string=azurite.connection_string)
            .queue_service()
            .get_queue_client(f"{prefix}-0")
        )
        # The redelivered message is processed (as a duplicate) and deleted.
        wait_until(lambda: queue.get_queue_properties().approximate_message_count == 0, 60, "queue to empty")
        values = [
            m["value"]
            for m in read_all(httpx.Client(base_url=healthy.url, headers=key_header(healthy)), stream)
        ]
        assert values == [f"m{i}" for i in range(10)] and doc["first_offset"] == 0
    finally:
        healthy.stop()


def test_each_staging_queue_has_one_owner_until_it_idles_or_its_process_stops(azurite: Azurite) -> None:
    """docs/ARCHITECTURE.md §3.7: the owner lease of a queue, as two instances see it."""
    prefix = f"q{uuid.uuid4().hex[:8]}"
    env = {**local_env(azurite.connection_string, "owner-test-key-0123456789"), "VAULT_QUEUE_PREFIX": prefix}
    services = Services(load_settings(env))
    services.ensure()
    queue = services.queues[0]
    first, second = OpenWriters(idle_seconds=60), OpenWriters(idle_seconds=60)
    try:
        assert first.own(services, queue) and not second.own(services, queue)
        first.done(queue)
        first.keep_owned(now=time.monotonic() + 30)  # busy enough: renewed, kept
        assert first.own(services, queue) and first.owned() == [f"0/{queue.name}"]
        first.keep_owned(now=time.monotonic() + 61)  # an invocation is still running: kept
        first.done(queue)
        first.keep_owned(now=time.monotonic() + 61)  # idle: released for the others at once
        assert first.owned() == [] and second.own(services, queue) and not first.own(services, queue)
        second.done(queue)
        second.close_all()  # a process that exits releases what it owns
        assert first.own(services, queue)
        first.done(queue)
    finally:
        first.close_all()
        second.close_all()


SIBLING = """
import os
from vault_app.config import load_settings
from vault_app.open_writers import OpenWriters
from vault_app.services import Services
from vault_core.errors import StreamLeased
from vault_core.recordformat import NewMessage
from vault_core.writer import Batch

services = Services(load_settings())
stream = os.environ["SIBLING_STREAM"]
writers = OpenWriters()
print("owner" if writers.own(services, services.queue_for(stream)) else "not-owner")
try:
    writers.append(services, stream, [Batch([NewMessage(b"sibling", b"")], "from-the-sibling")])
    print("appended")
except StreamLeased:
    print("leased")
writers.close_all()
"""


def test_two_live_processes_of_one_instance_never_both_own_a_queue_or_write_a_stream(
    azurite: Azurite, stream: str
) -> None:
    """docs/ARCHITECTURE.md §3.7: the processes of one instance take leases under one lease id,
    so the blob lease cannot keep them apart; the instance-wide file lock does, while both live."""
    instance = f"test-instance-{uuid.uuid4().hex[:8]}"
    env = {
        **local_env(azurite.connection_string, "sibling-test-key-0123456789"),
        "VAULT_QUEUE_PREFIX": f"q{uuid.uuid4().hex[:8]}",
        "WEBSITE_INSTANCE_ID": instance,
    }
    services = Services(load_settings(env))
    services.ensure()
    queue = services.queue_for(stream)
    writers = OpenWriters(idle_seconds=60)
    try:
        assert writers.own(services, queue)
        writers.append(services, stream, [Batch([NewMessage(b"first", b"")], "first")])
        sibling = subprocess.run(  # a live process of the same instance, its leases under the same id
            [sys.executable, "-c", SIBLING],
            env={**os.environ, **env, "SIBLING_STREAM": stream},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert sibling.stdout.split() == ["not-owner", "leased"], sibling.stderr
        writers.append(services, stream, [Batch([NewMessage(b"second", b"")], "second")])  # still ours
        writers.done(queue)
    finally:
        writers.close_all()
        shutil.rmtree(lock_directory(instance), ignore_errors=True)
    assert [m.value for m in services.vault.reader.scan(stream)] == [b"first", b"second"]


def test_two_instances_on_the_same_queue_write_every_batch_once_through_its_owner(
    azurite: Azurite, tmp_path: Path
) -> None:
    """Scale-out: both instances take POSTs and poll the queue; one of them writes it, the other
    passes the batches it receives on, and nothing is lost, duplicated or poisoned."""
    prefix = f"q{uuid.uuid4().hex[:8]}"
    streams = [f"own-{uuid.uuid4().hex[:6]}-{i}" for i in range(3)]
    hosts = [own_host(azurite, tmp_path, prefix=prefix) for _ in range(2)]
    try:
        with ThreadPoolExecutor(2) as starting:  # side by side, as instances start
            list(starting.map(HostProcess.start, hosts))

        def produce(p: int) -> list[tuple[str, str]]:
            sent = []
            with httpx.Client(timeout=30) as producer:  # one each: making one costs ~20 ms of CPU
                for n in range(12):
                    host, stream, value = hosts[n % 2], streams[(p + n) % 3], f"p{p}-{n}"
                    r = producer.post(
                        f"{host.url}/streams/{stream}/messages",
                        params={"code": host.key},
                        json={"messages": [{"value": value}]},
                    )
                    assert r.status_code == 202, r.text
                    sent.append((stream, value))
            return sent

        with ThreadPoolExecutor(4) as pool:
            sent = [x for batch in pool.map(produce, range(4)) for x in batch]
        client = httpx.Client(base_url=hosts[0].url, timeout=30, params={"code": hosts[0].key})
        deadline = time.monotonic() + 60
        while sum(len(read_all(client, s)) for s in streams) < len(sent) and time.monotonic() < deadline:
            time.sleep(0.05)
        for stream in streams:
            got = [m["value"] for m in read_all(client, stream)]
            assert sorted(got) == sorted(v for s, v in sent if s == stream)
        writers = [h for h in hosts if any('"event":"appended"' in line for line in h.lines)]
        assert len(writers) == 1, "one instance owns the queue and writes all of its streams"
        poison = (
            StorageAccount(connection_string=azurite.connection_string)
            .queue_service()
            .get_queue_client(f"{prefix}-0-poison")
        )
        assert poison.get_queue_properties().approximate_message_count == 0
    finally:
        with ThreadPoolExecutor(2) as stopping:
            list(stopping.map(HostProcess.stop, hosts))
