"""The interface of a container of ordinary blobs (the claim-check container, which also holds
the staging queues' owner-lease blobs): pure, no SDK.

Implementations: :class:`vault_core.blobs.BlobContainer` (Azure Blob Storage) and
:class:`vault_core.memory.MemoryBlobContainer` (in memory). ``tests/test_contracts.py`` runs one
contract against both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from vault_core.pagelog import HeldLease


class OwnerBlob(Protocol):
    """An empty blob that exists to be leased: whoever holds its lease owns something (a staging
    queue, docs/ARCHITECTURE.md §3.7)."""

    @property
    def name(self) -> str: ...

    def acquire(self, seconds: int, lease_id: str) -> HeldLease | None:
        """The lease under ``lease_id``, or None while another holder has it; the blob is created
        first if it is missing. Taking a lease this ``lease_id`` already holds succeeds (and renews
        it); an expired lease may be taken by anyone."""
        ...

    def mark_renewed(self, lease: HeldLease, renewed_ms: int) -> None:
        """Write down, under ``lease``, when its holder last renewed it (its clock, Unix ms), so
        that others can tell when it runs out if the holder dies (raises LeaseLost if not held)."""
        ...

    def renewed_ms(self) -> int | None:
        """What the holder last wrote with :meth:`mark_renewed`; None if nothing (or no blob)."""
        ...


class BlobStore(Protocol):
    """Write-once blobs by name."""

    @property
    def name(self) -> str: ...

    def create_if_missing(self) -> None:
        """Create the container; idempotent."""
        ...

    def upload_new(self, name: str, data: bytes) -> None:
        """Write blob ``name``; never overwrites one that exists (``If-None-Match: *``): a second
        upload under one name raises a :class:`~vault_core.errors.VaultError` and leaves the first."""
        ...

    def download(self, name: str) -> bytes | None:
        """The whole blob, or None if there is no such blob."""
        ...

    def delete_many(self, names: Sequence[str]) -> None:
        """Delete blobs as far as storage lets: best effort, never raises. A blob already gone is
        no error."""
        ...

    def lease_blob(self, name: str) -> OwnerBlob: ...
