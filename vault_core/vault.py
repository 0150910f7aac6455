"""The vault: one storage account's streams, with their catalog and index."""

from __future__ import annotations

from functools import cached_property

from azure.storage.blob import BlobServiceClient, ContainerClient

from vault_core.azure import StorageAccount, create_if_missing, translate_errors
from vault_core.clock import Clock, SystemClock
from vault_core.errors import FormatError
from vault_core.index import CatalogEntry, IndexTables
from vault_core.names import validate_stream_name
from vault_core.pageblob import CommitState, StreamBlob
from vault_core.reader import StreamReader
from vault_core.writer import DEFAULT_LEASE_SECONDS, StreamWriter


class Vault:
    """Entry point for writers and readers of the streams in one account."""

    def __init__(
        self,
        account: StorageAccount,
        *,
        container: str = "streams",
        table_prefix: str = "mv",
        clock: Clock | None = None,
    ) -> None:
        self.account = account
        self.container_name = container
        self.table_prefix = table_prefix
        self.clock = clock or SystemClock()

    @cached_property
    def blob_service(self) -> BlobServiceClient:
        return self.account.blob_service()

    @cached_property
    def container(self) -> ContainerClient:
        return self.blob_service.get_container_client(self.container_name)

    @cached_property
    def index(self) -> IndexTables:
        return IndexTables.in_account(self.account, self.table_prefix)

    @cached_property
    def reader(self) -> StreamReader:
        return StreamReader(self.blob, self.index, clock=self.clock)

    def ensure(self) -> Vault:
        """Create the container and tables if they are missing (idempotent)."""
        create_if_missing(self.container.create_container)
        self.index.ensure_tables()
        return self

    def blob(self, stream: str) -> StreamBlob:
        return StreamBlob.in_container(self.container, validate_stream_name(stream))

    def writer(
        self, stream: str, *, lease_seconds: int = DEFAULT_LEASE_SECONDS, **options: int
    ) -> StreamWriter:
        """Open the single writer of ``stream`` (raises StreamLeased if another holds it)."""
        return StreamWriter.open(
            self.blob(stream), self.index, clock=self.clock, lease_seconds=lease_seconds, **options
        )

    def streams(self) -> list[CatalogEntry]:
        """Every stream, its size and count as its commit record says them, in two requests.

        One blob listing with metadata returns every stream's commit record, so the numbers
        are exact as of that listing even if a writer died before refreshing the catalog row,
        which only contributes the creation time.
        """
        with translate_errors():
            blobs = list(self.container.list_blobs(include=["metadata"]))
        catalog = {e.stream: e for e in self.index.list_catalog()}
        out = []
        for b in blobs:
            known = catalog.get(b.name)
            try:
                state = CommitState.from_metadata(dict(b.metadata or {}), b.etag, b.size)
            except FormatError:  # written by a newer vault: report what the catalog knows
                if known:
                    out.append(known)
                continue
            modified = int(b.last_modified.timestamp() * 1000) if b.last_modified else 0
            out.append(
                CatalogEntry(
                    stream=b.name,
                    committed=state.committed,
                    count=state.count,
                    first_ts=state.first_ts,
                    last_ts=state.last_ts,
                    created=known.created if known else modified,
                    updated=max(known.updated, modified) if known else modified,
                )
            )
        return out
