"""Reading a stream straight from its page blob with a read-only SAS: no server on the read path.

The SAS comes from an *access provider*, normally ``GET /streams/{s}/access``
(:meth:`ApiClient.access`). It is renewed shortly before it expires, and once more when
storage refuses a read with 401/403 (a SAS revoked, or a clock that disagrees with ours).

Reads reuse :class:`vault_core.reader.StreamReader` unchanged (:class:`SasBlob` is a
:class:`~vault_core.readable.ReadableLog`): it bounds every read by the commit record
(``mv_committed`` in the blob's metadata) and verifies every checksum.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import TypeVar

from vault_client.api import Access
from vault_core.errors import InvalidInput, StorageAccessDenied
from vault_core.pageblob import StreamBlob
from vault_core.pagelog import CommitState
from vault_core.reader import SCAN_CHUNK, SCAN_PREFETCH, ReadResult, ScanOptions, StreamReader
from vault_core.recordformat import Message
from vault_core.retry import poll

T = TypeVar("T")
AccessProvider = Callable[[], Access]

PAGE_MESSAGES = 10_000
PAGE_BYTES = 4 * 1024 * 1024
"""A direct page's default size: larger than the API's, since no server decodes it (and each
GET has a fixed cost)."""


class AccessDenied(StorageAccessDenied):
    """Storage refused the SAS even after it was renewed."""


def _blob(access: Access, stream: str) -> StreamBlob:
    return StreamBlob.from_url(f"{access.blob_url}?{access.sas.lstrip('?')}", stream)


class SasBlob:
    """A stream's page blob reached through a SAS that renews itself: a
    :class:`~vault_core.readable.ReadableLog`. Safe to share between threads."""

    def __init__(
        self,
        stream: str,
        access: AccessProvider,
        *,
        margin: timedelta = timedelta(seconds=60),
        now: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
    ) -> None:
        self.stream = stream
        self._provider = access
        self._margin = margin
        self._now = now
        self._lock = threading.Lock()
        self._access = access()
        self._blob = _blob(self._access, stream)
        self.refreshes = 0
        """How often the SAS was renewed (on expiry or on a refused read)."""

    @property
    def access(self) -> Access:
        return self._access

    def _renew(self, stale: Access) -> None:
        with self._lock:
            if self._access is stale:  # another thread may have renewed it already
                self._access = self._provider()
                self._blob = _blob(self._access, self.stream)
                self.refreshes += 1

    def _call(self, op: Callable[[StreamBlob], T]) -> T:
        current = self._access
        if current.expires - self._margin <= self._now():
            self._renew(current)
        used = self._access
        try:
            return op(self._blob)
        except StorageAccessDenied:
            pass
        self._renew(used)
        try:
            return op(self._blob)
        except StorageAccessDenied as exc:
            raise AccessDenied(
                f"storage refused the SAS for stream {self.stream!r} even after renewing it",
                status=exc.status,
                code=exc.code,
            ) from exc

    def state(self) -> CommitState:
        return self._call(lambda blob: blob.state())

    def read(self, start: int, length: int) -> bytes:
        return self._call(lambda blob: blob.read(start, length))

    def read_with_state(self, start: int, length: int) -> tuple[bytes, CommitState]:
        return self._call(lambda blob: blob.read_with_state(start, length))


class DirectSource:
    """Pages read from the blob; ``wait`` is emulated by polling the commit record with back-off."""

    def __init__(
        self,
        stream: str,
        access: AccessProvider,
        *,
        seek: Callable[[int], int] | None = None,
        page_size: int = PAGE_MESSAGES,
        max_bytes: int = PAGE_BYTES,
        chunk: int = SCAN_CHUNK,
        prefetch: int = SCAN_PREFETCH,
        poll_min: float = 0.02,
        poll_max: float = 1.0,
        margin: timedelta = timedelta(seconds=60),
    ) -> None:
        """``seek`` finds the offset for a time (the API's index does it in one request);
        without it a time seek scans the blob from the start."""
        self.stream = stream
        self.blob = SasBlob(stream, access, margin=margin)
        self.reader = StreamReader(self._log, index=None)
        self._seek = seek
        self.page_size = page_size
        self.max_bytes = max_bytes
        self.scan_options = ScanOptions(chunk=chunk, prefetch=prefetch)
        self.poll_min = poll_min
        self.poll_max = poll_max

    def _log(self, stream: str) -> SasBlob:
        if stream != self.stream:
            raise InvalidInput(f"this source reads stream {self.stream!r}, not {stream!r}")
        return self.blob

    def read(self, offset: int, wait: float = 0.0) -> ReadResult:
        return poll(
            lambda: self.reader.read(self.stream, offset, max_bytes=self.max_bytes, max_count=self.page_size),
            lambda result: bool(result.messages),
            wait,
            first=self.poll_min,
            longest=self.poll_max,
            each_within=None,
        )

    def committed(self) -> int:
        return self.blob.state().committed

    def seek_time(self, at_ms: int) -> int:
        if self._seek is not None:
            return self._seek(at_ms)
        return self.reader.seek_time(self.stream, at_ms)

    def scan(self, start: int, end: int) -> Iterator[Message]:
        """Every record in ``[start, end)``, with ``prefetch`` ranged GETs of ``chunk`` bytes in flight."""
        return self.reader.scan(self.stream, start, end, self.scan_options)

    def close(self) -> None:
        pass
