"""The writer's protocol, its lease renewal and its crash windows, in memory and in milliseconds
(what every backend must do alike is tests/test_writer.py, run here in memory and on Azurite).

The same StreamWriter as on Azure, over :mod:`vault_core.memory` (which passes the page blob and
table contracts of tests/test_contracts.py), with a ManualClock: leases expire when the test
moves the clock, and a crash is the writer stopping dead at a chosen call and never releasing
its lease. tests/test_log.py proves the same on Azurite, with a real kill -9.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from vault_core import codecs
from vault_core.clock import ManualClock
from vault_core.errors import CorruptRecord, LeaseLost, MessageTooLarge, StreamLeased
from vault_core.memory import MemoryAccount, MemoryPageBlob, MemoryPageBlobs
from vault_core.pagelog import CommitState, HeldLease
from vault_core.reader import ScanOptions
from vault_core.recordformat import MAX_VALUE_BYTES, NewMessage
from vault_core.stagedunits import encode_units, message_fields, staged_units
from vault_core.unitformat import UNIT_TARGET_BYTES, UNIT_TARGET_MESSAGES
from vault_core.vault import Vault
from vault_core.writer import MIN_GROWTH, Batch, StreamWriter, WriterSettings

LEASE = 15
STREAM = "s"


class Crash(BaseException):
    """The process died here (not an Exception: nothing in the writer may handle it)."""


def msgs(n: int, size: int = 100, tag: str = "m") -> list[NewMessage]:
    # Random bodies (without the tag separator): as long in a compressed unit as in records.
    rng = random.Random(f"{tag}{n}{size}")
    return [
        NewMessage(f"{tag}-{i:06d}-".encode() + rng.randbytes(size).replace(b"-", b"+"), "k")
        for i in range(n)
    ]


def tags(vault: Vault) -> list[bytes]:
    return [m.value.split(b"-")[0] for m in vault.reader.scan(STREAM)]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_750_000_000_000)


@pytest.fixture
def vault(clock: ManualClock) -> Vault:
    return Vault(MemoryAccount(clock), clock=clock).ensure()


class Faulty(MemoryPageBlob):
    """The in-memory page blob, with a hook before every write: a crash point or a slow call."""

    def __init__(self, vault: Vault, before: Callable[[str, int], None]) -> None:
        container = vault.page_blobs
        assert isinstance(container, MemoryPageBlobs)
        super().__init__(container, STREAM)
        self.before = before
        self.calls: dict[str, int] = {}

    def _hook(self, what: str) -> None:
        self.calls[what] = self.calls.get(what, 0) + 1
        self.before(what, self.calls[what])

    def resize(self, size: int, lease: HeldLease, etag: str) -> str:
        self._hook("resize")
        return super().resize(size, lease, etag)

    def write_pages(self, offset: int, data: bytes | memoryview, lease: HeldLease, etag: str) -> str:
        self._hook("write_pages")
        return super().write_pages(offset, data, lease, etag)

    def commit(self, state: CommitState, lease: HeldLease, etag: str) -> str:
        self._hook("commit")
        return super().commit(state, lease, etag)


def crash_at(point: str, nth: int = 1) -> Callable[[str, int], None]:
    def before(what: str, count: int) -> None:
        if what == point and count == nth:
            raise Crash(f"killed before {point} #{nth}")

    return before


def faulty_writer(vault: Vault, before: Callable[[str, int], None], **options: Any) -> StreamWriter:
    return StreamWriter.open(
        Faulty(vault, before), vault.index, WriterSettings(LEASE, **options), clock=vault.clock
    )


def abandon(writer: StreamWriter) -> None:
    """What a dead process leaves: no close, no release; only its threads go (as the process did)."""
    writer._recorder.shutdown(wait=True)  # a test's stand-in for the process exiting
    writer._uploader.shutdown(wait=True)


def after_lease_expiry(clock: ManualClock) -> None:
    clock.advance((LEASE + 1) * 1000)


# -- the protocol ------------------------------------------------------------------------------
def test_writer_settings_refuse_a_record_format_codec_or_unit_size_the_writer_cannot_write() -> None:
    with pytest.raises(ValueError, match="record format 3"):
        WriterSettings(record_format=3)
    with pytest.raises(ValueError, match="codec 99"):
        WriterSettings(codec=99)
    for size in (0, 4 * 1024 * 1024 + 1):
        with pytest.raises(ValueError, match="unit_bytes"):
            WriterSettings(unit_bytes=size)


def test_a_unit_closes_at_its_target_bytes_or_messages_whichever_comes_first(vault: Vault) -> None:
    """Small messages fill a unit in messages (UNIT_TARGET_MESSAGES), large ones in payload bytes
    (UNIT_TARGET_BYTES: the unit closes before it would pass them); a batch's pieces say where."""
    with vault.writer(STREAM) as w:
        [small] = w.append([Batch(msgs(5000, size=20))])
        [large] = w.append([Batch(msgs(2500, size=1000))])
    assert [n for _, n in small.pieces] == [
        UNIT_TARGET_MESSAGES,
        UNIT_TARGET_MESSAGES,
        5000 - 2 * UNIT_TARGET_MESSAGES,
    ]
    per_message = 8 + len(b"k") + len(msgs(1, size=1000)[0].value)
    fits = (UNIT_TARGET_BYTES - 8) // per_message  # the payload's two leading zero boundaries
    assert [n for _, n in large.pieces] == [fits, fits, 2500 - 2 * fits]
    assert [m.offset for m in vault.reader.scan(STREAM)][5000:] == [
        o + i for o, n in large.pieces for i in range(n)
    ]
    smaller = 256 * 1024
    with vault.writer(STREAM, WriterSettings(unit_bytes=smaller)) as w:  # a writer asked for smaller units
        [third] = w.append([Batch(msgs(600, size=1000))])
    fits = (smaller - 8) // per_message
    assert [n for _, n in third.pieces] == [fits, fits, 600 - 2 * fits]


