"""A storage account in memory: page blobs with leases and ETags, tables, queues and ordinary
blobs, for fast tests.

:class:`MemoryAccount` hands out what an Azure storage account does (``page_blobs``, ``table``,
``queue``, ``blob_container``), and behaves as the Azure adapters do where the vault and the app
rely on it: every page write and commit is conditional on the lease and the ETag
(else :class:`~vault_core.errors.LeaseLost`), a held lease refuses a second writer
(:class:`~vault_core.errors.StreamLeased`) until it expires by the injected clock, table writes
are conditional on ETags, and rows come back in key order; a received queue message stays
invisible for its visibility timeout, and only its latest receipt changes or deletes it;
a blob is written once, and an owner-lease blob has one holder at a time. It also answers the
request path's async reads (``async_reads``: commit records and queue lengths, for long polls and
/health) and hands out a read SAS's fields. ``tests/test_contracts.py`` runs the
same contract against these and against Azurite, so a test of the writer's protocol, its lease
renewal or its crash windows can run here in milliseconds (with a
:class:`~vault_core.clock.ManualClock`), while the Azurite and kill -9 tests stay the end-to-end
proof.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Protocol
from urllib.parse import urlencode

from vault_core.clock import Clock, SystemClock
from vault_core.errors import (
    LeaseLost,
    NotFound,
    StorageFailure,
    StorageUnavailable,
    StreamLeased,
    StreamNotFound,
    VaultError,
)
from vault_core.pagelog import MAX_PAGE_WRITE, PAGE_SIZE, CommitState, HeldLease, ListedBlob
from vault_core.queueing import QueuedMessage
from vault_core.rows import EVERY_ROW, Fields, KeyRange, Row, Value

_etags = itertools.count(1)


def _etag() -> str:
    return f'"0x{next(_etags):016X}"'


# -- page blobs ------------------------------------------------------------------------------
@dataclass
class _Blob:
    data: bytearray = field(default_factory=bytearray)
    """The pages up to the last one written. The blob's other pages, up to ``size``, are zeros,
    as Azure's unwritten pages read: not kept, since a writer grows a blob 16 MiB or more at a
    time, and making and copying those zeros was most of an in-memory append's CPU."""
    size: int = 0
    metadata: dict[str, str] = field(default_factory=dict)
    etag: str = field(default_factory=_etag)
    modified_ms: int = 0
    lease_id: str | None = None
    lease_seconds: int = 0
    lease_until: float = 0.0


def _pages(b: _Blob, start: int, length: int) -> bytes:
    """Bytes ``[start, start+length)`` of ``b``, as far as its end: unwritten pages are zeros."""
    end = min(start + max(0, length), b.size)
    if end <= start:
        return b""
    kept = bytes(b.data[start:end])
    return kept if len(kept) == end - start else kept + bytes(end - start - len(kept))


class _Leased(Protocol):
    def _renew(self, lease_id: str) -> None: ...

    def _release(self, lease_id: str) -> None: ...


class MemoryLease:
    """A lease on a :class:`MemoryPageBlob` or a :class:`MemoryOwnerBlob` (a
    :class:`~vault_core.pagelog.HeldLease`)."""

    def __init__(self, blob: _Leased, lease_id: str) -> None:
        self._blob = blob
        self._id = lease_id

    @property
    def id(self) -> str:
        return self._id

    def renew(self) -> None:
        self._blob._renew(self._id)

    def release(self) -> None:
        self._blob._release(self._id)


