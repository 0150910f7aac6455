"""Stream writers kept open between writer invocations, the staging queues this process owns,
and the reaper that closes idle ones.

A busy stream pays for its lease and its recovery once, not per invocation. A staging queue is
written by one instance at a time, its **owner** (docs/ARCHITECTURE.md §3.7): the instance
that holds the queue's owner lease, an empty page blob ``_owners/<account>/<queue>`` in the
claim-check container. On shutdown (:func:`close_all`: called by the local host's workers when
told to terminate, and registered with ``atexit`` as the backstop of a normal interpreter exit)
every writer brings the catalog up to date and releases its lease, and then every owned queue
is released, so another instance can take over at once rather than after the leases run out.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import uuid
from dataclasses import dataclass

from vault_app.services import Services, StagingQueue
from vault_core.errors import LeaseLost, VaultError
from vault_core.pagelog import HeldLease
from vault_core.writer import AppendResult, Batch, StreamWriter

log = logging.getLogger("vault_app.writer")

WRITER_LEASE_SECONDS = 15
"""Azure's shortest lease: if a writer process dies, its stream is free again within 15 s.
The writer renews it during long appends, so a short lease costs nothing while alive."""

WRITER_IDLE_SECONDS = 10.0
"""How long a stream's writer (and its lease) stays open after its last append; a staging queue
stays owned this long after its last invocation."""

OWNER_BLOB_PREFIX = "_owners/"
"""Owner leases of the staging queues: ``_owners/<account>/<queue>`` in the claim-check
container. Empty page blobs: the lifecycle rule deletes only block blobs, and no claim-check
blob starts with ``_`` (stream names begin with a letter or digit)."""


@dataclass
class _Owned:
    """A staging queue this process owns: its lease, when it was last used and renewed, and how
    many invocations of it are running (a busy queue is never released)."""

    lease: HeldLease
    used: float
    renewed: float
    running: int = 0


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
        self._owned: dict[str, _Owned] = {}
        self.owner_id = str(uuid.uuid4())
        """The lease id of every owner lease taken here: taking a lease it already holds (say,
        after a renewal failed during a storage stall) succeeds instead of locking it out."""
        self._lock = threading.Lock()
        self._reaper: threading.Thread | None = None

    def append(self, services: Services, stream: str, batches: list[Batch]) -> list[AppendResult]:
        with self._lock:
            writer = self._take(stream)
        if writer is None:
            writer = services.vault.writer(
                stream, lease_seconds=WRITER_LEASE_SECONDS, **services.settings.writer_options
            )
        try:
            results = writer.append(batches)
        except LeaseLost:
            writer.close()
            writer = services.vault.writer(
                stream, lease_seconds=WRITER_LEASE_SECONDS, **services.settings.writer_options
            )
            results = writer.append(batches)
        except BaseException:
            writer.close()
            raise
        with self._lock:
            self._open[stream] = (writer, time.monotonic())
            self._start_reaper()
        return results

    # -- owning staging queues -------------------------------------------------------------
    def own(self, services: Services, queue: StagingQueue) -> bool:
        """Is this process the queue's owner (the one instance that writes its batches)?

        True if it owns the queue already, or took its free owner lease now; then the caller
        must call :meth:`done` when its invocation ends. False if another instance holds it.
        Raises StorageUnavailable if storage cannot say.
        """
        key = _key(queue)
        with self._lock:
            owned = self._owned.get(key)
            if owned is not None:
                owned.running += 1
                return True
        lease = services.claimcheck.lease_blob(OWNER_BLOB_PREFIX + key).acquire(
            WRITER_LEASE_SECONDS, self.owner_id
        )
        if lease is None:
            return False
        now = time.monotonic()
        with self._lock:
            owned = self._owned.setdefault(key, _Owned(lease, now, now))
            owned.running += 1
            self._start_reaper()
        log.info("this instance now owns staging queue %s", key)
        return True

    def done(self, queue: StagingQueue) -> None:
        """An invocation of an owned queue ended: the queue's idle time starts now."""
        with self._lock:
            owned = self._owned.get(_key(queue))
            if owned is not None:
                owned.running = max(0, owned.running - 1)
                owned.used = time.monotonic()

    def owned(self) -> list[str]:
        with self._lock:
            return sorted(self._owned)

    def keep_owned(self, now: float | None = None) -> None:
        """Release queues idle for idle_seconds; renew the others' leases every third of them."""
        now = time.monotonic() if now is None else now
        with self._lock:
            idle = [k for k, o in self._owned.items() if not o.running and now - o.used >= self.idle_seconds]
            # Released under the lock: an invocation starting meanwhile must not take the lease
            # again (same lease id) just before this release drops it.
            for key in idle:
                _release_owner(key, self._owned.pop(key).lease)
            due = [(k, o) for k, o in self._owned.items() if now - o.renewed >= WRITER_LEASE_SECONDS / 3]
        for key, owned in due:
            try:
                owned.lease.renew()
                owned.renewed = now
            except VaultError as exc:
                # Taken over after a stall, or storage down: forget it. If the lease is still
                # ours, the next invocation takes it again (same lease id); if not, it is a loser.
                log.info("ownership of staging queue %s not renewed: %s", key, exc)
                with self._lock:
                    if self._owned.get(key) is owned:
                        del self._owned[key]

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
        """Close every open writer now (catalog up to date, leases released), then release the
        owned queues: their next owner finds every stream free."""
        with self._lock:
            writers = [w for w, _ in self._open.values()]
            self._open.clear()
            owned = list(self._owned.items())
            self._owned.clear()
        self._close(writers)
        for key, o in owned:
            _release_owner(key, o.lease)

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
            # Writers first: a queue idles no sooner than the streams it carries, so its next
            # owner finds their leases released.
            self.close_idle()
            self.keep_owned()
            with self._lock:
                if not self._open and not self._owned:
                    return


def _key(queue: StagingQueue) -> str:
    return f"{queue.account}/{queue.name}"


def _release_owner(key: str, lease: HeldLease) -> None:
    try:
        lease.release()
        log.info("staging queue %s released", key)
    except VaultError as exc:  # expired or taken: nothing to release
        log.info("ownership of staging queue %s not released: %s", key, exc)


open_writers = OpenWriters()
atexit.register(open_writers.close_all)
