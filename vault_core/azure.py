"""The storage account adapter: how to reach an account, its SDK clients, and the adapters of
the containers, tables and queues in it.

:class:`StorageAccount` builds the SDK clients (sharing one HTTP session and honouring the
request's storage budget) and hands out the adapters that wrap them: stream page blobs
(:mod:`vault_core.pageblob`), ordinary blobs (:mod:`vault_core.blobs`), queues
(:mod:`vault_core.queues`) and tables (:mod:`vault_core.tables`); it also mints read-only SAS
tokens. Every SDK exception is translated
by :func:`vault_core.translation.translate_errors`, so nothing above the adapters catches
``azure.core`` exceptions.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Any

import requests
from azure.core.pipeline.transport import RequestsTransport
from azure.data.tables import TableServiceClient
from azure.storage.blob import BlobSasPermissions, BlobServiceClient, generate_blob_sas
from azure.storage.blob import ExponentialRetry as BlobRetry
from requests.adapters import HTTPAdapter, Retry  # urllib3's, as requests uses it

from vault_core.blobs import BlobContainer
from vault_core.devaccount import AZURITE_CONNECTION_STRING, azurite_connection_string
from vault_core.pageblob import PageBlobs
from vault_core.retry import BudgetExhausted, note_backoff, remaining, request_hook
from vault_core.tables import AzureTable
from vault_core.translation import create_if_missing, translate_errors

__all__ = [
    "AZURITE_CONNECTION_STRING",
    "StorageAccount",
    "azurite_connection_string",
    "create_if_missing",
    "translate_errors",
]

if TYPE_CHECKING:
    from azure.storage.queue import QueueServiceClient

    from vault_core.queues import Queue


class _WithinBudget:
    """Mixin for the storage SDKs' retry policies: on a request path with a storage budget
    (vault_core.retry), a back-off that would outlast the budget ends the call at once."""

    def sleep(self, settings: dict[str, Any], transport: Any) -> None:
        backoff = float(self.get_backoff_time(settings))  # type: ignore[attr-defined]
        left = remaining()
        if left is not None and backoff >= left:
            raise BudgetExhausted(
                f"no time left in the request's storage budget for a {backoff:.1f}s back-off"
            )
        if backoff > 0:
            note_backoff(backoff)
            transport.sleep(backoff)


class _BlobRetry(_WithinBudget, BlobRetry):
    pass


@lru_cache(maxsize=1)
def _queue_retry() -> type[Any]:
    # Built on first use: only the Function App's staging uses queues, and a reader (a Spark
    # pool with the message-vault-core wheel) must import this module without
    # azure-storage-queue (the core's `queue` extra).
    from azure.storage.queue import ExponentialRetry as QueueRetry

    class _QueueRetry(_WithinBudget, QueueRetry):
        pass

    return _QueueRetry


CONNECTIONS_PER_HOST = 64
"""Kept-alive connections per storage endpoint. ``requests`` keeps 10, fewer than a busy process
has threads calling one endpoint at once (a host's request threads, the writer's I/O pool, a
reader's prefetch): past 10 a connection is closed after each use and opened again for the
next, with urllib3's "Connection pool is full" warning."""


@lru_cache(maxsize=1)
def shared_transport() -> RequestsTransport:
    """One HTTP session (and connection pool) for every storage client of this process.

    Without a proxy configured, ``requests`` is told not to consult the environment: otherwise
    it looks for a ``~/.netrc`` file on every request, which showed up as a visible share of the
    host's CPU under load. With a proxy in the environment, it is honoured as usual.
    """
    use_env = bool(urllib.request.getproxies())
    session = requests.Session()
    session.trust_env = use_env
    # A session handed to the SDK keeps its own adapters: so no retries here (the SDK retries), as
    # the SDK's own adapter does, and a pool the size of the process's concurrency.
    no_retries = Retry(total=False, redirect=False, raise_on_status=False)
    adapter = HTTPAdapter(pool_maxsize=CONNECTIONS_PER_HOST, max_retries=no_retries)
    for scheme in ("http://", "https://"):
        session.mount(scheme, adapter)
    return RequestsTransport(
        session=session, session_owner=False, use_env_settings=use_env, connection_data_block_size=256 * 1024
    )


@dataclass(frozen=True)
class StorageAccount:
    """How to reach one storage account: a connection string, or service URIs and a credential."""

    connection_string: str | None = None
    blob_url: str | None = None
    queue_url: str | None = None
    table_url: str | None = None
    credential: Any = None

    @classmethod
    def from_settings(cls, env: Mapping[str, str], name: str) -> StorageAccount:
        """Read connection ``name`` the way the Functions host does.

        ``env[name]`` is a connection string; otherwise ``name__blobServiceUri``,
        ``name__queueServiceUri``, ``name__tableServiceUri`` with a managed identity
        (``name__clientId`` for a user-assigned one) or ``DefaultAzureCredential``.
        """
        if env.get(name):
            return cls(connection_string=env[name])
        blob, queue, table = (env.get(f"{name}__{s}ServiceUri") for s in ("blob", "queue", "table"))
        if not (blob or queue or table):
            raise ValueError(
                f"storage connection {name!r} is not configured: set {name} to a connection string, "
                f"or {name}__blobServiceUri / {name}__queueServiceUri / {name}__tableServiceUri"
            )
        return cls(
            blob_url=blob, queue_url=queue, table_url=table, credential=_identity_credential(env, name)
        )

    # The storage SDKs' default retry waits 18 s, then 24 s, ... before answering: far too long
    # for a request path that must say 503 promptly. These wait less: the SDK counts a retry
    # before computing its wait (initial + base ** count), so 2.5 s, 4.5 s (and 8.5 s for blobs),
    # each ± 0.5 s. On a request path the hook (vault_core.retry) bounds all attempts by the
    # request's budget; callers that can wait longer (the writer) add their own back-off on top.
    def blob_service(self) -> BlobServiceClient:
        # Sub-second back-off: the SDKs type these as int, but use them as float.
        retry = _BlobRetry(initial_backoff=0.5, increment_base=2, retry_total=3, random_jitter_range=0.5)  # type: ignore[arg-type]
        return self._client(BlobServiceClient, "blob", retry_policy=retry)

    def queue_service(self, retry_policy: Any | None = None) -> QueueServiceClient:
        """``retry_policy``: another than this module's (the local Functions host's own, say)."""
        from azure.storage.queue import QueueServiceClient  # the `queue` extra, see _queue_retry

        retry = retry_policy or _queue_retry()(
            initial_backoff=0.5, increment_base=2, retry_total=2, random_jitter_range=0.5
        )
        return self._client(QueueServiceClient, "queue", retry_policy=retry)

    def table_service(self) -> TableServiceClient:
        return self._client(TableServiceClient, "table", retry_total=3, retry_backoff_factor=0.5)

    def _client(self, sdk_class: Any, service: str, **options: Any) -> Any:
        """A client of the SDK's ``sdk_class``: from the connection string, else from the
        service's URI and the credential; on the shared transport, with the request hook."""
        options.update(transport=shared_transport(), raw_request_hook=request_hook)
        if self.connection_string:
            return sdk_class.from_connection_string(self.connection_string, **options)
        return sdk_class(self.service_url(service), credential=self.credential, **options)

    def service_url(self, service: str) -> str:
        """The configured URI of the ``blob``, ``queue`` or ``table`` service."""
        url = {"blob": self.blob_url, "queue": self.queue_url, "table": self.table_url}[service]
        if not url:
            raise ValueError(f"no {service} service URI configured for this storage connection")
        return url

    # -- the adapters, on one SDK client per service of this account ---------------------------
    @cached_property
    def _blobs(self) -> BlobServiceClient:
        return self.blob_service()

    @cached_property
    def _queues(self) -> QueueServiceClient:
        return self.queue_service()

    @cached_property
    def _tables(self) -> TableServiceClient:
        return self.table_service()

    def page_blobs(self, container: str) -> PageBlobs:
        return PageBlobs(self._blobs.get_container_client(container))

    def blob_container(self, name: str) -> BlobContainer:
        return BlobContainer(self._blobs.get_container_client(name))

    def queue(self, name: str) -> Queue:
        from vault_core.queues import Queue  # the `queue` extra, see _queue_retry

        return Queue(self._queues.get_queue_client(name))

    def table(self, name: str) -> AzureTable:
        return AzureTable(self._tables.get_table_client(name))

    def read_sas(self, container: str, blob: str, *, start: datetime, expiry: datetime) -> tuple[str, str]:
        """The URL of a blob and a read-only SAS for it alone, valid from ``start`` to ``expiry``.

        Signed with the account key of a connection string, else with a user delegation key
        (an identity-based connection: the identity needs a role that may delegate).
        """
        client = self._blobs.get_blob_client(container, blob)
        common: dict[str, Any] = {
            "account_name": client.account_name,
            "container_name": container,
            "blob_name": blob,
            "permission": BlobSasPermissions(read=True),
            "expiry": expiry,
            "start": start,
        }
        if client.url.startswith("https://"):
            common["protocol"] = "https"  # the SAS is refused over plain HTTP (Azurite is http only)
        if self.connection_string:
            parts = dict(p.split("=", 1) for p in self.connection_string.split(";") if "=" in p)
            return client.url, generate_blob_sas(account_key=parts.get("AccountKey"), **common)
        with translate_errors(blob):
            key = self._blobs.get_user_delegation_key(start, expiry)
        return client.url, generate_blob_sas(user_delegation_key=key, **common)


def _identity_credential(env: Mapping[str, str], name: str) -> Any:
    # Imported lazily: azure-identity is only needed for keyless (managed identity) connections.
    from azure.identity import DefaultAzureCredential, ManagedIdentityCredential

    client_id = env.get(f"{name}__clientId")
    if env.get(f"{name}__credential", "").lower() == "managedidentity":
        return ManagedIdentityCredential(client_id=client_id) if client_id else ManagedIdentityCredential()
    return (
        DefaultAzureCredential(managed_identity_client_id=client_id)
        if client_id
        else DefaultAzureCredential()
    )
