"""The one adapter between the vault and the Azure SDKs: clients, and error translation.

Every SDK exception is translated into :mod:`vault_core.errors` by :func:`translate_errors`,
so nothing above this module catches ``azure.core`` exceptions.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import requests
from azure.core.exceptions import (
    AzureError,
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.core.pipeline.transport import RequestsTransport
from azure.data.tables import TableServiceClient
from azure.storage.blob import BlobServiceClient
from azure.storage.blob import ExponentialRetry as BlobRetry
from azure.storage.queue import ExponentialRetry as QueueRetry
from azure.storage.queue import QueueServiceClient

from vault_core.errors import (
    LeaseLost,
    NotFound,
    StorageAccessDenied,
    StorageFailure,
    StorageUnavailable,
    StreamLeased,
    StreamNotFound,
    VaultError,
)
from vault_core.retry import BudgetExhausted, remaining, request_hook

AZURITE_CONNECTION_STRING = (
    # Azurite's well-known development account: public, documented, local only.
    "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
    "AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;"
    "BlobEndpoint=http://127.0.0.1:{blob}/devstoreaccount1;"
    "QueueEndpoint=http://127.0.0.1:{queue}/devstoreaccount1;"
    "TableEndpoint=http://127.0.0.1:{table}/devstoreaccount1;"
)


def azurite_connection_string(blob: int = 10000, queue: int = 10001, table: int = 10002) -> str:
    return AZURITE_CONNECTION_STRING.format(blob=blob, queue=queue, table=table)


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
            transport.sleep(backoff)


class _BlobRetry(_WithinBudget, BlobRetry):
    pass


class _QueueRetry(_WithinBudget, QueueRetry):
    pass


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

    # The storage SDKs' default retry waits 15 s, then 18 s, ... before answering: far too long
    # for a request path that must say 503 promptly. Retry briefly here, and on a request path
    # the hook (vault_core.retry) bounds all attempts by the request's budget; callers that can
    # wait longer (the writer) add their own back-off on top.
    def blob_service(self) -> BlobServiceClient:
        # Sub-second back-off: the SDKs type these as int, but use them as float.
        retry = _BlobRetry(initial_backoff=0.5, increment_base=2, retry_total=3, random_jitter_range=0.5)  # type: ignore[arg-type]
        options: dict[str, Any] = {
            "retry_policy": retry,
            "transport": shared_transport(),
            "raw_request_hook": request_hook,
        }
        if self.connection_string:
            return BlobServiceClient.from_connection_string(self.connection_string, **options)
        return BlobServiceClient(self._url(self.blob_url, "blob"), credential=self.credential, **options)

    def queue_service(self) -> QueueServiceClient:
        retry = _QueueRetry(initial_backoff=0.5, increment_base=2, retry_total=2, random_jitter_range=0.5)  # type: ignore[arg-type]
        options: dict[str, Any] = {
            "retry_policy": retry,
            "transport": shared_transport(),
            "raw_request_hook": request_hook,
        }
        if self.connection_string:
            return QueueServiceClient.from_connection_string(self.connection_string, **options)
        return QueueServiceClient(self._url(self.queue_url, "queue"), credential=self.credential, **options)

    def table_service(self) -> TableServiceClient:
        options: dict[str, Any] = {
            "retry_total": 3,
            "retry_backoff_factor": 0.5,
            "transport": shared_transport(),
            "raw_request_hook": request_hook,
        }
        if self.connection_string:
            return TableServiceClient.from_connection_string(self.connection_string, **options)
        return TableServiceClient(self._url(self.table_url, "table"), credential=self.credential, **options)

    @staticmethod
    def _url(url: str | None, service: str) -> str:
        if not url:
            raise ValueError(f"no {service} service URI configured for this storage connection")
        return url


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


_LEASE_HELD = {"LeaseAlreadyPresent"}
_LEASE_LOST = {
    "LeaseIdMismatchWithBlobOperation",
    "LeaseIdMismatchWithLeaseOperation",
    "LeaseLost",
    "LeaseNotPresentWithBlobOperation",
    "LeaseNotPresentWithLeaseOperation",
    "LeaseIdMissing",
    "LeaseExpired",
    "ConditionNotMet",
}
_NOT_FOUND = {"BlobNotFound", "ContainerNotFound", "ResourceNotFound", "TableNotFound"}


def create_if_missing(*creates: Callable[[], object]) -> None:
    """Run each ``create`` call (a container, table or queue), treating "already exists" as done."""
    with translate_errors():
        for create in creates:
            try:
                create()
            except ResourceExistsError:
                pass


def error_code(exc: BaseException) -> str | None:
    code = getattr(exc, "error_code", None)
    code = getattr(code, "value", code)  # the SDKs return a StorageErrorCode enum or a string
    return str(code) if code is not None else None


@contextmanager
def translate_errors(stream: str | None = None) -> Iterator[None]:
    """Map Azure SDK exceptions raised inside the block to the vault's error tree."""
    try:
        yield
    except VaultError:
        raise
    except BudgetExhausted as exc:
        raise StorageUnavailable(str(exc)) from exc
    except (ServiceRequestError, ServiceResponseError) as exc:
        raise StorageUnavailable(f"storage could not be reached: {exc.__class__.__name__}") from exc
    except HttpResponseError as exc:
        raise translate_http_error(exc, stream) from exc
    except AzureError as exc:
        raise StorageUnavailable(f"storage request failed: {exc.__class__.__name__}: {exc.message}") from exc


def translate_http_error(exc: HttpResponseError, stream: str | None = None) -> VaultError:
    code = error_code(exc)
    status = exc.status_code
    what = f"stream {stream!r}" if stream else "the stream"
    if code in _LEASE_HELD or (isinstance(exc, ResourceExistsError) and status == 409 and code is None):
        return StreamLeased(f"{what} is leased by another writer")
    if code in _LEASE_LOST or isinstance(exc, ResourceModifiedError) or status == 412:
        return LeaseLost(
            f"this writer lost its lease on {what} (or the blob changed under it); it stopped writing"
        )
    if code in _NOT_FOUND or isinstance(exc, ResourceNotFoundError):
        return StreamNotFound(f"{what} does not exist") if stream else NotFound(f"not found: {code}")
    if status in (401, 403):
        return StorageAccessDenied("storage refused the credential", status=status, code=code)
    if status is not None and (status >= 500 or status in (408, 429)):
        return StorageUnavailable(f"storage is unavailable or throttling (status {status}, code {code})")
    return StorageFailure("unexpected storage error", status=status, code=code)
