"""Read-ahead for sequential consumers of the read API.

A consumer replaying a stream asks for ``from=N``, then ``from=<X-Next-Offset>``, and so on.
Once a read starts exactly where an earlier read of this process ended, the consumer is
reading sequentially, and this process fetches the next range in the background while it
formats and sends the current one: the next request then finds its bytes already here, and
the download no longer adds to each request's time. This is what a file system's read-ahead
does for a sequential reader.

Committed bytes never change, so prefetched bytes are as good as fresh ones; the commit record
that came with them may be a little older, which only means a reader sees a slightly older
``X-Committed`` (it reads the rest on its next request). Reads at the tail (nothing committed
past them) prefetch nothing, and a prefetched range is handed out once and then dropped, so
the memory held is bounded by :data:`MAX_HELD_BYTES` per process. A consumer whose next
request goes to another instance costs one unused GET here: that is why read-ahead starts only
after a sequential pattern has been seen on this instance.

Its lifetime is its owner's (the app's :class:`~vault_app.runtime.Runtime`): built with it (the
pool's threads start with the first prefetch) and closed with it, which cancels prefetches not
yet started, drops what is held, and lets the pool's threads end.

A consumer whose pages end at its message ``limit`` rather than at ``max_bytes`` gets the bytes
its last page took (and some more), not ``max_bytes``: pages of 10,000 small compressed messages
take a few hundred KiB, and fetching 4 MiB for each would cost the storage and this process ten
times what the page needs. Should the next page need more, the read continues past the
prefetched bytes (vault_app.api).

A read that was not foreseen is sized the same way once this process has read the stream: by
the log bytes per message its pages have taken, times the messages the read asks for. That is
the common case when a consumer's requests are spread over several workers or instances (each
sees every other page, and the one that prefetched is not the one asked next): a read of 10,000
small compressed messages then fetches a few hundred KiB, not the 4 MiB of ``max_bytes``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor

from vault_core.pagelog import CommitState
from vault_core.reader import StreamReader

MAX_HELD_BYTES = 64 * 1024 * 1024
"""Prefetched bytes held at most per process (the oldest are dropped first)."""
MAX_TRACKED = 1024
"""Read ends remembered to recognise a sequential consumer (the oldest are forgotten)."""
PREFETCH_SLACK = 128 * 1024
"""Bytes a prefetch sized to the consumer's last page reads beyond a quarter more than it: pages
of as many messages vary in size, and one starting inside a format 2 unit is read from its start."""

Fetched = tuple[bytes, CommitState]


class ReadAhead:
    def __init__(self, max_held_bytes: int = MAX_HELD_BYTES) -> None:
        self.max_held_bytes = max_held_bytes
        self._lock = threading.Lock()
        self._ends: OrderedDict[tuple[str, int], None] = OrderedDict()
        self._ahead: OrderedDict[tuple[str, int], tuple[int, Future[Fetched]]] = OrderedDict()
        self._per_message: OrderedDict[str, float] = OrderedDict()
        """Log bytes per message of each stream's latest page (the oldest streams are forgotten)."""
        self._held = 0
        self._closed = False
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="mv-readahead")

    def __enter__(self) -> ReadAhead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Prefetch nothing more and hold nothing: prefetches not started are cancelled and the
        pool's threads end once the GETs in flight return. Reads still work, each one GET. Idempotent."""
        with self._lock:
            self._closed = True
            self._ends.clear()
            self._ahead.clear()
            self._per_message.clear()
            self._held = 0
        self._pool.shutdown(wait=False, cancel_futures=True)

    @property
    def held_bytes(self) -> int:
        """The bytes reserved for prefetched ranges not yet handed out."""
        return self._held

    def fetch(
        self, reader: StreamReader, stream: str, offset: int, max_bytes: int, *, limit: int | None = None
    ) -> Fetched:
        """The bytes at ``offset``: prefetched if this read was foreseen (then possibly fewer than
        ``max_bytes``: as many as the consumer's last page took, and more), else one GET now, of
        what ``limit`` messages take by this stream's pages so far (and more), at most ``max_bytes``."""
        size = max_bytes
        with self._lock:
            found = self._ahead.pop((stream, offset), None)
            if found is not None:
                self._held -= found[0]
            per_message = self._per_message.get(stream)
            if limit is not None and per_message is not None:
                size = min(max_bytes, int(limit * per_message) * 5 // 4 + PREFETCH_SLACK)
        if found is not None:
            try:
                return found[1].result()
            except Exception:  # a failed prefetch is retried as an ordinary read, which reports it
                pass
        return reader.fetch(stream, offset, size)

    def done(
        self,
        reader: StreamReader,
        stream: str,
        offset: int,
        next_offset: int,
        committed: int,
        max_bytes: int,
        *,
        by_count: bool = False,
        count: int = 0,
    ) -> None:
        """Note a read of ``count`` messages, ``[offset, next_offset)``; prefetch what a sequential
        reader wants next.

        ``by_count``: the read ended at the consumer's message limit (not at ``max_bytes``)."""
        size = max_bytes
        if by_count:
            size = min(max_bytes, (next_offset - offset) * 5 // 4 + PREFETCH_SLACK)
        with self._lock:
            if count:
                self._per_message.pop(stream, None)
                self._per_message[stream] = (next_offset - offset) / count
                if len(self._per_message) > MAX_TRACKED:
                    self._per_message.popitem(last=False)
            sequential = (stream, offset) in self._ends  # it starts where a read of ours ended
            self._ends.pop((stream, offset), None)
            self._ends[(stream, next_offset)] = None
            while len(self._ends) > MAX_TRACKED:
                self._ends.popitem(last=False)
            if self._closed:
                return
            if not sequential or next_offset >= committed or (stream, next_offset) in self._ahead:
                return
            while self._ahead and self._held + size > self.max_held_bytes:
                _, (dropped, _) = self._ahead.popitem(last=False)
                self._held -= dropped
            if self._held + size > self.max_held_bytes:
                return
            self._held += size
            future = self._pool.submit(reader.fetch, stream, next_offset, size)
            self._ahead[(stream, next_offset)] = (size, future)