def test_the_blob_grows_in_large_steps_and_oversize_batches_write_nothing(vault: Vault) -> None:
    with vault.writer(STREAM) as w:
        w.append([Batch(msgs(10, size=1000))])
        with pytest.raises(MessageTooLarge):
            w.append([Batch(msgs(2)), Batch([NewMessage(b"v" * (MAX_VALUE_BYTES + 1))])])
        w.append([Batch(msgs(1))])
        assert w.state.blob_size == MIN_GROWTH
    assert len(tags(vault)) == 11


def test_time_seeks_and_a_clock_going_backwards(vault: Vault, clock: ManualClock) -> None:
    offsets = {}
    with vault.writer(STREAM, WriterSettings(index_spacing=4096)) as w:
        for _ in range(10):
            clock.advance(1000)
            [r] = w.append([Batch(msgs(40, size=200))])
            offsets[clock.now_ms()] = r.first_offset
        clock.advance(-60_000)
        [late] = w.append([Batch(msgs(1))])
    assert late.timestamp == max(offsets)  # never earlier than what is committed
    for at, expected in offsets.items():
        assert vault.reader.seek_time(STREAM, at - 500) == expected


# -- leases ------------------------------------------------------------------------------------
def test_a_second_writer_is_refused_until_the_lease_expires(vault: Vault, clock: ManualClock) -> None:
    stale = vault.writer(STREAM, WriterSettings(lease_seconds=LEASE))
    stale.append([Batch(msgs(10, tag="old"))])
    with pytest.raises(StreamLeased):
        vault.writer(STREAM)
    after_lease_expiry(clock)  # the stale writer never renewed: its lease ran out
    with vault.writer(STREAM) as fresh:
        fresh.append([Batch(msgs(10, tag="new"))])
        with pytest.raises(LeaseLost):
            stale.append([Batch(msgs(10, tag="stale"))])
    assert tags(vault) == [b"old"] * 10 + [b"new"] * 10


def test_the_lease_is_renewed_during_a_long_append(vault: Vault, clock: ManualClock) -> None:
    def slow(what: str, count: int) -> None:
        if what == "write_pages":
            clock.advance(1000)  # each 64 KiB page write takes a second

    writer = faulty_writer(vault, slow, max_write=64 * 1024)
    writer.append([Batch(msgs(220, size=5000))])  # 17 page writes: longer than the lease
    assert writer.blob.calls["write_pages"] > LEASE  # type: ignore[attr-defined]
    with pytest.raises(StreamLeased):
        vault.writer(STREAM)  # still held: it was renewed on the way
    writer.close()
    vault.writer(STREAM).close()  # released by close: free at once
    assert len(tags(vault)) == 220


