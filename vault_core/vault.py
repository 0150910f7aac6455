"""The vault: one storage account's streams, with their catalog and index."""

from __future__ import annotations

from datetime import datetime
from functools import cached_property
from typing import Protocol

from vault_core.clock import Clock, SystemClock
from vault_core.errors import FormatError
from vault_core.index import CatalogEntry, IndexTables
from vault_core.names import validate_stream_name
from vault_core.pagelog import CommitState, PageLog, PageLogs
from vault_core.reader import StreamReader
from vault_core.rows import Table
from vault_core.writer import StreamWriter, WriterSettings


class Storage(Protocol):
    """What a vault needs of a storage account: :class:`vault_core.azure.StorageAccount`, or
    :class:`vault_core.memory.MemoryAccount` in tests."""

    def page_blobs(self, container: str) -> PageLogs: ...

    def table(self, name: str) -> Table: ...

    def read_sas(
        self, container: str, blob: str, *, start: datetime, expiry: datetime
    ) -> tuple[str, str]: ...


class Vault:
    """Entry point for writers and readers of the streams in one account."""

    def __init__(
        self,
        account: Storage,
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
    def page_blobs(self) -> PageLogs:
        return self.account.page_blobs(self.container_name)

    @cached_property
    def index(self) -> IndexTables:
        return IndexTables.in_account(self.account, self.table_prefix)

    @cached_property
    def reader(self) -> StreamReader:
        return StreamReader(self.blob, self.index, clock=self.clock)

    def ensure(self) -> Vault:
        """Create the container and tables if they are missing (idempotent)."""
        self.page_blobs.create_if_missing()
        self.index.ensure_tables()
        return self

    def blob(self, stream: str) -> PageLog:
        return self.page_blobs.blob(validate_stream_name(stream))

    def read_access(self, stream: str, *, start: datetime, expiry: datetime) -> tuple[str, str]:
        """The URL of ``stream``'s blob and a read-only SAS for it alone, from ``start`` to ``expiry``."""
        return self.account.read_sas(
            self.container_name, validate_stream_name(stream), start=start, expiry=expiry
        )

    def writer(
        self,
        stream: str,
        settings: WriterSettings | None = None,
    ) -> StreamWriter:
        """Open the single writer of ``stream`` (raises StreamLeased if another holds it)."""
        return StreamWriter.open(self.blob(stream), self.index, settings, clock=self.clock)

    def streams(self) -> list[CatalogEntry]:
        """Every stream, its size and count as its commit record says them, in two requests.

        One blob listing with metadata returns every stream's commit record, so the numbers
        are exact as of that listing even if a writer died before refreshing the catalog row,
        which only contributes the creation time.
        """
        blobs = self.page_blobs.list()
        catalog = {e.stream: e for e in self.index.list_catalog()}
        out = []
        for b in blobs:
            known = catalog.get(b.name)
            try:
                state = CommitState.from_metadata(b.metadata, b.etag, b.size)
            except FormatError:  # written by a newer vault: report what the catalog knows
                if known:
                    out.append(known)
                continue
            out.append(
                CatalogEntry(
                    stream=b.name,
                    committed=state.committed,
                    count=state.count,
                    first_ts=state.first_ts,
                    last_ts=state.last_ts,
                    created=known.created if known else b.modified_ms,
                    updated=max(known.updated, b.modified_ms) if known else b.modified_ms,
                )
            )
        return out
