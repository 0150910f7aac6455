"""The hosts a test starts, forked from one process that has already imported their libraries.

A local host's start is almost all imports: the Functions library, the storage SDKs (and aiohttp,
which they load), uvicorn, starlette, PyJWT, the codecs: about a CPU-second of the 1.5 a host
takes to say READY (its language workers are forked from it, so they add almost nothing). The
suite starts about thirty hosts of its own. So the run starts, once, a *host template*:
``python tests/helpers/host_template.py``, an interpreter that imports those libraries
(:data:`PRELOAD`: the app's and the host's own modules too, which read no setting as they load;
not ``function_app``, which reads them) and then waits on its socket. For each host it forks a
child that becomes ``python -m vault_local host ARGS`` in the host's own environment, session
and directory: from ``vault_local.__main__`` on,
the host starts as that command does (it checks its settings, then imports the app and forks its
workers), and it ends through the interpreter's normal exit, with its exit code. Only the import
of libraries that behave alike in every host is shared.

One template for the whole run: under xdist the controller starts it (:class:`RunTemplate`) while
the workers start, and each worker connects to its socket (an import each would be a CPU-second
per worker); with ``-n 0`` the pytest process starts one at its first host. The template is the
hosts' parent: it reaps each and tells the test process that asked for it how it ended, with
``Popen``'s exit codes. A test process whose connection closes (it ended, or died) leaves no host
behind: the template ends those it had asked for; and when the run ends, the template ends with
every host still running. Where the template cannot be used (off Linux), hosts start as before.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib
import json
import os
import runpy
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:  # the template itself imports none of the project's code
    from vault_local.process import HostChild

ROOT = Path(__file__).resolve().parents[2]
PRELOAD = (
    "azure.functions",
    "azure.storage.blob",
    "azure.storage.blob.aio",
    "azure.storage.queue",
    "azure.data.tables",
    "aiohttp",
    "uvicorn",
    "starlette.applications",
    "starlette.responses",
    "jwt",
    "httptools",
    "lz4.block",
    "zstandard",
    "msgspec",
    # The project's modules that function_app and the host import: none reads a setting as it
    # loads (function_app reads them, and is not preloaded; vault_app keeps no module state).
    "vault_app.api",
    "vault_app.config",
    "vault_app.explorer_api",
    "vault_app.poison_api",
    "vault_app.ui",
    "vault_app.runtime",
    "vault_app.writer_fn",
    "vault_local.host",
)
"""What a host imports that reads no setting as it loads; anything else it imports itself."""
LAUNCH_TIMEOUT = 60.0
"""Seconds a test waits for the template to fork a host (the first may wait for its imports)."""
END_TIMEOUT = 10.0
"""Seconds the hosts still running at the run's end get to stop (SIGTERM) before SIGKILL."""
WORKER_INPUT = "mv_host_template"
"""The key of ``workerinput`` under which each xdist worker finds the template's socket."""
_REQUEST_BYTES = 1 << 20


# -- the test's side ----------------------------------------------------------------------------


class ForkedHost:
    """A host forked by the template: what ``HostProcess`` needs of a ``Popen`` (``pid``,
    ``stdout``, ``poll``, ``wait``, ``send_signal``), with Popen's exit codes, which the template
    (its parent) reports."""

    def __init__(self, pid: int, stdout: IO[str], template: TemplateClient) -> None:
        self.pid = pid
        self.stdout: IO[str] | None = stdout
        self._template = template

    @property
    def returncode(self) -> int | None:
        return self._template.exit_code(self.pid)

    def poll(self) -> int | None:
        return self._template.exit_code(self.pid)

    def wait(self, timeout: float | None = None) -> int:
        code = self._template.wait_for_exit(self.pid, timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"host (pid {self.pid})", timeout or 0)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)


