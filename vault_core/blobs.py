"""The adapter for a container of ordinary blobs (the claim-check container): write a blob once,
read it back, delete many at once, and lease blobs in it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from azure.core.exceptions import ResourceNotFoundError
from azure.storage.blob import ContainerClient

from vault_core.errors import VaultError
from vault_core.pageblob import LeaseBlob
from vault_core.translation import create_if_missing, translate_errors

log = logging.getLogger(__name__)

DELETE_BATCH = 256
"""Blob Batch requests carry at most 256 sub-requests."""


class BlobContainer:
    """A container in Azure Blob Storage (a :class:`~vault_core.blobstore.BlobStore`)."""

    def __init__(self, client: ContainerClient) -> None:
        self.client = client
        self.name = client.container_name

    def create_if_missing(self) -> None:
        create_if_missing(self.client.create_container)

    def upload_new(self, name: str, data: bytes) -> None:
        """Write blob ``name``; never overwrites one that exists (``If-None-Match: *``)."""
        with translate_errors():
            self.client.upload_blob(name, data, overwrite=False)

    def download(self, name: str) -> bytes | None:
        """The whole blob, or None if there is no such blob."""
        with translate_errors():
            try:
                return self.client.download_blob(name).readall()
            except ResourceNotFoundError:
                return None

    def delete_many(self, names: Sequence[str]) -> None:
        """Delete blobs, 256 per request, as far as storage lets: best effort. A blob that is gone
        already, or a request that fails, is left to whoever cleans up after (a lifecycle rule)."""
        for i in range(0, len(names), DELETE_BATCH):
            try:
                with translate_errors():
                    self.client.delete_blobs(*names[i : i + DELETE_BATCH], raise_on_any_failure=False)
            except VaultError as exc:
                log.info(
                    "deleting %d blobs of %s failed: %s", len(names[i : i + DELETE_BATCH]), self.name, exc
                )

    def lease_blob(self, name: str) -> LeaseBlob:
        return LeaseBlob(self.client.get_blob_client(name))
