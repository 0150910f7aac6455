"""The batch scan (vault_core.messagebatch, ``scan_batches``) returns exactly the messages of the
per-message scan, on version 1, version 2 and mixed logs, from any message offset to any other,
and fails or skips on damage exactly as the per-message scan does.

All in process, over the in-memory twin (tests/test_contracts.py shows it behaves as Azurite does).
"""

from __future__ import annotations

import gc
import json
import random
import threading
from itertools import chain
from pathlib import Path
from typing import cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vault_client.exporters import exporter_for
from vault_client.wire import message_json
from vault_core import codecs, reader, scanparts, unitformat
from vault_core.clock import ManualClock
from vault_core.errors import FormatError
from vault_core.memory import MemoryAccount, MemoryPageBlobs
from vault_core.messagebatch import MessageBatch, batch_messages, decode_batches
from vault_core.pagelog import CommitState
from vault_core.reader import ScanOptions, scan_log, scan_log_batches
from vault_core.recordformat import MAX_KEY_BYTES, Frame, Message, NewMessage, decode, frame_at
from vault_core.scanparts import decode_parts, part_messages
from vault_core.span import Span
from vault_core.vault import Vault
from vault_core.writer import Batch, WriterSettings

STREAM = "columns"
FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

message = st.builds(
    NewMessage,
    st.binary(max_size=200) | st.just(b"") | st.just(b"\xf5MVL\x02"),
    st.text(max_size=12) | st.binary(max_size=12) | st.just(b"k" * MAX_KEY_BYTES),
)
commit = st.tuples(
    st.sampled_from([(1, 0), *((2, c) for c in sorted(codecs.CODEC_NAMES))]),
    st.lists(st.lists(message, min_size=1, max_size=30), min_size=1, max_size=3),
)


def written(commits: list[tuple[tuple[int, int], list[list[NewMessage]]]]) -> Vault:
    """A stream of ``commits``, each in its own format and codec (so formats mix at commit boundaries)."""
    clock = ManualClock(1_750_000_000_000)
    vault = Vault(MemoryAccount(clock), clock=clock).ensure()
    for (record_format, codec), batches in commits:
        with vault.writer(
            STREAM, WriterSettings(record_format=record_format, codec=codec, index_spacing=2048)
        ) as w:
            w.append([Batch(b) for b in batches])
        clock.advance(1_000)
    return vault


def flat(batches: list[MessageBatch]) -> list[Message]:
    assert all(len(b) > 0 for b in batches)
    return list(batch_messages(batches))


@FAST
@given(commits=st.lists(commit, min_size=1, max_size=5), seed=st.integers(0, 2**32))
def test_the_batch_scan_returns_the_messages_of_the_per_message_scan(
    commits: list[tuple[tuple[int, int], list[list[NewMessage]]]], seed: int
) -> None:
    vault = written(commits)
    reader, blob = vault.reader, vault.blob(STREAM)
    everything = list(reader.scan(STREAM))
    assert len(everything) == sum(len(b) for _, batches in commits for b in batches)
    assert flat(list(reader.scan_batches(STREAM))) == everything
    committed = reader.state(STREAM).committed
    chunk = random.Random(seed).choice([211, 4096])  # buffers that cut records and units anywhere
    assert (
        flat(list(scan_log_batches(blob, 0, committed, ScanOptions(chunk=chunk, prefetch=2)))) == everything
    )
    rng = random.Random(seed)
    for _ in range(6):  # from any message to any message, inside units or not
        i, j = sorted(rng.sample(range(len(everything) + 1), 2) if len(everything) > 1 else (0, 1))
        start = everything[i].offset
        stop = everything[j].offset if j < len(everything) else None
        expected = everything[i:j]
        assert list(reader.scan(STREAM, start, stop)) == expected
        assert flat(list(reader.scan_batches(STREAM, start, stop))) == expected


