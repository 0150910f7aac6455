"""Reads at the edges FORMAT.md draws, on logs whose headers lie: frames that claim to run past
the committed end or past any frame's size, index rows that point at no frame (or at producer
bytes that look like a newer writer's), index points near the committed end, and time seeks that
need no log at all. Each was found by an adversarial reader of the spec against this reader."""

from __future__ import annotations

import struct
import threading
import time

import pytest

from vault_core.clock import ManualClock
from vault_core.errors import CorruptRecord, FormatError, InvalidOffset
from vault_core.index import IndexPoint
from vault_core.memory import BytesLog, MemoryAccount, MemoryPageBlobs
from vault_core.prefetch import prefetched_reads
from vault_core.reader import StreamReader, scan_log
from vault_core.recordformat import MAGIC, NewMessage, encode
from vault_core.spark.columnar import SPARK_MAX_MS, Decoder
from vault_core.unitformat import encode_unit
from vault_core.vault import Vault
from vault_core.writer import Batch, WriterSettings

STREAM = "edges"
TS = 1_700_000_000_000
VALUE_LENGTH_AT = 12  # a record's value_length (FORMAT.md §2)
PAYLOAD_LENGTH_AT, STORED_LENGTH_AT = 14, 18  # a unit's (§11.2)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_750_000_000_000)


def _vault(clock: ManualClock, record_format: int, commits: int = 2) -> Vault:
    vault = Vault(MemoryAccount(clock), clock=clock).ensure()
    for c in range(commits):
        with vault.writer(STREAM, WriterSettings(record_format=record_format, codec=0)) as w:
            w.append([Batch([NewMessage(b"%d-%d" % (c, i) * 20, "k") for i in range(4)])])
        clock.advance(1000)
    return vault


def _blob(vault: Vault) -> bytearray:
    container = vault.page_blobs
    assert isinstance(container, MemoryPageBlobs)
    return container.blobs[STREAM].data


def _fresh(vault: Vault, clock: ManualClock) -> Vault:
    return Vault(vault.account, clock=clock)  # nothing proven yet


def stopped(seconds: float) -> threading.Event:
    """An event set after ``seconds``: a follower that polled for ever ends, and its test fails."""
    event = threading.Event()
    timer = threading.Timer(seconds, event.set)
    timer.daemon = True
    timer.start()
    return event


def _frames(vault: Vault) -> list[int]:
    """Where each frame starts: a record's offset, or a unit's first message's."""
    starts, after = [], 0
    for m in vault.reader.scan(STREAM):
        if m.offset == after:
            starts.append(m.offset)
        if m.ends_frame:
            after = m.next_offset
    return starts


@pytest.mark.parametrize("record_format", [1, 2])
@pytest.mark.parametrize("max_bytes", [10, 100, 1_000_000])
def test_a_frame_that_claims_to_run_past_the_committed_end_is_corrupt_at_any_max_bytes(
    clock: ManualClock, record_format: int, max_bytes: int
) -> None:
    """§7.2 step 5: corrupt. A small max_bytes once answered an empty page instead, whose
    next offset was where it began: a follower polled it for ever."""
    vault = _vault(clock, record_format)
    last = _frames(vault)[-1]
    data = _blob(vault)
    if record_format == 1:
        struct.pack_into("<I", data, last + VALUE_LENGTH_AT, 5000)  # within the limits, past the end
    else:
        struct.pack_into("<II", data, last + PAYLOAD_LENGTH_AT, 600, 600)
    reader = _fresh(vault, clock).reader
    with pytest.raises(CorruptRecord, match="runs past the committed end"):
        reader.read(STREAM, last, max_bytes=max_bytes)
    follower = _fresh(vault, clock).reader.follow(STREAM, 0, max_bytes=max_bytes, stop=stopped(5))
    with pytest.raises(CorruptRecord, match="runs past the committed end"):
        list(follower)