class MemoryPageBlob:
    """One stream's page blob in memory (a :class:`~vault_core.pagelog.PageLog`)."""

    def __init__(self, container: MemoryPageBlobs, stream: str) -> None:
        self._container = container
        self.stream = stream

    # -- reads ---------------------------------------------------------------------------
    def state(self) -> CommitState:
        with self._container.lock:
            b = self._stored()
            return CommitState.from_metadata(dict(b.metadata), b.etag, b.size)

    def read(self, start: int, length: int) -> bytes:
        if length <= 0:
            return b""
        with self._container.lock:
            return _pages(self._stored(), start, length)

    def read_with_state(self, start: int, length: int) -> tuple[bytes, CommitState]:
        with self._container.lock:
            b = self._stored()
            state = CommitState.from_metadata(dict(b.metadata), b.etag, b.size)
            return _pages(b, start, length), state

    # -- lifecycle -----------------------------------------------------------------------
    def create_if_missing(self) -> None:
        with self._container.lock:
            if self.stream not in self._container.blobs:
                self._container.blobs[self.stream] = _Blob(
                    metadata=CommitState().to_metadata(), modified_ms=self._container.clock.now_ms()
                )

    def acquire_lease(self, seconds: int, lease_id: str | None = None) -> HeldLease:
        with self._container.lock:
            b = self._stored()
            if self._held(b) and (lease_id is None or b.lease_id != lease_id):
                raise StreamLeased(f"stream {self.stream!r} is leased by another writer")
            b.lease_id, b.lease_seconds = lease_id or str(uuid.uuid4()), seconds
            b.lease_until = self._container.clock.monotonic() + seconds
            return MemoryLease(self, b.lease_id)

    def break_lease(self) -> None:
        with self._container.lock:
            self._stored().lease_id = None

    # -- conditional writes ----------------------------------------------------------------
    def resize(self, size: int, lease: HeldLease, etag: str) -> str:
        assert size % PAGE_SIZE == 0
        with self._container.lock:
            b = self._writable(lease, etag)
            del b.data[size:]
            b.size = size
            return self._changed(b)

    def write_pages(self, offset: int, data: bytes | memoryview, lease: HeldLease, etag: str) -> str:
        assert offset % PAGE_SIZE == 0 and len(data) % PAGE_SIZE == 0 and len(data) <= MAX_PAGE_WRITE
        with self._container.lock:
            b = self._writable(lease, etag)
            if offset + len(data) > b.size:
                raise StorageFailure("pages past the end of the blob", status=416, code="InvalidPageRange")
            if offset > len(b.data):
                b.data.extend(bytes(offset - len(b.data)))  # the zero pages before these are kept now
            b.data[offset : offset + len(data)] = data
            return self._changed(b)

    def commit(self, state: CommitState, lease: HeldLease, etag: str) -> str:
        with self._container.lock:
            b = self._writable(lease, etag)
            b.metadata = state.to_metadata()
            return self._changed(b)

    # -- the rules, as Azure applies them ----------------------------------------------------
    def _stored(self) -> _Blob:
        b = self._container.blobs.get(self.stream)
        if b is None:
            raise StreamNotFound(f"stream {self.stream!r} does not exist")
        return b

    def _held(self, b: _Blob) -> bool:
        return b.lease_id is not None and self._container.clock.monotonic() < b.lease_until

    def _writable(self, lease: HeldLease, etag: str) -> _Blob:
        b = self._stored()
        if not self._held(b) or b.lease_id != lease.id or b.etag != etag:
            raise LeaseLost(
                f"this writer lost its lease on stream {self.stream!r} (or the blob changed under it); "
                "it stopped writing"
            )
        return b

    def _changed(self, b: _Blob) -> str:
        b.etag = _etag()
        b.modified_ms = self._container.clock.now_ms()
        return b.etag

    def _renew(self, lease_id: str) -> None:
        # Azure renews an expired lease too, as long as nobody has leased the blob since.
        with self._container.lock:
            b = self._stored()
            if b.lease_id != lease_id:
                raise LeaseLost(f"the lease on stream {self.stream!r} was taken or broken")
            b.lease_until = self._container.clock.monotonic() + b.lease_seconds

    def _release(self, lease_id: str) -> None:
        with self._container.lock:
            b = self._stored()
            if b.lease_id != lease_id:
                raise LeaseLost(f"the lease on stream {self.stream!r} was taken or broken")
            b.lease_id = None


class MemoryPageBlobs:
    """A container of page blobs in memory (a :class:`~vault_core.pagelog.PageLogs`)."""

    def __init__(self, name: str, clock: Clock) -> None:
        self.name = name
        self.clock = clock
        self.blobs: dict[str, _Blob] = {}
        self.lock = threading.RLock()

    def create_if_missing(self) -> None:
        pass  # always there

    def blob(self, stream: str) -> MemoryPageBlob:
        return MemoryPageBlob(self, stream)

    def list(self) -> list[ListedBlob]:
        with self.lock:
            return [
                ListedBlob(name, dict(b.metadata), b.etag, b.size, b.modified_ms)
                for name, b in sorted(self.blobs.items())
            ]


