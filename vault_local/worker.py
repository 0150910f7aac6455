"""A language worker process of the local host: ``python -m vault_local.worker``.

Started by :class:`vault_local.workers.Workers` (forked from the host, or as a fresh
interpreter), not by hand. It imports ``function_app``, reads
its functions from the app object, and runs each invocation the host sends with real
``azure.functions.HttpRequest`` / ``QueueMessage`` objects, as the Python language worker does:
an ``async def`` function runs on the worker's event loop (so a request that waits costs a
coroutine, not a thread), any other function in the thread pool (``PYTHON_THREADPOOL_THREAD_COUNT``).
Its log records travel back to the host, which writes them with its own handler, so the lines
of several processes never interleave on the shared stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NoReturn

import azure.functions as func
from azure.functions.queue import QueueMessage

from vault_app import telemetry
from vault_app.runtime import Runtime
from vault_local.channel import CLOSE_WRITERS_TIMEOUT, HTTP, LOG, QUEUE, READY, RESULT, TERMINATE, Channel

log = logging.getLogger("vault_local.worker")


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


def install_fault(runtime: Runtime, point: str) -> None:
    """Test seam: stop dead at a named point in the writer so a test can kill -9 the process."""

    def hook(where: str) -> None:
        if where == point:
            print(f"FAULT {where}\n", end="", flush=True)  # one write: the host's lines share stdout
            time.sleep(3600)

    runtime.fault_hook = hook


class _Runner:
    """Runs the invocations the host sends, each answered with one RESULT: coroutine functions
    on the event loop (its own thread here, as the receive loop owns the main thread), the
    others in the thread pool."""

    def __init__(
        self,
        channel: Channel,
        functions: Mapping[str, tuple[str, Callable[..., Any]]],
        threads: int,
        slot: int,
    ) -> None:
        self.channel = channel
        self.functions = functions
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=f"worker-{slot}")
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name=f"worker-{slot}-loop", daemon=True).start()

    def submit(self, kind: int, ident: int, meta: dict[str, Any], body: bytes) -> None:
        name = str(meta["function"])
        fn = self.functions[name][1] if name in self.functions else None
        if fn is not None and inspect.iscoroutinefunction(fn):
            asyncio.run_coroutine_threadsafe(self._run_async(kind, ident, meta, body), self.loop)
        else:
            self.pool.submit(self._run_sync, kind, ident, meta, body)

    def _run_sync(self, kind: int, ident: int, meta: dict[str, Any], body: bytes) -> None:
        try:
            arg, fn = self.functions[str(meta["function"])]
            result = fn(**{arg: _input(kind, meta, body)})
            self._answer(ident, *_output(kind, result))
        except Exception as exc:
            self._answer(ident, _failure(kind, meta, exc), b"")

    async def _run_async(self, kind: int, ident: int, meta: dict[str, Any], body: bytes) -> None:
        try:
            arg, fn = self.functions[str(meta["function"])]
            result = await fn(**{arg: _input(kind, meta, body)})
            self._answer(ident, *_output(kind, result))
        except Exception as exc:
            self._answer(ident, _failure(kind, meta, exc), b"")

    def _answer(self, ident: int, out: dict[str, Any], out_body: bytes) -> None:
        try:
            self.channel.send(RESULT, ident, out, out_body)
        except OSError:
            pass  # the host is gone; the main loop sees EOF and exits


def _input(kind: int, meta: Mapping[str, Any], body: bytes) -> func.HttpRequest | QueueMessage:
    """The binding's object, as the Python worker builds it from the host's invocation."""
    if kind == HTTP:
        return func.HttpRequest(
            method=meta["method"],
            url=meta["url"],
            headers=meta["headers"],
            params=meta["params"],
            route_params=meta["route_params"],
            body=body,
        )
    return QueueMessage(
        id=meta["id"],
        body=body,
        dequeue_count=meta["dequeue_count"],
        pop_receipt=meta["pop_receipt"],
        insertion_time=meta["insertion_time"],
        expiration_time=meta["expiration_time"],
        time_next_visible=meta["time_next_visible"],
    )


def _output(kind: int, result: Any) -> tuple[dict[str, Any], bytes]:
    if kind != HTTP:
        return {"ok": True}, b""
    resp: func.HttpResponse = result
    out = {
        "ok": True,
        "status": int(resp.status_code),
        "headers": dict(resp.headers),
        "mimetype": resp.mimetype,
        "charset": resp.charset,
    }
    return out, resp.get_body()


def _failure(kind: int, meta: Mapping[str, Any], exc: Exception) -> dict[str, Any]:
    name = meta.get("function")
    if kind == QUEUE:
        log.exception("function %s failed (dequeue count %d)", name, meta["dequeue_count"])
    else:
        log.exception("function %s failed", name)
    return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


def warm_up(runtime: Runtime) -> None:
    """Before READY, what a worker's first invocations would otherwise pay for: the app's storage
    clients (made, no request sent) and with them the queue SDK, which ``vault_core.azure``
    imports on first use. A spare that takes a dead worker's place then starts on its takeover
    at once. Best effort: a setting that cannot make a client fails the first invocation, as
    before, with its own message."""
    services = runtime.services
    try:
        for made in ("vault", "claims", "batch_table", "queues", "steering"):
            getattr(services, made)
    except Exception:
        log.warning("language worker warm-up: the storage clients could not be made", exc_info=True)


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
    for inherited in list(root.handlers):  # a worker forked from the host has the host's
        root.removeHandler(inherited)
    root.addHandler(_ToHost(channel))
    logging.getLogger("azure").setLevel(logging.WARNING)
    sys.path.insert(0, str(args.app_dir))
    import function_app  # after the environment (inherited from the host) is in place

    runtime: Runtime = function_app.runtime
    if args.fault:
        install_fault(runtime, args.fault)
    warm_up(runtime)
    from vault_local.routes import discover

    http, queues = discover(function_app.app)
    functions = {f.name: (f.arg_name, f.fn) for f in http}
    functions.update({f.name: (f.arg_name, f.fn) for f in queues})
    runner = _Runner(channel, functions, args.threads, args.slot)
    channel.send(READY, 0, {"pid": os.getpid(), "functions": sorted(functions)})
    while True:
        try:
            kind, ident, meta, body = channel.recv()
        except (EOFError, OSError):
            kind = TERMINATE  # the host is gone or closed us: stop as if told to
        if kind in (HTTP, QUEUE):
            runner.submit(kind, ident, meta, body)
        elif kind == TERMINATE:
            _terminate(runtime, args.slot)


def _terminate(runtime: Runtime, slot: int) -> NoReturn:
    """Close the app's runtime (its open stream writers), then end the process.

    The host has drained (or given up waiting), so whatever still runs here is abandoned, as
    the host's own death would abandon it: hence ``os._exit``, which does not wait for the pool's
    threads. It also skips ``atexit``, where ``function_app`` registers the same close (the
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
    closer = threading.Thread(target=runtime.close, name="mv-close-writers", daemon=True)
    closer.start()
    closer.join(CLOSE_WRITERS_TIMEOUT)
    flusher.join(max(0.0, deadline - time.monotonic()))
    if closer.is_alive():
        log.warning("language worker %d: open writers not closed within %.0f s", slot, CLOSE_WRITERS_TIMEOUT)
    os._exit(0)


if __name__ == "__main__":
    main()
