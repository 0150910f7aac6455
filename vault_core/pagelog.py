"""A stream's page blob as the vault lays it out (docs/FORMAT.md §6), and the interfaces through
which the writer and the readers use it. Pure: no SDK.

The *commit record* is the blob's own metadata. It is the one place the committed length
lives, and it changes only through :meth:`PageLog.commit`: a single ``Set Blob Metadata`` call
under the writer's lease and ``If-Match`` the ETag of the writer's last page write. Readers
never look past ``committed``; bytes beyond it are scratch space.

Implementations of :class:`ReadableLog`: :class:`vault_core.pageblob.StreamBlob` (the page blob;
also a :class:`PageLog`), :class:`vault_client.direct.SasBlob` (the page blob through a SAS that
renews itself), :class:`vault_client.rawlog.ApiLog` (the API's raw log route) and
:class:`vault_core.memory.MemoryPageBlob` (in memory, also a :class:`PageLog`).
``tests/test_contracts.py`` runs one contract against each of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from vault_core.errors import FormatError, UnsupportedVersion
from vault_core.recordformat import MAX_OFFSET

PAGE_SIZE = 512
MAX_PAGE_WRITE = 4 * 1024 * 1024
"""Azure's limit for one Put Page call."""
MAX_PAGE_BLOB_SIZE = 8 * 1024**4
"""Azure's page blob maximum (8 TiB)."""
assert MAX_PAGE_BLOB_SIZE <= MAX_OFFSET + 1, "every offset must fit the 48 bits of a message id"

# Commit-record metadata keys (the metadata is the commit record; see docs/FORMAT.md §6).
META_FORMAT = "mv_format"
META_COMMITTED = "mv_committed"
META_COUNT = "mv_count"
META_FIRST_TS = "mv_first_ts"
META_LAST_TS = "mv_last_ts"
META_BATCHES = "mv_batches"
KNOWN_FORMATS = ("1", "2")
"""``mv_format`` values this code reads: 2 is a log of version 1 records and/or version 2 units."""


Pieces = tuple[tuple[int, int], ...]
"""Runs of consecutive message offsets, ``(first offset, count)`` each (CommittedBatch.pieces)."""


def pieces_of(offsets: Iterable[int]) -> Pieces:
    """The runs of consecutive offsets in ``offsets`` (ascending), as ``(first offset, count)``."""
    runs: list[tuple[int, int]] = []
    for offset in offsets:
        if runs and runs[-1][0] + runs[-1][1] == offset:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((offset, 1))
    return tuple(runs)


@dataclass(frozen=True)
class CommittedBatch:
    """A producer batch that a commit made durable: its id and the offsets it got."""

    batch_id: str
    first_offset: int
    next_offset: int
    count: int
    timestamp: int
    pieces: Pieces = field(default=(), compare=False)
    """Where the messages of a batch written as version 2 units lie (docs/FORMAT.md §11.6): each
    ``(offset, count)`` is a run of consecutive message offsets, one per unit the batch spans, in
    order; the counts add up to ``count``. Empty for version 1 records, and where not known: the
    commit record does not carry them (the index's batch row does), and they identify nothing."""

    def encode(self) -> str:
        return f"{self.batch_id}:{self.first_offset}:{self.next_offset}:{self.count}:{self.timestamp}"

    @classmethod
    def decode(cls, text: str) -> CommittedBatch:
        fields = text.split(":")
        numbers = fields[1:]
        if len(fields) != 5 or not all(n.isascii() and n.isdigit() for n in numbers):
            raise FormatError(f"commit record mv_batches entry {text!r} is not id:first:next:count:ts")
        first, nxt, count, ts = map(int, numbers)
        return cls(fields[0], first, nxt, count, ts)


