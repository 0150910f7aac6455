"""Language worker processes of the local host, and the host's side of their channel.

The Functions host serves HTTP and polls queues in its own process and hands every invocation
to one or more Python *language worker* processes (``FUNCTIONS_WORKER_PROCESS_COUNT``), which
run the functions in a thread pool (``PYTHON_THREADPOOL_THREAD_COUNT``). The local host does
the same, with a socketpair per worker instead of gRPC:

* ``python -m vault_local.worker`` (started by :class:`Workers`, not by hand) imports
  ``function_app``, reads its functions from the app object, and runs each invocation it is sent
  in its thread pool, with real ``azure.functions.HttpRequest`` / ``QueueMessage`` objects.
  Its log records travel back to the host, which writes them with its own handler, so the lines
  of several processes never interleave on the shared stdout.
* :class:`Workers` (in the host process) starts the workers, sends invocations (HTTP: to the
  least busy worker; queue function ``i``: always to worker ``i % count``), fails the in-flight
  invocations of a worker that dies, and starts a replacement, as the Functions host does.

Only plain data crosses: per frame a fixed header, a small pickled dict and the body as raw
bytes (sent from, and received into, one ``bytes`` object: HTTP bodies reach 16 MiB).

Stopping: the host sends TERMINATE (the gRPC protocol's ``WorkerTerminate``) once it has drained
its invocations; the worker closes the app's open stream writers and exits. A worker also exits
that way when the host's end of its socket closes, so no worker outlives its host.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import azure.functions as func
from azure.functions.queue import QueueMessage

from vault_app import telemetry
from vault_app.open_writers import open_writers

log = logging.getLogger("vault_local.worker")

MAX_WORKER_PROCESSES = 10
"""The Functions host's limit for ``FUNCTIONS_WORKER_PROCESS_COUNT``."""
START_TIMEOUT = 60.0
"""Seconds a new worker may take to import the app and report ready."""
WAIT_FOR_WORKER = 60.0
"""Seconds an invocation waits for a worker while its replacement starts."""
CLOSE_WRITERS_TIMEOUT = 4.0
"""Seconds a stopping worker gives the app's open writers to close (catalog row, lease release):
bounded, so a storage outage cannot hold the host's shutdown; a lease left behind expires."""
WORKER_EXIT_TIMEOUT = CLOSE_WRITERS_TIMEOUT + 1.0
"""Seconds the host waits for a worker told to terminate before it kills it."""

# Frame kinds. Host → worker: HTTP, QUEUE, TERMINATE. Worker → host: READY, RESULT, LOG.
READY, HTTP, QUEUE, RESULT, LOG, TERMINATE = 1, 2, 3, 4, 5, 6
_HEADER = struct.Struct("!BQII")  # kind, invocation id, meta length, body length
_INLINE = 256 * 1024
"""Bodies below this go out in one send with their header; larger ones are sent as they are."""


# -- settings --------------------------------------------------------------------------------


def _positive(env: Mapping[str, str], name: str, default: int, top: int | None) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    bound = f"from 1 to {top}" if top else "of at least 1"
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be a whole number {bound}, not {raw!r}") from None
    if value < 1 or (top is not None and value > top):
        raise ValueError(f"{name} must be a whole number {bound}, not {raw!r}")
    return value


def worker_settings(env: Mapping[str, str]) -> tuple[int, int]:
    """``(FUNCTIONS_WORKER_PROCESS_COUNT, PYTHON_THREADPOOL_THREAD_COUNT)``, with the defaults
    of the Functions host (1 process) and of the Python worker (``ThreadPoolExecutor``'s own)."""
    processes = _positive(env, "FUNCTIONS_WORKER_PROCESS_COUNT", 1, MAX_WORKER_PROCESSES)
    threads = _positive(env, "PYTHON_THREADPOOL_THREAD_COUNT", min(32, (os.cpu_count() or 1) + 4), None)
    return processes, threads


# -- dispatch --------------------------------------------------------------------------------


def least_busy(loads: Sequence[int | None], turn: int) -> int:
    """The index of the live worker (load not None) with the fewest invocations in flight;
    ties go to the first one from ``turn`` on, so an idle host still spreads requests."""
    best: int | None = None
    best_load = 0
    for k in range(len(loads)):
        i = (turn + k) % len(loads)
        load = loads[i]
        if load is not None and (best is None or load < best_load):
            best, best_load = i, load
    if best is None:
        raise LookupError("no live worker")
    return best


