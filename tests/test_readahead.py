"""Read-ahead of the read API for sequential consumers, on a real Azurite (its lifetime in memory)."""

from __future__ import annotations

import threading

from vault_app.readahead import PREFETCH_SLACK, ReadAhead
from vault_core.memory import MemoryAccount
from vault_core.pagelog import CommitState
from vault_core.reader import StreamReader
from vault_core.recordformat import NewMessage
from vault_core.vault import Vault
from vault_core.writer import Batch, WriterSettings


class CountingReader(StreamReader):
    """The real reader, counting the GETs it makes (to see which reads were prefetched)."""

    def __init__(self, vault: Vault) -> None:
        super().__init__(vault.reader.log, vault.reader.index)
        self.fetches: list[int] = []
        self.sizes: list[int] = []
        self.threads: set[str] = set()
        """Where the GETs ran: the reading thread, or the read-ahead's pool."""

    def fetch(self, stream: str, from_offset: int, max_bytes: int) -> tuple[bytes, CommitState]:
        self.fetches.append(from_offset)
        self.sizes.append(max_bytes)
        self.threads.add(threading.current_thread().name)
        return super().fetch(stream, from_offset, max_bytes)


def fill(vault: Vault, stream: str, batches: int = 6) -> None:
    # Format 1: read-ahead works on bytes whatever the format, and these sizes are format 1's
    # (the repeated values below would compress into a couple of small format 2 units).
    with vault.writer(stream, WriterSettings(record_format=1)) as w:
        for b in range(batches):
            w.append([Batch([NewMessage(f"{b}-{i}".encode() * 20, "k") for i in range(100)])])


def consume(ahead: ReadAhead, reader: StreamReader, stream: str, max_bytes: int) -> list[bytes]:
    """A sequential consumer, as the read API serves it: fetch, decode, then note the read."""
    offset = 0
    got: list[bytes] = []
    while True:
        data, state = ahead.fetch(reader, stream, offset, max_bytes)
        result = reader.decode_checked_batches(
            stream, offset, data, state, max_bytes=max_bytes, max_count=10_000
        )
        ahead.done(reader, stream, offset, result.next_offset, result.committed, max_bytes)
        if not result.count:
            return got
        got += [m.value for m in result.messages()]
        offset = result.next_offset


def test_a_sequential_consumer_reads_prefetched_ranges_and_every_message(vault: Vault, stream: str) -> None:
    fill(vault, stream)
    reader = CountingReader(vault)
    with ReadAhead() as ahead:
        got = consume(ahead, reader, stream, 8 * 1024)
    assert got == [m.value for m in vault.reader.scan(stream)]
    # Read-ahead starts with the second read: it is the first one known to be sequential.
    # Every read after that was fetched once, ahead of time, and never again.
    assert len(reader.fetches) == len(set(reader.fetches))
    assert reader.fetches[:2] == [0, reader.fetches[1]] and len(reader.fetches) >= 4


def test_random_reads_prefetch_nothing(vault: Vault, stream: str) -> None:
    fill(vault, stream, 2)
    reader = CountingReader(vault)
    offsets = [m.offset for m in vault.reader.scan(stream)][::37]
    with ReadAhead() as ahead:
        for offset in reversed(offsets):
            data, state = ahead.fetch(reader, stream, offset, 4096)
            result = reader.decode_checked_batches(stream, offset, data, state, max_bytes=4096)
            ahead.done(reader, stream, offset, result.next_offset, result.committed, 4096)
    assert reader.fetches == list(reversed(offsets))


def test_a_read_not_foreseen_fetches_what_its_messages_take_by_the_streams_pages() -> None:
    """A consumer whose pages alternate between two processes (workers or instances): neither
    foresees its reads, and each sizes a read by the log bytes per message of the pages it served,
    not by max_bytes."""
    vault = Vault(MemoryAccount()).ensure()
    fill(vault, "s", 40)
    reader = CountingReader(vault)
    limit, max_bytes = 100, 4 * 1024 * 1024
    offset, got, served = 0, [], [ReadAhead(), ReadAhead()]
    while True:
        ahead = served[len(reader.fetches) % 2]
        data, state = ahead.fetch(reader, "s", offset, max_bytes, limit=limit)
        page = reader.decode_checked_batches("s", offset, data, state, max_bytes=max_bytes, max_count=limit)
        messages = page.messages()
        count = len(messages)
        ahead.done(reader, "s", offset, page.next_offset, page.committed, max_bytes, count=count)
        if not count:
            break
        assert count == limit or page.next_offset == page.committed
        got += messages
        offset = page.next_offset
    for ahead in served:
        ahead.close()
    assert got == list(vault.reader.scan("s"))
    largest = max(got[i + limit].offset - got[i].offset for i in range(0, len(got) - limit, limit))
    assert reader.sizes[:2] == [max_bytes, max_bytes]  # each process's first read knows nothing
    assert all(size <= largest * 5 // 4 + PREFETCH_SLACK for size in reader.sizes[2:])


def test_held_bytes_stay_bounded_and_a_prefetch_is_handed_out_once(vault: Vault, stream: str) -> None:
    fill(vault, stream, 2)
    reader = CountingReader(vault)
    with ReadAhead(max_held_bytes=3 * 1024) as ahead:
        # Two sequential consumers on the same stream at different places; each wants 2 KiB ahead.
        offsets = [m.offset for m in vault.reader.scan(stream)]
        for start in (0, next(o for o in offsets if o >= 8192)):
            data, state = ahead.fetch(reader, stream, start, 2048)
            first = reader.decode_checked_batches(stream, start, data, state, max_bytes=2048)
            ahead.done(reader, stream, start, first.next_offset, first.committed, 2048)
            data, state = ahead.fetch(reader, stream, first.next_offset, 2048)
            second = reader.decode_checked_batches(stream, first.next_offset, data, state, max_bytes=2048)
            ahead.done(reader, stream, first.next_offset, second.next_offset, second.committed, 2048)
        assert ahead.held_bytes <= 3 * 1024  # the older consumer's prefetch was dropped for the newer one
        ahead.fetch(reader, stream, second.next_offset, 2048)  # the prefetched one: no new GET
        assert reader.fetches.count(second.next_offset) == 1 and ahead.held_bytes == 0
        ahead.fetch(reader, stream, second.next_offset, 2048)  # handed out once: a GET again
        assert reader.fetches.count(second.next_offset) == 2


def test_a_closed_read_ahead_prefetches_nothing_holds_nothing_and_its_threads_end() -> None:
    vault = Vault(MemoryAccount()).ensure()
    fill(vault, "s", 2)
    reader = CountingReader(vault)
    before = set(threading.enumerate())
    ahead = ReadAhead()
    everything = consume(ahead, reader, "s", 2048)  # sequential: prefetched on the pool's threads
    pool = [t for t in set(threading.enumerate()) - before if t.name.startswith("mv-readahead")]
    assert pool and len(reader.threads) > 1
    ahead.close()
    reader.threads.clear()
    assert consume(ahead, reader, "s", 2048) == everything  # reads still work, each its own GET
    assert reader.threads == {threading.current_thread().name} and ahead.held_bytes == 0
    for t in pool:
        t.join(timeout=10)
    assert not any(t.is_alive() for t in pool)
    ahead.close()  # idempotent
