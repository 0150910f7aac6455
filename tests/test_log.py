"""The lease-guarded writer and the reader, on a real Azurite: what only real storage shows (a real
kill -9, a real 15 s lease, storage faults through a proxy, Azure's answers). What every backend
must do alike is tests/test_writer.py, run on Azurite and in memory."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import cast

import pytest
from fault_proxy import CUT, DROP, FaultProxy
from leases import end_stream_leases

from vault_core import azure, pageblob
from vault_core import recordformat as fmt
from vault_core.azure import StorageAccount, azurite_connection_string
from vault_core.clock import ManualClock
from vault_core.errors import (
    CorruptRecord,
    FormatError,
    InvalidOffset,
    InvalidStreamName,
    LeaseLost,
    MessageTooLarge,
    StorageUnavailable,
    StreamLeased,
    StreamNotFound,
    UnsupportedVersion,
)
from vault_core.pageblob import StreamBlob
from vault_core.pagelog import PAGE_SIZE, CommitState
from vault_core.reader import ScanOptions, scan_log
from vault_core.recordformat import HEADER_SIZE, MAX_VALUE_BYTES, NewMessage
from vault_core.vault import Vault
from vault_core.writer import Batch, WriterSettings
from vault_local.azurite import Azurite

HELPERS = Path(__file__).parent / "helpers"


def msgs(n: int, size: int = 100, key: str | bytes = "k", tag: str = "m") -> list[NewMessage]:
    # Random bodies (without the tag separator): as long in a compressed unit as in records.
    rng = random.Random(f"{tag}{n}{size}")
    body = [rng.randbytes(size).replace(b"-", b"+") for _ in range(n)]
    return [NewMessage(f"{tag}-{i:06d}-".encode() + body[i], key) for i in range(n)]


def read_all(vault: Vault, stream: str) -> list[bytes]:
    return [m.value for m in vault.reader.scan(stream)]


def test_read_returns_a_record_larger_than_max_bytes(vault: Vault, stream: str) -> None:
    with vault.writer(stream) as w:
        w.append([Batch([NewMessage(b"v" * MAX_VALUE_BYTES)])])
    assert [len(m.value) for m in vault.reader.read(stream, 0, max_bytes=4096).messages] == [MAX_VALUE_BYTES]


def test_second_writer_gets_a_clear_leased_error(vault: Vault, stream: str) -> None:
    with vault.writer(stream), pytest.raises(StreamLeased, match="leased by another writer"):
        vault.writer(stream)


def test_a_writer_whose_lease_was_taken_stops_and_cannot_roll_back(vault: Vault, stream: str) -> None:
    stale = vault.writer(stream, WriterSettings(lease_seconds=15))
    stale.append([Batch(msgs(10, tag="old"))])
    vault.blob(stream).break_lease()
    with vault.writer(stream) as fresh:
        fresh.append([Batch(msgs(10, tag="new"))])
        with pytest.raises(LeaseLost):
            stale.append([Batch(msgs(10, tag="stale"))])
    assert [v.split(b"-")[0] for v in read_all(vault, stream)] == [b"old"] * 10 + [b"new"] * 10


@pytest.mark.slow  # outlives a real 15 s lease: the shortest Azure allows
def test_lease_is_renewed_during_a_long_append(vault: Vault, stream: str) -> None:
    writer = vault.writer(stream, WriterSettings(lease_seconds=15, max_write=64 * 1024))
    slow_write = writer.blob.write_pages

    def slow(*args: object, **kwargs: object) -> str:
        time.sleep(1.0)
        return slow_write(*args, **kwargs)  # type: ignore[arg-type]

    writer.blob.write_pages = slow  # type: ignore[method-assign]
    start = time.monotonic()
    writer.append([Batch(msgs(220, size=5000))])  # 17 page writes of 64 KiB: > 15 s
    assert time.monotonic() - start > 15
    with pytest.raises(StreamLeased):
        vault.writer(stream)
    writer.close()
    assert len(read_all(vault, stream)) == 220


def _crash(vault: Vault, azurite_conn: str, stream: str, phase: str, batch_id: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, str(HELPERS / "crash_writer.py"), azurite_conn, stream, phase, batch_id],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(HELPERS.parent.parent)},
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"PAUSED"
    os.kill(proc.pid, signal.SIGKILL)  # a real kill -9 at that exact point
    proc.wait()


def _end_the_dead_writers_lease(vault: Vault, stream: str) -> None:
    """The killed writer still holds the stream (for up to 15 s): end its lease as expiry would
    (tests/leases.py), so the next writer recovers at once."""
    with pytest.raises(StreamLeased):
        vault.writer(stream)
    assert end_stream_leases(vault, [stream]) == 1


def test_writer_killed_between_pages_and_commit_loses_nothing_and_exposes_nothing(
    vault: Vault, account: StorageAccount, stream: str
) -> None:
    with vault.writer(stream) as w:
        w.append([Batch(msgs(100, tag="committed"))])
    committed = vault.reader.state(stream).committed
    _crash(vault, account.connection_string or "", stream, "before-commit", "lost-batch")
    assert vault.reader.state(stream).committed == committed  # pages written, commit not
    assert all(b"uncommitted" not in v for v in read_all(vault, stream))
    _end_the_dead_writers_lease(vault, stream)
    with vault.writer(stream) as w:
        w.append([Batch(msgs(5, tag="after"))])
    values = read_all(vault, stream)
    assert [v.split(b"-")[0] for v in values] == [b"committed"] * 100 + [b"after"] * 5


def test_writer_killed_after_commit_keeps_the_batch_exactly_once(
    vault: Vault, account: StorageAccount, stream: str
) -> None:
    _crash(vault, account.connection_string or "", stream, "after-commit", "batch-1")
    _end_the_dead_writers_lease(vault, stream)
    with vault.writer(stream) as w:
        [again] = w.append([Batch(msgs(3000, tag="redelivered"), "batch-1")])
    assert again.duplicate and again.first_offset == 0 and again.count == 3000
    assert len(read_all(vault, stream)) == 3000
    assert vault.index.last_point(stream) is not None  # the index was re-derived from the log
    entry = vault.index.catalog_entry(stream)
    assert entry is not None and entry.count == 3000


def test_redelivered_batch_ids_are_not_appended_twice(vault: Vault, stream: str) -> None:
    with vault.writer(stream) as w:
        first = w.append([Batch(msgs(3), "b1"), Batch(msgs(2), "b2"), Batch(msgs(3), "b1")])
    with vault.writer(stream) as w:
        again = w.append([Batch(msgs(2), "b2"), Batch(msgs(1), "b3")])
    assert [r.duplicate for r in first] == [False, False, True]
    assert first[2].first_offset == first[0].first_offset
    assert again[0].duplicate and again[0].first_offset == first[1].first_offset
    assert len(read_all(vault, stream)) == 3 + 2 + 1


def test_a_flipped_byte_in_the_blob_is_detected_by_the_reader(vault: Vault, stream: str) -> None:
    with vault.writer(
        stream, WriterSettings(record_format=1)
    ) as w:  # format 2 units: tests/test_unitformat.py
        w.append([Batch(msgs(50))])
    blob = vault.blob(stream)
    page = bytearray(blob.read(0, PAGE_SIZE))
    page[400] ^= 0x40  # inside the value of the third record
    cast(StreamBlob, blob).client.upload_page(bytes(page), offset=0, length=PAGE_SIZE)
    with pytest.raises(CorruptRecord, match="checksum"):
        list(vault.reader.scan(stream))
    survivors = list(vault.reader.scan(stream, options=ScanOptions(skip_corrupt=True)))
    assert len(survivors) == 49
    with pytest.raises(CorruptRecord):
        vault.reader.read(stream, 0, max_count=50)


def test_time_seeks_find_the_first_record_at_or_after_a_time(vault: Vault, stream: str) -> None:
    clock = ManualClock(1_000_000)
    v = Vault(vault.account, clock=clock)
    offsets = {}
    with v.writer(stream, WriterSettings(index_spacing=4096)) as w:
        for _ in range(10):
            clock.advance(1000)
            [r] = w.append([Batch(msgs(40, size=200))])
            offsets[clock.now_ms()] = r.first_offset
    end = v.reader.state(stream).committed
    for at, expected in offsets.items():
        assert v.reader.seek_time(stream, at) == expected
        assert v.reader.seek_time(stream, at - 500) == expected
    assert v.reader.seek_time(stream, 0) == 0
    assert v.reader.seek_time(stream, max(offsets) + 1) == end


def test_a_clock_going_backwards_never_makes_timestamps_go_backwards(vault: Vault, stream: str) -> None:
    clock = ManualClock(5_000_000)
    v = Vault(vault.account, clock=clock)
    with v.writer(stream) as w:
        w.append([Batch(msgs(2))])
        clock.advance(-60_000)
        w.append([Batch(msgs(2))])
    assert [m.timestamp for m in v.reader.scan(stream)] == [5_000_000] * 4


@pytest.mark.parametrize(
    "bad",
    [
        Batch([NewMessage(b"v" * (MAX_VALUE_BYTES + 1))]),
        Batch([NewMessage(b"ok"), NewMessage(b"v", b"k" * 2000)]),
    ],
)
def test_oversize_messages_are_rejected_and_nothing_is_written(vault: Vault, stream: str, bad: Batch) -> None:
    with vault.writer(stream) as w:
        w.append([Batch(msgs(3))])
        with pytest.raises(MessageTooLarge):
            w.append([Batch(msgs(2)), bad])
        w.append([Batch(msgs(1))])
    assert len(read_all(vault, stream)) == 4


@pytest.mark.parametrize("name", ["../streams", "a/b", "", "mv-claimcheck/x", "x" * 200])
def test_invalid_stream_names_never_reach_storage(vault: Vault, name: str) -> None:
    with pytest.raises(InvalidStreamName):
        vault.writer(name)
    with pytest.raises(InvalidStreamName):
        vault.reader.read(name, 0)


def test_reads_reject_offsets_outside_the_log_or_between_records(vault: Vault, stream: str) -> None:
    with vault.writer(stream) as w:
        w.append([Batch(msgs(5))])
    committed = vault.reader.state(stream).committed
    for bad in (-1, committed + 1, 7):
        with pytest.raises(InvalidOffset):
            vault.reader.read(stream, bad)
    with pytest.raises(StreamNotFound):
        vault.reader.read(stream + "-missing", 0)


def test_follow_yields_new_records_as_they_are_committed(vault: Vault, stream: str) -> None:
    stop = threading.Event()
    seen: list[bytes] = []

    def consume() -> None:
        for m in vault.reader.follow(stream, 0, poll_max=0.2, stop=stop):
            seen.append(m.value)
            if len(seen) == 6:
                stop.set()

    t = threading.Thread(target=consume)
    t.start()
    with vault.writer(stream) as w:
        for i in range(3):
            time.sleep(0.3)
            w.append([Batch(msgs(2, tag=f"f{i}"))])
    t.join(10)
    assert not t.is_alive() and [v.split(b"-")[0] for v in seen] == [b"f0"] * 2 + [b"f1"] * 2 + [b"f2"] * 2


def test_skipping_a_corrupt_record_reports_where_and_how_much(vault: Vault, stream: str) -> None:
    with vault.writer(
        stream, WriterSettings(record_format=1)
    ) as w:  # one record per message: each one skipped alone
        w.append([Batch(msgs(5))])
    records = list(vault.reader.scan(stream))
    blob = vault.blob(stream)
    for victim in (records[2], records[-1]):  # one in the middle, then the very last record
        page_at = (victim.offset + 40) // PAGE_SIZE * PAGE_SIZE
        page = bytearray(blob.read(page_at, PAGE_SIZE))
        page[victim.offset + 40 - page_at] ^= 0x01
        cast(StreamBlob, blob).client.upload_page(bytes(page), offset=page_at, length=PAGE_SIZE)
    skips: list[tuple[int, int]] = []
    survivors = list(
        scan_log(
            blob,
            0,
            blob.state().committed,
            ScanOptions(skip_corrupt=True, on_skip=lambda off, n: skips.append((off, n))),
        )
    )
    assert [m.offset for m in survivors] == [r.offset for r in records if r not in (records[2], records[-1])]
    assert skips == [(records[2].offset, records[2].size), (records[-1].offset, records[-1].size)]


def test_a_batch_id_repeated_far_apart_in_one_call_is_appended_once(vault: Vault, stream: str) -> None:
    batches = [Batch(msgs(1), "dup")] + [Batch(msgs(1), f"b{i}") for i in range(60)] + [Batch(msgs(1), "dup")]
    with vault.writer(stream) as w:
        results = w.append(batches)
    assert results[-1].duplicate and results[-1].first_offset == results[0].first_offset
    assert len(read_all(vault, stream)) == 61


def test_a_failed_index_write_is_redone_before_the_next_commit(vault: Vault, stream: str) -> None:
    w = Vault(vault.account).writer(stream)  # its own IndexTables: the patch below stays local
    failures = {"left": 1}

    def flaky(real: Callable[..., None]) -> Callable[..., None]:
        def call(*args: object, **kwargs: object) -> None:
            if failures["left"]:
                failures["left"] -= 1
                raise StorageUnavailable("injected: table write failed")
            real(*args, **kwargs)

        return call

    w.index.record_commit = flaky(w.index.record_commit)  # type: ignore[method-assign]
    w.index.record_index = flaky(w.index.record_index)  # type: ignore[method-assign]
    w.append([Batch(msgs(2), "first")])  # committed; its batch-id row write fails in the background
    with pytest.raises(StorageUnavailable):
        w.append([Batch(msgs(2), "second")])
    w.append([Batch(msgs(2), "second")])  # recovers (re-records "first"), then appends
    w.close()
    with vault.writer(stream) as again:
        assert again.append([Batch(msgs(2), "first")])[0].duplicate
    assert len(read_all(vault, stream)) == 4


def test_a_commit_record_of_an_unknown_format_is_rejected(vault: Vault, stream: str) -> None:
    with vault.writer(stream) as w:
        w.append([Batch(msgs(1))])
    client = cast(StreamBlob, vault.blob(stream)).client
    client.set_blob_metadata({**client.get_blob_properties().metadata, "mv_format": "3"})
    with pytest.raises(UnsupportedVersion, match="format '3'"):
        vault.reader.read(stream, 0)


@pytest.mark.parametrize("committed", ["+40", " 40", "4_0", "0x28", "forty"])
def test_a_commit_record_whose_length_is_not_digits_is_refused(committed: str) -> None:
    """FORMAT.md §6.2: writers write digits only; a reader refuses anything else rather than guess."""
    meta = {"mv_format": "1", "mv_committed": committed, "mv_count": "1"}
    with pytest.raises(FormatError, match=r"mv_committed=.* is not a decimal number"):
        CommitState.from_metadata(meta, None, 512)
    assert CommitState.from_metadata({**meta, "mv_committed": "40"}, None, 512).committed == 40
    for entry in ("b1:0:40:1", "b1:0:+40:1:1700000000000", "b1:0:40:1:17e11"):
        with pytest.raises(FormatError, match="mv_batches entry"):
            CommitState.from_metadata({**meta, "mv_committed": "40", "mv_batches": entry}, None, 512)


@pytest.mark.parametrize("max_bytes", [1024 * 1024 + 1, 4 * 1024 * 1024, 16 * 1024 * 1024])
def test_large_reads_fetched_in_parallel_parts_match_a_scan(
    vault: Vault, stream: str, max_bytes: int
) -> None:
    with vault.writer(stream) as w:
        w.append([Batch(msgs(2500, size=1500))])  # ~3.7 MiB, records across every 1 MiB part edge
    everything = list(vault.reader.scan(stream))
    got: list[object] = []
    offset = 0
    while offset < everything[-1].next_offset:
        result = vault.reader.read(stream, offset, max_bytes=max_bytes, max_count=10_000)
        got += result.messages
        offset = result.next_offset
    assert got == everything
    end = vault.reader.read(stream, offset, max_bytes=max_bytes)
    assert end.messages == [] and end.next_offset == end.committed


def forged_value(at: int) -> bytes:
    """A value whose bytes are a complete, valid record naming ``at``, its offset in the log."""
    return fmt.encode([NewMessage(b"never produced", "forged")], at, 1)


def append_a_forgery(vault: Vault, stream: str) -> int:
    """Append an honest message, then one whose value holds a forged record; its offset."""
    with vault.writer(stream, WriterSettings(lease_seconds=15)) as w:
        w.append([Batch([NewMessage(b"honest", "k")])])
        at = w.state.committed + HEADER_SIZE  # where the value starts (empty key)
        w.append([Batch([NewMessage(forged_value(at), b"")])])
    return at


def test_skipping_a_corrupt_record_never_resumes_at_a_forged_one(vault: Vault, stream: str) -> None:
    at = append_a_forgery(vault, stream)
    container = cast(StreamBlob, vault.blob(stream)).client
    second = at - HEADER_SIZE
    page = bytearray(container.download_blob(offset=0, length=PAGE_SIZE).readall())
    page[second] ^= 0xFF  # the carrier's header is damaged: its length can no longer be trusted
    container.upload_page(bytes(page), offset=0, length=PAGE_SIZE)
    got = list(vault.reader.scan(stream, options=ScanOptions(skip_corrupt=True)))
    assert [m.value for m in got] == [b"honest"]  # not b"never produced"


def test_a_create_the_server_dropped_unanswered_is_sent_once_more(azurite: Azurite) -> None:
    """The SDKs do not retry a dropped POST (creating a table is one); creating may be repeated."""
    proxy = FaultProxy(azurite.table_port).start()
    try:
        drops = 0

        def drop(method: str, path: str, times: int = 1) -> int | None:
            nonlocal drops
            if method == "POST" and path.split("?")[0].endswith("/Tables") and drops < times:
                drops += 1
                return DROP
            return None

        proxied = azurite_connection_string(azurite.blob_port, azurite.queue_port, proxy.port)
        table = StorageAccount(connection_string=proxied).table(f"t{uuid.uuid4().hex[:12]}")
        proxy.rule = drop
        table.create_if_missing()
        assert drops == 1 and table.get("p", "r") is None  # it exists: no TableNotFound
        proxy.rule = lambda method, path: drop(method, path, times=3)
        with pytest.raises(StorageUnavailable):  # dropped again: once more, not forever
            StorageAccount(connection_string=proxied).table(f"t{uuid.uuid4().hex[:12]}").create_if_missing()
        assert drops == 3
    finally:
        proxy.stop()


def test_a_ranged_read_is_one_get_and_a_dropped_or_cut_one_is_sent_again(
    azurite: Azurite, vault: Vault, stream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each read of a range is one Get Blob: the SDK's download_blob follows it, on a page blob,
    with a Get Page Ranges of the whole blob; the client's retries still cover a failed GET."""
    with vault.writer(stream) as w:
        w.append([Batch(msgs(300))])
    state = vault.blob(stream).state()
    everything = vault.blob(stream).read(0, state.committed)
    assert len(everything) > 27_000
    monkeypatch.setattr(pageblob, "_BODY_RETRY_SECONDS", 0.0)
    monkeypatch.setattr(azure._BlobRetry, "get_backoff_time", lambda self, settings: 0.0)  # retry at once
    proxy = FaultProxy(azurite.blob_port).start()
    try:
        seen: list[tuple[str, str]] = []
        drops = 0

        def count(method: str, path: str, drop: int = 0, fault: int = DROP) -> int | None:
            nonlocal drops
            seen.append((method, path))
            if drops < drop:
                drops += 1
                return fault
            return None

        proxied = azurite_connection_string(proxy.port, azurite.queue_port, azurite.table_port)
        blobs = StorageAccount(connection_string=proxied).page_blobs(vault.container_name)
        blob = blobs.blob(stream)
        proxy.rule = count
        assert blob.read(1000, 20_000) == everything[1000:21_000]
        data, got = blob.read_with_state(500, 700)
        assert data == everything[500:1200] and (got.committed, got.etag) == (state.committed, state.etag)
        assert got.blob_size == state.blob_size
        assert [m for m, _ in seen] == ["GET", "GET"]
        assert not [p for _, p in seen if "comp=" in p]  # no page ranges, no properties
        seen.clear()
        proxy.rule = lambda method, path: count(method, path, drop=1)
        assert blob.read(0, 4096) == everything[:4096]
        assert drops == 1 and [m for m, _ in seen] == ["GET", "GET"]
        seen.clear()
        drops = 0
        proxy.rule = lambda method, path: count(method, path, drop=2, fault=CUT)  # bodies broken off
        assert blob.read(2000, 25_000) == everything[2000:27_000]
        assert drops == 2 and [m for m, _ in seen] == ["GET", "GET", "GET"]
        with pytest.raises(StreamNotFound):  # the SDK's error mapping, as download_blob's
            blobs.blob(stream + "-never").read(0, 10)
    finally:
        proxy.stop()
