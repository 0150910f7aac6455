"""The host's side of its language worker processes: start, dispatch, replace.

The Functions host serves HTTP and polls queues in its own process and hands every invocation
to one or more Python *language worker* processes (``FUNCTIONS_WORKER_PROCESS_COUNT``).
:class:`Workers` starts them (``python -m vault_local.worker``, :mod:`vault_local.worker`),
sends invocations (HTTP: to the least busy worker; a queue function: to one live worker, see
:class:`QueueAffinity`), fails the in-flight invocations of a worker that dies, and starts a
replacement in the background, as the Functions host does. Meanwhile invocations go to the live
workers: with two or more, a survivor takes a dead worker's queues over at once.

**The warm spare** (``LOCAL_SPARE_WORKERS``, by default 1 with one worker): one more worker, started and done
importing the app, which gets no invocation and owns nothing until a worker dies. Then it takes
the dead worker's place at once, and a new spare starts in the background (forked by the
template at once; a fresh interpreter SPARE_START_DELAY later). Starting a worker
takes seconds (a fresh interpreter importing the SDKs), and with one worker nothing else could
take the dead one's queues over meanwhile. An invocation that could not be sent to a worker (it
died before the host noticed) never reached it, so it goes to the next live worker instead.

Starting: the first workers are forked from the host, which has just imported the app and done
nothing else (no thread, no connection, no function listed), so each begins where a fresh
interpreter would be after ``import function_app``, without paying for that import again. So is
the worker *template* (:mod:`vault_local.template`), which forks every later worker, a new spare
or a replacement, the same way: by then the host runs threads, and a fork of the host would copy
whatever locks they hold. Without the template (off Linux, or ``--fresh-workers``), a later
worker is a fresh interpreter (``python -m vault_local.worker``), seconds of CPU.

Stopping: the host sends TERMINATE (the gRPC protocol's ``WorkerTerminate``) once it has drained
its invocations; the worker closes the app's open stream writers and exits. A worker also exits
that way when the host's end of its socket closes, so no worker outlives its host.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, Protocol

from vault_core.positive import positive
from vault_core.retry import Backoff
from vault_local.channel import CLOSE_WRITERS_TIMEOUT, HTTP, LOG, QUEUE, READY, RESULT, TERMINATE, Channel
from vault_local.template import WorkerTemplate

log = logging.getLogger("vault_local.workers")

MAX_WORKER_PROCESSES = 10
"""The Functions host's limit for ``FUNCTIONS_WORKER_PROCESS_COUNT``."""
START_TIMEOUT = 60.0
"""Seconds a new worker may take to import the app and report ready."""
WAIT_FOR_WORKER = 60.0
"""Seconds a queue invocation waits for a worker while its replacement starts."""
WAIT_FOR_WORKER_HTTP = 5.0
"""Seconds an HTTP request waits for a worker while its replacement starts (no spare was ready),
before the host answers 503 with Retry-After: well within a client's timeout."""
SPARE_WORKERS_SETTING = "LOCAL_SPARE_WORKERS"
SPARE_START_DELAY = 3.0
"""Seconds after a spare took a dead worker's place before the next spare starts, if it is a
fresh interpreter (no template): its start is seconds of CPU, which the takeover needs first."""
MAX_SPARE_WORKERS = 2
WORKER_EXIT_TIMEOUT = CLOSE_WRITERS_TIMEOUT + 1.0
"""Seconds the host waits for a worker told to terminate before it kills it."""


# -- settings --------------------------------------------------------------------------------


def worker_settings(env: Mapping[str, str]) -> tuple[int, int]:
    """``(FUNCTIONS_WORKER_PROCESS_COUNT, PYTHON_THREADPOOL_THREAD_COUNT)``, with the defaults
    of the Functions host (1 process) and of the Python worker (``ThreadPoolExecutor``'s own)."""
    processes = positive(env, "FUNCTIONS_WORKER_PROCESS_COUNT", 1, top=MAX_WORKER_PROCESSES)
    threads = positive(env, "PYTHON_THREADPOOL_THREAD_COUNT", min(32, (os.cpu_count() or 1) + 4))
    return processes, threads