class TemplateClient:
    """A test process's connection to the template: asks for hosts, one request at a time, and
    learns (in a thread of its own) how each ended."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.connect(address)
        self._changed = threading.Condition()
        self._replies: list[dict[str, Any]] = []
        self._ended: dict[int, int] = {}
        self._closed = False
        self._asking = threading.Lock()
        threading.Thread(target=self._read, name="host-template", daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                data = self.sock.recv(4096)
            except OSError:
                data = b""
            with self._changed:
                if not data:
                    self._closed = True
                    self._changed.notify_all()
                    return
                message = json.loads(data)
                if "ended" in message:
                    self._ended[message["ended"]] = message["code"]
                else:
                    self._replies.append(message)
                self._changed.notify_all()

    def launch(self, argv: list[str], env: dict[str, str]) -> ForkedHost:
        """``argv`` (``python -m vault_local host ...``) run by a fork of the template, in a
        session of its own, in ``env``, its stdout and stderr one pipe read by the caller."""
        if argv[1:3] != ["-m", "vault_local"]:
            raise ValueError(f"the host template runs `python -m vault_local ...`, not {argv}")
        read_end, write_end = os.pipe()
        try:
            request = {"args": argv[3:], "env": env, "cwd": str(ROOT)}
            with self._asking:
                socket.send_fds(self.sock, [json.dumps(request).encode()], [write_end])
                with self._changed:
                    self._changed.wait_for(lambda: self._replies or self._closed, LAUNCH_TIMEOUT)
                    reply = self._replies.pop(0) if self._replies else {"error": "no answer"}
        except BaseException:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)
        pid = reply.get("pid")
        if not isinstance(pid, int) or pid <= 0:
            os.close(read_end)
            raise OSError(f"the host template at {self.address} did not fork the host: {reply}")
        return ForkedHost(pid, open(read_end, encoding="utf-8", errors="replace"), self)

    def exit_code(self, pid: int) -> int | None:
        with self._changed:
            return self._ended.get(pid)

    def wait_for_exit(self, pid: int, timeout: float | None) -> int | None:
        """The host's exit code once it has ended; None if ``timeout`` seconds pass first."""
        with self._changed:
            self._changed.wait_for(lambda: pid in self._ended or self._closed, timeout)
            if pid not in self._ended and self._closed:
                raise OSError(f"the host template at {self.address} ended before host {pid} did")
            return self._ended.get(pid)

    def close(self) -> None:
        # Shut down first: a close alone neither wakes the reader's recv nor ends the connection.
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


