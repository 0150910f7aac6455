"""The hosts a test starts, forked from a process that has already imported their libraries.

A local host's start is almost all imports: the Functions library, the storage SDKs (and aiohttp,
which they load), uvicorn, starlette, PyJWT, the codecs: about a CPU-second of the 1.5 a host
takes to say READY (its language workers are forked from it, so they add almost nothing). The
suite starts about thirty hosts of its own. So a pytest process that starts hosts starts, once, a *host
template*: ``python tests/helpers/host_template.py FD``, an interpreter that imports those
libraries (:data:`PRELOAD`, none of the project's own code: the app reads its settings as it
loads) and then waits on its socket. For each host it forks a child that becomes
``python -m vault_local host ARGS`` in the host's own environment, session and directory: from
``vault_local.__main__`` on, the host starts as that command does (it checks its settings, then
imports the app and forks its workers), and it ends through the interpreter's normal exit, with
its exit code. Only the import of libraries that behave alike in every host is shared.

The same idea as the host's own worker template (``vault_local/template.py``), one level up, with
its double fork: the template forks a child that forks the host and exits, so the host is
adopted by the test process (a child subreaper), which waits for it and reads how it ended, as
it would a ``Popen``'s. Where a process cannot adopt (off Linux), hosts start as before.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import runpy
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, TYPE_CHECKING

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
)
"""What a host imports that reads no setting as it loads; anything else it imports itself."""
LAUNCH_TIMEOUT = 60.0
"""Seconds a test waits for the template to fork a host (the first waits for its imports)."""
_REQUEST_BYTES = 1 << 20


# -- the test's side ----------------------------------------------------------------------------


class ForkedHost:
    """A host forked by the template and adopted by this process: what ``HostProcess`` needs of a
    ``Popen`` (``pid``, ``stdout``, ``poll``, ``wait``, ``send_signal``), with Popen's exit codes."""

    def __init__(self, pid: int, stdout: IO[str]) -> None:
        from vault_local.workers import ForkedProcess  # waitpid-based, as the host waits for its workers

        self._process = ForkedProcess(pid)
        self.pid = pid
        self.stdout: IO[str] | None = stdout

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    def poll(self) -> int | None:
        return self._process.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self._process.wait(timeout)

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)


class HostTemplate:
    """The test process's end of the template: forks a host on request, one request at a time."""

    def __init__(self, root: Path) -> None:
        self.root = root
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.process = subprocess.Popen(
            [sys.executable, __file__, str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            cwd=root,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C of the run reaches the hosts through their tests
        )
        theirs.close()
        self.sock = ours
        self._lock = threading.Lock()

    def launch(self, argv: list[str], env: dict[str, str]) -> ForkedHost:
        """``argv`` (``python -m vault_local host ...``) run by a fork of the template, in a
        session of its own, in ``env``, its stdout and stderr one pipe read by the caller."""
        if argv[1:3] != ["-m", "vault_local"]:
            raise ValueError(f"the host template runs `python -m vault_local ...`, not {argv}")
        read_end, write_end = os.pipe()
        try:
            request = {"args": argv[3:], "env": env, "cwd": str(self.root)}
            with self._lock:
                self.sock.settimeout(LAUNCH_TIMEOUT)
                socket.send_fds(self.sock, [json.dumps(request).encode()], [write_end])
                reply = self.sock.recv(64)
        except BaseException:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)
        if not reply.strip().isdigit() or int(reply) <= 0:
            os.close(read_end)
            raise OSError(f"the host template (pid {self.process.pid}) did not fork the host: {reply!r}")
        return ForkedHost(int(reply), open(read_end, encoding="utf-8", errors="replace"))

    def close(self) -> None:
        """Close its socket: the template exits (or, stuck, is killed); the hosts it forked go on."""
        self.sock.close()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@functools.cache
def host_template() -> HostTemplate | None:
    """This process's template, started at its first host; None where hosts cannot be adopted."""
    from vault_local.template import adopt_orphans

    return HostTemplate(ROOT) if adopt_orphans() else None


def forked(argv: list[str], env: dict[str, str]) -> HostChild:
    """A ``HostProcess``'s ``launch`` for the tests' hosts: forked from this process's template,
    or a fresh interpreter where there is none, or where it failed (the next host starts a new
    template)."""
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


def _serve(sock: socket.socket) -> None:
    """Fork a host for each request until the test process is gone. Returns only in a host, to
    run it (the template's own end is os._exit)."""
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(sock, _REQUEST_BYTES, 1)
        except OSError:
            os._exit(0)
        if not data or len(fds) != 1:
            os._exit(0)  # the test process closed its end, or died
        request = json.loads(data)
        read_end, write_end = os.pipe()
        middle = os.fork()
        if middle == 0:
            host = os.fork()
            if host == 0:
                os.close(read_end)
                os.close(write_end)
                os.close(sock.detach())  # the host's own descriptors only, and no close at its exit
                _become_host(request, fds[0])
                return
            os.write(write_end, str(host).encode())
            os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as pipe:
            pid = pipe.read()
        os.waitpid(middle, 0)  # gone: the host's parent is now the test process
        os.close(fds[0])
        sock.send(pid if pid.isdigit() else b"0")


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
    sock = socket.socket(fileno=int(sys.argv[1]))
    for name in PRELOAD:
        importlib.import_module(name)
    _serve(sock)  # in a forked host: it returns once the host's main has, and the host exits as usual


if __name__ == "__main__":
    main()