def spare_workers(env: Mapping[str, str], workers: int) -> int:
    """``LOCAL_SPARE_WORKERS``: warm spare workers the local host keeps (0 to 2). By default one
    for a lone worker, none for more: with two or more a warm survivor takes a dead worker's
    queues over at once, and a spare's start (seconds of CPU) only competes with it."""
    raw = (env.get(SPARE_WORKERS_SETTING) or "").strip()
    if not raw:
        return 1 if workers == 1 else 0
    count = int(raw) if raw.isdigit() else -1
    if not 0 <= count <= MAX_SPARE_WORKERS:
        raise ValueError(
            f"{SPARE_WORKERS_SETTING} must be a whole number from 0 to {MAX_SPARE_WORKERS}, not {raw!r}"
        )
    return count


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
    """The worker that runs the ``function_index``-th queue function at the start."""
    return function_index % workers


class QueueAffinity:
    """Which worker runs each queue function's invocations: one live worker per function.

    The Functions host sends each invocation to the next of its *live* worker channels in turn
    (round robin, whatever the function) and restarts a dead one in the background; a queue's
    invocations may land on any worker. Here a queue function keeps one worker instead, so the
    writer's open stream writers and queue ownership, kept in the process between invocations
    (``vault_app.open_writers``), stay useful; the app does not depend on it (a process of the
    instance that does not own the queue passes its batch on, docs/ARCHITECTURE.md §3.7).
    What is faithful is what a death does: the functions of a dead worker move at once to the
    least busy live one, which takes the queue over (the instance's lease id, its lock gone with
    the dead process), instead of waiting for the replacement to start. They stay there: moving
    back to the replacement would find the survivor owning the queue. A warm spare that takes a
    dead worker's slot at once (:meth:`vacate`) does not take its queue functions while another
    worker lives: that one is warm (its storage clients made, its code run), the spare is not.

    ``round_robin``: every invocation goes to the next live worker instead, as the Functions host
    sends them (``./dev bench recovery`` measures what that costs the writer).
    """

    def __init__(self, workers: int, *, round_robin: bool = False) -> None:
        self.workers = workers
        self.round_robin = round_robin
        self._moved: dict[int, int] = {}
        self._turn = itertools.count()
        self._vacated: int | None = None
        """The slot of the worker that died last: its queue functions go to another live worker."""

    def vacate(self, slot: int) -> None:
        """The worker in ``slot`` died (a spare may take its slot before the next invocation)."""
        self._vacated = slot

    def worker(self, function_index: int, loads: Sequence[int | None]) -> int | None:
        """The worker for this function now (``loads``: in flight per worker, None if dead);
        None while no worker is alive."""
        if self.round_robin:
            live = [i for i, load in enumerate(loads) if load is not None]
            return live[next(self._turn) % len(live)] if live else None
        slot = self._moved.get(function_index, queue_worker(function_index, self.workers))
        if loads[slot] is not None and slot != self._vacated:
            return slot
        others = [None if i == self._vacated else load for i, load in enumerate(loads)]
        try:
            moved = least_busy(others, function_index)
        except LookupError:  # no other live worker: the spare in the dead one's slot, if any
            if loads[slot] is not None:
                return slot
            try:
                moved = least_busy(loads, function_index)
            except LookupError:
                return None
        self._moved[function_index] = moved
        return moved


class WorkerFailed(Exception):
    """The worker running (or about to run) an invocation died or could not be reached."""


class WorkerUnreachable(WorkerFailed):
    """The invocation could not be sent: its worker never saw it, so another may run it."""


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


class Process(Protocol):
    """What the host needs of a worker process: ``subprocess.Popen`` or :class:`ForkedProcess`."""

    @property
    def pid(self) -> int: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def kill(self) -> None: ...


