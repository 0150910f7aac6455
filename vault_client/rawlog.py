"""The raw log (the bytes of docs/FORMAT.md) of a stream, decoded and verified on this machine.

``vault verify`` and ``vault export`` read raw bytes rather than decoded messages, so every
checksum is checked here, end to end, whichever way the bytes came: through
``GET /streams/{s}/log`` (:class:`ApiLog`) or straight from the blob with a SAS
(:class:`vault_client.direct.SasBlob`). Both are a :class:`vault_core.readable.ReadableLog`, so
:func:`vault_core.reader.scan_log` (prefetching ranged reads, resynchronising after a corrupt
record) reads them unchanged.
"""

from __future__ import annotations

from vault_client.api import ApiClient
from vault_client.direct import SasBlob
from vault_client.errors import ApiError, ApiInvalidOffset
from vault_core.boundaries import boundary_by_definition
from vault_core.errors import InvalidOffset
from vault_core.pagelog import CommitState, ReadableLog


class ApiLog:
    """A stream's committed log through the HTTP API's raw log route (read-only)."""

    def __init__(self, api: ApiClient, stream: str) -> None:
        self.api = api
        self.stream = stream

    def state(self) -> CommitState:
        doc = self.api.stream(self.stream)
        return CommitState(
            committed=int(doc["committed"]),
            count=int(doc.get("count") or 0),
            first_ts=doc.get("first_timestamp"),
            last_ts=doc.get("last_timestamp"),
        )

    def read(self, start: int, length: int) -> bytes:
        return self.read_with_state(start, length)[0]

    def read_with_state(self, start: int, length: int) -> tuple[bytes, CommitState]:
        parts: list[bytes] = []
        got = 0
        committed: int | None = None
        while got < length:  # the API answers at most MAX_READ_BYTES per request
            try:
                data, committed = self.api.log(self.stream, start + got, length - got)
            except ApiInvalidOffset:  # 416: at or past the committed end, nothing there
                break
            if not data:
                break
            parts.append(data)
            got += len(data)
        if committed is None:  # nothing read: the commit record comes from the stream itself
            return b"", self.state()
        return b"".join(parts), CommitState(committed=committed)


def open_log(api: ApiClient, stream: str, *, direct: bool) -> ReadableLog:
    """The stream's log through the API, or (``direct``) from the blob with the SAS the API hands out."""
    if direct:
        return SasBlob(stream, lambda: api.access(stream))
    return ApiLog(api, stream)


def check_boundary(api: ApiClient, stream: str, offset: int, committed: int) -> None:
    """Raise InvalidOffset unless ``offset`` is a record boundary the writer produced.

    Bytes that parse as a record at ``offset`` are no proof (a value can hold a forged record,
    docs/FORMAT.md §7.3), and proving it needs the stream's index: so the server, which proves
    every read's starting offset, is asked with a one-message read.
    """
    if boundary_by_definition(stream, offset, committed):
        return
    try:
        api.read(stream, offset, limit=1, max_bytes=1)
    except ApiError as exc:
        if exc.status in (400, 416):
            raise InvalidOffset(f"offset {offset} is not the start of a record in stream {stream!r}") from exc
        raise
