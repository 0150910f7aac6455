"""The app's long-lived objects, in one place with one lifetime: built once per process by
``function_app.py`` (a test or a benchmark builds its own), closed once at the end.

What it holds: the services (:mod:`vault_app.services`: storage adapters and what is built on
them), the stream writers kept open between writer invocations and the staging queues this
process owns (:mod:`vault_app.open_writers`), the writer's pool for independent storage calls,
the request threads, the read path's read-ahead, the long-poll wait slots, what the handlers
keep per event loop (:mod:`vault_app.loops`), the authenticator with its signing key cache, and
the test seam of the local host's ``--fault``. Every handler and the writer function are handed
the runtime; nothing of it lives in module globals, so two runtimes in one process (two tests,
say) share nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property

from vault_app.auth.principal import Authenticator
from vault_app.auth.tokens import TokenValidator
from vault_app.config import VaultSettings
from vault_app.loops import LoopCaches
from vault_app.open_writers import OpenWriters
from vault_app.readahead import ReadAhead
from vault_app.services import Services
from vault_app.tail import WaitSlots

REQUEST_THREADS = min(32, (os.cpu_count() or 1) + 4)
"""Sized like the Python worker's own pool."""
WRITER_IO_THREADS = 8
"""Independent storage calls of one writer invocation (claim-check downloads, deletes)."""


class Runtime:
    def __init__(self, services: Services) -> None:
        self.services = services
        self.writers = OpenWriters()
        self.writer_io = ThreadPoolExecutor(max_workers=WRITER_IO_THREADS, thread_name_prefix="mv-writer-io")
        self.request_threads = ThreadPoolExecutor(
            max_workers=REQUEST_THREADS, thread_name_prefix="mv-request"
        )
        """Where a request's blocking storage calls run (:func:`vault_app.http.in_thread`): the HTTP
        functions are ``async def`` (a waiting request holds no thread), and the synchronous core
        (shared with the writer, Spark and the client) runs here, one short call at a time."""
        self.read_ahead = ReadAhead()
        self.wait_slots = WaitSlots(services.settings.max_waiting)
        self.loops = LoopCaches(services)
        self.fault_hook: Callable[[str], None] | None = None
        """Test seam of the local host (``--fault``): called at named points, e.g. ``after-commit``."""

    @classmethod
    def from_settings(cls, settings: VaultSettings) -> Runtime:
        return cls(Services(settings))

    @cached_property
    def authenticator(self) -> Authenticator:
        """One per runtime, like the storage clients: its signing key cache serves every request."""
        auth = self.services.settings.auth
        tokens = TokenValidator(auth.issuers, auth.audiences) if auth.tokens else None
        return Authenticator(keys=auth.keys, tokens=tokens, easy_auth=auth.easy_auth)

    def fault(self, point: str) -> None:
        if self.fault_hook is not None:
            self.fault_hook(point)

    def close(self) -> None:
        """Close every open writer (catalog up to date, leases released) and release the owned
        staging queues, so another instance takes over at once; then stop the read-ahead and the
        pools. Idempotent."""
        self.writers.close_all()
        self.read_ahead.close()
        self.writer_io.shutdown(wait=False)
        self.request_threads.shutdown(wait=False)