def queue_worker(function_index: int, workers: int) -> int:
    """The worker that runs every invocation of the ``function_index``-th queue function.

    Pinned, unlike HTTP: the writer keeps a stream's blob lease and its open writer in the
    process between invocations (``vault_app.writer_fn.OpenWriters``), and a stream lives on one
    queue, so consecutive invocations of a queue landing on different workers would contend for
    the queue's ownership and the stream leases. That stays correct (the loser passes its batch
    on, docs/ARCHITECTURE.md §3.7) but is slow.
    The real host promises no such affinity; the app does not depend on it.
    """
    return function_index % workers


# -- the wire --------------------------------------------------------------------------------


class Channel:
    """Frames over one end of a socketpair: sent from any thread, received by one.

    The meta dict is pickled: both ends are this module, over a private socketpair.
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._send_lock = threading.Lock()

    def send(self, kind: int, ident: int, meta: Mapping[str, Any], body: bytes = b"") -> None:
        packed = pickle.dumps(dict(meta), protocol=pickle.HIGHEST_PROTOCOL)
        head = _HEADER.pack(kind, ident, len(packed), len(body))
        with self._send_lock:
            if len(body) < _INLINE:
                self.sock.sendall(head + packed + body)
            else:
                self.sock.sendall(head + packed)
                self.sock.sendall(body)  # straight from the caller's buffer, not copied

    def recv(self) -> tuple[int, int, dict[str, Any], bytes]:
        """The next frame; EOFError once the other end has closed."""
        kind, ident, meta_len, body_len = _HEADER.unpack(self._exact(_HEADER.size))
        meta: dict[str, Any] = pickle.loads(self._exact(meta_len))
        return kind, ident, meta, self._exact(body_len)

    def _exact(self, n: int) -> bytes:
        if n == 0:
            return b""
        # MSG_WAITALL fills one bytes object of the full size in one call (one copy, from the
        # kernel); the loop only runs if a signal cuts it short.
        data = self.sock.recv(n, socket.MSG_WAITALL)
        if len(data) == n:
            return data
        parts = [data]
        got = len(data)
        while data and got < n:
            data = self.sock.recv(n - got, socket.MSG_WAITALL)
            parts.append(data)
            got += len(data)
        if got < n:
            raise EOFError("the other end closed the channel")
        return b"".join(parts)

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in recv on it
        except OSError:
            pass
        self.sock.close()


# -- the host's side -------------------------------------------------------------------------


class WorkerFailed(Exception):
    """The worker running (or about to run) an invocation died or could not be reached."""


class FunctionFailed(Exception):
    """The function raised; the worker has logged the traceback."""


class WorkerStartError(RuntimeError):
    """A worker exited or stayed silent before it reported ready."""


@dataclass(frozen=True)
class HttpResult:
    status: int
    headers: dict[str, str]
    mimetype: str | None
    charset: str | None
    body: bytes


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "still running, unreachable"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class _Worker:
    """One worker process and the host's end of its socket."""

    def __init__(self, slot: int, proc: subprocess.Popen[bytes], channel: Channel) -> None:
        self.slot = slot
        self.proc = proc
        self.channel = channel
        self.alive = True
        self._inflight: dict[int, Future[Any]] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    @property
    def load(self) -> int:
        return len(self._inflight)

    def submit(self, kind: int, meta: Mapping[str, Any], body: bytes) -> Future[Any]:
        fut: Future[Any] = Future()
        # Running from the start: a caller giving up (an asyncio wrapper cancelled when its
        # request is dropped) cannot cancel it, so setting its result later never raises.
        fut.set_running_or_notify_cancel()
        with self._lock:
            if not self.alive:
                fut.set_exception(WorkerFailed(f"language worker {self.slot} is not running"))
                return fut
            ident = next(self._ids)
            self._inflight[ident] = fut
        try:
            self.channel.send(kind, ident, meta, body)
        except OSError as exc:  # it died under us: the reader thread notices too
            self._settle(ident, exc=WorkerFailed(f"language worker {self.slot} is unreachable: {exc}"))
        return fut

    def _settle(self, ident: int, result: Any = None, exc: BaseException | None = None) -> None:
        with self._lock:
            fut = self._inflight.pop(ident, None)
        if fut is None:
            return  # already failed with the whole worker
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(result)

    def resolve(self, ident: int, meta: dict[str, Any], body: bytes) -> None:
        if not meta.get("ok"):
            self._settle(ident, exc=FunctionFailed(str(meta.get("error"))))
        elif "status" in meta:
            result = HttpResult(meta["status"], meta["headers"], meta["mimetype"], meta["charset"], body)
            self._settle(ident, result)
        else:
            self._settle(ident, None)

    def fail_all(self, why: str) -> int:
        with self._lock:
            self.alive = False
            futures = list(self._inflight.values())
            self._inflight.clear()
        for fut in futures:
            fut.set_exception(WorkerFailed(why))
        return len(futures)