# -- tables ----------------------------------------------------------------------------------
class MemoryTable:
    """One table in memory (a :class:`~vault_core.rows.Table`)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._created = False
        self._rows: dict[tuple[str, str], tuple[dict[str, Value], str]] = {}
        self._lock = threading.RLock()

    def create_if_missing(self) -> None:
        self._created = True

    def _require(self) -> None:
        if not self._created:
            raise NotFound(f"not found: table {self.name!r}")

    def _row(self, partition: str, key: str) -> Row:
        fields, etag = self._rows[(partition, key)]
        return Row(partition, key, dict(fields), etag)

    def get(self, partition: str, key: str) -> Row | None:
        with self._lock:
            return self._row(partition, key) if (partition, key) in self._rows else None

    def query(self, where: KeyRange = EVERY_ROW, *, top: int | None = None) -> list[Row]:
        with self._lock:
            self._require()
            found = [self._row(p, k) for p, k in sorted(self._rows) if where.contains(p, k)]
        return found if top is None else found[:top]

    def rows(self, partition: str, keys: Sequence[str]) -> list[Row]:
        with self._lock:
            self._require()
            return [self._row(partition, k) for k in sorted(set(keys)) if (partition, k) in self._rows]

    def insert(self, partition: str, key: str, fields: Fields) -> str | None:
        with self._lock:
            self._require()
            if (partition, key) in self._rows:
                return None
            return self._put(partition, key, dict(fields))

    def upsert(self, partition: str, key: str, fields: Fields, *, merge: bool = True) -> str:
        with self._lock:
            self._require()
            old = self._rows.get((partition, key), ({}, ""))[0] if merge else {}
            return self._put(partition, key, {**old, **fields})

    def update(
        self, partition: str, key: str, fields: Fields, *, etag: str | None = None, merge: bool = True
    ) -> str | None:
        with self._lock:
            self._require()
            current = self._rows.get((partition, key))
            if current is None or (etag is not None and current[1] != etag):
                return None
            return self._put(partition, key, {**(current[0] if merge else {}), **fields})

    def delete(self, partition: str, key: str) -> None:
        with self._lock:
            self._require()
            self._rows.pop((partition, key), None)

    def replace_all(self, partition: str, rows: Sequence[tuple[str, Fields]]) -> None:
        with self._lock:
            self._require()
            for key, fields in rows:
                self._put(partition, key, dict(fields))

    def _put(self, partition: str, key: str, fields: dict[str, Value]) -> str:
        etag = _etag()
        self._rows[(partition, key)] = (fields, etag)
        return etag


# -- queues ----------------------------------------------------------------------------------
@dataclass
class _Stored:
    body: str
    inserted: datetime
    visible_at: float
    receipt: str = ""
    dequeue_count: int = 0


class MemoryQueue:
    """One storage queue in memory (a :class:`~vault_core.queueing.MessageQueue`); visibility
    follows the account's clock."""

    def __init__(self, name: str, clock: Clock) -> None:
        self.name = name
        self._clock = clock
        self._created = False
        self._messages: dict[str, _Stored] = {}  # in the order sent
        self._lock = threading.Lock()

    def create_if_missing(self) -> None:
        self._created = True

    def send(self, text: str, *, visible_in: int = 0, retry: bool = True) -> QueuedMessage:
        with self._lock:
            if not self._created:
                raise StorageUnavailable(f"queue {self.name!r} does not exist")
            inserted = datetime.fromtimestamp(self._clock.now_ms() / 1000, timezone.utc)
            message_id, receipt = str(uuid.uuid4()), uuid.uuid4().hex
            visible_at = self._clock.monotonic() + visible_in
            self._messages[message_id] = _Stored(text, inserted, visible_at, receipt)
            return QueuedMessage(message_id, text, receipt, inserted)

    def receive(self, count: int, visibility: int, *, retry: bool = True) -> list[QueuedMessage]:
        with self._lock:
            now = self._clock.monotonic()
            out = []
            for message_id, m in self._visible(now)[:count]:
                m.visible_at, m.receipt = now + visibility, uuid.uuid4().hex
                m.dequeue_count += 1
                out.append(QueuedMessage(message_id, m.body, m.receipt, m.inserted, m.dequeue_count))
            return out

    def peek(self, count: int) -> list[QueuedMessage]:
        with self._lock:
            visible = self._visible(self._clock.monotonic())[:count]
            return [QueuedMessage(message_id, m.body, "", m.inserted) for message_id, m in visible]

    def hide(self, message: QueuedMessage, seconds: int, *, retry: bool = True) -> None:
        with self._lock:
            m = self._received(message)
            m.visible_at, m.receipt = self._clock.monotonic() + seconds, uuid.uuid4().hex
            message.receipt = m.receipt

    def delete(self, message: QueuedMessage, *, retry: bool = True) -> None:
        with self._lock:
            self._received(message)
            del self._messages[message.id]

    def approximate_count(self, *, retry: bool = True) -> int | None:
        with self._lock:
            if not self._created:
                raise NotFound(f"not found: queue {self.name!r}")
            return len(self._messages)

    def _visible(self, now: float) -> list[tuple[str, _Stored]]:
        return [(message_id, m) for message_id, m in self._messages.items() if m.visible_at <= now]

    def _received(self, message: QueuedMessage) -> _Stored:
        m = self._messages.get(message.id)
        if m is None:
            raise NotFound(f"not found: message {message.id} of queue {self.name!r}")
        if m.receipt != message.receipt:
            raise StorageFailure("a stale pop receipt", status=400, code="PopReceiptMismatch")
        return m


