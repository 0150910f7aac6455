"""Start and stop a real Azurite (the local Azure Storage) from the project's own npm install."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from vault_core.devaccount import azurite_connection_string

ROOT = Path(__file__).resolve().parent.parent
AZURITE_BIN = ROOT / "node_modules" / ".bin" / "azurite"
WITHOUT_TELEMETRY = Path(__file__).resolve().parent / "azurite_without_telemetry.cjs"
"""Preloaded into Azurite, which runs with telemetry off: its telemetry client is not loaded
(most of Azurite's start: about 2 of its 3 CPU-s)."""
WITHOUT_SQL = Path(__file__).resolve().parent / "azurite_without_sql.cjs"
"""Preloaded into Azurite, which keeps its metadata in files or in memory: the SQL stores' ORM
is not loaded (0.15-0.25 of the 1-1.3 CPU-s its start takes)."""


SERVER_PORTS = range(15000, 32768)
"""Where :func:`free_port` looks: below Linux's ephemeral range (32768-60999 by default; macOS
starts at 49152). The kernel gives ephemeral ports to every outgoing connection, so a port found
free there can be taken by some client socket before our server binds it; here only another
server's explicit bind can take it."""
_pick = random.SystemRandom()
"""Not the ``random`` module's shared state, which a test may seed: two test processes seeded
alike would pick the same ports."""


def free_port() -> int:
    """A loopback TCP port that is free now, for a server started next."""
    for _ in range(200):
        port = _pick.choice(SERVER_PORTS)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use (or lingering in TIME_WAIT): try another
            return port
    with socket.socket() as s:  # a crowded range: let the kernel choose
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port} after {timeout}s")


def ensure_installed() -> None:
    if not AZURITE_BIN.exists():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=ROOT, check=True)


@dataclass
class Azurite:
    """One Azurite process on loopback. ``stop()`` then ``start()`` keeps the data on disk."""

    blob_port: int = field(default_factory=free_port)
    queue_port: int = field(default_factory=free_port)
    table_port: int = field(default_factory=free_port)
    location: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="mv-azurite-")))
    in_memory: bool = False
    process: subprocess.Popen[bytes] | None = None

    @property
    def connection_string(self) -> str:
        return azurite_connection_string(self.blob_port, self.queue_port, self.table_port)

    def start(self) -> Azurite:
        ensure_installed()
        args = [
            "node",
            "--require",
            str(WITHOUT_TELEMETRY),
            "--require",
            str(WITHOUT_SQL),
            str(AZURITE_BIN),
            "--silent",
            "--disableTelemetry",
            "--skipApiVersionCheck",
            "--loose",
            "--blobHost",
            "127.0.0.1",
            "--queueHost",
            "127.0.0.1",
            "--tableHost",
            "127.0.0.1",
            "--blobPort",
            str(self.blob_port),
            "--queuePort",
            str(self.queue_port),
            "--tablePort",
            str(self.table_port),
        ]
        args += ["--inMemoryPersistence"] if self.in_memory else ["--location", str(self.location)]
        # node directly (not npx), so the PID we stop is the server itself; the child keeps its own
        # copy of the log's descriptor, ours is closed at once.
        with open(self.location / "azurite.log", "ab") as log:
            self.process = subprocess.Popen(
                args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        for port in (self.blob_port, self.queue_port, self.table_port):
            wait_for_port(port)
        return self

    def stop(self, kill: bool = False) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.location, ignore_errors=True)

    def env(self) -> dict[str, str]:
        return {**os.environ, "AZURITE_CONNECTION_STRING": self.connection_string}
