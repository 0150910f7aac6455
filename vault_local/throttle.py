"""A throttling front for Azurite: Azure Storage's scalability targets, scaled down, in a real proxy.

Azurite never throttles, so nothing run against it shows what the vault does at Azure's limits.
This front is a reverse proxy with one listener per service (blob, queue, table) that the SDKs
talk to over TCP instead of Azurite. It charges every request to the partitions Azure defines
its targets on, each a token bucket whose rate is the target divided by one ``factor``, and
answers a request that finds a bucket empty as Azure does, without forwarding it:

======================  =========================================  =========================
partition               charged                                    Azure's target (factor 1)
======================  =========================================  =========================
storage account         every request of the account, any service  20,000 requests/s
queue                   every request naming the queue              2,000 messages/s
table partition         entities (a batch: its operations)          2,000 entities/s
blob                    every request naming the blob               500 requests/s
blob                    bytes sent plus bytes asked for by a range  60 MiB/s
======================  =========================================  =========================

Azure's numbers are in docs/OPERATING.md ("Azure's scalability targets, and the throttling
front"), with where they come from. The refusal is ``503 ServerBusy`` (every ``timeout_every``-th
refusal ``500 OperationTimedOut`` instead, the other answer Azure gives for a partition over
its target) with ``x-ms-error-code``, ``x-ms-request-id`` and the service's own error body: XML
for blob and queue, OData JSON for table. Refused requests take no tokens.

Accounts are told apart by the first path segment (Azurite's path-style URLs), so one front
serves every account of one Azurite. ``GET /_throttle`` on any listener answers the counts of
admitted and refused requests per partition, as JSON (what the benchmark reads);
``/_throttle/unused`` the tokens each partition's full bucket could not hold (its target's share
that nobody asked for), and ``/_throttle/operations`` the queue message operations by kind;
``PUT /_throttle/factor`` with a number as its body divides every target by it from then on.

Run as a process of its own (``python -m vault_local.throttle --blob P --queue P --table P``; it
prints ``READY {"blob": port, ...}``), or in-process with :class:`ThrottlingFront`.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

from vault_core.azure import AZURITE_CONNECTION_STRING

SERVICES = ("blob", "queue", "table")
MIB = 1024 * 1024
SETTING_PREFIX = "MV_THROTTLE_"
"""Each field of :class:`Targets` is a setting: ``MV_THROTTLE_FACTOR``, ``MV_THROTTLE_QUEUE_MESSAGES``, ..."""


@dataclass(frozen=True)
class Targets:
    """Azure Storage's scalability targets (standard general-purpose v2 account, 1 KiB items),
    and the ``factor`` every one is divided by, so that this machine can reach them."""

    factor: float = 20.0
    account_requests: float = 20_000.0
    """Requests per second per storage account, every service together."""
    queue_messages: float = 2_000.0
    """Messages (requests) per second per queue."""
    table_partition_entities: float = 2_000.0
    """Entities per second per table partition."""
    blob_requests: float = 500.0
    """Requests per second per blob."""
    blob_bytes: float = 60.0 * MIB
    """Bytes per second per blob."""
    burst_seconds: float = 1.0
    """A bucket holds this many seconds of its rate: a partition idle for a while may burst."""
    timeout_every: int = 0
    """Every n-th refusal is ``500 OperationTimedOut`` rather than ``503 ServerBusy`` (0: never)."""

    def rate(self, target: str) -> float:
        """A target as the front enforces it: divided by the factor."""
        return float(getattr(self, target)) / self.factor

    @classmethod
    def from_env(cls, env: Mapping[str, str], **overrides: Any) -> Targets:
        """The targets with any ``MV_THROTTLE_<FIELD>`` settings in ``env`` applied."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(SETTING_PREFIX + f.name.upper())
            if raw:
                values[f.name] = int(raw) if f.name == "timeout_every" else float(raw)
        targets = replace(cls(), **values, **overrides)
        if not targets.factor > 0:
            raise ValueError(f"the throttling factor must be positive, got {targets.factor}")
        return targets


