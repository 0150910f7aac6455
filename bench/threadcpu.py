"""Where a scan's CPU goes: seconds by thread of the scanning process, and Azurite's, over the same
scans (bench/core.py ``--format``).

The scan's threads live only as long as one scan (its pools are shut down at its end), so their
CPU is taken as each one ends: while a :class:`ScanCPU` is entered, every thread started records
``time.thread_time()`` when its ``run`` returns, under its role (the name's second word:
``mv-read-<stream>_0`` is ``read``). The thread that iterates the scan is the ``consumer``
(it also checks the scan's first read). Azurite's CPU is its process's, from ``/proc``.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType

from bench.common import cpu_seconds

ROLES = ("consumer", "read", "decode", "open")
"""The scan's threads: the caller's (which builds the messages, checks each unit's boundaries,
and decompresses the units the helper has not started); the ranged reads (vault_core.prefetch);
the thread that walks and checks the next read's frames and units' checksums (``mv-decode``);
the helper that decompresses units a few ahead of the consumer (``mv-open``)."""


class ScanCPU:
    """CPU seconds by role, added up over every ``with`` block (one scan each), and Azurite's."""

    def __init__(self, azurite_pid: int) -> None:
        self.azurite_pid = azurite_pid
        self.seconds: dict[str, float] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> ScanCPU:
        self._run = threading.Thread.run
        self._before = set(threading.enumerate())
        recorder, run = self, self._run

        def recorded_run(thread: threading.Thread) -> None:
            try:
                run(thread)
            finally:
                recorder._add(_role(thread.name), time.thread_time())

        threading.Thread.run = recorded_run  # type: ignore[method-assign,assignment]
        self._azurite = cpu_seconds(self.azurite_pid)
        self._consumer = time.thread_time()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._add("consumer", time.thread_time() - self._consumer)
        for thread in set(threading.enumerate()) - self._before:
            if thread is not threading.current_thread():
                thread.join()  # the scan's pools end their threads after its last message
        threading.Thread.run = self._run  # type: ignore[method-assign]
        self._add("azurite", cpu_seconds(self.azurite_pid) - self._azurite)

    def _add(self, role: str, seconds: float) -> None:
        with self._lock:
            self.seconds[role] = self.seconds.get(role, 0.0) + seconds

    def figures(self, label: str, messages: int, wall: float) -> dict[str, float | str]:
        """µs of CPU per message by role, Azurite's and the total, and how many cores the scan kept
        busy on average (total CPU over wall time: 2 is both cores of the bench machine)."""
        out: dict[str, float | str] = {}
        for role in (*ROLES, "azurite"):
            out[f"{label}: CPU µs/message, {role}"] = self.seconds.get(role, 0.0) * 1e6 / messages
        total = sum(self.seconds.values())
        out[f"{label}: CPU µs/message, all (scan + Azurite)"] = total * 1e6 / messages
        out[f"{label}: cores busy (all CPU / wall)"] = total / wall
        return out


def _role(name: str) -> str:
    parts = name.split("-")
    return parts[1] if parts[0] == "mv" and len(parts) > 2 else "other"