class Workers:
    """The host's language workers: started before serving, replaced when one dies."""

    def __init__(self, count: int, threads: int, *, app_dir: Path, fault: str | None = None) -> None:
        if not 1 <= count <= MAX_WORKER_PROCESSES:
            raise ValueError(f"worker count must be 1..{MAX_WORKER_PROCESSES}, not {count}")
        self.count = count
        self.threads = threads
        self.app_dir = app_dir
        self.fault = fault
        self.functions: frozenset[str] = frozenset()
        self._slots: list[_Worker] = []
        self._changed = threading.Condition()
        self._turn = itertools.count()
        self._stopping = threading.Event()

    def start(self, expected: frozenset[str]) -> None:
        """Start every worker side by side and wait until each has imported the app."""
        self.functions = expected
        launched = [self._launch(slot) for slot in range(self.count)]
        try:
            self._slots = [self._handshake(*one) for one in launched]
        except BaseException:
            for _, proc, channel in launched:
                channel.close()
                proc.kill()
            raise
        for w in self._slots:
            self._watch(w)

    def close(self) -> None:
        """Stop every worker: each closes the app's open writers and exits; one that is still
        running after WORKER_EXIT_TIMEOUT is killed. Invocations still in flight fail.

        The host calls this after draining, so normally nothing is in flight. Safe to repeat.
        """
        self._stopping.set()  # first: the readers must not replace the workers that now exit
        with self._changed:
            self._changed.notify_all()
        for w in self._slots:
            try:
                w.channel.send(TERMINATE, 0, {})
            except OSError:
                pass  # already gone
        deadline = time.monotonic() + WORKER_EXIT_TIMEOUT
        for w in self._slots:
            try:
                w.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                w.proc.kill()
                w.proc.wait()
            w.channel.close()

    # -- invoking --------------------------------------------------------------------------
    def invoke_http(self, meta: Mapping[str, Any], body: bytes) -> Future[HttpResult]:
        return self._pick(None).submit(HTTP, meta, body)

    def invoke_queue(self, function_index: int, meta: Mapping[str, Any], body: bytes) -> Future[None]:
        return self._pick(queue_worker(function_index, self.count)).submit(QUEUE, meta, body)

    def _pick(self, slot: int | None) -> _Worker:
        """A live worker (any, or the given slot's), waiting while a replacement starts."""
        deadline = time.monotonic() + WAIT_FOR_WORKER
        with self._changed:
            while True:
                if slot is not None and self._slots[slot].alive:
                    return self._slots[slot]
                if slot is None:
                    loads = [w.load if w.alive else None for w in self._slots]
                    if any(load is not None for load in loads):
                        return self._slots[least_busy(loads, next(self._turn) % self.count)]
                left = deadline - time.monotonic()
                if left <= 0 or self._stopping.is_set():
                    raise WorkerFailed("no language worker is running")
                self._changed.wait(left)

    # -- lifecycle -------------------------------------------------------------------------
    def _launch(self, slot: int) -> tuple[int, subprocess.Popen[bytes], Channel]:
        ours, theirs = socket.socketpair()
        cmd = [
            sys.executable,
            "-m",
            "vault_local.worker",
            "--fd",
            str(theirs.fileno()),
            "--slot",
            str(slot),
            "--threads",
            str(self.threads),
            "--app-dir",
            str(self.app_dir),
        ]
        if self.fault:
            cmd += ["--fault", self.fault]
        # Same process group, stdout and environment as the host: killing the host's group
        # kills its workers, and their output lands where the host's does. subprocess starts
        # them with fork+exec in C, safe in a process with threads; only their socket is passed.
        proc = subprocess.Popen(cmd, pass_fds=(theirs.fileno(),), cwd=self.app_dir, stdin=subprocess.DEVNULL)
        theirs.close()
        return slot, proc, Channel(ours)

    def _handshake(self, slot: int, proc: subprocess.Popen[bytes], channel: Channel) -> _Worker:
        channel.sock.settimeout(START_TIMEOUT)
        try:
            kind, _, meta, _ = channel.recv()
        except (EOFError, OSError) as exc:
            channel.close()
            try:
                code = proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = None
            why = "it did not report ready in time" if isinstance(exc, TimeoutError) else _exit_reason(code)
            raise WorkerStartError(f"language worker {slot} (pid {proc.pid}) failed to start: {why}") from exc
        channel.sock.settimeout(None)
        if kind != READY or frozenset(meta["functions"]) != self.functions:
            channel.close()
            proc.kill()
            raise WorkerStartError(
                f"language worker {slot} found functions {sorted(meta.get('functions', []))}, "
                f"the host {sorted(self.functions)}"
            )
        return _Worker(slot, proc, channel)

    def _watch(self, w: _Worker) -> None:
        threading.Thread(target=self._read, args=(w,), name=f"worker-{w.slot}", daemon=True).start()

    def _read(self, w: _Worker) -> None:
        """Results and log records from one worker, until its socket closes."""
        try:
            while True:
                kind, ident, meta, body = w.channel.recv()
                if kind == RESULT:
                    w.resolve(ident, meta, body)
                elif kind == LOG:
                    _emit(meta)
        except (EOFError, OSError):
            pass
        except Exception:  # a frame we cannot read: the channel is out of step, so end the worker
            log.exception("language worker %d sent a frame the host cannot read", w.slot)
        w.channel.close()  # the worker sees EOF and exits
        try:
            code: int | None = w.proc.wait(5)
        except subprocess.TimeoutExpired:  # alive but its socket is broken: useless, so end it
            w.proc.kill()
            code = None
        why = f"language worker {w.slot} (pid {w.proc.pid}) died ({_exit_reason(code)})"
        failed = w.fail_all(why + " while running this invocation")
        if self._stopping.is_set():
            return
        log.error("%s; %d invocation(s) in flight failed; starting a replacement", why, failed)
        self._replace(w.slot)

    def _replace(self, slot: int) -> None:
        delay = 0.5
        while not self._stopping.is_set():
            try:
                w = self._handshake(*self._launch(slot))
            except WorkerStartError as exc:
                log.error("%s; retrying in %.1f s", exc, delay)
                self._stopping.wait(delay)
                delay = min(delay * 2, 30.0)
                continue
            with self._changed:
                self._slots[slot] = w
                self._changed.notify_all()
            self._watch(w)
            log.info("language worker %d replaced (pid %d)", slot, w.proc.pid)
            if self._stopping.is_set():
                w.channel.close()
            return


