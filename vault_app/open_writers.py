"""Stream writers kept open between writer invocations, the staging queues this process owns,
and the reaper that closes idle ones.

A busy stream pays for its lease and its recovery once, not per invocation. A staging queue is
written by one instance at a time, its **owner** (docs/ARCHITECTURE.md §3.7): the instance
that holds the queue's owner lease, an empty page blob ``_owners/<account>/<queue>`` in the
claim-check container. Its leases, the queues' and the streams', are taken under the lease id of
this process's *instance* (vault_app.instance), each paired with an instance-wide file lock:
a live process of the instance excludes the others, and a replacement for one that died takes
its leases over at once. On shutdown (:meth:`OpenWriters.close_all`, when its
:class:`vault_app.runtime.Runtime` closes: the local host's workers close it when told to
terminate, and ``function_app.py`` registers the close with ``atexit`` as the backstop of a
normal interpreter exit) every writer brings the catalog up to date and releases its lease, and
then every owned queue is released, so another instance can take over at once rather than after
the leases run out.
"""

from __future__ import annotations

import enum
import logging
import os
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, replace

from vault_app.drained import DrainedFile
from vault_app.instance import HeldLock, Instance
from vault_app.services import Services, StagingQueue
from vault_core.blobstore import OwnerBlob
from vault_core.errors import LeaseLost, StreamLeased, VaultError
from vault_core.pagelog import HeldLease
from vault_core.writer import AppendResult, Batch, StreamWriter

log = logging.getLogger("vault_app.writer")

WRITER_LEASE_SECONDS = 15
"""Azure's shortest lease: if a writer process dies, its stream is free again within 15 s.
The writer renews it during long appends, so a short lease costs nothing while alive."""

WRITER_IDLE_SECONDS = 10.0
"""How long a stream's writer (and its lease) stays open after its last append; a staging queue
stays owned this long after its last invocation."""

OWNER_RENEW_SECONDS = WRITER_LEASE_SECONDS / 3
"""How often an owner renews its queue's lease (and writes down when, for the others)."""
TAKEOVER_POLL_SECONDS = 0.1
"""Between attempts to take a queue over around the moment its dead owner's lease runs out."""
TAKEOVER_WINDOW_SECONDS = 1.0
"""How long past that moment the attempts go on: a renewal written down late, clocks apart."""

OWNER_BLOB_PREFIX = "_owners/"
"""Owner leases of the staging queues: ``_owners/<account>/<queue>`` in the claim-check
container. Empty page blobs: the lifecycle rule deletes only block blobs, and no claim-check
blob starts with ``_`` (stream names begin with a letter or digit)."""


class Owner(enum.Enum):
    """Who owns a staging queue, as :meth:`OpenWriters.own` found it; true only for this process."""

    THIS_PROCESS = "this process"
    SIBLING = "another live process of this instance"
    OTHER_INSTANCE = "another instance"

    def __bool__(self) -> bool:
        return self is Owner.THIS_PROCESS


@dataclass
class _Owned:
    """A staging queue this process owns: its lease, when it was last used and renewed, how
    many invocations of it are running (a busy queue is never released), and the instance-wide
    lock that keeps the instance's other processes from taking the same lease."""

    lease: HeldLease
    used: float
    renewed: float
    running: int = 0
    lock: HeldLock | None = None
    blob: OwnerBlob | None = None
    """Where the renewals are written down (None: not written)."""

    def renew(self, now: float) -> None:
        """Renew the lease, then write down when (best effort: others only wait longer without)."""
        renewed_ms = time.time_ns() // 1_000_000
        self.lease.renew()
        self.renewed = now
        _mark(self.blob, self.lease, renewed_ms)

    def release(self, key: str) -> None:
        """Give the queue up: the lease first, then the lock (released the other way round,
        a sibling could take the lease under the same id just before this release drops it)."""
        try:
            self.lease.release()
            log.info("staging queue %s released", key)
        except VaultError as exc:  # expired or taken: nothing to release
            log.info("ownership of staging queue %s not released: %s", key, exc)
        finally:
            if self.lock is not None:
                self.lock.release()