@FAST
@given(commits=st.lists(commit, min_size=1, max_size=4), seed=st.integers(0, 2**32))
def test_a_read_as_batches_has_the_messages_and_next_offset_of_the_read_as_messages(
    commits: list[tuple[tuple[int, int], list[list[NewMessage]]]], seed: int
) -> None:
    vault = written(commits)
    reader = vault.reader
    everything = list(reader.scan(STREAM))
    rng = random.Random(seed)
    for _ in range(6):  # from any message, as many as max_count and max_bytes (tiny to large) take
        offset = rng.choice(everything).offset
        max_count, max_bytes = rng.choice([1, 3, 50, 10_000]), rng.choice([1, 40, 300, 1 << 20])
        page = reader.read(STREAM, offset, max_bytes=max_bytes, max_count=max_count)
        data, state = reader.fetch(STREAM, offset, max_bytes)
        batches = reader.decode_checked_batches(
            STREAM, offset, data, state, max_bytes=max_bytes, max_count=max_count
        )
        assert page.messages and all(len(b) > 0 for b in batches.batches)
        assert (batches.messages(), batches.count) == (page.messages, len(page.messages))
        assert (batches.next_offset, batches.committed) == (page.next_offset, page.committed)


def test_a_unit_is_one_batch_and_a_run_of_records_another(clock: ManualClock) -> None:
    vault = Vault(MemoryAccount(clock), clock=clock).ensure()
    with vault.writer(STREAM, WriterSettings(record_format=1)) as w:
        w.append([Batch([NewMessage(b"a", "k"), NewMessage(b"b", b"\x01")])])
    with vault.writer(STREAM) as w:
        w.append([Batch([NewMessage(b"c", "k"), NewMessage(b"d", "k")])])
    records, unit = vault.reader.scan_batches(STREAM)
    assert (records.unit, len(records), unit.unit, len(unit)) == (False, 2, True, 2)
    assert (
        records.next_offset == unit.first_offset and unit.next_offset == vault.reader.state(STREAM).committed
    )
    assert list(records.flags) == [8, 0] and list(unit.flags) == [8, 8]  # text key or not, per message
    assert records.log_bytes == sum(m.size for m in records.messages())


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_750_000_000_000)


@pytest.fixture
def mixed(clock: ManualClock) -> Vault:
    """Version 1 commits, then version 2 ones of several units each."""
    vault = Vault(MemoryAccount(clock), clock=clock).ensure()
    rng = random.Random(5)
    for record_format in (1, 2):
        with vault.writer(STREAM, WriterSettings(record_format=record_format, index_spacing=4096)) as w:
            for i in range(3):
                msgs = [NewMessage(rng.randbytes(rng.randint(0, 300)), f"k{j % 5}") for j in range(200)]
                w.append([Batch(msgs, f"f{record_format}-{i}")])
    return vault


def damage(vault: Vault, batch_id: str, at: int) -> int:
    damaged = vault.index.committed_batches(STREAM, [batch_id])[batch_id]
    container = vault.page_blobs
    assert isinstance(container, MemoryPageBlobs)
    container.blobs[STREAM].data[damaged.first_offset + at] ^= 0x01
    return damaged.first_offset


@pytest.mark.parametrize("batch_id", ["f1-1", "f2-1"])
def test_damage_stops_both_scans_with_the_same_error(mixed: Vault, batch_id: str) -> None:
    damage(mixed, batch_id, 45)
    errors = []
    for scan in (mixed.reader.scan, mixed.reader.scan_batches):
        with pytest.raises(FormatError) as caught:
            list(scan(STREAM))
        errors.append((type(caught.value), str(caught.value), caught.value.offset))
    assert errors[0] == errors[1]