# -- crash windows -----------------------------------------------------------------------------
FORMS = pytest.mark.parametrize("form", ["messages", "staged units"])
"""A batch as messages, or as the units a format 2 app stages and the writer copies."""


def batch(messages: list[NewMessage], batch_id: str | None = None, *, form: str = "messages") -> Batch:
    if form == "messages":
        return Batch(messages, batch_id)
    body = encode_units(message_fields(messages), 1, codec=codecs.CODEC_ZSTD)
    return Batch.of_units(staged_units(body), batch_id)


@FORMS
def test_killed_between_pages_and_commit_loses_nothing_and_exposes_nothing(
    vault: Vault, clock: ManualClock, form: str
) -> None:
    with vault.writer(STREAM) as w:
        w.append([Batch(msgs(100, tag="committed"))])
    committed = vault.reader.state(STREAM).committed
    dying = faulty_writer(vault, crash_at("commit"))
    with pytest.raises(Crash):
        dying.append([batch(msgs(50, tag="lost"), "lost-batch", form=form)])
    abandon(dying)
    assert vault.reader.state(STREAM).committed == committed  # pages written, commit not
    with pytest.raises(StreamLeased):
        vault.writer(STREAM)  # the dead writer's lease holds until it expires
    after_lease_expiry(clock)
    with vault.writer(STREAM) as w:
        [again] = w.append([batch(msgs(5, tag="after"), "lost-batch", form=form)])
    assert not again.duplicate  # it never committed: appended now, once
    assert tags(vault) == [b"committed"] * 100 + [b"after"] * 5


@FORMS
def test_killed_between_two_page_writes_of_one_batch_exposes_nothing(
    vault: Vault, clock: ManualClock, form: str
) -> None:
    dying = faulty_writer(vault, crash_at("write_pages", 2), max_write=64 * 1024)
    with pytest.raises(Crash):
        dying.append([batch(msgs(100, size=2000, tag="torn"), form=form)])
    abandon(dying)
    after_lease_expiry(clock)
    assert vault.reader.state(STREAM).committed == 0
    with vault.writer(STREAM) as w:
        w.append([Batch(msgs(3, tag="next"))])
    assert tags(vault) == [b"next"] * 3


@FORMS
def test_killed_after_commit_keeps_the_batch_exactly_once(
    vault: Vault, clock: ManualClock, form: str
) -> None:
    index = vault.index.index

    def lose_the_index_write(*args: Any, **kwargs: Any) -> None:
        raise Crash("killed before the index rows were written")

    with vault.writer(STREAM) as w:
        w.append([Batch(msgs(10, tag="before"), "b0")])
    dying = vault.writer(STREAM, WriterSettings(lease_seconds=LEASE))
    index.replace_all = lose_the_index_write  # type: ignore[method-assign]
    [first] = dying.append([batch(msgs(3000, tag="redelivered"), "batch-1", form=form)])  # committed
    abandon(dying)
    del index.replace_all  # the next process writes its index rows as usual
    assert not vault.index.committed_batches(STREAM, ["batch-1"])  # only the commit record knows it
    after_lease_expiry(clock)
    with vault.writer(STREAM) as w:
        [again] = w.append([batch(msgs(3000, tag="redelivered"), "batch-1", form=form)])
    assert again.duplicate and again.first_offset == first.first_offset and again.count == 3000
    assert tags(vault) == [b"before"] * 10 + [b"redelivered"] * 3000
    entry = vault.index.catalog_entry(STREAM)
    assert entry is not None and entry.count == 3010 and vault.index.last_point(STREAM) is not None
    # The batch's pieces (two units), which the commit record does not carry, were re-derived
    # from the log; the writers after that keep them.
    offsets = [m.offset for m in vault.reader.scan(STREAM)][10:]
    assert len(first.pieces) == 2 and again.pieces == first.pieces
    assert [o + i for o, n in first.pieces for i in range(n)] == offsets
    vault.writer(STREAM).close()
    assert vault.index.committed_batches(STREAM, ["batch-1"])["batch-1"].pieces == first.pieces


