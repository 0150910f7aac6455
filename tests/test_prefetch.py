"""The prefetching range downloader shared by the full scan and every Spark task (pure, in memory)."""

from __future__ import annotations

import threading

import pytest

from vault_core.errors import StorageFailure
from vault_core.prefetch import prefetched_chunks


class CountingLog:
    """A log over ``data`` that records its reads and how many were under way at once."""

    stream = "s"

    def __init__(self, data: bytes, *, short_at: int | None = None) -> None:
        self.data = data
        self.short_at = short_at
        self.reads: list[tuple[int, int]] = []
        self.lock = threading.Lock()

    def read(self, start: int, length: int) -> bytes:
        with self.lock:
            self.reads.append((start, length))
        if start == self.short_at:
            return self.data[start : start + length - 1]
        return self.data[start : start + length]


DATA = bytes(range(256)) * 40  # 10,240 bytes


@pytest.mark.parametrize(
    ("start", "end", "chunk", "prefetch"), [(0, 10_240, 1000, 3), (7, 9_000, 4096, 1), (5, 6, 64, 4)]
)
def test_the_range_comes_back_in_order_in_chunks_the_last_one_marked(
    start: int, end: int, chunk: int, prefetch: int
) -> None:
    log = CountingLog(DATA)
    got = list(prefetched_chunks(log, start, end, chunk=chunk, prefetch=prefetch))
    assert b"".join(data for data, _ in got) == DATA[start:end]
    assert [last for _, last in got] == [False] * (len(got) - 1) + [True]
    assert all(len(data) == chunk for data, _ in got[:-1])
    assert sorted(log.reads) == [(p, min(chunk, end - p)) for p in range(start, end, chunk)]


@pytest.mark.parametrize(
    ("start", "end", "first", "sizes"),
    [(0, 10_240, 1000, [1000, 2000, 4000, 3240]), (7, 9_000, 300, [300, 600, 1200, 2400, 4096, 397])],
)
def test_reads_from_a_first_size_double_up_to_the_chunk(
    start: int, end: int, first: int, sizes: list[int]
) -> None:
    log = CountingLog(DATA)
    got = list(prefetched_chunks(log, start, end, chunk=4096, prefetch=2, first=first))
    assert b"".join(data for data, _ in got) == DATA[start:end]
    assert [len(data) for data, _ in got] == sizes
    assert [last for _, last in got] == [False] * (len(got) - 1) + [True]


def test_an_empty_range_reads_nothing() -> None:
    log = CountingLog(DATA)
    assert list(prefetched_chunks(log, 100, 100, chunk=10, prefetch=2)) == [] and log.reads == []


def test_a_short_read_is_a_storage_failure_not_a_shorter_chunk() -> None:
    log = CountingLog(DATA, short_at=2000)
    with pytest.raises(StorageFailure, match="short read from stream 's': 999 of 1000 bytes"):
        list(prefetched_chunks(log, 0, 5000, chunk=1000, prefetch=2))


def test_closing_early_leaves_the_rest_unread() -> None:
    log = CountingLog(DATA)
    chunks = prefetched_chunks(log, 0, 10_240, chunk=100, prefetch=2)
    assert next(chunks) == (DATA[:100], False)
    chunks.close()
    assert len(log.reads) <= 1 + 2 + 1  # the one returned, those in flight, one starting as it closed
