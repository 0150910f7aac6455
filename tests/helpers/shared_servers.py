"""One Azurite, one development issuer and one session host for all of a run's xdist workers.

Under ``./dev test`` the controller (the pytest process that starts the workers) owns them: it
starts them in the background while the workers start and collect, hands each worker their
addresses and the issuer's signing key (in memory, through xdist's ``workerinput``), and stops
them when the run ends. A worker's session fixtures then describe these servers instead of
starting their own: each worker would otherwise start an Azurite and a host, which poll and
answer for the whole run. Tests share them as they already share a worker's: every test uses
streams, queues (``VAULT_QUEUE_PREFIX``) and hosts of its own where it changes anything.

With ``-n 0`` there are no workers, and the fixtures start their own as before.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helpers import timeline

from vault_local.azurite import Azurite
from vault_local.dev_issuer import DevIssuer
from vault_local.process import HostProcess

WORKER_INPUT = "mv_shared_servers"
"""The key of ``workerinput`` under which each worker finds the servers."""
START_TIMEOUT = 180.0
"""Seconds a worker waits for the controller's servers: a host's start on a loaded machine."""


class SharedServers:
    """The controller's plugin: starts the servers, tells the workers, stops them at the end."""

    def __init__(self, session_host: Callable[[Azurite, DevIssuer], HostProcess]) -> None:
        """``session_host`` makes the host (not started) on the Azurite, trusting the issuer."""
        self.directory = Path(tempfile.mkdtemp(prefix="mv-shared-"))
        self.azurite = Azurite(in_memory=True, location=self.directory)
        self.issuer = DevIssuer().start()
        self.host = session_host(self.azurite, self.issuer)
        self._starting = threading.Thread(target=self._start, name="shared-servers", daemon=True)
        self._starting.start()

    def _start(self) -> None:
        # Each server announces itself with a file once it answers, or with why it did not.
        try:
            self.azurite.start()
            (self.directory / "azurite.ready").write_text("")
            self.host.start()
            if self.host.proc is not None:
                timeline.the_runs_hosts.add(self.host.proc.pid)
            (self.directory / "host.ready").write_text("")
        except BaseException:
            for name in ("azurite", "host"):
                (self.directory / f"{name}.failed").write_text(traceback.format_exc())

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[WORKER_INPUT] = {
            "directory": str(self.directory),
            "ports": [self.azurite.blob_port, self.azurite.queue_port, self.azurite.table_port],
            "issuer": self.issuer.shared(),
            "host": {"port": self.host.port, "key": self.host.key, "env": self.host.env},
        }

    def pytest_unconfigure(self) -> None:
        self._starting.join()
        self.host.stop()
        self.issuer.stop()
        self.azurite.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


@dataclass(frozen=True)
class Attached:
    """A worker's view of the controller's servers."""

    shared: dict[str, Any]

    @property
    def directory(self) -> Path:
        return Path(self.shared["directory"])

    def wait_for(self, name: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while not (self.directory / f"{name}.ready").exists():
            failed = self.directory / f"{name}.failed"
            if failed.exists():
                raise RuntimeError(f"the run's shared {name} did not start:\n{failed.read_text()}")
            assert time.monotonic() < deadline, f"the run's shared {name} did not start in {START_TIMEOUT}s"
            time.sleep(0.05)

    def azurite(self) -> Azurite:
        self.wait_for("azurite")
        blob, queue, table = self.shared["ports"]
        return Azurite(blob_port=blob, queue_port=queue, table_port=table, location=self.directory)

    def issuer(self) -> DevIssuer:
        return DevIssuer.minting_as(self.shared["issuer"])

    def host(self) -> HostProcess:
        """The session host (not to be stopped or restarted: it is every worker's)."""
        self.wait_for("host")
        host = self.shared["host"]
        return HostProcess(
            host["env"]["VaultStorage"], port=host["port"], key=host["key"], settings=host["env"]
        )