class TokenBucket:
    """``rate`` tokens a second, holding at most ``burst``. A request costing more than a full
    bucket is let through when the bucket is full and leaves it in debt (a 4 MiB page write
    against a small byte rate still passes, then waits out its bytes)."""

    def __init__(self, rate: float, burst: float, clock: Callable[[], float]) -> None:
        self.rate = rate
        self.burst = max(burst, 1.0)
        self.clock = clock
        self.tokens = self.burst
        self.updated = clock()
        self.unused = 0.0
        """Tokens the bucket could not hold because it was full: the partition's budget that no
        request asked for (a queue below its target while its callers waited elsewhere)."""

    def _refill(self) -> None:
        now = self.clock()
        filled = self.tokens + (now - self.updated) * self.rate
        self.unused += max(0.0, filled - self.burst)
        self.tokens = min(self.burst, filled)
        self.updated = now

    def unused_until_now(self) -> float:
        """:attr:`unused`, brought up to now (a bucket is refilled only when a request touches it)."""
        self._refill()
        return self.unused

    def has(self, cost: float) -> bool:
        self._refill()
        return self.tokens >= min(cost, self.burst)

    def take(self, cost: float) -> None:
        self.tokens -= cost

    def rescale(self, rate: float, burst: float) -> None:
        """A new rate and burst from now on; what it filled and could not hold so far is kept."""
        self._refill()
        self.rate = rate
        self.burst = max(burst, 1.0)
        self.tokens = min(self.tokens, self.burst)


@dataclass(frozen=True)
class Charge:
    """What one request costs one partition: ``target`` names the :class:`Targets` field."""

    target: str
    partition: str
    cost: float = 1.0


_TABLE_KEY = re.compile(r"^([A-Za-z][A-Za-z0-9]*)\(PartitionKey='((?:[^']|'')*)'")
_TABLE_FILTER = re.compile(r"PartitionKey eq '((?:[^']|'')*)'")
_BODY_PARTITION = re.compile(rb'"PartitionKey"\s*:\s*"((?:[^"\\]|\\.)*)"')
_BATCH_OPERATION = re.compile(rb"^(?:POST|PUT|MERGE|PATCH|DELETE|GET) (\S+) HTTP/1\.1", re.MULTILINE)
_RANGE = re.compile(r"bytes=(\d+)-(\d+)")


def charges(service: str, method: str, path: str, headers: Mapping[str, str], body: bytes) -> list[Charge]:
    """The partitions a request counts against, as Azure defines them (path-style URLs)."""
    raw_path, _, query = path.partition("?")
    parts = [unquote(p) for p in raw_path.split("/") if p]
    if not parts:
        return []
    account = parts[0]
    out = [Charge("account_requests", account)]
    rest = parts[1:]
    if service == "queue" and rest:
        out.append(Charge("queue_messages", f"{account}/{rest[0]}"))
    elif service == "blob" and len(rest) >= 2:
        blob = f"{account}/{rest[0]}/{'/'.join(rest[1:])}"
        out.append(Charge("blob_requests", blob))
        out.append(Charge("blob_bytes", blob, float(len(body) + _range_length(headers))))
    elif service == "table" and rest:
        out += _table_charges(account, rest[0], unquote(query), body)
    return out


def _range_length(headers: Mapping[str, str]) -> int:
    spec = headers.get("x-ms-range") or headers.get("Range") or ""
    match = _RANGE.search(spec)
    return int(match[2]) - int(match[1]) + 1 if match else 0


def _table_charges(account: str, resource: str, query: str, body: bytes) -> list[Charge]:
    if resource == "$batch":  # an entity group transaction: one partition, one entity per operation
        operations = _BATCH_OPERATION.findall(body)
        found = _BODY_PARTITION.search(body)
        table = unquote(operations[0].decode().rsplit("/", 1)[-1]).split("(", 1)[0] if operations else "?"
        key = found[1].decode() if found else _key_in(operations[0].decode() if operations else "")
        return [
            Charge("table_partition_entities", f"{account}/{table}/{key}", float(max(1, len(operations))))
        ]
    if resource.startswith("Tables"):
        return []  # creating, listing, deleting tables: the account only
    match = _TABLE_KEY.match(resource)
    if match:
        return [Charge("table_partition_entities", f"{account}/{match[1]}/{match[2]}")]
    table = resource.split("(", 1)[0]
    found_body = _BODY_PARTITION.search(body)
    if found_body:  # an insert: the entity says its partition
        return [Charge("table_partition_entities", f"{account}/{table}/{found_body[1].decode()}")]
    in_filter = _TABLE_FILTER.search(query)
    # A query without a partition key scans partitions: charged to the table as a whole.
    return [Charge("table_partition_entities", f"{account}/{table}/{in_filter[1] if in_filter else '*'}")]