# -- ordinary blobs ----------------------------------------------------------------------------
class MemoryOwnerBlob:
    """An owner-lease blob in a :class:`MemoryBlobContainer` (a
    :class:`~vault_core.blobstore.OwnerBlob`)."""

    def __init__(self, container: MemoryBlobContainer, name: str) -> None:
        self._container = container
        self.name = name

    def acquire(self, seconds: int, lease_id: str) -> HeldLease | None:
        c = self._container
        with c.lock:
            c.blobs.setdefault(self.name, b"")
            held = c.leases.get(self.name)
            if held is not None and held[0] != lease_id and c.clock.monotonic() < held[1]:
                return None
            c.leases[self.name] = (lease_id, c.clock.monotonic() + seconds, seconds)
            return MemoryLease(self, lease_id)

    def _renew(self, lease_id: str) -> None:
        c = self._container
        with c.lock:
            held = c.leases.get(self.name)
            if held is None or held[0] != lease_id:
                raise LeaseLost(f"the lease on blob {self.name!r} was taken or broken")
            c.leases[self.name] = (lease_id, c.clock.monotonic() + held[2], held[2])

    def _release(self, lease_id: str) -> None:
        c = self._container
        with c.lock:
            held = c.leases.get(self.name)
            if held is None or held[0] != lease_id:
                raise LeaseLost(f"the lease on blob {self.name!r} was taken or broken")
            del c.leases[self.name]

    def mark_renewed(self, lease: HeldLease, renewed_ms: int) -> None:
        c = self._container
        with c.lock:
            held = c.leases.get(self.name)
            if held is None or held[0] != lease.id or c.clock.monotonic() >= held[1]:
                raise LeaseLost(f"the lease on blob {self.name!r} was taken or broken")
            c.marks[self.name] = renewed_ms

    def renewed_ms(self) -> int | None:
        with self._container.lock:
            return self._container.marks.get(self.name)


class MemoryBlobContainer:
    """A container of ordinary blobs in memory (a :class:`~vault_core.blobstore.BlobStore`)."""

    def __init__(self, name: str, clock: Clock) -> None:
        self.name = name
        self.clock = clock
        self.created = False
        self.blobs: dict[str, bytes] = {}
        self.leases: dict[str, tuple[str, float, int]] = {}  # blob: (lease id, until, seconds)
        self.marks: dict[str, int] = {}  # owner blob: its holder's last renewal (Unix ms)
        self.lock = threading.RLock()

    def create_if_missing(self) -> None:
        self.created = True

    def upload_new(self, name: str, data: bytes) -> None:
        with self.lock:
            if not self.created:
                raise NotFound(f"not found: container {self.name!r}")
            if name in self.blobs:
                raise StorageFailure(f"blob {name!r} exists", status=409, code="BlobAlreadyExists")
            self.blobs[name] = bytes(data)

    def download(self, name: str) -> bytes | None:
        with self.lock:
            return self.blobs.get(name)

    def delete_many(self, names: Sequence[str]) -> None:
        with self.lock:
            for name in names:
                if name not in self.leases:  # Azure refuses to delete a leased blob
                    self.blobs.pop(name, None)

    def lease_blob(self, name: str) -> MemoryOwnerBlob:
        return MemoryOwnerBlob(self, name)