class HostTemplate:
    """The template's process, owned by the process that started it: it runs until that one
    closes its end (:meth:`close`), or dies."""

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="mv-host-template-"))
        self.address = str(self.directory / "socket")
        # Listening before the template starts: a connection made meanwhile waits in the backlog.
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        listener.bind(self.address)
        listener.listen(64)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.process = subprocess.Popen(
            [sys.executable, __file__, str(theirs.fileno()), str(listener.fileno())],
            pass_fds=[theirs.fileno(), listener.fileno()],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C of the run reaches the hosts through their tests
        )
        theirs.close()
        listener.close()
        self._control = ours

    def close(self) -> None:
        """The template ends every host still running, then exits (or, stuck, is killed)."""
        self._control.close()
        try:
            self.process.wait(END_TIMEOUT + 5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


class RunTemplate:
    """The xdist controller's plugin: one template for every worker, started while they start."""

    def __init__(self) -> None:
        self.template = HostTemplate() if sys.platform == "linux" else None
        if self.template is not None:  # the controller's own hosts (the session's) too
            use_the_runs({WORKER_INPUT: self.template.address})

    def pytest_configure_node(self, node: Any) -> None:
        if self.template is not None:
            node.workerinput[WORKER_INPUT] = self.template.address

    def pytest_unconfigure(self) -> None:
        if self.template is not None:
            self.template.close()


_run_template: str | None = None
"""On an xdist worker, the address of the run's template (see :func:`use_the_runs`)."""


def use_the_runs(workerinput: dict[str, Any]) -> None:
    """On an xdist worker: its hosts are forked by the run's template (:class:`RunTemplate`)."""
    global _run_template
    _run_template = workerinput.get(WORKER_INPUT)


@functools.cache
def host_template() -> TemplateClient | None:
    """This process's connection to the run's template, or to one it starts now (with ``-n 0``);
    None off Linux."""
    if sys.platform != "linux":
        return None
    if _run_template is not None:
        return TemplateClient(_run_template)
    own = HostTemplate()
    import atexit

    atexit.register(own.close)
    return TemplateClient(own.address)


def forked(argv: list[str], env: dict[str, str]) -> HostChild:
    """A ``HostProcess``'s ``launch`` for the tests' hosts: forked by the template, or a fresh
    interpreter where there is none, or where it failed (the next host connects again)."""
    from vault_local.process import popen

    template = host_template()
    if template is None:
        return popen(argv, env)
    try:
        return template.launch(argv, env)
    except OSError:
        host_template.cache_clear()
        template.close()
        return popen(argv, env)


# -- the template's side ------------------------------------------------------------------------


class _Template:
    """The template's loop: forks a host for each request, reaps the hosts and reports how each
    ended to the connection that asked for it. One thread only, so that a fork copies no lock
    another thread holds."""

    def __init__(self, control: socket.socket, listener: socket.socket) -> None:
        self.control = control
        self.listener = listener
        self.selector = selectors.DefaultSelector()
        self.wake_read, self.wake_write = os.pipe()
        self.hosts: dict[int, socket.socket] = {}
        """Each running host, and the connection that asked for it."""
        self.terminated = False

    def serve(self) -> dict[str, Any] | None:
        """Until the owner closes its end. Returns a request only in a forked host, to run it."""
        for fd in (self.wake_read, self.wake_write):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(self.wake_write)  # a SIGCHLD wakes the selector
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        signal.signal(signal.SIGTERM, self._terminate)  # as the owner closing its end
        self.selector.register(self.control, selectors.EVENT_READ, "control")
        self.selector.register(self.listener, selectors.EVENT_READ, "listener")
        self.selector.register(self.wake_read, selectors.EVENT_READ, "wake")
        while True:
            for key, _ in self.selector.select():
                if key.data == "listener":
                    conn, _ = self.listener.accept()
                    self.selector.register(conn, selectors.EVENT_READ, "client")
                elif key.data == "wake":
                    with contextlib.suppress(BlockingIOError):
                        while os.read(self.wake_read, 512):
                            pass
                    self._reap()
                    if self.terminated:
                        self._end()
                        return None
                elif key.data == "control":
                    with contextlib.suppress(OSError):
                        if self.control.recv(1):
                            continue
                    self._end()
                    return None
                else:
                    request = self._request(key.fileobj)  # type: ignore[arg-type]
                    if request is not None:
                        return request

    def _terminate(self, signum: int, frame: object) -> None:
        self.terminated = True  # the selector wakes (the wakeup descriptor), and the loop ends

    def _request(self, conn: socket.socket) -> dict[str, Any] | None:
        try:
            data, fds, _, _ = socket.recv_fds(conn, _REQUEST_BYTES, 1)
        except OSError:
            data, fds = b"", []
        if not data or len(fds) != 1:  # the test process closed its end, or died
            for fd in fds:
                os.close(fd)
            self.selector.unregister(conn)
            self._stop([pid for pid, asked in self.hosts.items() if asked is conn], signal.SIGKILL)
            conn.close()
            return None
        request = json.loads(data)
        pid = os.fork()
        if pid == 0:
            self._become_child()
            request["out"] = fds[0]
            return dict(request)
        os.close(fds[0])
        self.hosts[pid] = conn
        conn.send(json.dumps({"pid": pid}).encode())
        return None

    def _become_child(self) -> None:
        """In a forked host: nothing of the template's loop is left (its descriptors, handlers)."""
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        for key in list(self.selector.get_map().values()):
            if isinstance(key.fileobj, socket.socket):
                os.close(key.fileobj.detach())  # no shutdown: the socket stays the template's
        self.selector.close()
        os.close(self.wake_read)
        os.close(self.wake_write)

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            asked = self.hosts.pop(pid, None)
            if asked is not None:
                with contextlib.suppress(OSError):
                    asked.send(json.dumps({"ended": pid, "code": os.waitstatus_to_exitcode(status)}).encode())

    def _stop(self, pids: list[int], sig: int) -> None:
        for pid in pids:
            try:
                os.killpg(pid, sig)  # the host's whole session: its workers too
            except OSError:  # just forked: not yet in a session of its own
                with contextlib.suppress(OSError):
                    os.kill(pid, sig)

    def _end(self) -> None:
        """The run is over: the hosts still running stop (SIGTERM, then SIGKILL), and are reaped."""
        self._stop(list(self.hosts), signal.SIGTERM)
        deadline = time.monotonic() + END_TIMEOUT
        while self.hosts and time.monotonic() < deadline:
            time.sleep(0.1)
            self._reap()
        self._stop(list(self.hosts), signal.SIGKILL)


def _become_host(request: dict[str, object], out: int) -> None:
    """Where ``python -m vault_local ARGS`` would be, in the host's session, directory and
    environment, then run it."""
    os.setsid()
    stdin = os.open(os.devnull, os.O_RDONLY)
    os.dup2(stdin, 0)
    os.close(stdin)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    cwd = str(request["cwd"])
    os.chdir(cwd)
    env = request["env"]
    assert isinstance(env, dict)
    os.environ.clear()
    os.environ.update(env)
    sys.path[0] = cwd  # as `python -m` puts the working directory first
    args = request["args"]
    assert isinstance(args, list)
    sys.argv = ["-m", *args]
    runpy.run_module("vault_local", run_name="__main__", alter_sys=True)


def main() -> None:
    control = socket.socket(fileno=int(sys.argv[1]))
    listener = socket.socket(fileno=int(sys.argv[2]))
    # A killed host's workers are orphans: adopted here (Linux), and reaped, not left as zombies.
    from vault_local.template import adopt_orphans

    adopt_orphans()
    for name in PRELOAD:
        importlib.import_module(name)
    # What the preloads made lives in every host: moved out of the collector's sight here, as a
    # host does with what its own imports made, so that the host's collection before it freezes
    # its own walks only those, not the template's too (with uvicorn's WebSocket protocol off,
    # a host to READY 0.28 -> 0.16 CPU-s).
    gc.collect()
    gc.freeze()
    request = _Template(control, listener).serve()
    if request is not None:  # in a forked host: it runs, and exits as the command would
        _become_host(request, request.pop("out"))


if __name__ == "__main__":
    main()