def test_a_successor_under_the_dead_writers_lease_id_takes_over_at_once_and_the_dead_one_cannot_write(
    vault: Vault,
) -> None:
    """A replacement on the same instance opens under the lease id its dead predecessor held
    (docs/ARCHITECTURE.md §3.7): no wait for the lease to run out, the batch the predecessor
    committed stays once, and a late write of the predecessor's fails on the ETag."""
    shared = "4f8a6c1e-2b3d-4e5f-8a9b-0c1d2e3f4a5b"
    dying = StreamWriter.open(
        vault.blob(STREAM), vault.index, WriterSettings(LEASE), clock=vault.clock, lease_id=shared
    )
    dying.append([Batch(msgs(10, tag="committed"), "batch-1")])  # then it stops: no release
    with pytest.raises(StreamLeased):
        vault.writer(STREAM)  # any other lease id waits the lease out, as before
    with StreamWriter.open(
        vault.blob(STREAM), vault.index, WriterSettings(LEASE), clock=vault.clock, lease_id=shared
    ) as successor:  # at once
        [again, after] = successor.append(
            [Batch(msgs(10, tag="committed"), "batch-1"), Batch(msgs(5, tag="after"), "batch-2")]
        )
        with pytest.raises(LeaseLost):
            dying.append([Batch(msgs(5, tag="late"), "batch-3")])
    abandon(dying)
    assert again.duplicate and not after.duplicate
    assert tags(vault) == [b"committed"] * 10 + [b"after"] * 5


def test_a_successor_reads_the_log_again_only_when_the_last_commits_rows_are_missing(
    vault: Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each commit waits for the previous one's rows, so a successor whose last commit's batch
    rows are all in Tables opens without decoding the log (a takeover's few requests); one
    whose predecessor died before writing them re-derives them from the log, as before."""
    import vault_core.reader

    scans: list[int] = []
    real_scan = vault_core.reader.scan_log

    def counted_scan(*args: Any, **kwargs: Any) -> Any:
        scans.append(1)
        return real_scan(*args, **kwargs)

    monkeypatch.setattr(vault_core.reader, "scan_log", counted_scan)
    shared = "4f8a6c1e-2b3d-4e5f-8a9b-0c1d2e3f4a5b"

    def successor() -> StreamWriter:
        return StreamWriter.open(
            vault.blob(STREAM), vault.index, WriterSettings(LEASE), clock=vault.clock, lease_id=shared
        )

    dying = successor()
    dying.append([Batch(msgs(200, tag="one"), "batch-1")])
    dying.append([Batch(msgs(200, tag="two"), "batch-2")])
    dying._wait_recorded()  # its rows are written: the process died after that
    last_point = vault.index.last_point(STREAM)
    with successor() as w:
        assert not scans and w._last_point == last_point
        [dup, fresh] = w.append(
            [Batch(msgs(200, tag="two"), "batch-2"), Batch(msgs(5, tag="three"), "batch-3")]
        )
    assert dup.duplicate and not fresh.duplicate
    index = vault.index.index
    dying = successor()
    index.replace_all = lambda *a, **k: None  # type: ignore[method-assign]  # died before its rows
    dying.append([Batch(msgs(7, tag="four"), "batch-4")])
    dying._wait_recorded()
    del index.replace_all
    with successor() as w:
        assert scans  # re-derived from the log
        [again] = w.append([Batch(msgs(7, tag="four"), "batch-4")])
    assert again.duplicate and vault.index.committed_batches(STREAM, ["batch-4"])
    assert tags(vault) == [b"one"] * 200 + [b"two"] * 200 + [b"three"] * 5 + [b"four"] * 7


# -- what readers refuse -------------------------------------------------------------------------
def test_a_flipped_byte_is_detected_and_skipping_reads_the_rest(vault: Vault) -> None:
    with vault.writer(STREAM, WriterSettings(record_format=1)) as w:  # version 2: tests/test_unitformat.py
        w.append([Batch(msgs(50))])
    container = vault.page_blobs
    assert isinstance(container, MemoryPageBlobs)
    container.blobs[STREAM].data[400] ^= 0x40  # inside the value of the third record
    with pytest.raises(CorruptRecord, match="checksum"):
        list(vault.reader.scan(STREAM))
    assert len(list(vault.reader.scan(STREAM, options=ScanOptions(skip_corrupt=True)))) == 49