def test_a_length_past_any_frame_s_size_is_never_fetched(clock: ManualClock) -> None:
    """§4: the limits bound what a reader buffers. A value_length damaged to 5 MiB (past the
    largest frame, 4 MiB and 38 bytes) inside a longer committed log is corrupt, and the read
    never asks storage for what it claims: in a log of gigabytes, a damaged high byte would ask
    for gigabytes."""
    vault = Vault(MemoryAccount(clock), clock=clock).ensure()
    with vault.writer(STREAM, WriterSettings(record_format=1)) as w:
        for i in range(6):
            w.append([Batch([NewMessage(bytes([i]) * (1 << 20))])])
    struct.pack_into("<I", _blob(vault), VALUE_LENGTH_AT, 5 << 20)  # the first record's
    reader = _fresh(vault, clock).reader
    log = reader.log(STREAM)
    asked: list[int] = []
    read = log.read

    def counted(start: int, length: int) -> bytes:
        asked.append(length)
        return read(start, length)

    log.read = counted  # type: ignore[method-assign]
    reader.log = lambda stream: log  # type: ignore[method-assign]
    with pytest.raises(CorruptRecord, match="lengths out of range"):
        reader.read(STREAM, 0, max_bytes=100)
    assert max(asked, default=0) < 1 << 20


def test_an_index_row_at_bytes_that_look_like_a_newer_writer_s_frame_is_ignored(clock: ManualClock) -> None:
    """§8: a row with no frame of a known version where it says is the index's mistake. Producer
    bytes that read as a sync marker and version 5 there once made a sound log unreadable."""
    vault = Vault(MemoryAccount(clock), clock=clock).ensure()
    with vault.writer(STREAM, WriterSettings(record_format=1)) as w:
        w.append([Batch([NewMessage(b"first", "k")])])
        clock.advance(1000)
        w.append([Batch([NewMessage(MAGIC + bytes(4) + b"\x05" + bytes(40), b"")])])
        clock.advance(1000)
        w.append([Batch([NewMessage(b"later", "k")])])
    messages = list(vault.reader.scan(STREAM))
    inside = messages[1].offset + 32  # the second record's value: the look-alike header
    assert vault.index is not None
    vault.index.record_index(STREAM, [IndexPoint(inside, messages[1].timestamp, 1)], [])
    reader = _fresh(vault, clock).reader
    assert [m.value for m in reader.read(STREAM, messages[2].offset).messages] == [b"later"]
    assert _fresh(vault, clock).reader.seek_time(STREAM, messages[2].timestamp) == messages[2].offset
    with pytest.raises(InvalidOffset):
        _fresh(vault, clock).reader.read(STREAM, inside)


def test_an_index_point_near_the_committed_end_is_checked_without_reading_past_it(clock: ManualClock) -> None:
    vault = _vault(clock, 1)
    state = vault.reader.state(STREAM)
    near = state.committed - 20  # inside the last record: a header there would run past the end
    assert vault.index is not None
    vault.index.record_index(STREAM, [IndexPoint(near, state.last_ts or 0, 7)], [])
    reader = _fresh(vault, clock).reader
    log = reader.log(STREAM)
    read = log.read
    past: list[tuple[int, int]] = []

    def watched(start: int, length: int) -> bytes:
        if start + length > state.committed:
            past.append((start, length))
        return read(start, length)

    log.read = watched  # type: ignore[method-assign]
    reader.log = lambda stream: log  # type: ignore[method-assign]
    with pytest.raises(InvalidOffset):
        reader.read(STREAM, near)
    assert past == []


def test_a_time_seek_to_zero_or_before_is_the_start_whatever_the_log_holds(clock: ManualClock) -> None:
    """§7.5: for T ≤ 0 the answer is 0, which needs no byte of the log, damaged or not."""
    vault = _vault(clock, 2)
    _blob(vault)[0] ^= 0xFF
    reader = _fresh(vault, clock).reader
    assert reader.seek_time(STREAM, 0) == 0 and reader.seek_time(STREAM, -5) == 0
    with pytest.raises(CorruptRecord):
        reader.seek_time(STREAM, 1)


