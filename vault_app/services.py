"""What the app works with, built once per process from :mod:`vault_app.config`: the vault, the
staging queues (and which one a stream uses), the claim-check container and the batch table, as
storage adapters (:mod:`vault_core.azure` hands them out, or :class:`vault_core.memory.MemoryAccount`
for in-process tests), and the services built on them."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol, cast

from vault_app import config
from vault_app.batches import BatchTable
from vault_app.claimcheck import ClaimChecks
from vault_app.config import VaultSettings
from vault_app.steering import Steering
from vault_core.aio import AsyncReads, async_clients
from vault_core.azure import StorageAccount
from vault_core.blobstore import BlobStore
from vault_core.checkpoints import CheckpointStore
from vault_core.errors import StreamNotFound
from vault_core.pagelog import CommittedBatch
from vault_core.queueing import MessageQueue
from vault_core.rows import Table
from vault_core.vault import Storage, Vault


class AppStorage(Storage, Protocol):
    """What the app needs of a storage account: a vault's page blobs and tables, and queues and
    ordinary blobs (:class:`~vault_core.azure.StorageAccount`, or a
    :class:`~vault_core.memory.MemoryAccount` in tests)."""

    def queue(self, name: str) -> MessageQueue: ...

    def blob_container(self, name: str) -> BlobStore: ...


class OwnAsyncReads(Protocol):
    """A storage that is not an Azure account brings its own async reads (the memory account)."""

    def async_reads(self) -> AsyncReads: ...


@dataclass(frozen=True)
class StagingQueue:
    """One staging queue: which account (scale unit) and which queue in it."""

    account: int
    name: str
    staging: MessageQueue
    poison: MessageQueue


class Services:
    """Built lazily, each part on first use; one per :class:`vault_app.runtime.Runtime`.

    ``connect`` opens a storage connection by its setting name (``VaultStorage``,
    ``VaultStaging0``, ...); without it, the Azure accounts the settings describe. The async
    reads of the request path's waits (:meth:`async_reads`) use the same storage.
    """

    def __init__(self, settings: VaultSettings, connect: Callable[[str], AppStorage] | None = None) -> None:
        self.settings = settings
        self._connect = connect

    @cached_property
    def vault_account(self) -> StorageAccount:
        return StorageAccount.from_settings(self.settings.env, config.VAULT_CONNECTION)

    @cached_property
    def vault_storage(self) -> AppStorage:
        return self._connect(config.VAULT_CONNECTION) if self._connect else self.vault_account

    @cached_property
    def vault(self) -> Vault:
        return Vault(
            self.vault_storage,
            container=self.settings.streams_container,
            table_prefix=self.settings.table_prefix,
        )

    @cached_property
    def claimcheck(self) -> BlobStore:
        return self.vault_storage.blob_container(self.settings.claimcheck_container)

    @cached_property
    def claims(self) -> ClaimChecks:
        return ClaimChecks(self.claimcheck, self.vault, self.settings.writer_settings)

    @cached_property
    def batches(self) -> Table:
        """Batch status rows: PartitionKey = batch id, RowKey = stream (see vault_app.batches)."""
        return self.vault_storage.table(f"{self.settings.table_prefix}batches")

    @cached_property
    def batch_table(self) -> BatchTable:
        return BatchTable(self.batches, self.vault.index, self._latest_commit)

    def _latest_commit(self, stream: str) -> tuple[CommittedBatch, ...]:
        try:
            return self.vault.blob(stream).state().batches
        except StreamNotFound:
            return ()

    @cached_property
    def staging_accounts(self) -> list[StorageAccount]:
        """The staging accounts (scale units), in order: account ``i`` is ``VaultStaging{i}``."""
        return [
            StorageAccount.from_settings(self.settings.env, config.staging_connection(account))
            for account in range(self.settings.staging_accounts)
        ]

    @cached_property
    def checkpoints(self) -> CheckpointStore:
        """Consumer-group checkpoints, where the clients keep them by default: the vault's
        account, table ``<prefix>checkpoints`` (the app only reads them, for the explorer)."""
        return CheckpointStore.from_account(self.vault_storage, f"{self.settings.table_prefix}checkpoints")

    @cached_property
    def staging_storages(self) -> Sequence[AppStorage]:
        """The staging accounts' storage, in order (what ``connect`` opens, else the Azure accounts)."""
        if self._connect is None:
            return self.staging_accounts
        return [self._connect(config.staging_connection(a)) for a in range(self.settings.staging_accounts)]

    def async_reads(self, storage: AppStorage) -> AsyncReads:
        """The async reads of the request path's waits on ``storage``, on the running event loop:
        an Azure account's async clients, or what a storage of another kind brings."""
        if isinstance(storage, StorageAccount):
            return async_clients(storage)
        return cast(OwnAsyncReads, storage).async_reads()

    @cached_property
    def queues(self) -> list[StagingQueue]:
        """Every staging queue, account by account: the shards a stream hashes onto."""
        out = []
        for account, storage in enumerate(self.staging_storages):
            for name in self.settings.queue_names:
                out.append(StagingQueue(account, name, storage.queue(name), storage.queue(f"{name}-poison")))
        return out

    def queue_for(self, stream: str) -> StagingQueue:
        """A stable hash spreads streams over all queues of all accounts; one stream, one queue.

        Keeping a stream on one queue means one writer function sees all of its batches,
        so leases are rarely contended and coalescing finds neighbours to merge.
        """
        return self.queues[zlib.crc32(stream.encode()) % len(self.queues)]

    @cached_property
    def steering(self) -> Steering:
        """The staging queues' health as this process saw it, and the queue a batch goes to."""
        return Steering([q.account for q in self.queues])

    def queue(self, account: int, name: str) -> StagingQueue:
        return next(q for q in self.queues if q.account == account and q.name == name)

    def ensure(self) -> None:
        """Create containers, tables and queues if missing (local runs; Bicep does it in Azure)."""
        self.vault.ensure()
        self.claimcheck.create_if_missing()
        self.batches.create_if_missing()
        for q in self.queues:
            q.staging.create_if_missing()
            q.poison.create_if_missing()