def _key_in(url: str) -> str:
    match = _TABLE_KEY.match(unquote(url.rsplit("/", 1)[-1]))
    return match[2] if match else "?"


@dataclass
class Refusal:
    """How a request over a target is answered: the status, Azure's error code and message."""

    status: int
    code: str
    message: str
    charge: Charge


@dataclass
class _Counts:
    admitted: int = 0
    refused: int = 0


@dataclass
class Limiter:
    """Every partition's token bucket, made on first use, and what it admitted and refused."""

    targets: Targets
    clock: Callable[[], float] = time.monotonic
    _buckets: dict[tuple[str, str], TokenBucket] = field(default_factory=dict)
    _counts: dict[tuple[str, str], _Counts] = field(default_factory=dict)
    _refusals: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _bucket(self, charge: Charge) -> TokenBucket:
        key = (charge.target, charge.partition)
        bucket = self._buckets.get(key)
        if bucket is None:
            rate = self.targets.rate(charge.target)
            bucket = self._buckets[key] = TokenBucket(rate, rate * self.targets.burst_seconds, self.clock)
        return bucket

    def admit(self, request: list[Charge]) -> Refusal | None:
        """None if every partition the request touches has room (it is charged to all of them);
        otherwise the refusal, charged to nothing."""
        with self._lock:
            for charge in request:
                if not self._bucket(charge).has(charge.cost):
                    self._count(charge).refused += 1
                    self._refusals += 1
                    return self._refusal(charge)
            for charge in request:
                self._bucket(charge).take(charge.cost)
                self._count(charge).admitted += 1
            return None

    def _count(self, charge: Charge) -> _Counts:
        return self._counts.setdefault((charge.target, charge.partition), _Counts())

    def _refusal(self, charge: Charge) -> Refusal:
        every = self.targets.timeout_every
        if every and self._refusals % every == 0:
            return Refusal(
                500,
                "OperationTimedOut",
                "Operation could not be completed within the specified time.",
                charge,
            )
        if charge.target == "account_requests":
            return Refusal(503, "ServerBusy", "Operations per second is over the account limit.", charge)
        if charge.target == "blob_bytes":
            return Refusal(503, "ServerBusy", "Ingress is over the limit of this blob.", charge)
        return Refusal(503, "ServerBusy", "The server is busy.", charge)

    def stats(self) -> dict[str, dict[str, dict[str, int]]]:
        """``{target: {partition: {"admitted": n, "refused": n}}}``."""
        with self._lock:
            out: dict[str, dict[str, dict[str, int]]] = {}
            for (target, partition), counts in sorted(self._counts.items()):
                out.setdefault(target, {})[partition] = {
                    "admitted": counts.admitted,
                    "refused": counts.refused,
                }
            return out

    def rescale(self, factor: float) -> None:
        """Every target divided by ``factor`` from now on, in the buckets made so far too (their
        counts and unused tokens kept): a benchmark lifts the targets of the same front, for a
        phase in which nothing throttles, and puts them back."""
        if not factor > 0:
            raise ValueError(f"the throttling factor must be positive, got {factor}")
        with self._lock:
            self.targets = replace(self.targets, factor=factor)
            for (target, _), bucket in self._buckets.items():
                rate = self.targets.rate(target)
                bucket.rescale(rate, rate * self.targets.burst_seconds)

    def unused(self) -> dict[str, dict[str, float]]:
        """``{target: {partition: tokens}}``: what each partition's full bucket could not hold
        so far (TokenBucket.unused), the share of its target that no request asked for."""
        with self._lock:
            out: dict[str, dict[str, float]] = {}
            for (target, partition), bucket in sorted(self._buckets.items()):
                out.setdefault(target, {})[partition] = round(bucket.unused_until_now(), 3)
            return out


def error_response(service: str, refusal: Refusal) -> tuple[dict[str, str], bytes]:
    """The headers and body Azure sends with a refusal, in the service's own error format."""
    request_id = str(uuid.uuid4())
    now = time.strftime("%Y-%m-%dT%H:%M:%S.0000000Z", time.gmtime())
    text = f"{refusal.message}\nRequestId:{request_id}\nTime:{now}"
    headers = {
        "x-ms-error-code": refusal.code,
        "x-ms-request-id": request_id,
        "x-ms-version": "2025-01-05",
        "Date": formatdate(usegmt=True),
    }
    if service == "table":
        headers["Content-Type"] = "application/json;odata=minimalmetadata;streaming=true;charset=utf-8"
        body = json.dumps(
            {"odata.error": {"code": refusal.code, "message": {"lang": "en-US", "value": text}}}
        )
        return headers, body.encode()
    headers["Content-Type"] = "application/xml"
    body = (
        f'<?xml version="1.0" encoding="utf-8"?><Error><Code>{refusal.code}</Code>'
        f"<Message>{text}</Message></Error>"
    )
    return headers, body.encode()


