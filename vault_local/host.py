"""A small local Functions host for ``function_app.py``, for machines without Core Tools.

It does what ``func start`` does for this app, no more:

* reads the functions, their triggers, routes, methods and auth levels **from the app object
  itself** (``FunctionApp.get_functions()``): there is no second route table;
* serves HTTP triggers under ``/api`` (``extensions.http.routePrefix``) with uvicorn;
  function-level routes need the key (``?code=`` or ``x-functions-key``, compared in constant
  time), as in Azure (this app's routes are all anonymous at this level: the app checks);
* runs queue triggers against the configured storage with the host's semantics, read from
  ``host.json``: ``batchSize``, ``newBatchThreshold``, ``visibilityTimeout`` after a failure,
  ``maxPollingInterval`` back-off when idle or refused, and ``maxDequeueCount`` → ``<queue>-poison``,
  with the Functions host's polling waits and storage retries (:mod:`vault_local.polling`).
  While an invocation runs its message stays invisible (renewed), like the real host;
* runs the functions themselves, as the Functions host does, in ``FUNCTIONS_WORKER_PROCESS_COUNT``
  language worker processes (:mod:`vault_local.worker`) with real ``azure.functions`` request and
  message objects, so the HTTP tier, the queue pollers and the function code do not share one
  GIL. A worker that dies fails its in-flight invocations (a request: 503 with Retry-After) and
  is replaced, at once by a warm spare (``LOCAL_SPARE_WORKERS``, :mod:`vault_local.workers`).
* drains on SIGTERM or SIGINT, as the Functions host does when Azure stops an instance: see
  :meth:`LocalHost._drain`.

Where Core Tools exist, ``func start`` runs the same app unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hmac
import json
import logging
import os
import secrets
import shutil
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import azure.functions as func
import uvicorn
from azure.storage.queue import QueueClient
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import Receive, Scope, Send

from vault_app.auth.early import MESSAGE, anonymous_write
from vault_app.guard import unauthorized
from vault_app.http import RETRY_AFTER_SECONDS
from vault_app.instance import INSTANCE_ID_SETTING, instance_id, lock_directory
from vault_core.azure import StorageAccount, create_if_missing
from vault_core.retry import Backoff
from vault_local.http_limits import (
    BODY_GRACE_SECONDS,
    HeadersTimeoutProtocol,
    HttpLimits,
    LimitExceeded,
    check_url,
    read_body,
)
from vault_local.polling import PollingDelay, host_retry_policy
from vault_local.routes import QueueFunction, discover
from vault_local.startup import load_local_settings
from vault_local.workers import (
    FunctionFailed,
    HttpResult,
    WorkerFailed,
    Workers,
    WorkerStartError,
    spare_workers,
    worker_settings,
)

log = logging.getLogger("vault_local.host")
ROOT = Path(__file__).resolve().parent.parent

DRAIN_GRACE = 12.0
"""Seconds a stopping host waits for the invocations in flight, unless ``--drain-grace`` says
otherwise. With the workers' exit (WORKER_EXIT_TIMEOUT) and uvicorn's own close
(HTTP_CLOSE_TIMEOUT) the host is gone within 20 s of the signal, before a platform that sent
SIGTERM would send SIGKILL."""
HTTP_CLOSE_TIMEOUT = 2
"""Seconds uvicorn may take to close its connections once the workers are gone."""
MAX_CONNECTIONS = 1000
RETRY_MARGIN = 0.05
"""Seconds after a failed invocation's message is due back that its queue is polled again."""
WORKER_RETRY_AFTER_SECONDS = 1
"""Retry-After of a request whose worker died: a spare has taken its place by then, or soon will."""
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
"""Requests a drain does not wait for: safe to retry, and a long poll may have a minute left."""


def _timespan(raw: str | None, default: float) -> float:
    """host.json TimeSpan ``hh:mm:ss`` → seconds."""
    if not raw:
        return default
    h, m, s = raw.split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