@dataclass(frozen=True)
class CommitState:
    """What the commit record says, plus the blob's current ETag and size."""

    committed: int = 0
    count: int = 0
    first_ts: int | None = None
    last_ts: int | None = None
    batches: tuple[CommittedBatch, ...] = ()
    etag: str | None = field(default=None, compare=False)
    blob_size: int = field(default=0, compare=False)
    format: int = 1
    """``mv_format``: 1 while every record is version 1; 2 once a commit wrote version 2 units
    (docs/FORMAT.md §11.1). It never goes back: the units stay in the log."""
    read_at: int | None = field(default=None, compare=False)
    """Where the bytes returned with this state begin, when not at the offset asked for: a read
    of a message inside a version 2 unit fetches from the unit's start (StreamReader.fetch)."""

    def to_metadata(self) -> dict[str, str]:
        meta = {
            META_FORMAT: str(self.format),
            META_COMMITTED: str(self.committed),
            META_COUNT: str(self.count),
        }
        if self.first_ts is not None:
            meta[META_FIRST_TS] = str(self.first_ts)
        if self.last_ts is not None:
            meta[META_LAST_TS] = str(self.last_ts)
        if self.batches:
            meta[META_BATCHES] = ",".join(b.encode() for b in self.batches)
        return meta

    @classmethod
    def from_metadata(cls, meta: dict[str, str], etag: str | None, blob_size: int) -> CommitState:
        def number(key: str, text: str) -> int:
            # digits only, as writers write them: int() would also take signs, spaces and "1_0"
            if not (text.isascii() and text.isdigit()):
                raise FormatError(f"commit record {key}={text!r} is not a decimal number")
            return int(text)

        def opt(key: str) -> int | None:
            return number(key, meta[key]) if meta.get(key) else None

        if meta.get(META_FORMAT, "1") not in KNOWN_FORMATS:
            raise UnsupportedVersion(
                f"stream blob has commit-record format {meta[META_FORMAT]!r};"
                " this reader knows formats 1 and 2"
            )
        batches = tuple(CommittedBatch.decode(t) for t in meta.get(META_BATCHES, "").split(",") if t)
        return cls(
            committed=number(META_COMMITTED, meta.get(META_COMMITTED, "0")),
            count=number(META_COUNT, meta.get(META_COUNT, "0")),
            first_ts=opt(META_FIRST_TS),
            last_ts=opt(META_LAST_TS),
            batches=batches,
            etag=etag,
            blob_size=blob_size,
            format=int(meta.get(META_FORMAT, "1")),
        )


@dataclass(frozen=True)
class ListedBlob:
    """One blob of a container listing, with its metadata (a stream's commit record)."""

    name: str
    metadata: dict[str, str]
    etag: str | None
    size: int
    modified_ms: int


class ReadableLog(Protocol):
    """One stream's committed log, read-only. Safe to share between threads."""

    @property
    def stream(self) -> str: ...

    def state(self) -> CommitState:
        """The commit record now (raises StreamNotFound for a stream never written)."""
        ...

    def read(self, start: int, length: int) -> bytes:
        """Bytes ``[start, start+length)`` of the log; the caller keeps the range below ``committed``."""
        ...

    def read_with_state(self, start: int, length: int) -> tuple[bytes, CommitState]:
        """Bytes from ``start`` (up to ``length``, fewer at the end of what storage holds, none from
        at or past it) and the commit record, read together: one request where storage allows."""
        ...


LogOpener = Callable[[str], ReadableLog]
"""The log of a stream by name (checking the name): how a reader reaches the streams it reads."""


class HeldLease(Protocol):
    """A lease this process holds on a blob; every write to the blob carries it."""

    @property
    def id(self) -> str: ...

    def renew(self) -> None:
        """Renew for another full duration; raises LeaseLost if it expired and was taken."""
        ...

    def release(self) -> None:
        """Give the blob up at once (raises a VaultError if the lease expired or was taken)."""
        ...


class PageLog(ReadableLog, Protocol):
    """A stream's page blob as its writer uses it: every write takes the lease and an ETag."""

    def create_if_missing(self) -> None:
        """Create an empty page blob with an empty commit record; a no-op if it exists."""
        ...

    def acquire_lease(self, seconds: int, lease_id: str | None = None) -> HeldLease:
        """The stream's lease (raises StreamLeased if another writer holds it), under
        ``lease_id`` if given (else a new one): taking a lease this id already holds succeeds
        (and renews it), so a writer that died holding it can be succeeded at once."""
        ...

    def break_lease(self) -> None:
        """End whatever lease the blob has, at once: its holder's next write raises LeaseLost."""
        ...

    def resize(self, size: int, lease: HeldLease, etag: str) -> str:
        """Grow the blob to ``size`` (a multiple of PAGE_SIZE); the new ETag."""
        ...

    def write_pages(self, offset: int, data: bytes | memoryview, lease: HeldLease, etag: str) -> str:
        """Write whole pages at ``offset`` (at most MAX_PAGE_WRITE); the new ETag. Raises
        LeaseLost if the lease or the ETag does not match."""
        ...

    def commit(self, state: CommitState, lease: HeldLease, etag: str) -> str:
        """Replace the commit record, under the lease and If-Match ``etag``; the new ETag."""
        ...


class PageLogs(Protocol):
    """The container of every stream's page blob."""

    def create_if_missing(self) -> None: ...

    def blob(self, stream: str) -> PageLog: ...

    def list(self) -> list[ListedBlob]:
        """Every blob with its metadata (a stream's commit record), in one listing."""
        ...
