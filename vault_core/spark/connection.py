"""How Spark tasks reach the vault: plain strings that pickle, turned into SDK clients on use.

A :class:`Connection` travels inside every planned partition, to executors that may be on
other machines, so it holds only strings: a connection string, or service URLs with a SAS
token or a pre-acquired access token, or bare URLs (then ``DefaultAzureCredential``). The
SDK clients are built where they are used and cached per process, because Python workers
are reused across tasks and building a credential per task is slow.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from vault_core.azure import StorageAccount
from vault_core.index import IndexTables
from vault_core.names import validate_stream_name
from vault_core.pageblob import PageBlobs, StreamBlob
from vault_core.reader import StreamReader


@dataclass(frozen=True)
class Connection:
    """One vault's storage account, as plain strings. Secrets are kept out of ``repr``."""

    connection_string: str | None = field(default=None, repr=False)
    blob_url: str | None = None
    """The account's blob endpoint, e.g. ``https://acct.blob.core.windows.net``."""
    table_url: str | None = None
    """The account's table endpoint; without it (and without a connection string) there is no index."""
    sas: str | None = field(default=None, repr=False)
    """A SAS token for the blob endpoint (and the table endpoint, unless ``table_sas`` is set)."""
    table_sas: str | None = field(default=None, repr=False)
    access_token: str | None = field(default=None, repr=False)
    """A bearer token for ``https://storage.azure.com/`` acquired by the driver (e.g. on Synapse)."""
    container: str = "streams"
    table_prefix: str = "mv"

    def __post_init__(self) -> None:
        if not self.connection_string and not self.blob_url:
            raise ValueError(
                "no storage connection: set connectionString, or blobUrl (with tableUrl) and "
                "sas / accessToken, or bare URLs for DefaultAzureCredential"
            )
        if self.sas and self.access_token:
            raise ValueError("give either a SAS token or an access token, not both")

    @property
    def has_index(self) -> bool:
        """Whether the Tables index is reachable; without it partitions cannot be split."""
        return bool(self.connection_string or self.table_url)

    def blob_account(self) -> StorageAccount:
        if self.connection_string:
            return StorageAccount(connection_string=self.connection_string)
        return StorageAccount(blob_url=self.blob_url, credential=self._credential(self.sas))

    def table_account(self) -> StorageAccount | None:
        if self.connection_string:
            return StorageAccount(connection_string=self.connection_string)
        if not self.table_url:
            return None
        credential = self._credential(self.table_sas or self.sas)
        return StorageAccount(table_url=self.table_url, credential=credential)

    def _credential(self, sas: str | None) -> Any:
        if sas:
            from azure.core.credentials import AzureSasCredential

            return AzureSasCredential(sas.lstrip("?"))
        if self.access_token:
            return StaticToken(self.access_token)
        from azure.identity import DefaultAzureCredential  # only for keyless connections

        return DefaultAzureCredential()


class StaticToken:
    """A TokenCredential for a token someone else acquired (it is not refreshed: ~1 hour)."""

    def __init__(self, token: str, lifetime_s: int = 3600) -> None:
        self._token = token
        self._expires_on = int(time.time()) + lifetime_s

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.core.credentials import AccessToken

        return AccessToken(self._token, self._expires_on)


@dataclass(frozen=True)
class Clients:
    """The storage adapters of one :class:`Connection` in this process."""

    blobs: PageBlobs
    index: IndexTables | None
    reader: StreamReader
    blob: Callable[[str], StreamBlob]
    """The adapter of one stream's blob, made once per stream (making an SDK client builds its
    whole pipeline: a visible share of a small task's CPU)."""


@lru_cache(maxsize=16)
def clients(connection: Connection) -> Clients:
    """Clients for ``connection``, built once per process (executors reuse Python workers)."""
    blobs = connection.blob_account().page_blobs(connection.container)
    tables = connection.table_account()
    index = IndexTables.in_account(tables, connection.table_prefix) if tables else None

    @lru_cache(maxsize=256)
    def blob(stream: str) -> StreamBlob:
        return blobs.blob(validate_stream_name(stream))

    return Clients(blobs, index, StreamReader(blob, index), blob)