_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "proxy-connection",
}
STATS_PATH = "/_throttle"
OPERATIONS_PATH = "/_throttle/operations"
UNUSED_PATH = "/_throttle/unused"
FACTOR_PATH = "/_throttle/factor"


def queue_operation(method: str, path: str) -> str | None:
    """Which queue message operation a request is (``send``, ``receive``, ``delete``, ``update``),
    for counting where a throttled queue's requests go; None for any other request."""
    parts = [p for p in path.partition("?")[0].split("/") if p]
    if len(parts) < 3 or parts[2] != "messages" or "peekonly=true" in path:
        return None
    if len(parts) == 3:
        return {"POST": "send", "GET": "receive"}.get(method)
    return {"DELETE": "delete", "PUT": "update"}.get(method)


class ThrottlingFront:
    """Three listeners on loopback, one per service, in front of one Azurite's three ports."""

    def __init__(
        self,
        upstream: Mapping[str, int],
        targets: Targets | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        ports: Mapping[str, int] | None = None,
    ) -> None:
        self.upstream = dict(upstream)
        self.limiter = Limiter(targets or Targets(), clock)
        self.operations: Counter[str] = Counter()
        """Queue message operations by kind and answer: ``send admitted``, ``receive empty``,
        ``delete refused``... (a receive that found nothing is ``receive empty``)."""
        self._operations_lock = threading.Lock()
        self._servers = {s: self._server(s, (ports or {}).get(s, 0)) for s in SERVICES}
        self.ports = {s: server.server_address[1] for s, server in self._servers.items()}
        self._threads = [
            threading.Thread(target=s.serve_forever, daemon=True) for s in self._servers.values()
        ]

    @property
    def targets(self) -> Targets:
        return self.limiter.targets

    def connection_string(self, account: str = "devstoreaccount1") -> str:
        """The connection string of ``account`` through the front (Azurite's well-known dev key)."""
        text = AZURITE_CONNECTION_STRING.format(**self.ports)
        return text.replace("devstoreaccount1", account)

    def start(self) -> ThrottlingFront:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        for server in self._servers.values():
            server.shutdown()
            server.server_close()

    def __enter__(self) -> ThrottlingFront:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _count(self, operation: str | None, answer: str) -> None:
        if operation is not None:
            with self._operations_lock:
                self.operations[f"{operation} {answer}"] += 1

    def _server(self, service: str, port: int) -> ThreadingHTTPServer:
        front = self
        upstream_port = self.upstream[service]
        local = threading.local()

        def connection() -> http.client.HTTPConnection:
            conn: http.client.HTTPConnection | None = getattr(local, "conn", None)
            if conn is None:
                conn = local.conn = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=120)
            return conn

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _handle(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path == STATS_PATH:
                    return self._send(
                        200, {"Content-Type": "application/json"}, json.dumps(front.limiter.stats()).encode()
                    )
                if self.path == UNUSED_PATH:
                    counted = json.dumps(front.limiter.unused())
                    return self._send(200, {"Content-Type": "application/json"}, counted.encode())
                if self.path == FACTOR_PATH and self.command == "PUT":
                    front.limiter.rescale(float(body))
                    return self._send(204, {}, b"")
                if self.path == OPERATIONS_PATH:
                    with front._operations_lock:
                        counted = json.dumps(dict(sorted(front.operations.items())))
                    return self._send(200, {"Content-Type": "application/json"}, counted.encode())
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                refusal = front.limiter.admit(charges(service, self.command, self.path, headers, body))
                operation = queue_operation(self.command, self.path) if service == "queue" else None
                if refusal is not None:
                    front._count(operation, "refused")
                    return self._send(refusal.status, *error_response(service, refusal))
                status, reason, response_headers, data = self._forward(headers, body)
                if operation == "receive" and b"<QueueMessage>" not in data:
                    operation = "receive empty"
                front._count(operation, "admitted")
                head = self.command == "HEAD"  # keeps the real Content-Length, sends no body
                self.send_response(status, reason)
                for k, v in response_headers:
                    if k.lower() not in _HOP_BY_HOP and (head or k.lower() != "content-length"):
                        self.send_header(k, v)
                if not head:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if not head:
                    self.wfile.write(data)

            def _forward(
                self, headers: dict[str, str], body: bytes
            ) -> tuple[int, str, list[tuple[str, str]], bytes]:
                for attempt in (1, 2):  # a kept-alive upstream connection Azurite closed: once more
                    conn = connection()
                    try:
                        conn.request(self.command, self.path, body=body or None, headers=headers)
                        resp = conn.getresponse()
                        return resp.status, resp.reason, resp.getheaders(), resp.read()
                    except (http.client.HTTPException, OSError):
                        conn.close()
                        local.conn = None
                        if attempt == 2:
                            raise
                raise AssertionError("unreachable")

            def _send(self, status: int, headers: Mapping[str, str], data: bytes) -> None:
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":  # an error to a HEAD has the headers only, as Azure's
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = do_MERGE = do_OPTIONS = _handle

        server = QuietServer(("127.0.0.1", port), Handler)
        server.daemon_threads = True
        return server


class QuietServer(ThreadingHTTPServer):
    """A front's server, silent when a client goes away mid-answer: a host that stops closes its
    connections, and its requests in flight then meet a broken pipe, which is normal."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):  # BrokenPipeError, ConnectionResetError
            return
        super().handle_error(request, client_address)


class ThrottleProcess:
    """The front as a process of its own (``python -m vault_local.throttle``), so that its CPU is
    not the caller's: what the benchmark runs. ``ports`` and ``connection_string`` once started."""

    def __init__(self, upstream: Mapping[str, int], env: Mapping[str, str] | None = None) -> None:
        self.upstream = dict(upstream)
        self.env = dict(env or {})
        self.ports: dict[str, int] = {}
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> ThrottleProcess:
        args = [f"--{s}={self.upstream[s]}" for s in SERVICES]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "vault_local.throttle", *args],
            env={**os.environ, **self.env},
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("READY "):
            self.stop()
            raise RuntimeError(f"the throttling front did not start: {line!r}")
        self.ports = json.loads(line[len("READY ") :])
        return self

    def connection_string(self, account: str = "devstoreaccount1") -> str:
        return AZURITE_CONNECTION_STRING.format(**self.ports).replace("devstoreaccount1", account)

    def stats(self) -> dict[str, dict[str, dict[str, int]]]:
        """What the front admitted and refused so far, per target and partition."""
        return dict(self._get(STATS_PATH))

    def operations(self) -> dict[str, int]:
        """Queue message operations so far by kind and answer (``ThrottlingFront.operations``)."""
        return dict(self._get(OPERATIONS_PATH))

    def unused(self) -> dict[str, dict[str, float]]:
        """Tokens each partition's full bucket could not hold so far (``Limiter.unused``)."""
        return dict(self._get(UNUSED_PATH))

    def set_factor(self, factor: float) -> None:
        """Every target divided by ``factor`` from now on (``Limiter.rescale``)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.ports["queue"], timeout=30)
        try:
            conn.request("PUT", FACTOR_PATH, body=str(factor).encode())
            if conn.getresponse().status != 204:
                raise RuntimeError(f"the throttling front did not take the factor {factor}")
        finally:
            conn.close()

    def _get(self, path: str) -> Any:
        conn = http.client.HTTPConnection("127.0.0.1", self.ports["queue"], timeout=30)
        try:
            conn.request("GET", path)
            return json.loads(conn.getresponse().read())
        finally:
            conn.close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m vault_local.throttle", description=__doc__.split("\n")[0]
    )
    for service in SERVICES:
        parser.add_argument(f"--{service}", type=int, required=True, help=f"Azurite's {service} port")
    parser.add_argument(
        "--factor", type=float, help="divide every target by this (default: MV_THROTTLE_FACTOR or 20)"
    )
    args = parser.parse_args(argv)
    overrides = {"factor": args.factor} if args.factor else {}
    targets = Targets.from_env(os.environ, **overrides)
    front = ThrottlingFront({s: getattr(args, s) for s in SERVICES}, targets).start()
    print("READY " + json.dumps(front.ports), flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    front.stop()
    sys.exit(0)


if __name__ == "__main__":
    main()