class OpenWriters:
    """Writers kept open between invocations, so a busy stream pays for lease and recovery once.

    A writer closes (releasing its lease for other instances) after WRITER_IDLE_SECONDS without
    an append; one that lost its lease meanwhile is reopened. Invocations of one queue run one at
    a time (host.json), and a stream lives on one queue, so a writer is never shared at once;
    the lock covers the reaper.

    Every lease is taken under the lease id of ``instance`` (default: from the settings' platform
    instance id), so taking a lease it already holds (a dead sibling's, or its own after a
    renewal failed during a storage stall) succeeds instead of waiting it out.
    """

    def __init__(self, idle_seconds: float = WRITER_IDLE_SECONDS, instance: Instance | None = None) -> None:
        self.idle_seconds = idle_seconds
        self._open: dict[str, tuple[StreamWriter, float]] = {}
        self._streams: dict[str, HeldLock] = {}
        """The instance-wide lock of every stream whose writer is open here, or closing."""
        self._owned: dict[str, _Owned] = {}
        self._opening: dict[str, Future[StreamWriter]] = {}
        """Writers being opened ahead of their first append (:meth:`open_ahead`)."""
        self._instance = instance
        self._lock = threading.Lock()
        self._reaper: threading.Thread | None = None
        self._marks: dict[str, tuple[int | None, float]] = {}
        """Queue another instance owns → its owner's last renewal (Unix ms) and when that was read."""
        self._inherited: dict[str, float] = {}
        """Queue taken over as its owner's lease ran out → until when (monotonic) that owner's
        stream leases may still be live (:meth:`inherited`)."""

    def instance(self, services: Services) -> Instance:
        """The instance whose lease id this process's leases carry."""
        with self._lock:
            if self._instance is None:
                self._instance = Instance.from_env(services.settings.env)
            return self._instance

    def append(
        self, services: Services, stream: str, batches: list[Batch], *, break_dead_lease: bool = False
    ) -> list[AppendResult]:
        """Append under the stream's writer, opened here if it is not open. ``break_dead_lease``:
        the stream's queue was just taken over from an owner whose lease ran out (:meth:`inherited`),
        so a lease another instance holds on the stream is that dead owner's: broken, not waited out."""
        instance = self.instance(services)
        with self._lock:
            writer = self._take(stream)
            opening = self._opening.pop(stream, None) if writer is None else None
            if writer is None and opening is None:
                self._lock_stream(instance, stream)
        try:
            if opening is not None:
                try:
                    writer = opening.result()
                except StreamLeased:  # a lease the drain may have outlasted (a dead owner's): again
                    writer = None
            if writer is None:
                writer = self._open_or_break(services, instance, stream, break_dead_lease)
            try:
                results = writer.append(batches)
            except LeaseLost:
                writer.close()
                writer = None  # closed: nothing left for the handler below to close
                writer = self._open_writer(services, instance, stream)
                results = writer.append(batches)
        except BaseException:
            try:
                if writer is not None:
                    writer.close()
            finally:
                self._unlock_stream(stream)
            raise
        with self._lock:
            self._open[stream] = (writer, time.monotonic())
            self._start_reaper()
        return results

    def open_ahead(self, services: Services, stream: str) -> None:
        """Start opening the writer of ``stream`` in the background unless it is open here, so
        that its lease and recovery overlap what the invocation does before its first append (a
        queue's new owner drains while the dead owner's stream opens, docs/ARCHITECTURE.md
        §3.7). The next :meth:`append` to it takes the writer, or the open's error; call
        :meth:`keep_opened` when no append may come."""
        instance = self.instance(services)
        with self._lock:
            if stream in self._open or stream in self._opening:
                return
            try:
                self._lock_stream(instance, stream)
            except StreamLeased:
                return  # the append meets it again and hands its batches back
            opening: Future[StreamWriter] = Future()
            self._opening[stream] = opening

        def run() -> None:  # a thread of its own: a pool's threads would outlive the runtime
            try:
                opening.set_result(self._open_writer(services, instance, stream))
            except BaseException as exc:
                opening.set_exception(exc)

        threading.Thread(target=run, name=f"mv-open-ahead-{stream}", daemon=True).start()

    def keep_opened(self, stream: str) -> None:
        """A writer opened ahead that no append took: kept open like any other (the reaper
        closes it once idle), or, if its open failed, its lock given up."""
        with self._lock:
            opening = self._opening.pop(stream, None)
        if opening is None:
            return
        try:
            writer = opening.result()
        except Exception:
            self._unlock_stream(stream)
            return
        with self._lock:
            self._open[stream] = (writer, time.monotonic())
            self._start_reaper()

    def _lock_stream(self, instance: Instance, stream: str) -> None:
        """Take the stream's instance-wide lock before its writer opens (called under _lock)."""
        if stream in self._streams:  # its writer is closing: as if leased, hand the batch back
            raise StreamLeased(f"the writer of stream {stream!r} is closing")
        held = instance.try_lock("stream/" + stream)
        if held is None:
            raise StreamLeased(f"stream {stream!r} is open in another process of this instance")
        self._streams[stream] = held

    def _unlock_stream(self, stream: str) -> None:
        with self._lock:
            held = self._streams.pop(stream, None)
        if held is not None:
            held.release()

    def _open_or_break(
        self, services: Services, instance: Instance, stream: str, break_dead_lease: bool
    ) -> StreamWriter:
        try:
            return self._open_writer(services, instance, stream)
        except StreamLeased:
            if not break_dead_lease:
                raise
        # The queue's owner lease ran out before this process took it: its owner has not renewed
        # anything for 15 s, dead or stalled. Its stream lease, renewed by its last append, can
        # outlive the owner lease by a renewal period; waiting it out held the stream's batches
        # back (handed back and forth) for those seconds. If the owner only stalled, breaking it
        # makes its next write fail (LeaseLost): the lease still decides who writes (§3.7).
        log.info("breaking the lease on stream %s, held by its queue's dead owner", stream)
        services.vault.blob(stream).break_lease()
        return self._open_writer(services, instance, stream)

    def inherited(self, queue: StagingQueue) -> bool:
        """Whether this process took ``queue`` over as its owner's lease ran out, recently enough
        that the dead owner's stream leases may still be live (WRITER_LEASE_SECONDS)."""
        with self._lock:
            return time.monotonic() < self._inherited.get(_key(queue), 0.0)

    @staticmethod
    def _open_writer(services: Services, instance: Instance, stream: str) -> StreamWriter:
        vault = services.vault
        return StreamWriter.open(
            vault.blob(stream),
            vault.index,
            replace(services.settings.writer_settings, lease_seconds=WRITER_LEASE_SECONDS),
            clock=vault.clock,
            lease_id=instance.lease_id,
        )

    # -- owning staging queues -------------------------------------------------------------
    def own(self, services: Services, queue: StagingQueue) -> Owner:
        """Is this process the queue's owner (the one instance that writes its batches)?

        THIS_PROCESS (true) if it owns the queue already, or took its owner lease now (free, or
        held under this instance's lease id by a process that is gone); then the caller must
        call :meth:`done` when its invocation ends. Otherwise (false) who holds it: another live
        process of this instance, or another instance. Raises StorageUnavailable if storage
        cannot say.
        """
        key = _key(queue)
        with self._lock:
            owned = self._owned.get(key)
            if owned is not None:
                owned.running += 1
                return Owner.THIS_PROCESS
        instance = self.instance(services)
        held = instance.try_lock(OWNER_BLOB_PREFIX + key)
        if held is None:
            return Owner.SIBLING
        blob = services.claimcheck.lease_blob(OWNER_BLOB_PREFIX + key)
        try:
            acquired_ms = time.time_ns() // 1_000_000
            lease = blob.acquire(WRITER_LEASE_SECONDS, instance.lease_id)
        except BaseException:
            held.release()
            raise
        if lease is None:
            held.release()
            return Owner.OTHER_INSTANCE
        _mark(blob, lease, acquired_ms)
        now = time.monotonic()
        with self._lock:
            self._marks.pop(key, None)
            owned = self._owned.setdefault(key, _Owned(lease, now, now, lock=held, blob=blob))
            owned.running += 1
            self._start_reaper()
        if owned.lock is not held:  # taken meanwhile by another invocation here
            held.release()
        log.info("this instance now owns staging queue %s (process %d)", key, os.getpid())
        # A process of this instance that owned the queue and died: what it had drained.
        returned = self.drained(services, queue).return_to(queue.staging)
        if returned:
            log.info("%d messages a dead process had drained from %s are visible again", returned, key)
        return Owner.THIS_PROCESS

    def own_when_free(self, services: Services, queue: StagingQueue, within: float) -> Owner | None:
        """Another instance owns ``queue``: if its lease runs out within ``within`` seconds unless
        renewed (by the renewal its owner wrote down last), wait for that moment and take the
        queue over then, trying every TAKEOVER_POLL_SECONDS for TAKEOVER_WINDOW_SECONDS. The owner
        as :meth:`own` found it after the wait (THIS_PROCESS: call :meth:`done`), or None, at
        once, if the lease is not due to run out that soon (or nothing was written down).

        A dead instance's lease is taken over as it runs out, rather than at the first poll after
        (up to a pass's pause later, docs/ARCHITECTURE.md §3.7), for one read of the owner blob
        per OWNER_RENEW_SECONDS per queue, and one more before a wait."""
        key = _key(queue)
        blob = services.claimcheck.lease_blob(OWNER_BLOB_PREFIX + key)
        runs_out = self._runs_out(key, blob, fresh=False)
        if runs_out is None or runs_out - time.time() > within:
            return None
        runs_out = self._runs_out(key, blob, fresh=True)  # renewed since it was read?
        if runs_out is None or runs_out - time.time() > within:
            return None
        time.sleep(max(0.0, runs_out - time.time()))
        owner = Owner.OTHER_INSTANCE
        while True:
            try:
                owner = self.own(services, queue)
            except VaultError as exc:
                if not exc.retriable:
                    raise
            if owner is not Owner.OTHER_INSTANCE or time.time() >= runs_out + TAKEOVER_WINDOW_SECONDS:
                break
            time.sleep(TAKEOVER_POLL_SECONDS)
        if owner:
            with self._lock:
                self._inherited[key] = time.monotonic() + WRITER_LEASE_SECONDS
            log.info(
                "staging queue %s taken over %.2f s after its owner's lease ran out",
                key,
                time.time() - runs_out,
            )
        return owner

    def _runs_out(self, key: str, blob: OwnerBlob, *, fresh: bool) -> float | None:
        """When the owner lease of ``key`` runs out unless renewed (Unix time), from the renewal
        its owner wrote down: read again if ``fresh``, or if read OWNER_RENEW_SECONDS ago."""
        now = time.monotonic()
        with self._lock:
            cached = self._marks.get(key)
        if fresh or cached is None or now - cached[1] >= OWNER_RENEW_SECONDS:
            try:
                cached = (blob.renewed_ms(), now)
            except VaultError:
                return None
            with self._lock:
                self._marks[key] = cached
        renewed_ms = cached[0]
        return None if renewed_ms is None else renewed_ms / 1000 + WRITER_LEASE_SECONDS

    def drained(self, services: Services, queue: StagingQueue) -> DrainedFile:
        """Where the owner of ``queue`` writes down the messages it holds (vault_app.drained)."""
        return DrainedFile(self.instance(services).path(OWNER_BLOB_PREFIX + _key(queue), ".drained"))

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
                self._owned.pop(key).release(key)
            due = [(k, o) for k, o in self._owned.items() if now - o.renewed >= OWNER_RENEW_SECONDS]
        for key, owned in due:
            try:
                owned.renew(now)
            except VaultError as exc:
                # Taken over after a stall, or storage down: forget it. If the lease is still
                # ours, the next invocation takes it again (same lease id); if not, it is a loser.
                log.info("ownership of staging queue %s not renewed: %s", key, exc)
                with self._lock:
                    if self._owned.get(key) is owned:
                        del self._owned[key]
                        if owned.lock is not None:
                            owned.lock.release()

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
            opening = list(self._opening)
        for stream in opening:
            self.keep_opened(stream)
        with self._lock:
            writers = [w for w, _ in self._open.values()]
            self._open.clear()
            owned = list(self._owned.items())
            self._owned.clear()
        self._close(writers)
        for key, o in owned:
            o.release(key)

    def _close(self, writers: list[StreamWriter]) -> None:
        for w in writers:
            try:
                w.close()
            except VaultError as exc:
                log.warning("closing the writer of %s: %s", w.stream, exc)
            finally:  # after the lease's release: a sibling may take the stream now
                self._unlock_stream(w.stream)

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


def _mark(blob: OwnerBlob | None, lease: HeldLease, renewed_ms: int) -> None:
    """Write down when an owner lease was taken or renewed (:meth:`OpenWriters.own_when_free`);
    best effort: without it, another instance takes the queue over at its next poll after the
    lease ran out, as before."""
    if blob is None:
        return
    try:
        blob.mark_renewed(lease, renewed_ms)
    except VaultError as exc:
        log.info("could not write down the renewal of %s: %s", blob.name, exc)