def _emit(meta: dict[str, Any]) -> None:
    """Write a worker's log record with the host's handlers, keeping its time and origin."""
    record = logging.makeLogRecord(meta)
    logging.getLogger(record.name).handle(record)


# -- the worker's side -----------------------------------------------------------------------


class _ToHost(logging.Handler):
    """Sends each record to the host as plain data; the host formats and writes it."""

    def __init__(self, channel: Channel) -> None:
        super().__init__()
        self.channel = channel
        self._plain = logging.Formatter()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            exc_text = record.exc_text
            if record.exc_info and not exc_text:
                exc_text = self._plain.formatException(record.exc_info)
            meta = {
                "name": record.name,
                "levelno": record.levelno,
                "levelname": record.levelname,
                "msg": record.getMessage(),
                "created": record.created,
                "msecs": record.msecs,
                "exc_text": exc_text,
                "stack_info": record.stack_info,
                "process": record.process,
                "processName": f"worker-{os.getpid()}",
                "threadName": record.threadName,
                "pathname": record.pathname,
                "filename": record.filename,
                "module": record.module,
                "lineno": record.lineno,
                "funcName": record.funcName,
            }
            self.channel.send(LOG, 0, meta)
        except Exception:
            self.handleError(record)


def install_fault(point: str) -> None:
    """Test seam: stop dead at a named point in the writer so a test can kill -9 the process."""
    from vault_app import writer_fn

    def hook(where: str) -> None:
        if where == point:
            print(f"FAULT {where}", flush=True)
            time.sleep(3600)

    writer_fn.fault_hook = hook


