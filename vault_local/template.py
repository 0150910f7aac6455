"""The worker template: a process that has imported the app and forks the host's later workers.

The local host forks its first language workers right after it has imported the app
(:mod:`vault_local.workers`). A later worker, a new warm spare or a replacement, cannot be forked
from the host, which runs threads by then (a fork copies whatever locks they hold), and a fresh
interpreter spends seconds of CPU importing the app and the SDKs: on two cores, seconds taken
from the takeover or the catch-up that a death has just started (BENCHMARKS.md, "Recovery").

So the host forks one more process at the start, the **template**, while it is still safe to:
the template has imported the app, runs one thread and opens nothing, and does nothing but wait
on its socket. For each later worker the host sends it the worker's arguments and its end of
the worker's socketpair (``SCM_RIGHTS``); the template forks the worker, which starts exactly
where a worker forked at the start does. Python's ``multiprocessing`` forkserver works the same
way, but starts its server as a fresh interpreter, which would import the app once more.

The host waits for its workers and reads how they ended (``waitpid``), so a worker must be the
host's child: the template forks twice, its first child forks the worker and exits at once, and
the worker is adopted by the host, which has made itself a *child subreaper*
(``PR_SET_CHILD_SUBREAPER``, Linux). The template exits when the host's end of its socket closes.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

PR_SET_CHILD_SUBREAPER = 36
"""``prctl`` option (linux/prctl.h): orphaned descendants are adopted by this process."""
SPAWN_TIMEOUT = 10.0
"""Seconds the host waits for the template to report a worker's pid before it starts the
worker as a fresh interpreter instead."""
CLOSE_TIMEOUT = 2.0
"""Seconds the template gets to exit once its socket is closed, before it is killed."""
_REQUEST_BYTES = 64 * 1024

RunWorker = Callable[[list[str], int, Path], NoReturn]
"""Runs a forked worker: its arguments, its socket's descriptor, the app's directory."""


def adopt_orphans() -> bool:
    """Make this process the parent of its descendants whose parent exits (Linux only);
    False if the kernel refused or this is not Linux."""
    if sys.platform != "linux":
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)


class WorkerTemplate:
    """The host's end of the template: forks a worker on request, one request at a time."""

    def __init__(self, pid: int, sock: socket.socket) -> None:
        self.pid = pid
        self.sock = sock
        self._lock = threading.Lock()

    @classmethod
    def fork(cls, app_dir: Path, run_worker: RunWorker) -> WorkerTemplate | None:
        """Fork the template from this process (one thread, the app imported, nothing else
        done); None if this process cannot adopt the workers it would fork."""
        if not adopt_orphans():
            return None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sys.stdout.flush()  # what is buffered would be written twice
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _serve(theirs, app_dir, run_worker)
        theirs.close()
        return cls(pid, ours)

    def spawn(self, argv: list[str], fd: int) -> int:
        """Have the template fork a worker with ``argv`` (its ``--fd`` becomes the fd the worker
        gets) and ``fd``, its end of the socketpair; the worker's pid, a child of this process.
        Raises OSError if the template is gone or did not answer within SPAWN_TIMEOUT."""
        with self._lock:
            self.sock.settimeout(SPAWN_TIMEOUT)
            socket.send_fds(self.sock, [json.dumps(argv).encode()], [fd])
            reply = self.sock.recv(64)
        if not reply or not reply.strip().isdigit() or int(reply) <= 0:
            raise OSError(f"the worker template (pid {self.pid}) did not fork the worker: {reply!r}")
        return int(reply)

    def close(self) -> None:
        """Close the template's socket: it exits (or, stuck, is killed), and is reaped here."""
        self.sock.close()
        deadline = time.monotonic() + CLOSE_TIMEOUT
        with contextlib.suppress(ChildProcessError):
            while not os.waitpid(self.pid, os.WNOHANG)[0]:
                if time.monotonic() > deadline:
                    os.kill(self.pid, signal.SIGKILL)
                    os.waitpid(self.pid, 0)
                    return
                time.sleep(0.02)


def _serve(sock: socket.socket, app_dir: Path, run_worker: RunWorker) -> NoReturn:
    """The template's whole life: fork a worker for each request, until the host is gone."""
    code = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the host decides when it ends, as for workers
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        keep = sock.fileno()
        os.closerange(3, keep)  # nothing of the host's: only its own socket
        os.closerange(keep + 1, 65536)
        while True:
            try:
                data, fds, _, _ = socket.recv_fds(sock, _REQUEST_BYTES, 1)
            except OSError:
                break
            if not data:
                break  # the host closed its end, or died
            pid = _fork_worker(json.loads(data), fds, app_dir, run_worker)
            for fd in fds:
                os.close(fd)
            sock.send(str(pid).encode())
    except BaseException:  # never back into the host's code
        code = 1
    os._exit(code)


def _fork_worker(argv: list[str], fds: list[int], app_dir: Path, run_worker: RunWorker) -> int:
    """Fork twice: the worker's pid (adopted by the host once its first parent exits), or 0."""
    if len(fds) != 1:
        return 0
    fd = fds[0]
    argv = list(argv)
    argv[argv.index("--fd") + 1] = str(fd)
    read_end, write_end = os.pipe()
    middle = os.fork()
    if middle == 0:
        try:
            worker = os.fork()
            if worker == 0:
                run_worker(argv, fd, app_dir)  # closes every other descriptor; never returns
            os.write(write_end, str(worker).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        pid = pipe.read()
    os.waitpid(middle, 0)  # gone now: the worker's parent is the host
    return int(pid) if pid.isdigit() else 0