@dataclass(frozen=True)
class QueueOptions:
    batch_size: int = 16
    new_batch_threshold: int | None = None
    visibility_timeout: float = 0.0
    max_polling_interval: float = 60.0
    max_dequeue_count: int = 5
    message_encoding: str = "base64"

    @classmethod
    def from_host_json(cls, host: Mapping[str, Any]) -> QueueOptions:
        q = host.get("extensions", {}).get("queues", {})
        return cls(
            batch_size=int(q.get("batchSize", 16)),
            new_batch_threshold=q.get("newBatchThreshold"),
            visibility_timeout=_timespan(q.get("visibilityTimeout"), 0.0),
            max_polling_interval=_timespan(q.get("maxPollingInterval"), 60.0),
            max_dequeue_count=int(q.get("maxDequeueCount", 5)),
            message_encoding=str(q.get("messageEncoding", "base64")),
        )

    @property
    def threshold(self) -> int:
        # The host's default: fetch a new batch when half of batchSize is still running.
        return self.new_batch_threshold if self.new_batch_threshold is not None else self.batch_size // 2


def create_until_done(
    creates: tuple[Callable[[], object], ...], stopping: threading.Event, longest: float, name: str
) -> bool:
    """Create a trigger's queue and its poison queue if missing, trying again with a back-off
    while storage refuses: a throttled or unreachable account at start must not leave a queue
    without its poller for the host's life. False if the host stops first."""
    backoff = Backoff(0.1, longest)
    while not stopping.is_set():
        try:
            create_if_missing(*creates)
            return True
        except Exception as exc:  # as a failed poll: keep trying, like the host
            log.warning("creating %s failed: %s", name, exc)
            stopping.wait(backoff.next())
    return False


