"""The app's long-lived objects, in one place with one lifetime: built once per process by
``function_app.py`` (a test or a benchmark builds its own), closed once at the end.

What it holds: the services (:mod:`vault_app.services`: storage adapters and what is built on
them), the stream writers kept open between writer invocations and the staging queues this
process owns (:mod:`vault_app.open_writers`), the writer's pool for independent storage calls,
and the test seam of the local host's ``--fault``. Nothing of it lives in module globals, so two
runtimes in one process (two tests, say) share nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from vault_app.open_writers import OpenWriters
from vault_app.services import Services

WRITER_IO_THREADS = 8
"""Independent storage calls of one writer invocation (claim-check downloads, deletes)."""


class Runtime:
    def __init__(self, services: Services) -> None:
        self.services = services
        self.writers = OpenWriters()
        self.writer_io = ThreadPoolExecutor(max_workers=WRITER_IO_THREADS, thread_name_prefix="mv-writer-io")
        self.fault_hook: Callable[[str], None] | None = None
        """Test seam of the local host (``--fault``): called at named points, e.g. ``after-commit``."""

    def fault(self, point: str) -> None:
        if self.fault_hook is not None:
            self.fault_hook(point)

    def close(self) -> None:
        """Close every open writer (catalog up to date, leases released) and release the owned
        staging queues, so another instance takes over at once; then stop the pool. Idempotent."""
        self.writers.close_all()
        self.writer_io.shutdown(wait=False)
