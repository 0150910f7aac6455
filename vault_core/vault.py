"""The vault: one storage account's streams, with their catalog and index."""

from __future__ import annotations

from functools import cached_property

from azure.storage.blob import BlobServiceClient, ContainerClient

from vault_core.azure import StorageAccount, create_if_missing
from vault_core.clock import Clock, SystemClock
from vault_core.index import CatalogEntry, IndexTables
from vault_core.names import validate_stream_name
from vault_core.pageblob import StreamBlob
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
        return IndexTables(self.account.table_service(), self.table_prefix)

    @cached_property
    def reader(self) -> StreamReader:
        return StreamReader(self.container, self.index, clock=self.clock)

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
        return self.index.list_catalog()