class LocalHost:
    def __init__(
        self,
        app: func.FunctionApp,
        host_json: Mapping[str, Any],
        env: Mapping[str, str],
        *,
        function_key: str,
        workers: Workers,
        port: int = 7071,
        inflight_visibility: float = 30.0,
        drain_grace: float = DRAIN_GRACE,
        body_grace: float = BODY_GRACE_SECONDS,
        wake_pollers_on_write: bool = False,
    ) -> None:
        self.http, self.queues = discover(app)
        self.workers = workers
        self.prefix = "/" + str(
            host_json.get("extensions", {}).get("http", {}).get("routePrefix", "api")
        ).strip("/")
        self.options = QueueOptions.from_host_json(host_json)
        self.limits = HttpLimits.from_host_json(host_json, body_grace)
        self._outstanding = 0
        self._running = asyncio.Semaphore(self.limits.max_concurrent or 1_000_000)
        self.env = env
        self.function_key = function_key
        self.port = port
        self.inflight_visibility = inflight_visibility
        self.drain_grace = drain_grace
        self.stopping = threading.Event()
        """Set when the queue pollers are to stop fetching messages."""
        self.draining = False
        """Set (on the event loop) by SIGTERM/SIGINT: new requests are answered 503."""
        self._writes: set[asyncio.Future[None]] = set()
        """One future per write request being handled, done when it has been answered."""
        self._pollers: list[threading.Thread] = []
        self.wake_pollers_on_write = wake_pollers_on_write
        self._idle_ends: list[threading.Event] = []
        """One per queue poller, set to end its idle wait early (see :meth:`_wake_pollers`)."""
        self._woken_at_a_start: set[threading.Event] = set()
        """The idle pollers a write request's start woke (``wake_pollers_on_write``), not its end."""
        self._retry_due: dict[str, float] = {}
        """Queue → when the message of its last failed invocation is visible again (monotonic)."""
        self._lifespan = Starlette()

    # -- HTTP ------------------------------------------------------------------------------
    async def asgi(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Every HTTP request goes to :meth:`_dispatch`, whatever its path: a Starlette route
        would answer a path with a line end in it 404 itself."""
        if scope["type"] != "http":
            await self._lifespan(scope, receive, send)
            return
        response = await self._dispatch(Request(scope, receive))
        await response(scope, receive, send)

    async def _dispatch(self, request: Request) -> Response:
        try:
            check_url(request)
            response = await self._admitted(request)
        except LimitExceeded as exc:
            response = JSONResponse({"error": exc.code, "message": exc.message}, exc.status)
        # On the host's own answers (404, 405, 401, 503) too: no browser guesses a type.
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        return response

    async def _admitted(self, request: Request) -> Response:
        """The host's queue: at most maxOutstandingRequests held, maxConcurrentRequests running."""
        if self.limits.max_outstanding is not None and self._outstanding >= self.limits.max_outstanding:
            return JSONResponse(
                {"error": "too_busy", "message": "the host holds as many requests as it may; retry shortly"},
                429,
                headers={"Retry-After": "1"},
            )
        self._outstanding += 1
        try:
            async with self._running:
                return await self._tracked(request)
        finally:
            self._outstanding -= 1

    async def _tracked(self, request: Request) -> Response:
        if self.draining:
            return _shutting_down()
        if request.method in READ_METHODS:
            return await self._route(request)
        # A write is tracked from its first byte, so the drain waits for it: a 202 must mean
        # that the batch is staged, never that a stopping host dropped it.
        answered = asyncio.get_running_loop().create_future()
        self._writes.add(answered)
        if self.wake_pollers_on_write:
            self._wake_pollers(at_start=True)
        try:
            return await self._route(request)
        finally:
            self._writes.discard(answered)
            answered.set_result(None)
            if self.wake_pollers_on_write:
                self._wake_pollers()

    def _wake_pollers(self, *, at_start: bool = False) -> None:
        """End the idle pollers' waits, and their back-off. With ``wake_pollers_on_write`` (test
        hosts, not the Functions host's behaviour: the app stages through the SDK, not an
        output binding) a write request, which may stage a message, wakes them at its start and
        at its end, when any message it staged is there: idle queues are then polled as seldom
        as ``maxPollingInterval`` says without a POST's ``?wait=`` waiting that long. Woken by a
        request's start, a poller first waits the shortest interval: the request's message is
        there no sooner than its staging's storage call, so a poll at once would find nothing."""
        for idle_end in self._idle_ends:
            if at_start:
                self._woken_at_a_start.add(idle_end)
            else:
                self._woken_at_a_start.discard(idle_end)
            idle_end.set()

    def _woken_when_due(self) -> bool:
        """Whether an idle poller may wait ``maxPollingInterval`` at once, not back off to it:
        with ``wake_pollers_on_write`` and no write request in flight, the next message comes
        with a write request, whose start and end wake the pollers (a test host's back-off after
        each wake was some five empty polls in 3 s, for nothing). While a write is in flight the
        pollers back off as usual: a POST's ``?wait=`` ends only once its batch is taken."""
        return self.wake_pollers_on_write and not self._writes

    def _stop_polling(self) -> None:
        self.stopping.set()
        self._wake_pollers()

    async def _route(self, request: Request) -> Response:
        path = request.scope["path"]  # as sent; request.url.path drops tabs and line ends
        if not path.startswith(self.prefix + "/"):
            return JSONResponse({"error": "not_found", "message": f"no function at {path}"}, 404)
        sub = path[len(self.prefix) + 1 :]
        allowed: set[str] = set()
        for h in self.http:
            match = h.pattern.match(sub)
            if not match:
                continue
            if request.method not in h.methods:
                allowed |= h.methods
                continue
            if h.auth_level != "anonymous" and not self._authorised(request):
                return JSONResponse(
                    {
                        "error": "unauthorized",
                        "message": "this route needs a function key: ?code=KEY or x-functions-key",
                    },
                    401,
                )
            if anonymous_write(request.method, request.headers, request.query_params):
                # The app's own answer, before a byte of the body is read (vault_app.auth.early).
                refused = unauthorized(MESSAGE)
                return JSONResponse({"error": refused.code, "message": refused.message}, 401, refused.headers)
            meta = {
                "function": h.name,
                "method": request.method,
                "url": str(request.url),
                "headers": dict(request.headers),
                "params": dict(request.query_params),
                "route_params": match.groupdict(default=""),
            }
            body = await read_body(
                request, read_only=request.method in READ_METHODS, grace=self.limits.body_grace
            )
            try:
                # Picking a worker may wait for a replacement and a send of up to 16 MiB may
                # block: both off the event loop. The reply is awaited without holding a thread,
                # so long polls tie up only the worker's threads, as in the Python worker.
                sent = await run_in_threadpool(self.workers.invoke_http, meta, body)
                resp: HttpResult = await asyncio.wrap_future(sent)
            except WorkerFailed as exc:
                if self.draining:  # a read cut short, or an invocation past the grace period
                    return _shutting_down()
                return _worker_failed(exc)
            except FunctionFailed:  # what Starlette answered when the function raised in-process
                return PlainTextResponse("Internal Server Error", 500)
            media = resp.mimetype or "text/plain"
            return Response(
                resp.body,
                status_code=resp.status,
                headers=resp.headers,
                media_type=f"{media}; charset={resp.charset}" if media.startswith("text/") else media,
            )
        if allowed:
            return JSONResponse(
                {
                    "error": "method_not_allowed",
                    "message": f"{request.method} is not allowed here; use {', '.join(sorted(allowed))}",
                },
                405,
                headers={"Allow": ", ".join(sorted(allowed))},
            )
        return JSONResponse({"error": "not_found", "message": f"no function at {path}"}, 404)

    def _authorised(self, request: Request) -> bool:
        given = request.query_params.get("code") or request.headers.get("x-functions-key")
        return given is not None and key_matches(given, self.function_key)

    # -- queues ----------------------------------------------------------------------------
    def _queue_client(self, q: QueueFunction, name: str) -> QueueClient:
        """The trigger's own client, retrying a refused call as the Functions host's does
        (vault_local.polling), not as the app's clients do."""
        account = StorageAccount.from_settings(self.env, q.connection)
        return account.queue_service(host_retry_policy()).get_queue_client(name)

    def _poll(self, q: QueueFunction, index: int) -> None:
        client = self._queue_client(q, q.queue_name)
        poison = self._queue_client(q, f"{q.queue_name}-poison")
        opts = self.options
        creates = (client.create_queue, poison.create_queue)
        if not create_until_done(creates, self.stopping, opts.max_polling_interval, q.queue_name):
            return
        running = 0
        lock = threading.Lock()
        done = threading.Condition(lock)
        delay = PollingDelay(opts.max_polling_interval)
        idle_end = threading.Event()
        self._idle_ends.append(idle_end)
        with ThreadPoolExecutor(max_workers=opts.batch_size, thread_name_prefix=q.name) as pool:
            # Leaving this loop leaves the `with`, which waits for the invocations in flight,
            # each settled as usual: that is how a drain waits for the queue functions.
            while not self.stopping.is_set():
                with done:
                    while running > opts.threshold and not self.stopping.is_set():
                        done.wait(0.5)
                    want = opts.batch_size - running
                if self.stopping.is_set():
                    break
                try:
                    got = list(
                        client.receive_messages(
                            max_messages=want, visibility_timeout=int(self.inflight_visibility)
                        )
                    )
                except Exception as exc:  # down or refusing: back off as from an empty poll, like the host
                    log.warning("polling %s failed: %s", q.queue_name, exc)
                    got = []
                if not got:
                    # Idle back-off, but no later than a failed invocation's message is due back
                    # (a dead worker's, say): its retry is what the queue is waiting for.
                    idle = delay.longest if self._woken_when_due() else delay.next()
                    wait = idle_wait(idle, self._retry_due.get(q.queue_name), time.monotonic())
                    if wait < idle:  # waiting for that retry now: done with it
                        self._retry_due.pop(q.queue_name, None)
                    if idle_end.wait(wait):  # a write request, or stopping
                        idle_end.clear()
                        delay.found()
                        if idle_end in self._woken_at_a_start:  # its message is not there yet
                            self._woken_at_a_start.discard(idle_end)
                            if idle_end.wait(delay.shortest):  # its end, another, or stopping
                                idle_end.clear()
                    continue
                delay.found()
                for m in got:
                    with lock:
                        running += 1

                    def run(m: Any = m) -> None:
                        nonlocal running
                        try:
                            self._invoke(q, index, client, poison, m)
                        finally:
                            with done:
                                running -= 1
                                done.notify_all()

                    pool.submit(run)

    def _invoke(self, q: QueueFunction, index: int, client: QueueClient, poison: QueueClient, m: Any) -> None:
        receipt = [m.pop_receipt]
        if m.dequeue_count > self.options.max_dequeue_count:
            self._to_poison(client, poison, m, receipt[0], "dequeue count over maxDequeueCount")
            return
        stop_renew = threading.Event()

        def renew() -> None:  # keep the message invisible while the function runs
            while not stop_renew.wait(self.inflight_visibility / 3):
                try:
                    r = client.update_message(
                        m.id, receipt[0], visibility_timeout=int(self.inflight_visibility)
                    )
                    receipt[0] = r.pop_receipt
                except Exception:
                    return

        renewer = threading.Thread(target=renew, daemon=True)
        renewer.start()
        content = m.content
        if self.options.message_encoding == "base64":
            import base64

            content = base64.b64decode(content).decode()
        meta = {
            "function": q.name,
            "id": m.id,
            "dequeue_count": m.dequeue_count,
            "pop_receipt": receipt[0],
            "insertion_time": m.inserted_on,
            "expiration_time": m.expires_on,
            "time_next_visible": m.next_visible_on,
        }
        try:
            self.workers.invoke_queue(index, meta, content.encode()).result()
            ok = True
        except FunctionFailed:  # the worker logged it, with the traceback
            ok = False
        except WorkerFailed as exc:
            log.error("function %s failed (dequeue count %d): %s", q.name, m.dequeue_count, exc)
            ok = False
        finally:
            stop_renew.set()
            renewer.join()
        try:
            if ok:
                client.delete_message(m.id, receipt[0])
            elif m.dequeue_count >= self.options.max_dequeue_count:
                self._to_poison(client, poison, m, receipt[0], "failed maxDequeueCount times")
            else:
                client.update_message(
                    m.id, receipt[0], visibility_timeout=int(self.options.visibility_timeout)
                )
                self._retry_due[q.queue_name] = (
                    time.monotonic() + RETRY_MARGIN + self.options.visibility_timeout
                )
        except Exception as exc:
            log.warning("could not settle message %s: %s", m.id, exc)

    def _to_poison(self, client: QueueClient, poison: QueueClient, m: Any, receipt: str, why: str) -> None:
        log.error("moving message %s to %s-poison: %s", m.id, client.queue_name, why)
        poison.send_message(m.content)
        client.delete_message(m.id, receipt)

    # -- run -------------------------------------------------------------------------------
    def serve(self, ready: Callable[[], None] | None = None) -> None:
        """Serve until SIGTERM or SIGINT, then drain and return. Call from the main thread."""
        listed = frozenset([h.name for h in self.http] + [q.name for q in self.queues])
        if self.workers.functions != listed:
            self.workers.close()
            found = sorted(self.workers.functions)
            raise WorkerStartError(f"the language workers found functions {found}, the host {sorted(listed)}")
        for index, q in enumerate(self.queues):
            poller = threading.Thread(target=self._poll, args=(q, index), name=f"poll-{q.name}", daemon=True)
            poller.start()
            self._pollers.append(poller)
        try:
            asyncio.run(self._serve(ready))
        finally:
            self._stop_polling()
            self.workers.close()

    async def _serve(self, ready: Callable[[], None] | None) -> None:
        config = uvicorn.Config(
            self.asgi,
            interface="asgi3",  # a bound method: uvicorn would take it for ASGI 2
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            access_log=False,
            timeout_keep_alive=30,
            http=HeadersTimeoutProtocol,
            # No WebSocket protocol (a Functions HTTP trigger has none): an upgrade request is
            # answered as HTTP, and uvicorn does not import the websockets library at each
            # start (with the template's frozen preloads, a forked test host to READY 0.28 -> 0.16 CPU-s).
            ws="none",
            # A cap on connections (and requests in flight) before uvicorn answers 503 itself:
            # well above what maxOutstandingRequests lets through, so that answers first.
            limit_concurrency=MAX_CONNECTIONS,
            timeout_graceful_shutdown=HTTP_CLOSE_TIMEOUT,
        )
        server = _Server(config)
        signalled = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, signalled.set)
        serving = asyncio.create_task(server.serve())
        started = asyncio.create_task(_when_started(server, ready))
        stop = asyncio.create_task(signalled.wait())
        await asyncio.wait({serving, stop}, return_when=asyncio.FIRST_COMPLETED)
        if not serving.done():  # a signal, not a failed start: drain, then stop serving
            log.info("shutting down: draining the invocations in flight (up to %g s)", self.drain_grace)
            await self._drain()
            server.should_exit = True
        started.cancel()
        stop.cancel()
        await serving
        log.info("stopped")

    async def _drain(self) -> None:
        """Stop as the Functions host stops an instance: stop the listeners, let the
        invocations in flight finish within a grace period, then stop the language workers.

        HTTP stays up meanwhile and answers new requests 503 (``Retry-After``), so a client
        learns to retry elsewhere instead of being refused; reads in flight are not waited for.
        Queue messages in flight are settled as usual (deleted, or returned to their queue).
        Then each worker closes its open stream writers (see ``worker._terminate``).
        """
        self.draining = True
        self._stop_polling()
        deadline = time.monotonic() + self.drain_grace
        if self._writes:
            await asyncio.wait(set(self._writes), timeout=self.drain_grace)
        await asyncio.to_thread(self._join_pollers, deadline)
        await asyncio.to_thread(self.workers.close)

    def _join_pollers(self, deadline: float) -> None:
        for poller in self._pollers:
            poller.join(max(0.0, deadline - time.monotonic()))


