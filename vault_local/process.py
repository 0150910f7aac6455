"""The local host as a child process: used by the demo, the end-to-end tests and the benchmarks."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import IO, Protocol
from urllib.parse import quote

from vault_app.instance import INSTANCE_ID_SETTING, lock_directory
from vault_local.azurite import ROOT, free_port

LOCAL_KEY_NAME = "local"
"""The name of the function key a local host accepts (``VAULT_FUNCTION_KEYS``)."""
STOP_TIMEOUT = 25.0
"""Seconds a SIGTERM'd host gets before its group is killed: its drain takes at most 20."""


def new_key() -> str:
    """A function key made for one run: no key is ever written into the repository."""
    return secrets.token_urlsafe(24)


def admin_policy(key_name: str = LOCAL_KEY_NAME) -> str:
    """``VAULT_ACCESS_POLICY`` granting the named key admin (so read and write) on every stream."""
    return json.dumps({"grants": [{"key": key_name, "allow": ["admin"], "streams": ["*"]}]})


def local_env(connection_string: str, key: str) -> dict[str, str]:
    """Settings for the host on one Azurite: every connection points at it, and ``key`` is
    the app's function key ``local`` with admin on every stream (authentication stays on)."""
    return {
        "AzureWebJobsStorage": connection_string,
        "VaultStorage": connection_string,
        "VaultStaging0": connection_string,
        "LOCAL_FUNCTION_KEY": key,
        "VAULT_FUNCTION_KEYS": json.dumps({LOCAL_KEY_NAME: key}),
        "VAULT_ACCESS_POLICY": admin_policy(),
        "FUNCTIONS_WORKER_RUNTIME": "python",
    }


def explorer_url(api: str, *, key: str | None = None, token: str | None = None) -> str:
    """The web explorer, signed in with a function key or a token passed in the URL fragment."""
    credential = f"key={quote(key, safe='')}" if key else f"token={quote(token or '', safe='')}"
    return f"{api}/ui/#{credential}"


class HostChild(Protocol):
    """What :class:`HostProcess` and its users need of the host's process: a ``Popen``'s ``pid``,
    ``stdout``, ``poll``, ``wait`` and ``send_signal``."""

    pid: int
    stdout: IO[str] | None

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, sig: int) -> None: ...


Launch = Callable[[list[str], dict[str, str]], HostChild]
"""Starts a host's command line with its environment: in a session of its own, in ROOT, its
stdout and stderr one pipe (see :func:`popen`)."""


def popen(argv: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    """The host as a fresh interpreter: what a :class:`HostProcess` runs unless told otherwise."""
    return subprocess.Popen(
        argv,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


class HostProcess:
    """``python -m vault_local host`` in its own process group; its output is drained and kept.
    ``launch``: how its process starts (the tests fork theirs from a template, see
    tests/helpers/host_template.py); by default :func:`popen`."""

    def __init__(
        self,
        connection_string: str,
        *,
        port: int | None = None,
        key: str | None = None,
        settings: Mapping[str, str] | None = None,
        args: tuple[str, ...] = (),
        echo: bool = False,
        launch: Launch | None = None,
    ) -> None:
        self.connection_string = connection_string
        self.port = port or free_port()
        self.key = key or new_key()
        """The function key with admin on every stream (unless ``settings`` change the policy)."""
        self.env = {**local_env(connection_string, self.key), **(settings or {})}
        self.instance = self.env.setdefault(INSTANCE_ID_SETTING, uuid.uuid4().hex)
        """Its instance id, chosen here so that its lock files can be removed even after a kill."""
        self.args = args
        self.echo = echo
        self.lines: list[str] = []
        self.launch: Launch = launch or popen
        self.proc: HostChild | None = None
        self._changed = threading.Condition()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    def start(self, timeout: float = 60) -> HostProcess:
        self.lines = []
        command = [sys.executable, "-m", "vault_local", "host", "--port", str(self.port)]
        argv = [*command, "--settings", "/dev/null", *self.args]
        self.proc = self.launch(argv, {**os.environ, **self.env})
        threading.Thread(target=self._drain, daemon=True).start()
        self.wait_for("READY", timeout)
        return self

    def _drain(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            if self.echo:
                sys.stdout.write("  [host] " + line)
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, prefix: str, timeout: float) -> str:
        """Block until the host prints a line starting with ``prefix``."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for line in self.lines:
                    if line.startswith(prefix):
                        return line
                if self.proc is None or self.proc.poll() is not None:
                    raise RuntimeError("the host exited:\n" + "".join(self.lines[-30:]))
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"host did not print {prefix!r}:\n" + "".join(self.lines[-30:]))
                self._changed.wait(min(left, 0.5))

    def stop(self, kill: bool = False) -> None:
        """SIGTERM (the host drains, then exits) or SIGKILL (a crash) the whole process group."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None
        shutil.rmtree(lock_directory(self.instance), ignore_errors=True)
