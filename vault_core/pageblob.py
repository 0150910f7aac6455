"""One stream's page blob: conditional page writes, the commit record, range reads.

The *commit record* is the blob's own metadata. It is the one place the committed length
lives, and it changes only through :meth:`StreamBlob.commit`: a single ``Set Blob
Metadata`` call under the writer's lease and ``If-Match`` the ETag of the writer's last
page write. Readers never look past ``committed``; bytes beyond it are scratch space.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from azure.core import MatchConditions
from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError
from azure.storage.blob import BlobClient, BlobLeaseClient, ContainerClient

from vault_core.errors import NotFound, StreamLeased, StreamNotFound, UnsupportedVersion
from vault_core.recordformat import MAX_OFFSET
from vault_core.translation import create_if_missing, translate_errors

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


@dataclass(frozen=True)
class CommittedBatch:
    """A producer batch that a commit made durable: its id and the offsets it got."""

    batch_id: str
    first_offset: int
    next_offset: int
    count: int
    timestamp: int

    def encode(self) -> str:
        return f"{self.batch_id}:{self.first_offset}:{self.next_offset}:{self.count}:{self.timestamp}"

    @classmethod
    def decode(cls, text: str) -> CommittedBatch:
        batch_id, first, nxt, count, ts = text.split(":")
        return cls(batch_id, int(first), int(nxt), int(count), int(ts))


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

    def to_metadata(self) -> dict[str, str]:
        meta = {META_FORMAT: "1", META_COMMITTED: str(self.committed), META_COUNT: str(self.count)}
        if self.first_ts is not None:
            meta[META_FIRST_TS] = str(self.first_ts)
        if self.last_ts is not None:
            meta[META_LAST_TS] = str(self.last_ts)
        if self.batches:
            meta[META_BATCHES] = ",".join(b.encode() for b in self.batches)
        return meta

    @classmethod
    def from_metadata(cls, meta: dict[str, str], etag: str | None, blob_size: int) -> CommitState:
        def opt(key: str) -> int | None:
            return int(meta[key]) if meta.get(key) else None

        if meta.get(META_FORMAT, "1") != "1":
            raise UnsupportedVersion(
                f"stream blob has commit-record format {meta[META_FORMAT]!r}; this reader knows format 1"
            )
        batches = tuple(CommittedBatch.decode(t) for t in meta.get(META_BATCHES, "").split(",") if t)
        return cls(
            committed=int(meta.get(META_COMMITTED, "0")),
            count=int(meta.get(META_COUNT, "0")),
            first_ts=opt(META_FIRST_TS),
            last_ts=opt(META_LAST_TS),
            batches=batches,
            etag=etag,
            blob_size=blob_size,
        )


class Lease:
    """A lease this process holds on a blob. Every write to a leased blob carries it."""

    def __init__(self, client: BlobLeaseClient, name: str) -> None:
        self.client = client
        self.name = name

    @property
    def id(self) -> str:
        return str(self.client.id)

    def renew(self) -> None:
        """Renew for another full duration; raises LeaseLost if it expired and was taken."""
        with translate_errors(self.name):
            self.client.renew()

    def release(self) -> None:
        """Give the blob up at once (raises a VaultError if the lease expired or was taken)."""
        with translate_errors(self.name):
            self.client.release()


class LeaseBlob:
    """An empty page blob that exists to be leased: whoever holds its lease owns something
    (a staging queue, docs/ARCHITECTURE.md §3.7)."""

    def __init__(self, client: BlobClient) -> None:
        self.client = client
        self.name = client.blob_name

    def acquire(self, seconds: int, lease_id: str) -> Lease | None:
        """The lease under ``lease_id``, or None if another holder has it; the blob is created first
        if it is missing. Taking a lease this ``lease_id`` already holds succeeds (and renews it)."""
        for _ in range(2):
            try:
                with translate_errors():
                    return Lease(
                        self.client.acquire_lease(lease_duration=seconds, lease_id=lease_id), self.name
                    )
            except StreamLeased:
                return None
            except NotFound:  # its first holder: create the blob, then lease it
                with translate_errors():
                    try:
                        self.client.create_page_blob(size=0, match_condition=MatchConditions.IfMissing)
                    except ResourceExistsError:
                        pass
        return None


class StreamBlob:
    """The page blob of one stream. Every write method takes the lease and an ETag."""

    def __init__(self, client: BlobClient, stream: str | None = None) -> None:
        self.client = client
        self.stream = stream or client.blob_name

    @classmethod
    def from_url(cls, url: str, stream: str) -> StreamBlob:
        """The blob at ``url``, which carries its credential (a SAS) in its query string."""
        return cls(BlobClient.from_blob_url(url), stream)

    # -- reads ---------------------------------------------------------------------------
    def state(self) -> CommitState:
        with translate_errors(self.stream):
            props = self.client.get_blob_properties()
        return CommitState.from_metadata(dict(props.metadata or {}), props.etag, props.size)

    def read(self, start: int, length: int) -> bytes:
        """Bytes ``[start, start+length)``; the caller keeps the range below ``committed``."""
        if length <= 0:
            return b""
        with translate_errors(self.stream):
            return self.client.download_blob(offset=start, length=length, max_concurrency=1).readall()

    def read_with_state(self, start: int, length: int) -> tuple[bytes, CommitState]:
        """One GET: the bytes and the commit record returned with them (Get Blob returns metadata)."""
        with translate_errors(self.stream):
            try:
                downloader = self.client.download_blob(offset=start, length=length, max_concurrency=1)
                data = downloader.readall()
            except HttpResponseError as exc:
                if exc.status_code != 416:
                    raise
                return b"", self.state()  # a range at or past the blob's end: nothing there
        props = downloader.properties
        return data, CommitState.from_metadata(dict(props.metadata or {}), props.etag, props.size)

    # -- lifecycle -----------------------------------------------------------------------
    def create_if_missing(self) -> None:
        """Create an empty page blob; a no-op if the stream already exists (idempotent)."""
        with translate_errors(self.stream):
            try:
                self.client.create_page_blob(
                    size=0, metadata=CommitState().to_metadata(), match_condition=MatchConditions.IfMissing
                )
            except ResourceExistsError:
                pass

    def acquire_lease(self, seconds: int) -> Lease:
        """The stream's lease (raises StreamLeased if another writer holds it)."""
        with translate_errors(self.stream):
            try:
                return Lease(self.client.acquire_lease(lease_duration=seconds), self.stream)
            except ResourceNotFoundError as exc:
                raise StreamNotFound(f"stream {self.stream!r} does not exist") from exc

    def break_lease(self) -> None:
        """End whatever lease the blob has, at once: its writer's next write fails with LeaseLost."""
        with translate_errors(self.stream):
            BlobLeaseClient(self.client).break_lease(lease_break_period=0)

    # -- conditional writes: lease + If-Match the writer's last known ETag ---------------
    def resize(self, size: int, lease: Lease, etag: str) -> str:
        with translate_errors(self.stream):
            result = self.client.resize_blob(
                size, lease=lease.client, etag=etag, match_condition=MatchConditions.IfNotModified
            )
        return str(result["etag"])

    def write_pages(self, offset: int, data: bytes | memoryview, lease: Lease, etag: str) -> str:
        assert offset % PAGE_SIZE == 0 and len(data) % PAGE_SIZE == 0 and len(data) <= MAX_PAGE_WRITE
        with translate_errors(self.stream):
            result = self.client.upload_page(
                bytes(data),
                offset=offset,
                length=len(data),
                lease=lease.client,
                etag=etag,
                match_condition=MatchConditions.IfNotModified,
            )
        return str(result["etag"])

    def commit(self, state: CommitState, lease: Lease, etag: str) -> str:
        with translate_errors(self.stream):
            result = self.client.set_blob_metadata(
                state.to_metadata(),
                lease=lease.client,
                etag=etag,
                match_condition=MatchConditions.IfNotModified,
            )
        return str(result["etag"])


@dataclass(frozen=True)
class ListedBlob:
    """One blob of a container listing, with its metadata (a stream's commit record)."""

    name: str
    metadata: dict[str, str]
    etag: str | None
    size: int
    modified_ms: int


class PageBlobs:
    """The container that holds the streams' page blobs."""

    def __init__(self, client: ContainerClient) -> None:
        self.client = client
        self.name: str = client.container_name

    def create_if_missing(self) -> None:
        create_if_missing(self.client.create_container)

    def blob(self, stream: str) -> StreamBlob:
        return StreamBlob(self.client.get_blob_client(stream), stream)

    def list(self) -> list[ListedBlob]:
        """Every blob with its metadata: one listing, however many streams."""
        with translate_errors():
            return [
                ListedBlob(
                    b.name,
                    dict(b.metadata or {}),
                    b.etag,
                    b.size,
                    int(b.last_modified.timestamp() * 1000) if b.last_modified else 0,
                )
                for b in self.client.list_blobs(include=["metadata"])
            ]