class _Runner:
    """Runs the invocations the host sends, each in the pool, each answered with one RESULT."""

    def __init__(self, channel: Channel, functions: Mapping[str, tuple[str, Callable[..., Any]]]) -> None:
        self.channel = channel
        self.functions = functions

    def run(self, kind: int, ident: int, meta: dict[str, Any], body: bytes) -> None:
        name = str(meta["function"])
        out: dict[str, Any] = {"ok": True}
        out_body = b""
        try:
            arg, fn = self.functions[name]
            if kind == HTTP:
                req = func.HttpRequest(
                    method=meta["method"],
                    url=meta["url"],
                    headers=meta["headers"],
                    params=meta["params"],
                    route_params=meta["route_params"],
                    body=body,
                )
                resp: func.HttpResponse = fn(**{arg: req})
                out.update(
                    status=int(resp.status_code),
                    headers=dict(resp.headers),
                    mimetype=resp.mimetype,
                    charset=resp.charset,
                )
                out_body = resp.get_body()
            else:
                msg = QueueMessage(
                    id=meta["id"],
                    body=body,
                    dequeue_count=meta["dequeue_count"],
                    pop_receipt=meta["pop_receipt"],
                    insertion_time=meta["insertion_time"],
                    expiration_time=meta["expiration_time"],
                    time_next_visible=meta["time_next_visible"],
                )
                fn(**{arg: msg})
        except Exception as exc:
            if kind == QUEUE:
                log.exception("function %s failed (dequeue count %d)", name, meta["dequeue_count"])
            else:
                log.exception("function %s failed", name)
            out = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            out_body = b""
        try:
            self.channel.send(RESULT, ident, out, out_body)
        except OSError:
            pass  # the host is gone; the main loop sees EOF and exits


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m vault_local.worker")
    parser.add_argument("--fd", type=int, required=True, help="this worker's end of the host's socketpair")
    parser.add_argument("--slot", type=int, required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--app-dir", type=Path, required=True, help="where function_app.py is")
    parser.add_argument("--fault", help="test seam of the host's --fault")
    args = parser.parse_args(argv)
    # The host decides when a worker stops (by closing its socket): a Ctrl-C or SIGTERM sent to
    # the whole process group must not kill workers under a host that is still shutting down.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    channel = Channel(socket.socket(fileno=args.fd))
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    root.addHandler(_ToHost(channel))
    logging.getLogger("azure").setLevel(logging.WARNING)
    if args.fault:
        install_fault(args.fault)
    sys.path.insert(0, str(args.app_dir))
    import function_app  # after the environment (inherited from the host) is in place
    from vault_local.host import discover

    http, queues = discover(function_app.app)
    functions = {f.name: (f.arg_name, f.fn) for f in http}
    functions.update({f.name: (f.arg_name, f.fn) for f in queues})
    pool = ThreadPoolExecutor(max_workers=args.threads, thread_name_prefix=f"worker-{args.slot}")
    runner = _Runner(channel, functions)
    channel.send(READY, 0, {"pid": os.getpid(), "functions": sorted(functions)})
    while True:
        try:
            kind, ident, meta, body = channel.recv()
        except (EOFError, OSError):
            kind = TERMINATE  # the host is gone or closed us: stop as if told to
        if kind in (HTTP, QUEUE):
            pool.submit(runner.run, kind, ident, meta, body)
        elif kind == TERMINATE:
            _terminate(args.slot)


def _terminate(slot: int) -> NoReturn:
    """Close the app's open stream writers, then end the process.

    The host has drained (or given up waiting), so whatever still runs here is abandoned, as
    the host's own death would abandon it: hence ``os._exit``, which does not wait for the pool's
    threads. It also skips ``atexit``, where ``open_writers`` registers the same close (the
    backstop of a normal interpreter exit), so the writers are closed here, explicitly: the
    catalog row catches up with the commit record and the stream leases are released now
    rather than expiring 15 s later. Bounded, so a storage outage cannot hold the exit.
    """
    deadline = time.monotonic() + CLOSE_WRITERS_TIMEOUT
    # Side by side with the writers, within the same bound: spans and metrics not yet exported.
    flusher = threading.Thread(
        target=telemetry.flush, args=(CLOSE_WRITERS_TIMEOUT,), name="mv-flush-telemetry", daemon=True
    )
    flusher.start()
    closer = threading.Thread(target=open_writers.close_all, name="mv-close-writers", daemon=True)
    closer.start()
    closer.join(CLOSE_WRITERS_TIMEOUT)
    flusher.join(max(0.0, deadline - time.monotonic()))
    if closer.is_alive():
        log.warning("language worker %d: open writers not closed within %.0f s", slot, CLOSE_WRITERS_TIMEOUT)
    os._exit(0)


if __name__ == "__main__":
    main()