class ForkedProcess:
    """A child this process forked: ``Popen``'s ``pid``, ``poll``, ``wait`` and ``kill``, with the
    same exit codes (negative: the signal that ended it)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._lock = threading.Lock()  # one waitpid at a time: the reader and close() both wait

    def poll(self) -> int | None:
        with self._lock:
            if self.returncode is None:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
            return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"language worker (pid {self.pid})", timeout or 0)
            time.sleep(0.02)
        return code

    def kill(self) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


def may_fork() -> bool:
    """Whether a worker may be forked from this process: on Linux, while it runs one thread."""
    return sys.platform == "linux" and threading.active_count() == 1


def _forked_worker(argv: list[str], keep: int, app_dir: Path) -> NoReturn:
    """The child's side of a fork: become ``python -m vault_local.worker ARGV``, never return."""
    import resource  # Unix only; this runs on Linux alone (may_fork)

    code = 1
    try:
        # Only its own end of its socket: another worker's host end, inherited, would keep that
        # worker's channel open after the host closed it (and the worker would outlive it).
        top = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        os.closerange(3, keep)
        os.closerange(keep + 1, top if top != resource.RLIM_INFINITY else 65536)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.chdir(app_dir)
        from vault_local import worker

        worker.main(argv)  # ends the process itself (os._exit)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)  # never back into the host's code, nor its atexit handlers


