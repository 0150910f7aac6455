"""Azure SDK exceptions into :mod:`vault_core.errors`: the one translation the adapters share.

Only the storage adapters (:mod:`vault_core.pageblob`, :mod:`vault_core.blobs`,
:mod:`vault_core.queues`, :mod:`vault_core.tables`, :mod:`vault_core.azure`) call the SDKs, and
each call runs inside :func:`translate_errors`, so nothing above them sees an ``azure.core``
exception; ``tests/test_layers.py`` checks that no other module imports the SDKs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from azure.core.exceptions import (
    AzureError,
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)

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
from vault_core.retry import BudgetExhausted

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
    """Run each ``create`` call (a container, table or queue), treating "already exists" as done.

    A create the server dropped without answering is sent once more. The SDKs do not retry a
    POST (creating a table is one) on a dropped connection, since it may have been done; but a
    create may be repeated, and a pooled keep-alive connection that the server closes just as it
    is reused drops the request that way."""
    with translate_errors():
        for create in creates:
            for attempt in (1, 2):
                try:
                    create()
                except ResourceExistsError:
                    pass
                except ServiceResponseError:
                    if attempt == 2:
                        raise
                    continue
                break


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