class BytesLog:
    """A committed log held as bytes (``data`` is the log from offset 0 to its committed end),
    read as a scan reads a stream's page blob, each read a new ``bytes``: for reading a log that
    is in memory already (a downloaded blob, a log built by hand) with the readers of
    :mod:`vault_core.reader`."""

    def __init__(self, data: bytes, stream: str = "bytes", record_format: int = 2) -> None:
        self.data = data
        self.stream = stream
        self.record_format = record_format

    def state(self) -> CommitState:
        return CommitState(committed=len(self.data), format=self.record_format)

    def read(self, start: int, length: int) -> bytes:
        return self.data[start : start + length]

    def read_with_state(self, start: int, length: int) -> tuple[bytes, CommitState]:
        return self.read(start, length), self.state()


# -- the account -----------------------------------------------------------------------------
class MemoryAccount:
    """Page blob containers, tables, queues and blob containers by name, the same object for a
    name for the account's life; lease expiry and queue visibility follow ``clock`` (a
    ManualClock in tests)."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock or SystemClock()
        self._containers: dict[str, MemoryPageBlobs] = {}
        self._tables: dict[str, MemoryTable] = {}
        self._queues: dict[str, MemoryQueue] = {}
        self._blob_containers: dict[str, MemoryBlobContainer] = {}
        self._lock = threading.Lock()

    def queue(self, name: str) -> MemoryQueue:
        with self._lock:
            return self._queues.setdefault(name, MemoryQueue(name, self.clock))

    def blob_container(self, name: str) -> MemoryBlobContainer:
        with self._lock:
            return self._blob_containers.setdefault(name, MemoryBlobContainer(name, self.clock))

    def page_blobs(self, container: str) -> MemoryPageBlobs:
        with self._lock:
            return self._containers.setdefault(container, MemoryPageBlobs(container, self.clock))

    def table(self, name: str) -> MemoryTable:
        with self._lock:
            return self._tables.setdefault(name, MemoryTable(name))

    def read_sas(self, container: str, blob: str, *, start: datetime, expiry: datetime) -> tuple[str, str]:
        """A read SAS's fields as Azure writes them (read-only, one blob, start and expiry), for
        an address only this process knows: what the app hands out can be checked, not used."""
        fields = {"st": _sas_time(start), "se": _sas_time(expiry), "sr": "b", "sp": "r"}
        return f"memory://{container}/{blob}", urlencode(fields)

    def async_reads(self) -> MemoryAsyncReads:
        """The request path's async reads (:class:`vault_core.aio.AsyncReads`) of this account."""
        return MemoryAsyncReads(self)


def _sas_time(t: datetime) -> str:
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class MemoryAsyncReads:
    """What a long poll or a health probe reads while it waits, from a memory account: the
    same answers as :class:`vault_core.aio.AsyncClients` over Azure, at once."""

    def __init__(self, account: MemoryAccount) -> None:
        self._account = account

    async def commit_state(self, container: str, stream: str) -> CommitState:
        return self._account.page_blobs(container).blob(stream).state()

    async def commit_states(self, container: str, most: int) -> dict[str, CommitState]:
        found: dict[str, CommitState] = {}
        for b in self._account.page_blobs(container).list():
            try:
                found[b.name] = CommitState.from_metadata(b.metadata, b.etag, b.size)
            except VaultError:
                continue  # not a stream of a format this reader knows, as over Azure
            if len(found) > most:
                break
        return found

    async def queue_length(self, queue: str) -> int:
        return self._account.queue(queue).approximate_count() or 0
