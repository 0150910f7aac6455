"""One error hierarchy for the whole vault.

::

    VaultError                      base; ``retriable``: trying again later can help (see retriable())
    ├── InvalidInput                permanent: a caller sent something we refuse
    │   ├── InvalidStreamName
    │   ├── MessageTooLarge         key or value over the documented limit
    │   └── InvalidOffset           negative, past the committed end, or not a record boundary
    │       └── OffsetPastEnd       past the committed end (a reader may wait there, not start)
    ├── NotFound                    a container, table, queue or blob that does not exist
    │   └── StreamNotFound          a stream that was never written (permanent)
    ├── FormatError                 permanent: bytes that are not a valid record
    │   ├── UnsupportedVersion      a record written by a newer format version
    │   └── CorruptRecord           checksum or header mismatch (carries offset, stored/computed CRC)
    ├── WriterConflict              another writer owns, or took over, the stream (retriable)
    │   ├── StreamLeased            the blob lease is held by another writer
    │   └── LeaseLost               our lease expired/was broken mid-append; we stopped writing
    ├── StreamFull                  the page blob maximum would be exceeded
    ├── StorageUnavailable          throttling, timeouts, connection errors (retriable)
    └── StorageFailure              any other storage answer we did not expect (status, code)
        └── StorageAccessDenied     storage refused the credential (401/403): a SAS expired or revoked

Azure SDK exceptions are translated into this tree in exactly one place,
:func:`vault_core.translation.translate_errors`, which only the storage adapters use.
"""

from __future__ import annotations


class VaultError(Exception):
    """Base of every error the vault raises on purpose."""

    retriable: bool = False
    """Trying the same thing again later can succeed: the writer hands such a batch back to its
    queue instead of poisoning it, and the API answers 503 with ``Retry-After``."""


def retriable(exc: BaseException) -> bool:
    """Whether trying again later can cure ``exc`` (a :class:`VaultError` that says so)."""
    return isinstance(exc, VaultError) and exc.retriable


class InvalidInput(VaultError):
    """The caller sent something the vault refuses; retrying the same input cannot help."""


class InvalidStreamName(InvalidInput):
    """A stream name outside the documented character set or length."""


class MessageTooLarge(InvalidInput):
    """A key or value longer than the documented maximum."""


class InvalidOffset(InvalidInput):
    """An offset that is negative, past the committed length, or not a record boundary."""


class OffsetPastEnd(InvalidOffset):
    """An offset beyond the stream's committed length."""


class NotFound(VaultError):
    """A storage resource (container, table, queue, blob) that does not exist."""


class StreamNotFound(NotFound):
    """The stream has never been written."""


class FormatError(VaultError):
    """Bytes that are not a valid record of a format version this reader knows."""

    def __init__(self, message: str, *, stream: str | None = None, offset: int | None = None) -> None:
        where = (
            f" (stream {stream!r}, offset {offset})"
            if stream is not None
            else (f" (offset {offset})" if offset is not None else "")
        )
        super().__init__(message + where)
        self.stream = stream
        self.offset = offset


class UnsupportedVersion(FormatError):
    """A record whose version byte this reader does not know (written by a newer vault)."""


class CorruptRecord(FormatError):
    """A record whose header or checksum does not verify: never returned as data."""

    def __init__(
        self,
        message: str,
        *,
        stream: str | None = None,
        offset: int | None = None,
        stored_crc: int | None = None,
        computed_crc: int | None = None,
    ) -> None:
        if stored_crc is not None and computed_crc is not None:
            message += f": stored crc {stored_crc:#010x}, computed {computed_crc:#010x}"
        super().__init__(message, stream=stream, offset=offset)
        self.stored_crc = stored_crc
        self.computed_crc = computed_crc


class WriterConflict(VaultError):
    """Another writer owns the stream; this writer must not write (until that one is done)."""

    retriable = True


class StreamLeased(WriterConflict):
    """The stream is leased by another writer."""


class LeaseLost(WriterConflict):
    """This writer's lease expired or was taken; it stopped writing and left the stream consistent."""


class StreamFull(VaultError):
    """Appending would grow the page blob past its maximum size."""


class StorageUnavailable(VaultError):
    """Storage throttled us (503/500), timed out or could not be reached."""

    retriable = True


class StorageFailure(VaultError):
    """Storage answered with an error this code does not expect; carries status and error code."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None) -> None:
        super().__init__(f"{message} (status {status}, code {code})")
        self.status = status
        self.code = code


class StorageAccessDenied(StorageFailure):
    """Storage refused the request's credential (401/403): a SAS that expired or was revoked, or
    an identity without the role."""
