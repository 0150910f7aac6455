"""Stream writers kept open between writer invocations, and the reaper that closes idle ones.

A busy stream pays for its lease and its recovery once, not per invocation. On shutdown
(:func:`close_all`: called by the local host's workers when told to terminate, and registered
with ``atexit`` as the backstop of a normal interpreter exit) every writer brings the catalog up
to date and releases its lease, so another instance can take the stream at once rather than
after the lease runs out.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time

from vault_app.services import Services
from vault_core.errors import LeaseLost, VaultError
from vault_core.writer import AppendResult, Batch, StreamWriter

log = logging.getLogger("vault_app.writer")

WRITER_LEASE_SECONDS = 15
"""Azure's shortest lease: if a writer process dies, its stream is free again within 15 s.
The writer renews it during long appends, so a short lease costs nothing while alive."""

WRITER_IDLE_SECONDS = 10.0
"""How long a stream's writer (and its lease) stays open after its last append."""


class OpenWriters:
    """Writers kept open between invocations, so a busy stream pays for lease and recovery once.

    A writer closes (releasing its lease for other instances) after WRITER_IDLE_SECONDS without
    an append; one that lost its lease meanwhile is reopened. Invocations of one queue run one at
    a time (host.json), and a stream lives on one queue, so a writer is never shared at once;
    the lock covers the reaper.
    """

    def __init__(self, idle_seconds: float = WRITER_IDLE_SECONDS) -> None:
        self.idle_seconds = idle_seconds
        self._open: dict[str, tuple[StreamWriter, float]] = {}
        self._lock = threading.Lock()
        self._reaper: threading.Thread | None = None

    def append(self, services: Services, stream: str, batches: list[Batch]) -> list[AppendResult]:
        with self._lock:
            writer = self._take(stream)
        if writer is None:
            writer = services.vault.writer(stream, lease_seconds=WRITER_LEASE_SECONDS)
        try:
            results = writer.append(batches)
        except LeaseLost:
            writer.close()
            writer = services.vault.writer(stream, lease_seconds=WRITER_LEASE_SECONDS)
            results = writer.append(batches)
        except BaseException:
            writer.close()
            raise
        with self._lock:
            self._open[stream] = (writer, time.monotonic())
            self._start_reaper()
        return results

    def _take(self, stream: str) -> StreamWriter | None:
        entry = self._open.pop(stream, None)
        return entry[0] if entry else None

    def close_idle(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self._lock:
            idle = [s for s, (_, used) in self._open.items() if now - used >= self.idle_seconds]
            writers = [self._open.pop(s)[0] for s in idle]
        self._close(writers)

    def close_all(self) -> None:
        """Close every open writer now: catalog up to date, leases released."""
        with self._lock:
            writers = [w for w, _ in self._open.values()]
            self._open.clear()
        self._close(writers)

    @staticmethod
    def _close(writers: list[StreamWriter]) -> None:
        for w in writers:
            try:
                w.close()
            except VaultError as exc:
                log.warning("closing the writer of %s: %s", w.stream, exc)

    def _start_reaper(self) -> None:
        if self._reaper is None or not self._reaper.is_alive():
            self._reaper = threading.Thread(target=self._reap, name="mv-writer-reaper", daemon=True)
            self._reaper.start()

    def _reap(self) -> None:
        while True:
            time.sleep(1.0)
            self.close_idle()
            with self._lock:
                if not self._open:
                    return


open_writers = OpenWriters()
atexit.register(open_writers.close_all)