@pytest.mark.parametrize("batch_id", ["f1-1", "f2-0", "f2-2"])
@pytest.mark.parametrize("chunk", [4096, 1 << 20])
def test_skipping_damage_leaves_the_same_survivors_and_reports_the_same_skips(
    mixed: Vault, batch_id: str, chunk: int
) -> None:
    damage(mixed, batch_id, 45)
    committed = mixed.reader.state(STREAM).committed
    blob = mixed.blob(STREAM)
    skips: list[list[tuple[int, int]]] = [[], []]
    messages = list(
        scan_log(
            blob,
            0,
            committed,
            ScanOptions(chunk=chunk, skip_corrupt=True, on_skip=lambda *s: skips[0].append(s)),
        )
    )
    batches = list(
        scan_log_batches(
            blob,
            0,
            committed,
            ScanOptions(chunk=chunk, skip_corrupt=True, on_skip=lambda *s: skips[1].append(s)),
        )
    )
    assert flat(batches) == messages and skips[0] == skips[1] and len(skips[0]) == 1
    assert flat(list(mixed.reader.scan_batches(STREAM, options=ScanOptions(skip_corrupt=True)))) == list(
        mixed.reader.scan(STREAM, options=ScanOptions(skip_corrupt=True))
    )


def test_decode_batches_raises_what_decode_raises_and_leaves_a_cut_off_frame(mixed: Vault) -> None:
    log = mixed.blob(STREAM).read(0, mixed.reader.state(STREAM).committed)
    rng = random.Random(9)
    for cut in rng.sample(range(1, len(log)), 40):  # a buffer that ends anywhere
        messages, pos = decode(log, 0, 0, cut)
        batches, batch_pos = decode_batches(Span(log, 0, 0, cut))
        assert (flat(batches), batch_pos) == (messages, pos)
        for complete in (True,):
            try:
                decode(log, 0, 0, cut, complete=complete)
            except FormatError as exc:
                with pytest.raises(type(exc), match="committed end"):
                    decode_batches(Span(log, 0, 0, cut, complete=complete))
    for at in rng.sample(range(len(log)), 40):  # a flipped bit anywhere
        damaged = bytearray(log)
        damaged[at] ^= 0x20
        try:
            expected: object = decode(damaged, 0, complete=True)
        except FormatError as exc:
            expected = (type(exc), str(exc))
        try:
            batches, pos = decode_batches(Span(damaged, 0, 0, len(damaged), complete=True))
            got: object = (flat(batches), pos)
        except FormatError as exc:
            got = (type(exc), str(exc))
        assert got == expected


def test_decode_parts_reads_and_fails_as_decode_does(mixed: Vault) -> None:
    """The same messages, the same first error, its units opened as their messages are taken."""
    log = mixed.blob(STREAM).read(0, mixed.reader.state(STREAM).committed)
    rng = random.Random(11)

    def parts(buf: bytes | bytearray, end: int | None = None, complete: bool = False) -> object:
        try:
            got, pos = decode_parts(Span(buf, 0, 0, len(buf) if end is None else end, complete=complete))
            return list(chain.from_iterable(map(part_messages, got))), pos
        except FormatError as exc:
            return type(exc), str(exc)

    def reference(buf: bytes | bytearray, end: int | None = None, complete: bool = False) -> object:
        try:
            return decode(buf, 0, 0, end, complete=complete)
        except FormatError as exc:
            return type(exc), str(exc)

    for cut in rng.sample(range(1, len(log)), 40):  # a buffer that ends anywhere, or the committed end there
        for complete in (False, True):
            assert parts(log, cut, complete=complete) == reference(log, cut, complete=complete)
    for at in rng.sample(range(len(log)), 40):  # a flipped bit anywhere
        damaged = bytearray(log)
        damaged[at] ^= 0x20
        assert parts(damaged, complete=True) == reference(damaged, complete=True)


def test_of_two_damaged_units_the_first_is_reported_before_any_message_of_the_read(mixed: Vault) -> None:
    """Every unit's checksum is checked before the scan hands on any message of the read: of two
    damaged units the first is reported, and nothing of the buffer is handed on (a scan of one
    4 MiB read)."""
    first, second = (damage(mixed, batch_id, 45) for batch_id in ("f2-1", "f2-2"))
    assert first < second
    damaged = mixed.blob(STREAM).read(0, mixed.reader.state(STREAM).committed)
    with pytest.raises(FormatError) as caught:
        decode_parts(Span(damaged, 0, 0, len(damaged), complete=True))
    assert caught.value.offset == first
    taken: list[Message] = []
    with pytest.raises(FormatError) as caught:
        taken.extend(mixed.reader.scan(STREAM))
    assert caught.value.offset == first and taken == []


