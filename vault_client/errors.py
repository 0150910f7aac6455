"""Errors the client raises, grafted onto the vault's own tree (:mod:`vault_core.errors`).

An HTTP error answer becomes an :class:`ApiError` that is *also* the matching vault error,
so callers catch ``StreamNotFound`` or ``InvalidOffset`` the same way whether they read
through the API or straight from the blob::

    ApiError(VaultError)            any error answer: .status, .code (the API's "error" field)
    ├── ApiBadRequest               + InvalidInput        400 bad_request
    ├── ApiInvalidStream            + InvalidStreamName   400 invalid_stream
    ├── ApiInvalidOffset            + InvalidOffset       400/416 invalid_offset
    ├── ApiTooLarge                 + MessageTooLarge     413 too_large
    ├── ApiNotFound                 + StreamNotFound      404 not_found
    ├── Unauthorized                                      401 (no credential, or one the vault refused)
    │   └── Forbidden                                     403 (a known caller without the permission)
    └── ApiUnavailable              + StorageUnavailable  429/502/503/504 (retriable)
    EndpointUnreachable(StorageUnavailable)               connection refused, DNS, timeouts
    BufferFull(VaultError)                                the producer's memory bound was hit
    ProducerClosed(VaultError)                            send() after close()
"""

from __future__ import annotations

from vault_core.errors import (
    InvalidInput,
    InvalidOffset,
    InvalidStreamName,
    MessageTooLarge,
    StorageUnavailable,
    StreamNotFound,
    VaultError,
)


class ApiError(VaultError):
    """The vault API answered with an error status."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


class ApiBadRequest(ApiError, InvalidInput):
    pass


class ApiInvalidStream(ApiError, InvalidStreamName):
    pass


class ApiInvalidOffset(ApiError, InvalidOffset):
    pass


class ApiTooLarge(ApiError, MessageTooLarge):
    pass


class ApiNotFound(ApiError, StreamNotFound):
    pass


class Unauthorized(ApiError):
    pass


class Forbidden(Unauthorized):
    """The vault knows the caller, and its access policy does not allow this."""


class ApiUnavailable(ApiError, StorageUnavailable):
    retriable = True


class EndpointUnreachable(StorageUnavailable):
    """The endpoint could not be reached at all (or did not answer in time)."""


class BufferFull(VaultError):
    """The producer's buffer is at its memory bound and the caller asked not to block (or waited too long)."""

    retriable = True


class ProducerClosed(VaultError):
    """The producer was closed; it accepts no more messages."""


_BY_CODE: dict[str, type[ApiError]] = {
    "bad_request": ApiBadRequest,
    "invalid_stream": ApiInvalidStream,
    "invalid_offset": ApiInvalidOffset,
    "invalid_range": ApiInvalidOffset,
    "too_large": ApiTooLarge,
    "not_found": ApiNotFound,
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "unavailable": ApiUnavailable,
}
_BY_STATUS: dict[int, type[ApiError]] = {
    400: ApiBadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: ApiNotFound,
    413: ApiTooLarge,
    416: ApiInvalidOffset,
    429: ApiUnavailable,
    502: ApiUnavailable,
    503: ApiUnavailable,
    504: ApiUnavailable,
}


def api_error(status: int, code: str | None, message: str) -> ApiError:
    """The exception for an error answer: by the API's code, else by status."""
    cls = _BY_CODE.get(code or "") or _BY_STATUS.get(status, ApiError)
    if status in (429, 502, 503, 504):  # throttling is retriable whatever the body says
        cls = ApiUnavailable
    return cls(status, code or f"http_{status}", message)