@pytest.mark.parametrize("cut", [10, 31, 35])
@pytest.mark.parametrize("max_bytes", [1, 20, 1 << 20])
def test_a_header_the_committed_end_cuts_off_is_corrupt_at_any_max_bytes(cut: int, max_bytes: int) -> None:
    """§7.2 step 3. A max_bytes smaller than what is left before the end once answered an empty
    page there, whose next offset was where it began."""
    good = encode([NewMessage(b"hello", "k")], 0, TS)
    following = (
        encode_unit([b"k"], [b"v" * 50], len(good), TS, codec=0, key_is_text=True)
        if cut == 35
        else encode([NewMessage(b"world", "k")], len(good), TS)
    )
    log = good + following[:cut]
    reader = StreamReader(lambda stream: BytesLog(log, stream), None)
    with pytest.raises(CorruptRecord, match=r"partial (record|unit) header at the committed end"):
        reader.read(STREAM, len(good), max_bytes=max_bytes)


@pytest.mark.parametrize("frame", ["record", "unit"])
@pytest.mark.parametrize("timestamp", [1 << 48, SPARK_MAX_MS + 1, -(1 << 63)])
def test_the_spark_columns_report_a_timestamp_they_cannot_hold(frame: str, timestamp: int) -> None:
    """§2: readers deliver a timestamp as stored; a Spark timestamp holds microseconds in 64 bits,
    so one past about 292,000 years is reported as such (it once wrapped round in a record and
    raised OverflowError out of the decoder for a unit), and one a writer could write is kept."""
    log = (
        encode([NewMessage(b"v", "k")], 0, timestamp)
        if frame == "record"
        else encode_unit([b"k"], [b"v"], 0, timestamp, codec=0, key_is_text=True)
    )
    assert [m.timestamp for m in scan_log(BytesLog(log, STREAM), 0, len(log))] == [timestamp]
    columns = Decoder(log, 0, last=True, stream=STREAM).pieces().joined()
    if abs(timestamp) <= SPARK_MAX_MS:
        assert columns.error is None and columns.arrays[1].cast("int64").to_pylist() == [timestamp * 1000]
    else:
        assert columns.rows == 0 and isinstance(columns.error, FormatError)
        assert "outside what a Spark timestamp holds" in str(columns.error)


def test_reads_are_ranged_as_they_go_not_listed_to_the_committed_end() -> None:
    """A time seek or a page reads from a point towards the committed end and stops early; the
    reads' ranges were once listed up front, so a damaged mv_committed of 10^30 (or a healthy
    stream of terabytes) cost every seek memory and time by the whole length."""
    log = BytesLog(bytes(1 << 20), STREAM)
    started = time.perf_counter()
    reads = prefetched_reads(log, 0, 10**30, chunk=1 << 20, prefetch=2)
    first, last = next(reads)
    assert len(first.result()) == 1 << 20 and not last
    reads.close()
    assert time.perf_counter() - started < 5


def test_an_index_row_whose_offset_lies_past_the_offset_it_was_found_for_is_ignored(
    clock: ManualClock,
) -> None:
    """§8.5's query finds the last point at or before X by its RowKey; a row whose Offset says
    otherwise is wrong, and once made good offsets "not a record boundary"."""
    vault = _vault(clock, 1, commits=3)
    frames = _frames(vault)
    assert vault.index is not None
    vault.index.record_index(STREAM, [IndexPoint(frames[0], 0, 0)], [])  # the point at 0 is sound
    row = vault.index.index.get(STREAM, "o" + f"{frames[0]:016x}")
    assert row is not None
    vault.index.index.upsert(STREAM, row.key, {**row.fields, "Offset": frames[-1]})
    assert [m.offset for m in _fresh(vault, clock).reader.read(STREAM, frames[1]).messages][:1] == [frames[1]]