@pytest.mark.parametrize("record_format", [1, 2])
def test_the_per_message_scan_sets_off_no_collection_of_its_own(
    clock: ManualClock, record_format: int
) -> None:
    """A unit's messages, and a read's records, are built as they are taken: a consumer that drops
    each one leaves the cyclic collector nothing to do (a list of them would set it off every 700
    messages)."""
    vault = Vault(MemoryAccount(clock), clock=clock).ensure()
    with vault.writer(STREAM, WriterSettings(record_format=record_format)) as w:
        w.append([Batch([NewMessage(b"%d" % i, "k") for i in range(10_000)])])
    # A first scan imports what scans import on first use (pyarrow, for the columns: thousands
    # of objects, which set collections off): what is counted is the scan itself.
    assert sum(1 for _ in vault.reader.scan(STREAM)) == 10_000
    started: list[int] = []
    # threads already running (other tests' in this worker) allocate too: not the scan's own
    others = {t.ident for t in threading.enumerate()} - {threading.get_ident()}

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and threading.get_ident() not in others:
            started.append(info["generation"])

    gc.callbacks.append(count)
    try:
        assert sum(1 for _ in vault.reader.scan(STREAM)) == 10_000
    finally:
        gc.callbacks.remove(count)
    assert len(started) <= 1  # at most one the allocations before the scan had nearly set off


def test_the_exporters_write_every_message_of_a_mixed_stream_from_batches(
    mixed: Vault, tmp_path: Path
) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    everything = list(mixed.reader.scan(STREAM))
    for name in ("out.parquet", "out.ndjson"):
        exporter = exporter_for(tmp_path / name)
        for batch in mixed.reader.scan_batches(STREAM):
            exporter.write_batch(batch)
        exporter.commit()
    table = pq.read_table(tmp_path / "out.parquet")
    assert table.column("offset").to_pylist() == [m.offset for m in everything]
    stamps = [int(t.timestamp() * 1000) for t in table.column("timestamp").to_pylist()]
    assert stamps == [m.timestamp for m in everything]
    assert table.column("id").to_pylist() == [m.id for m in everything]
    assert table.column("key").to_pylist() == [m.key for m in everything]
    assert table.column("value").to_pylist() == [m.value for m in everything]
    lines = (tmp_path / "out.ndjson").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [message_json(m) for m in everything]


@pytest.mark.parametrize(("batch_id", "chunk"), [("f1-1", 4096), ("f1-1", 16384), ("f2-1", 65536)])
def test_a_read_decoded_ahead_fails_only_once_the_read_before_is_taken(
    mixed: Vault, batch_id: str, chunk: int
) -> None:
    """The scan decodes a read while the consumer takes the one before: damage in it is raised once
    every message before that read is taken, and nothing of the read is handed on, as when reads
    were decoded in turn."""
    committed = mixed.reader.state(STREAM).committed
    log = mixed.blob(STREAM).read(0, committed)
    good = list(mixed.reader.scan(STREAM))
    bad = damage(mixed, batch_id, 45)
    frame = frame_at(log, bad)
    assert frame is not None
    # Where the read holding the damaged unit whole begins: each read starts at the first frame the
    # one before did not hold whole (reads are the chunks of the range, with what was cut off).
    base, pos = 0, 0
    for end in range(chunk, committed + chunk, chunk):
        if bad + frame.length <= end:
            break
        while pos < bad and pos + cast(Frame, frame_at(log, pos)).length <= end:
            pos += cast(Frame, frame_at(log, pos)).length
        base = pos
    taken: list[Message] = []
    with pytest.raises(FormatError) as caught:
        taken.extend(scan_log(mixed.blob(STREAM), 0, committed, ScanOptions(chunk=chunk)))
    assert caught.value.offset == bad
    assert taken == [m for m in good if m.next_offset <= base] and base < bad


