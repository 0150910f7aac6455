"""Where a consumer's pages come from: the one interface both read paths implement.

:class:`ApiSource` reads through the HTTP API (the server decodes and verifies); the
direct path (:class:`vault_client.direct.DirectSource`) reads the stream's page blob with
a SAS and decodes and verifies the records here, with no server on the read path.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from vault_client.api import ApiClient
from vault_core.limits import DEFAULT_READ_BYTES, DEFAULT_READ_MESSAGES
from vault_core.reader import ReadResult
from vault_core.recordformat import Message


class Source(Protocol):
    stream: str

    def read(self, offset: int, wait: float = 0.0) -> ReadResult:
        """One page from ``offset`` (a record boundary); if nothing is committed there, wait ``wait`` s."""
        ...

    def scan(self, start: int, end: int) -> Iterator[Message]:
        """Every message in ``[start, end)``, as fast as the path allows (catching up)."""
        ...

    def committed(self) -> int:
        """The stream's committed length now (where "the end" is)."""
        ...

    def seek_time(self, at_ms: int) -> int:
        """Offset of the first message with timestamp >= ``at_ms`` (the committed end if none)."""
        ...

    def close(self) -> None: ...


class ApiSource:
    """Pages from ``GET /streams/{s}/messages``; ``wait`` becomes the server's long poll."""

    def __init__(
        self,
        api: ApiClient,
        stream: str,
        *,
        page_size: int = DEFAULT_READ_MESSAGES,
        max_bytes: int = DEFAULT_READ_BYTES,
        owns_api: bool = False,
    ) -> None:
        self.api = api
        self.stream = stream
        self.page_size = page_size
        self.max_bytes = max_bytes
        self._owns_api = owns_api

    def read(self, offset: int, wait: float = 0.0) -> ReadResult:
        return self.api.read(self.stream, offset, limit=self.page_size, max_bytes=self.max_bytes, wait=wait)

    def scan(self, start: int, end: int) -> Iterator[Message]:
        # Each page says where the next one starts, so pages cannot be fetched ahead.
        offset = start
        while offset < end:
            page = self.read(offset)
            for m in page.messages:
                if m.offset >= end:
                    return
                yield m
            if not page.messages:
                return
            offset = page.next_offset

    def committed(self) -> int:
        return self.api.committed(self.stream)

    def seek_time(self, at_ms: int) -> int:
        # The server seeks with its time index: one request, whatever the stream's length.
        page = self.api.read(self.stream, at=at_ms, limit=1, max_bytes=1)
        return page.messages[0].offset if page.messages else page.next_offset

    def close(self) -> None:
        if self._owns_api:
            self.api.close()
