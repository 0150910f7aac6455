"""A killed writer's leases ended at once, instead of waited out.

A writer killed with SIGKILL leaves its leases behind: its streams' blob leases and, in the app,
the owner leases of its staging queues (docs/ARCHITECTURE.md §3.7). Azure's shortest lease is
15 s, so they run out 15 s later. A test about what happens *after* they are gone breaks them
with ``break_lease(0)``, which leaves each blob as an expired lease does (free to take), without
the wait. Break only after the kill: the living process would still be renewing them.

That real expiry frees a killed writer's streams and queues is tested on its own, waiting it out:
``tests/test_faults.py::test_batches_a_killed_writer_had_drained_are_committed_by_another_within_30_seconds``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

from azure.core.exceptions import HttpResponseError, ResourceNotFoundError
from azure.storage.blob import BlobClient, BlobLeaseClient

from vault_app.config import load_settings
from vault_app.open_writers import OWNER_BLOB_PREFIX
from vault_app.services import Services
from vault_core.blobs import BlobContainer
from vault_core.pageblob import StreamBlob
from vault_core.vault import Vault
from vault_local.process import local_env


def break_lease(blob: BlobClient) -> bool:
    """Break the blob's lease now; False if it had none (or no blob is there)."""
    try:
        if blob.get_blob_properties().lease.state != "leased":
            return False
        BlobLeaseClient(blob).break_lease(lease_break_period=0)
    except ResourceNotFoundError:
        return False
    except HttpResponseError as exc:  # released or broken meanwhile
        if getattr(exc, "error_code", None) not in (
            "LeaseNotPresentWithLeaseOperation",
            "LeaseIsBrokenAndCannotBeRenewed",
        ):
            raise
        return False
    return True


def end_stream_leases(vault: Vault, streams: Iterable[str]) -> int:
    """Break the leases of these streams' blobs (what a killed :class:`StreamWriter` held)."""
    return sum(break_lease(cast(StreamBlob, vault.blob(s)).client) for s in streams)


def _services(connection_string: str, prefix: str) -> Services:
    """The app's view of one Azurite with staging queues ``prefix`` (as its hosts see it)."""
    env = {**local_env(connection_string, "lease-breaker-key-0123456789"), "VAULT_QUEUE_PREFIX": prefix}
    return Services(load_settings(env))


def owner_blobs(connection_string: str, prefix: str) -> list[BlobClient]:
    """The owner lease blobs of the staging queues ``prefix`` (those taken so far)."""
    services = _services(connection_string, prefix)
    names = {q.name for q in services.queues}
    container = services.claimcheck
    assert isinstance(container, BlobContainer)
    return [
        container.client.get_blob_client(b.name)
        for b in container.client.list_blobs(name_starts_with=OWNER_BLOB_PREFIX)
        if b.name.rsplit("/", 1)[-1] in names
    ]


def end_dead_host_leases(connection_string: str, prefix: str, streams: Iterable[str] = ()) -> int:
    """Break what a killed host on queues ``prefix`` held: its queues' owner leases and the
    leases of ``streams``. Returns how many leases were broken."""
    broken = sum(break_lease(blob) for blob in owner_blobs(connection_string, prefix))
    return broken + end_stream_leases(_services(connection_string, prefix).vault, streams)