class _HeldLog:
    """A stream's log whose reads after the first wait until ``release`` is set (as a slow storage
    would): what a scan can hand on while its next read is still under way."""

    def __init__(self, vault: Vault) -> None:
        self.blob = vault.blob(STREAM)
        self.release = threading.Event()

    @property
    def stream(self) -> str:
        return STREAM

    def state(self) -> CommitState:
        return self.blob.state()

    def read(self, start: int, length: int) -> bytes:
        if start > 0:
            assert self.release.wait(10), "the scan waited for a read it did not need yet"
        return self.blob.read(start, length)

    def read_with_state(self, start: int, length: int) -> tuple[bytes, CommitState]:
        return self.read(start, length), self.state()


@pytest.mark.parametrize("batches", [False, True], ids=["scan", "scan_batches"])
def test_a_read_is_handed_on_before_the_next_read_arrives(mixed: Vault, batches: bool) -> None:
    """Both scans hand on a read's messages as soon as the read is checked, while the next read is
    still under way (they waited for it once, costing a whole read's download at the start)."""
    log = _HeldLog(mixed)
    committed = log.state().committed
    first = log.blob.read(0, 8192)
    in_first, _ = decode(first, 0)  # the messages whole in the first 8 KiB
    options = ScanOptions(chunk=8192, prefetch=2)
    scan = (
        batch_messages(scan_log_batches(log, 0, committed, options))
        if batches
        else scan_log(log, 0, committed, options)
    )
    taken = [next(scan) for _ in range(len(in_first))]  # with every later read held back
    assert taken == in_first
    log.release.set()
    assert taken + list(scan) == list(mixed.reader.scan(STREAM))


def test_the_scan_opens_units_a_few_ahead_of_its_consumer_and_each_once(
    mixed: Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read's units are checked together but decompressed at most ``SCAN_OPEN_AHEAD`` ahead of
    the consumer (on a helper thread, or by the consumer when the helper is behind), each once: the
    scan holds a few units' payloads, not the read's."""
    opened: list[int] = []
    real = unitformat.opened_unit

    def counted(unit: unitformat.SealedUnit, *, stream: str | None = None) -> unitformat.StoredUnit:
        opened.append(unit.offset)
        return real(unit, stream=stream)

    monkeypatch.setattr(scanparts, "opened_unit", counted)
    monkeypatch.setattr(reader, "SCAN_OPEN_AHEAD", 1)  # the stream's read holds three units
    first_v2 = mixed.index.committed_batches(STREAM, ["f2-0"])["f2-0"].first_offset
    ends = [m.offset for m in mixed.reader.scan(STREAM, first_v2) if m.ends_frame]  # a unit's last
    assert len(ends) > reader.SCAN_OPEN_AHEAD + 1
    for scan in (mixed.reader.scan, mixed.reader.scan_batches):
        opened.clear()
        taken = scan(STREAM, first_v2)  # one read holds every unit
        next(taken)
        assert first_v2 in opened and len(opened) <= reader.SCAN_OPEN_AHEAD + 1
        rest = list(taken)
        assert len(opened) == len(set(opened)) == len(ends) and len(rest) > 0


def test_a_scan_closed_early_ends_its_helper_thread(mixed: Vault) -> None:
    """The thread that opens units ahead lives as long as the scan: a consumer that stops after
    one message leaves nothing running once it closes the scan."""
    first_v2 = mixed.index.committed_batches(STREAM, ["f2-0"])["f2-0"].first_offset
    before = set(threading.enumerate())
    scan = mixed.reader.scan(STREAM, first_v2)
    next(scan)
    helpers = [t for t in set(threading.enumerate()) - before if t.name.startswith(f"mv-open-{STREAM}")]
    assert len(helpers) == 1
    del scan  # what a consumer that stops does: it drops the iterator
    helpers[0].join(timeout=10)
    assert not helpers[0].is_alive()