class _Server(uvicorn.Server):
    """uvicorn without its own SIGTERM/SIGINT handling: it would stop serving at once, and
    re-raise the signal on its way out (so the host would not exit 0). The host drains first,
    then sets ``should_exit``."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def _when_started(server: uvicorn.Server, ready: Callable[[], None] | None) -> None:
    while not server.started:  # uvicorn offers no event for it
        await asyncio.sleep(0.05)
    if ready:
        ready()


def idle_wait(backoff: float, retry_due: float | None, now: float) -> float:
    """How long a poller that found its queue empty waits: its back-off, but no later than the
    message of a failed invocation is visible again (``retry_due``, None if none is pending)."""
    return backoff if retry_due is None else max(0.0, min(backoff, retry_due - now))


def key_matches(given: str, key: str) -> bool:
    """In constant time, as the Functions host compares keys: an early exit at the first wrong
    character would tell an attacker, by the time taken, how much of a guess was right."""
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), key.encode("utf-8", "surrogatepass"))


def _shutting_down() -> Response:
    return JSONResponse(
        {"error": "unavailable", "message": "the host is shutting down; retry shortly"},
        503,
        # The app's own 503 advice; Connection: close sends a keep-alive client to a fresh
        # connection, which behind a load balancer is another instance.
        headers={"Retry-After": str(RETRY_AFTER_SECONDS), "Connection": "close"},
    )


def _worker_failed(exc: WorkerFailed) -> Response:
    """The worker running the request died (or none came up in time): retriable, so a 503. A
    POST may have been staged before the death: its retry with the same Idempotency-Key finds it."""
    return JSONResponse(
        {"error": "worker_failed", "message": f"{exc}; retry shortly"},
        503,
        headers={"Retry-After": str(WORKER_RETRY_AFTER_SECONDS)},
    )


def run(
    port: int,
    settings_file: Path | None,
    inflight_visibility: float,
    fault: str | None,
    host_json_file: Path | None = None,
    drain_grace: float = DRAIN_GRACE,
    body_grace: float = BODY_GRACE_SECONDS,
    instance_per_process: bool = False,
    round_robin_queues: bool = False,
    wake_pollers_on_write: bool = False,
    fresh_workers: bool = False,
) -> None:
    """Entry point of ``python -m vault_local host``: environment first, then import the app.

    ``instance_per_process``: the workers get no instance id, so each takes its leases under an
    id of its own and a replacement waits them out (the baseline of ``./dev bench recovery``).
    ``round_robin_queues``: queue invocations go to the live workers in turn, as on Azure.
    ``wake_pollers_on_write``: see :meth:`LocalHost._wake_pollers` (tests).
    ``fresh_workers``: no worker template, so a later worker starts as a fresh interpreter, as on
    Azure (vault_local.template)."""
    if settings_file:
        for k, v in load_local_settings(settings_file).items():
            os.environ.setdefault(k, v)
    # An instance id, as Azure gives each instance one, inherited by the workers: a replacement
    # takes over the leases of a worker that died at once (vault_app.instance). One per run:
    # several hosts on one machine are several instances.
    if instance_per_process:
        os.environ.pop(INSTANCE_ID_SETTING, None)
    made_instance = not instance_per_process and instance_id(os.environ) is None
    if made_instance:
        os.environ[INSTANCE_ID_SETTING] = uuid.uuid4().hex
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("azure").setLevel(logging.WARNING)
    try:
        processes, threads = worker_settings(os.environ)
        spares = spare_workers(os.environ, processes)
    except ValueError as exc:
        sys.exit(f"vault_local host: {exc}")
    import function_app  # imported after the environment is set, as the host does

    host_json = json.loads((host_json_file or ROOT / "host.json").read_text())
    # What the imports made (~80,000 objects) lives as long as the process: moved out of the
    # collector's sight (after a collection, so that no garbage is kept), so that the host's and
    # its forked workers' full collections walk only what they make later, and the interpreter's
    # exit does not walk them either (about 0.3 CPU-s of the host's stop).
    gc.collect()
    gc.freeze()
    # Function-level routes only (this app has none: it checks credentials itself). Unset: a
    # key made for this run, so no well-known key ever opens a route.
    key = os.environ.get("LOCAL_FUNCTION_KEY") or secrets.token_urlsafe(24)
    # The workers inherit this environment (local settings included) and import the same
    # function_app; the --fault seam goes to them, since the writer runs there. Started first,
    # while this process has only imported the app: they are forked from it (vault_local.workers).
    workers = Workers(
        processes,
        threads,
        app_dir=Path(function_app.__file__).resolve().parent,
        fault=fault,
        round_robin_queues=round_robin_queues,
        spares=spares,
        template=not fresh_workers,
    )
    try:
        workers.start()
        function_app.runtime.services.ensure()
        host = LocalHost(
            function_app.app,
            host_json,
            os.environ,
            function_key=key,
            workers=workers,
            port=port,
            inflight_visibility=inflight_visibility,
            drain_grace=drain_grace,
            body_grace=body_grace,
            wake_pollers_on_write=wake_pollers_on_write,
        )
        names = ", ".join(h.name for h in host.http)
        names += "; queues: " + ", ".join(q.queue_name for q in host.queues)
        names += f"; {processes} worker process(es) x {threads} threads, {spares} warm spare(s)"
        # The whole line in one write (end=""): the workers share this stdout, and print's
        # separate write of "\n" let a worker's line land in the middle of this one.
        ready = f"READY http://127.0.0.1:{port}{host.prefix} ({names})\n"
        host.serve(ready=lambda: print(ready, end="", flush=True))
    except WorkerStartError as exc:
        sys.exit(f"vault_local host: {exc}")
    finally:
        workers.close()  # serve() has closed them already, unless the start failed
        if made_instance:  # its lock files: no process of this instance is left to use them
            shutil.rmtree(lock_directory(os.environ[INSTANCE_ID_SETTING]), ignore_errors=True)