class WorkerProcess:
    """One worker process and the host's end of its socket."""

    def __init__(self, slot: int, proc: Process, channel: Channel) -> None:
        self.slot = slot
        self.proc = proc
        self.channel = channel
        self.alive = True
        self.functions: frozenset[str] = frozenset()
        """The functions it reported when it started."""
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
                raise WorkerUnreachable(f"language worker {self.slot} is not running")
            ident = next(self._ids)
            self._inflight[ident] = fut
        try:
            self.channel.send(kind, ident, meta, body)
        except OSError as exc:  # it died under us: the reader thread notices too
            with self._lock:
                self.alive = False  # not to be picked again meanwhile
                self._inflight.pop(ident, None)
            raise WorkerUnreachable(f"language worker {self.slot} is unreachable: {exc}") from exc
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

    def __init__(
        self,
        count: int,
        threads: int,
        *,
        app_dir: Path,
        fault: str | None = None,
        round_robin_queues: bool = False,
        spares: int = 0,
        template: bool = True,
    ) -> None:
        if not 1 <= count <= MAX_WORKER_PROCESSES:
            raise ValueError(f"worker count must be 1..{MAX_WORKER_PROCESSES}, not {count}")
        self.count = count
        self.threads = threads
        self.app_dir = app_dir
        self.fault = fault
        self.spares = spares
        self.functions: frozenset[str] = frozenset()
        """The functions every worker found in the app (set by :meth:`start`)."""
        self._slots: list[WorkerProcess] = []
        self._spares: list[WorkerProcess] = []
        """Warm spares, started and ready, that run nothing until one takes a dead worker's slot."""
        self._spare_numbers = itertools.count(count)
        """A spare's ``--slot`` (its threads' names): numbers after the workers' own."""
        self._queues = QueueAffinity(count, round_robin=round_robin_queues)
        self._changed = threading.Condition()
        self._turn = itertools.count()
        self._stopping = threading.Event()
        self.template = template
        """Whether later workers are forked by a template (vault_local.template), where forking works."""
        self._template: WorkerTemplate | None = None
        """Forks the later workers; None: they start as fresh interpreters."""

    def start(self) -> None:
        """Start every worker side by side and wait until each has imported the app and
        reported the same functions (:attr:`functions`).

        Call it before this process lists the app's functions or does any I/O: the first
        workers are forked (see the module's docstring)."""
        launched = [self._launch(slot, fault=self.fault) for slot in range(self.count)]
        launched += [self._launch(next(self._spare_numbers)) for _ in range(self.spares)]
        if self.template and may_fork():
            self._template = WorkerTemplate.fork(self.app_dir, _forked_worker)
        if self._template is not None:
            log.info("language worker template ready (pid %d)", self._template.pid)
        try:
            first = self._handshake(*launched[0], expected=None)
            self.functions = first.functions
            rest = [self._handshake(*one, expected=self.functions) for one in launched[1:]]
        except BaseException:
            for _, proc, channel in launched:
                channel.close()
                proc.kill()
            if self._template is not None:
                self._template.close()
            raise
        self._slots = [first, *rest[: self.count - 1]]
        self._spares = rest[self.count - 1 :]
        for w in [*self._slots, *self._spares]:
            self._watch(w)

    def close(self) -> None:
        """Stop every worker: each closes the app's open writers and exits; one that is still
        running after WORKER_EXIT_TIMEOUT is killed. Invocations still in flight fail.

        The host calls this after draining, so normally nothing is in flight. Safe to repeat.
        """
        self._stopping.set()  # first: the readers must not replace the workers that now exit
        with self._changed:
            self._changed.notify_all()
        with self._changed:
            everyone = [*self._slots, *self._spares]
        for w in everyone:
            try:
                w.channel.send(TERMINATE, 0, {})
            except OSError:
                pass  # already gone
        deadline = time.monotonic() + WORKER_EXIT_TIMEOUT
        for w in everyone:
            try:
                w.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                w.proc.kill()
                w.proc.wait()
            w.channel.close()
        if self._template is not None:
            self._template.close()

    # -- invoking --------------------------------------------------------------------------
    def invoke_http(self, meta: Mapping[str, Any], body: bytes) -> Future[HttpResult]:
        return self._send(None, HTTP, meta, body, WAIT_FOR_WORKER_HTTP)

    def invoke_queue(self, function_index: int, meta: Mapping[str, Any], body: bytes) -> Future[None]:
        return self._send(function_index, QUEUE, meta, body, WAIT_FOR_WORKER)

    def _send(
        self, queue_function: int | None, kind: int, meta: Mapping[str, Any], body: bytes, wait: float
    ) -> Future[Any]:
        """Send to a live worker; one found dead on the way never saw it, so try the next one."""
        deadline = time.monotonic() + wait
        while True:
            try:
                return self._pick(queue_function, deadline).submit(kind, meta, body)
            except WorkerUnreachable as exc:
                log.warning("%s; sending the invocation to another", exc)

    def _pick(self, queue_function: int | None, deadline: float) -> WorkerProcess:
        """A live worker (for HTTP: the least busy; for a queue function: its own, see
        :class:`QueueAffinity`), waiting until ``deadline`` only while no worker is alive."""
        with self._changed:
            while True:
                loads = [w.load if w.alive else None for w in self._slots]
                if queue_function is not None:
                    slot = self._queues.worker(queue_function, loads)
                    if slot is not None:
                        return self._slots[slot]
                elif any(load is not None for load in loads):
                    return self._slots[least_busy(loads, next(self._turn) % self.count)]
                left = deadline - time.monotonic()
                if left <= 0 or self._stopping.is_set():
                    raise WorkerFailed("no language worker is running")
                self._changed.wait(left)

    # -- lifecycle -------------------------------------------------------------------------
    def _launch(self, slot: int, *, fault: str | None = None) -> tuple[int, Process, Channel]:
        ours, theirs = socket.socketpair()
        argv = ["--fd", str(theirs.fileno()), "--slot", str(slot), "--threads", str(self.threads)]
        argv += ["--app-dir", str(self.app_dir)]
        # The --fault seam stops the first workers only: a spare or a replacement runs clean, so
        # a test can see it take over from the worker it killed.
        if fault:
            argv += ["--fault", fault]
        # Same process group, stdout and environment as the host: killing the host's group
        # kills its workers, and their output lands where the host's does.
        proc: Process
        if may_fork():
            sys.stdout.flush()  # what is buffered would be written twice
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _forked_worker(argv, theirs.fileno(), self.app_dir)
            proc = ForkedProcess(pid)
        elif (forked := self._from_template(argv, theirs)) is not None:
            proc = ForkedProcess(forked)
        else:
            if self.template and sys.platform == "linux":  # a template that failed may have
                ours.close()  # passed this socket on to a worker of its own: a new pair
                theirs.close()
                ours, theirs = socket.socketpair()
                argv[argv.index("--fd") + 1] = str(theirs.fileno())
            # subprocess starts it with fork+exec in C, safe in a process with threads; only
            # its socket is passed.
            proc = subprocess.Popen(
                [sys.executable, "-m", "vault_local.worker", *argv],
                pass_fds=(theirs.fileno(),),
                cwd=self.app_dir,
                stdin=subprocess.DEVNULL,
            )
        theirs.close()
        return slot, proc, Channel(ours)

    def _from_template(self, argv: list[str], theirs: socket.socket) -> int | None:
        """A worker forked by the template (its pid), or None if there is no template, or it
        failed (then it is closed, and later workers start as fresh interpreters)."""
        template = self._template
        if template is None:
            return None
        try:
            return template.spawn(argv, theirs.fileno())
        except OSError as exc:
            log.error("%s; later workers start as fresh interpreters", exc)
            with self._changed:
                if self._template is template:
                    self._template = None
            template.close()
            return None

    def _handshake(
        self, slot: int, proc: Process, channel: Channel, *, expected: frozenset[str] | None
    ) -> WorkerProcess:
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
        found = frozenset(meta.get("functions", []))
        if kind != READY or (expected is not None and found != expected):
            channel.close()
            proc.kill()
            raise WorkerStartError(
                f"language worker {slot} found functions {sorted(found)}, the others {sorted(expected or [])}"
            )
        w = WorkerProcess(slot, proc, channel)
        w.functions = found
        return w

    def _watch(self, w: WorkerProcess) -> None:
        threading.Thread(target=self._read, args=(w,), name=f"worker-{w.slot}", daemon=True).start()

    def _read(self, w: WorkerProcess) -> None:
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
        with self._changed:
            spare = w in self._spares
            if spare:
                self._spares.remove(w)
        if spare:
            if not self._stopping.is_set():
                log.error("the warm spare language worker (pid %d) died (%s)", w.proc.pid, _exit_reason(code))
                self._refill()
            return
        why = f"language worker {w.slot} (pid {w.proc.pid}) died ({_exit_reason(code)})"
        failed = w.fail_all(why + " while running this invocation")
        if self._stopping.is_set():
            return
        with self._changed:
            self._queues.vacate(w.slot)
        if self._promote(w.slot):
            log.error("%s; %d invocation(s) in flight failed; the warm spare took its place", why, failed)
            # A fork of the template costs hundredths of a CPU second: at once, so that a second
            # death finds a spare too. A fresh interpreter's seconds of CPU (importing the SDKs)
            # wait: the takeover needs them now, on as few as one or two cores.
            if self._template is None:
                self._stopping.wait(SPARE_START_DELAY)
            self._refill()
        else:
            log.error("%s; %d invocation(s) in flight failed; starting a replacement", why, failed)
            self._replace(w.slot)

    def _promote(self, slot: int) -> bool:
        """Put a warm spare in ``slot``, at once; False if none is ready."""
        with self._changed:
            if not self._spares:
                return False
            spare = self._spares.pop(0)
            spare.slot = slot
            self._slots[slot] = spare
            self._changed.notify_all()
        log.info("language worker %d replaced (pid %d) by the warm spare", slot, spare.proc.pid)
        return True

    def _refill(self) -> None:
        """Start fresh spares until there are :attr:`spares` again (in the calling thread)."""
        while not self._stopping.is_set():
            with self._changed:
                if len(self._spares) >= self.spares:
                    return
            w = self._start(next(self._spare_numbers))
            if w is None:
                return
            with self._changed:
                wanted = not self._stopping.is_set() and len(self._spares) < self.spares
                if wanted:
                    self._spares.append(w)
            if not wanted:  # closed meanwhile, or another death's refill came first
                w.channel.close()  # it sees end of file and exits
                continue
            self._watch(w)
            log.info("warm spare language worker ready (pid %d)", w.proc.pid)

    def _replace(self, slot: int) -> None:
        w = self._start(slot)
        if w is None:
            return
        with self._changed:
            self._slots[slot] = w
            self._changed.notify_all()
        self._watch(w)
        log.info("language worker %d replaced (pid %d)", slot, w.proc.pid)
        if self._stopping.is_set():
            w.channel.close()

    def _start(self, number: int) -> WorkerProcess | None:
        """A started worker that has said hello, failed starts retried with back-off; None once
        the host stops."""
        backoff = Backoff(0.5, 30.0)
        while not self._stopping.is_set():
            try:
                return self._handshake(*self._launch(number), expected=self.functions)
            except WorkerStartError as exc:
                delay = backoff.next()
                log.error("%s; retrying in %.1f s", exc, delay)
                self._stopping.wait(delay)
        return None


def _emit(meta: dict[str, Any]) -> None:
    """Write a worker's log record with the host's handlers, keeping its time and origin."""
    record = logging.makeLogRecord(meta)
    logging.getLogger(record.name).handle(record)
