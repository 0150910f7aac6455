"""Record format version 2 (docs/FORMAT.md §11): units encode and decode, damage is caught, and a
log that mixes version 1 records with version 2 units reads like one made of either.

All in process: pure functions over bytes, and the writer and reader over the in-memory twin
(tests/test_contracts.py shows it behaves as Azurite does).
"""

from __future__ import annotations

import itertools
import random
import struct
import zlib
from collections.abc import Iterator

import lz4.block
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vault_core import codecs
from vault_core.boundaries import Boundaries
from vault_core.clock import ManualClock
from vault_core.errors import CorruptRecord, InvalidOffset, UnsupportedVersion
from vault_core.index import IndexPoint
from vault_core.memory import MemoryAccount, MemoryPageBlob, MemoryPageBlobs
from vault_core.messagebatch import batch_messages
from vault_core.reader import FULL_SCAN, ScanOptions, scan_log
from vault_core.recordformat import MAX_KEY_BYTES, MAX_VALUE_BYTES, Message, NewMessage, decode, encode
from vault_core.span import Span
from vault_core.unitformat import (
    COUNT_OFFSET,
    CRC_COVERAGE_START,
    CRC_OFFSET,
    FLAGS_OFFSET,
    MAX_PAYLOAD_BYTES,
    PAYLOAD_LENGTH_OFFSET,
    STORED_LENGTH_OFFSET,
    STORED_OFFSET,
    UNIT_HEADER_SIZE,
    VERSION_OFFSET,
    decode_unit,
    encode_unit,
)
from vault_core.vault import Vault
from vault_core.writer import Batch, WriterSettings

TS = 1_700_000_000_000
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CODECS = sorted(codecs.CODEC_NAMES)

keys = (
    st.binary(max_size=40) | st.just(b"\xf5MVL") | st.binary(min_size=MAX_KEY_BYTES, max_size=MAX_KEY_BYTES)
)
values = st.binary(max_size=300) | st.just(b"")


def reseal(unit: bytearray) -> bytearray:
    """Recompute the crc, as a writer that lies about a field would."""
    struct.pack_into("<I", unit, CRC_OFFSET, zlib.crc32(unit[CRC_COVERAGE_START:]))
    return unit


@FAST
@given(
    pairs=st.lists(st.tuples(keys, values), min_size=1, max_size=40),
    offset=st.integers(0, 2**43),
    codec=st.sampled_from(CODECS),
    text=st.booleans(),
)
def test_a_unit_decodes_to_exactly_what_was_encoded(
    pairs: list[tuple[bytes, bytes]], offset: int, codec: int, text: bool
) -> None:
    ks, vs = [k for k, _ in pairs], [v for _, v in pairs]
    unit = encode_unit(ks, vs, offset, TS, codec=codec, key_is_text=text)
    messages, end = decode(unit, offset, complete=True)
    assert end == len(unit) > len(pairs)  # longer than its count: offsets stay inside the unit
    assert [(m.key, m.value) for m in messages] == pairs
    assert [m.offset for m in messages] == list(range(offset, offset + len(pairs)))
    assert [m.next_offset for m in messages] == [m.offset + 1 for m in messages[:-1]] + [offset + len(unit)]
    assert all(m.timestamp == TS and m.key_is_text == text for m in messages)


def test_the_limits_fit_one_unit_and_one_message_of_each_maximum() -> None:
    key, value = b"k" * MAX_KEY_BYTES, random.Random(1).randbytes(MAX_VALUE_BYTES)
    unit = encode_unit([key], [value], 0, TS, codec=codecs.CODEC_ZSTD, key_is_text=False)
    [message], _ = decode(unit, 0, complete=True)
    assert (message.key, message.value) == (key, value)
    with pytest.raises(ValueError, match="exceeds"):
        encode_unit([b""] * 5, [value] * 5, 0, TS, codec=codecs.CODEC_NONE, key_is_text=False)


def test_many_empty_messages_never_make_a_unit_shorter_than_its_count() -> None:
    unit = encode_unit([b""] * 50_000, [b""] * 50_000, 0, TS, codec=codecs.CODEC_ZSTD, key_is_text=True)
    assert unit[FLAGS_OFFSET] & 0x07 == codecs.CODEC_NONE  # zstd would make it ~60 bytes
    assert len(unit) > 50_000
    messages, _ = decode(unit, 0, complete=True)
    assert len(messages) == 50_000


@pytest.fixture(params=CODECS, ids=[codecs.CODEC_NAMES[c] for c in CODECS])
def unit(request: pytest.FixtureRequest) -> bytearray:
    rng = random.Random(7)
    vs = [f'{{"id":{rng.randint(0, 10**9)},"n":"{rng.random()}"}}'.encode() for _ in range(100)]
    return bytearray(encode_unit([b"key"] * 100, vs, 0, TS, codec=request.param, key_is_text=True))


def test_every_flipped_bit_of_the_stored_bytes_is_caught_before_decompressing(unit: bytearray) -> None:
    for position in range(CRC_COVERAGE_START, len(unit), max(1, len(unit) // 97)):
        damaged = bytearray(unit)
        damaged[position] ^= 0x10
        with pytest.raises((CorruptRecord, UnsupportedVersion)):
            decode(damaged, 0, complete=True)


def test_a_truncated_unit_is_incomplete_then_corrupt_at_the_committed_end(unit: bytearray) -> None:
    for cut in (UNIT_HEADER_SIZE - 1, UNIT_HEADER_SIZE + 3, len(unit) - 1):
        assert decode(unit[:cut], 0) == ([], 0)  # a later read completes it
        with pytest.raises(CorruptRecord, match="committed end"):
            decode(unit[:cut], 0, complete=True)


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        (PAYLOAD_LENGTH_OFFSET, MAX_PAYLOAD_BYTES + 1, "lengths out of range"),
        (PAYLOAD_LENGTH_OFFSET, 1, "lengths out of range"),
        (COUNT_OFFSET, 0, "lengths out of range"),
        (COUNT_OFFSET, 99, "boundaries|decompress"),
        (COUNT_OFFSET, 10**6, "lengths out of range"),
    ],
)
def test_lying_lengths_with_a_valid_crc_are_corrupt(
    unit: bytearray, field: int, value: int, error: str
) -> None:
    struct.pack_into("<I", unit, field, value)
    with pytest.raises(CorruptRecord, match=error):
        decode(reseal(unit), 0, complete=True)


def test_a_payload_that_decompresses_to_another_length_is_corrupt(unit: bytearray) -> None:
    declared = struct.unpack_from("<I", unit, PAYLOAD_LENGTH_OFFSET)[0]
    struct.pack_into("<I", unit, PAYLOAD_LENGTH_OFFSET, declared + 1)
    with pytest.raises(CorruptRecord):
        decode(reseal(unit), 0, complete=True)


@pytest.mark.parametrize(
    "key_ends",
    [(0, 1100, 1200, 1210), (0, 1205, 1200, 1210), (0, 100, 1125, 1210)],
    ids=[
        "a key over the limit, the others shorter",
        "a boundary going back",
        "a key over the limit in the middle",
    ],
)
def test_key_boundaries_that_lie_with_a_valid_crc_are_corrupt(key_ends: tuple[int, ...]) -> None:
    unit = bytearray(encode_unit(KEYS_1210, [b"v"] * 3, 0, TS, codec=codecs.CODEC_NONE, key_is_text=False))
    struct.pack_into("<4I", unit, STORED_OFFSET, *key_ends)
    with pytest.raises(CorruptRecord, match="boundaries do not agree"):
        decode(reseal(unit), 0, complete=True)


def test_key_boundaries_moved_within_the_limits_are_read_as_they_say() -> None:
    unit = bytearray(encode_unit(KEYS_1210, [b"v"] * 3, 0, TS, codec=codecs.CODEC_NONE, key_is_text=False))
    struct.pack_into("<4I", unit, STORED_OFFSET, 0, 600, 1210, 1210)  # 600, 610 and 0 bytes
    keys = [m.key for m in decode(reseal(unit), 0, complete=True)[0]]
    assert keys == [b"a" * 600, b"b" * 600 + b"c" * 10, b""]


KEYS_1210 = [b"a" * 600, b"b" * 600, b"c" * 10]
"""Keys whose boundaries (0, 600, 1200, 1210) a lying writer moves: 1210 bytes, more than one key may hold."""


def test_a_decompression_bomb_is_refused_without_allocating_it() -> None:
    # 1 GiB of zeros in ~32 KiB, compressed from one MiB of zeros 1,024 times over rather than from
    # a GiB made in memory (half the CPU: no GiB of pages to touch).
    compressor = zstandard.ZstdCompressor().compressobj(size=2**30)
    zeros = bytes(2**20)
    bomb = b"".join(compressor.compress(zeros) for _ in range(2**10)) + compressor.flush()
    assert zstandard.frame_content_size(bomb) == 2**30
    header = struct.pack("<BBIIIQq", 2, codecs.CODEC_ZSTD | 0x08, 1, 1024, len(bomb), 0, TS)
    unit = b"\xf5MVL" + struct.pack("<I", zlib.crc32(bomb, zlib.crc32(header))) + header + bomb
    with pytest.raises(CorruptRecord, match="lengths out of range"):  # stored > payload
        decode(unit, 0, complete=True)
    small = zstandard.ZstdCompressor().compress(bytes(2**20))
    header = struct.pack("<BBIIIQq", 2, codecs.CODEC_ZSTD, 1, 4096, len(small), 0, TS)
    unit = b"\xf5MVL" + struct.pack("<I", zlib.crc32(small, zlib.crc32(header))) + header + small
    with pytest.raises(CorruptRecord, match="declares 1048576 bytes, the unit 4096"):
        decode(unit, 0, complete=True)


@pytest.mark.parametrize(
    ("tail", "reason"),
    [(b"junk", "unused data"), ("frame", "unused data"), ("skippable", "declares 0 bytes")],
)
def test_zstd_stored_bytes_are_exactly_one_frame(tail: bytes | str, reason: str) -> None:
    """§11.4: one Zstandard frame that names its size, nothing after it and no skippable frame,
    even where the checksum holds (a faulty or forged writer)."""
    value = b'{"n":1}' * 40
    payload = struct.pack("<4I", 0, 1, 0, len(value)) + b"k" + value  # §11.3, one message
    frame = zstandard.ZstdCompressor(write_content_size=True).compress(payload)
    if tail == "skippable":
        stored = b"\x50\x2a\x4d\x18" + struct.pack("<I", 4) + b"skip" + frame
    else:
        stored = frame + (frame if tail == "frame" else tail if isinstance(tail, bytes) else b"")
    assert len(stored) <= len(payload)  # as step 3 requires: the checks reach the codec
    header = struct.pack("<BBIIIQq", 2, codecs.CODEC_ZSTD, 1, len(payload), len(stored), 0, TS)
    unit = b"\xf5MVL" + struct.pack("<I", zlib.crc32(stored, zlib.crc32(header))) + header + stored
    with pytest.raises(CorruptRecord, match=reason):
        decode(unit, 0, complete=True)


def test_a_thread_decompresses_good_frames_after_bad_ones() -> None:
    """Each thread keeps one zstd decompressor (making one per unit costs a tenth of the work): a
    frame that fails (cut off, or with bytes after it) leaves it ready for the next."""
    payload = b"".join(b'{"n":%d,"text":"some words"}' % i for i in range(500))
    frame = codecs.compress(codecs.CODEC_ZSTD, payload)
    for bad in (frame[: len(frame) // 2], frame + b"x", frame[:-1]):
        with pytest.raises(codecs.DecompressionFailed):
            codecs.decompress(codecs.CODEC_ZSTD, bad, len(payload))
        assert codecs.decompress(codecs.CODEC_ZSTD, frame, len(payload)) == payload


@pytest.mark.parametrize("tail", [b"\x00", b"junk"])
def test_lz4_stored_bytes_are_exactly_one_block(tail: bytes) -> None:
    """§11.4: the block ends at the last stored byte; bytes after it are corrupt, not ignored."""
    value = b'{"n":1}' * 40
    payload = struct.pack("<4I", 0, 1, 0, len(value)) + b"k" + value
    stored = bytes(lz4.block.compress(payload, store_size=False)) + tail
    header = struct.pack("<BBIIIQq", 2, codecs.CODEC_LZ4, 1, len(payload), len(stored), 0, TS)
    unit = b"\xf5MVL" + struct.pack("<I", zlib.crc32(stored, zlib.crc32(header))) + header + stored
    with pytest.raises(CorruptRecord, match="does not decompress"):
        decode(unit, 0, complete=True)


@pytest.mark.parametrize("value", [0x07, 0x40, 0x0B])
def test_a_flipped_flag_bit_is_damage_that_skipping_passes_over(unit: bytearray, value: int) -> None:
    """Flags are checked after the checksum (FORMAT.md §11.5): a flag changed by damage fails the
    checksum and is corrupt, which a skipping scan passes over by the unit's length."""
    unit[FLAGS_OFFSET] = value  # the checksum is left as the writer wrote it
    with pytest.raises(CorruptRecord, match="checksum mismatch"):
        decode(bytes(unit), 0, complete=True)


@pytest.mark.parametrize(
    ("field", "value"), [(VERSION_OFFSET, 3), (FLAGS_OFFSET, 0x07), (FLAGS_OFFSET, 0x40)]
)
def test_an_unknown_version_or_codec_is_the_clear_error_of_section_9(
    unit: bytearray, field: int, value: int
) -> None:
    unit[field] = value
    with pytest.raises(UnsupportedVersion, match=r"not supported|does not know"):
        decode(reseal(unit), 0, complete=True)


def test_decode_unit_exposes_the_arrow_buffers(unit: bytearray) -> None:
    decoded = decode_unit(Span(unit, 0, 0, len(unit), complete=True), 0)
    assert decoded is not None and decoded.size == 100 and decoded.length == len(unit)
    assert decoded.payload[decoded.keys_start :].startswith(b"key" * 100)
    assert STORED_OFFSET == UNIT_HEADER_SIZE and struct.unpack_from("<I", unit, STORED_LENGTH_OFFSET)[0] > 0


# -- the writer and the reader on a mixed log ---------------------------------------------------
STREAM = "s"


def events(n: int, tag: str) -> list[NewMessage]:
    rng = random.Random(tag)
    return [
        NewMessage(f'{{"tag":"{tag}","i":{i},"v":{rng.random()}}}'.encode(), f"k{i % 7}") for i in range(n)
    ]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_750_000_000_000)


@pytest.fixture
def mixed(clock: ManualClock) -> Vault:
    """A stream of version 1 commits, then version 2 ones (one with binary keys), 3 minutes apart."""
    vault = Vault(MemoryAccount(clock), clock=clock).ensure()
    with vault.writer(STREAM, WriterSettings(record_format=1, index_spacing=4096)) as w:
        for i in range(4):
            w.append([Batch(events(40, f"v1-{i}"), f"a{i}")])
            clock.advance(60_000)
    assert vault.reader.state(STREAM).format == 1
    with vault.writer(STREAM, WriterSettings(index_spacing=4096)) as w:
        for i in range(4):
            w.append([Batch(events(300, f"v2-{i}"), f"b{i}"), Batch([NewMessage(b"\x00", b"\xff")], f"c{i}")])
            clock.advance(60_000)
    assert vault.reader.state(STREAM).format == 2
    row = vault.index.catalog.get("stream", STREAM)
    assert row is not None and row.number("Format") == 2  # the catalog says it too
    return vault


def test_a_mixed_log_reads_whole_by_scan_by_pages_and_from_every_offset(mixed: Vault) -> None:
    everything = list(mixed.reader.scan(STREAM))
    assert len(everything) == 4 * 40 + 4 * 301 == mixed.reader.state(STREAM).count
    assert [m.offset for m in everything] == sorted({m.offset for m in everything})
    for m, after in itertools.pairwise(everything):
        assert m.next_offset == after.offset
    paged, offset = [], 0
    while True:
        page = mixed.reader.read(STREAM, offset, max_count=37, max_bytes=2048)
        if not page.messages:
            break
        paged += page.messages
        offset = page.next_offset
    assert paged == everything
    for m in everything[::13]:
        assert mixed.reader.read(STREAM, m.offset, max_count=2).messages[0] == m
        assert next(iter(mixed.reader.scan(STREAM, m.offset))) == m


def test_only_message_offsets_are_readable(mixed: Vault) -> None:
    offsets = {m.offset for m in mixed.reader.scan(STREAM)}
    committed = mixed.reader.state(STREAM).committed
    refused = [x for x in random.Random(2).sample(range(1, committed), 400) if x not in offsets]
    for x in refused[:60]:
        with pytest.raises(InvalidOffset):
            mixed.reader.read(STREAM, x)


def test_batches_time_seeks_and_index_points_fall_on_message_and_unit_offsets(mixed: Vault) -> None:
    everything = list(mixed.reader.scan(STREAM))
    by_offset = {m.offset: i for i, m in enumerate(everything)}
    for i in range(4):
        b = mixed.index.committed_batches(STREAM, [f"b{i}"])[f"b{i}"]
        assert everything[by_offset[b.first_offset]].value.startswith(f'{{"tag":"v2-{i}"'.encode())
        assert by_offset[b.next_offset] - by_offset[b.first_offset] == 300
    for m in everything:
        if m.offset == 0 or m.timestamp != everything[by_offset[m.offset] - 1].timestamp:
            assert mixed.reader.seek_time(STREAM, m.timestamp) == m.offset
    points = mixed.index.points(STREAM)
    assert len(points) > 4
    for p in points:  # each point is where decoding can start: reading from it gives that message
        assert everything[p.count].offset == p.offset
        assert list(decode_first(mixed, p.offset)) == [everything[p.count]]


def decode_first(vault: Vault, offset: int) -> list[object]:
    data = vault.blob(STREAM).read(offset, 1 << 20)
    return decode(data, offset, max_count=1)[0]  # type: ignore[return-value]


@pytest.mark.parametrize(("batch", "skip"), [("b1", False), ("b1", True), ("c0", True)])
def test_a_damaged_unit_stops_or_is_skipped_whole(mixed: Vault, batch: str, skip: bool) -> None:
    """b1 is a unit of 300 messages; c0 one of a single message followed by b1's larger unit."""
    everything = list(mixed.reader.scan(STREAM))
    damaged = mixed.index.committed_batches(STREAM, [batch])[batch]
    container = mixed.page_blobs
    assert isinstance(container, MemoryPageBlobs)
    container.blobs[STREAM].data[damaged.first_offset + 40] ^= 0x01
    if not skip:
        with pytest.raises(CorruptRecord, match="unit checksum mismatch"):
            list(mixed.reader.scan(STREAM))
        return
    committed = mixed.reader.state(STREAM).committed
    for chunk in (1 << 20, 4096):  # small ranges: the unit after the damaged one runs past them
        # no index points to resume at (as a Spark task reads): only the damaged unit's own length
        survivors = list(
            scan_log(mixed.blob(STREAM), 0, committed, ScanOptions(chunk=chunk, skip_corrupt=True))
        )
        kept = set(survivors)
        lost = [m for m in everything if m not in kept]
        assert [m.offset for m in lost] == list(
            range(damaged.first_offset, damaged.first_offset + damaged.count)
        )


@pytest.mark.parametrize("batches", [False, True], ids=["scan", "scan_batches"])
@pytest.mark.parametrize("skip", [False, True])
def test_a_unit_that_checks_but_does_not_open_stops_or_is_skipped_where_the_scan_reaches_it(
    mixed: Vault, skip: bool, batches: bool
) -> None:
    """A scan checks every unit's checksum before it hands on anything of the read, and opens a
    unit as its consumer reaches it: a unit whose checksum holds but whose payload does not
    decompress to its declared length (a lying writer's) is reported there, after the messages
    before it, or skipped whole by its checked length. Both scans alike."""
    reader = mixed.reader

    def scan(options: ScanOptions = FULL_SCAN) -> Iterator[Message]:
        if batches:
            return batch_messages(reader.scan_batches(STREAM, options=options))
        return reader.scan(STREAM, options=options)

    everything = list(scan())
    b1 = mixed.index.committed_batches(STREAM, ["b1"])["b1"]
    container = mixed.page_blobs
    assert isinstance(container, MemoryPageBlobs)
    data = container.blobs[STREAM].data
    at = b1.first_offset
    length = UNIT_HEADER_SIZE + struct.unpack_from("<I", data, at + STORED_LENGTH_OFFSET)[0]
    forged = bytearray(data[at : at + length])
    declared = struct.unpack_from("<I", forged, PAYLOAD_LENGTH_OFFSET)[0]
    struct.pack_into("<I", forged, PAYLOAD_LENGTH_OFFSET, declared + 1)
    data[at : at + length] = reseal(forged)
    taken: list[Message] = []
    if not skip:
        with pytest.raises(CorruptRecord, match="does not decompress") as caught:
            taken.extend(scan())
        assert caught.value.offset == at and taken == [m for m in everything if m.offset < at]
        return
    skipped: list[tuple[int, int]] = []
    got = list(scan(ScanOptions(skip_corrupt=True, on_skip=lambda offset, n: skipped.append((offset, n)))))
    assert got == [m for m in everything if not at <= m.offset < at + length]
    assert skipped == [(at, length)] and len(everything) - len(got) == b1.count


# -- the Arrow path of Spark ---------------------------------------------------------------------
@pytest.mark.parametrize("chunk", [97, 4096, 1 << 20])
def test_the_columnar_decoder_reads_a_mixed_log_as_the_reference_decoder_does(
    mixed: Vault, chunk: int
) -> None:
    pa = pytest.importorskip("pyarrow")
    from vault_core.spark.columnar import Decoder, messages_to_columns

    committed = mixed.reader.state(STREAM).committed
    log = mixed.blob(STREAM).read(0, committed)
    columns, base, carry = [], 0, b""
    for at in range(0, committed, chunk):  # as read_partition feeds it: ranged reads, the tail carried
        buf = carry + log[at : at + chunk]
        cols = Decoder(buf, base, last=at + chunk >= committed, stream=STREAM).pieces().joined()
        assert cols.error is None
        columns.append(cols.arrays) if cols.rows else None
        carry, base = buf[cols.end :], base + cols.end
    assert not carry
    got = [pa.concat_arrays([c[i] for c in columns]) for i in range(5)]
    expected = messages_to_columns(list(mixed.reader.scan(STREAM)))
    assert [a.to_pylist() for a in got] == [a.to_pylist() for a in expected]


def test_the_columnar_decoder_reports_a_damaged_unit_with_the_reference_error(mixed: Vault) -> None:
    pytest.importorskip("pyarrow")
    from vault_core.spark.columnar import Decoder

    b1 = mixed.index.committed_batches(STREAM, ["b1"])["b1"]
    log = bytearray(mixed.blob(STREAM).read(0, mixed.reader.state(STREAM).committed))
    log[b1.first_offset + 60] ^= 0x01
    cols = Decoder(bytes(log), 0, last=True, stream=STREAM).pieces().joined()
    assert isinstance(cols.error, CorruptRecord) and "unit checksum mismatch" in str(cols.error)
    assert cols.end == b1.first_offset and cols.rows == 4 * 40 + 301


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    units=st.lists(
        st.tuples(
            st.lists(st.tuples(keys, values), min_size=1, max_size=20), st.sampled_from(CODECS), st.booleans()
        ),
        min_size=1,
        max_size=5,
    ),
    budget=st.sampled_from([1, 600, 1 << 22]),
)
def test_the_columnar_decoder_reads_runs_of_units_as_the_reference_decoder_does(
    units: list[tuple[list[tuple[bytes, bytes]], int, bool]], budget: int
) -> None:
    """Units of random messages (empty values, binary and text keys, the key limit, every codec)
    decode to the reference decoder's rows, one unit a piece or several joined."""
    pytest.importorskip("pyarrow")
    from vault_core.spark import columnar

    log = b""
    for pairs, codec, text in units:
        ks = [bytes(b & 0x7F for b in k) if text else k for k, _ in pairs]  # text keys are UTF-8
        log += encode_unit(ks, [v for _, v in pairs], 4096 + len(log), TS, codec=codec, key_is_text=text)
    messages, _ = decode(log, 4096, complete=True)
    saved, columnar.BATCH_PAYLOAD_BYTES = columnar.BATCH_PAYLOAD_BYTES, budget
    try:
        pieces = columnar.Decoder(log, 4096, last=True, stream="s").pieces()
    finally:
        columnar.BATCH_PAYLOAD_BYTES = saved
    assert pieces.error is None and pieces.end == len(log) and len(pieces.parts) <= len(units)
    got = pieces.joined().arrays
    assert [a.to_pylist() for a in got] == [a.to_pylist() for a in columnar.messages_to_columns(messages)]


@pytest.mark.parametrize(
    "key_ends", [(0, 1100, 1200, 1210), (0, 1205, 1200, 1210), (1, 600, 1200, 1210), (0, 2**31, 1200, 1210)]
)
@pytest.mark.parametrize("good", [0, 2], ids=["alone", "after two good units"])
def test_the_columnar_decoder_refuses_lying_boundaries_with_the_reference_error(
    key_ends: tuple[int, ...], good: int
) -> None:
    """Where a run of units holds one whose boundaries lie, the units before it are read and the
    error is the reference one, whichever of the run's checks found it."""
    pytest.importorskip("pyarrow")
    from vault_core.spark.columnar import Decoder

    log = b""
    for _ in range(good):
        log += encode_unit([b"k"] * 5, [b"v"] * 5, len(log), TS, codec=codecs.CODEC_ZSTD, key_is_text=True)
    unit = bytearray(
        encode_unit(KEYS_1210, [b"v"] * 3, len(log), TS, codec=codecs.CODEC_NONE, key_is_text=False)
    )
    struct.pack_into("<4I", unit, STORED_OFFSET, *key_ends)
    with pytest.raises(CorruptRecord) as reference:
        decode(bytes(reseal(unit)), len(log), complete=True)
    cols = Decoder(log + bytes(reseal(unit)), 0, last=True, stream=None).pieces().joined()
    assert cols.rows == 5 * good and cols.end == len(log) and str(cols.error) == str(reference.value)


def test_a_text_key_that_is_not_utf8_is_delivered_not_refused() -> None:
    """The key-is-text bit is the writer's word, not a check (FORMAT.md §2): a faulty writer's
    text key that is not UTF-8 reads as its bytes, and the column readers give it no text."""
    from vault_core.spark.columnar import Decoder, messages_to_columns

    bad = b"\xff\xfe"
    record = bytearray(encode([NewMessage(b"v1", "k")], 0, TS))  # a version 1 text key, made bad
    record[32] = 0xFF
    struct.pack_into("<I", record, 4, zlib.crc32(record[8:]))
    unit = encode_unit([b"ok", bad], [b"a", b"b"], len(record), TS, codec=codecs.CODEC_ZSTD, key_is_text=True)
    log = bytes(record) + unit
    messages, _ = decode(log, 0, complete=True)
    assert [(m.key, m.key_is_text) for m in messages] == [(b"\xff", True), (b"ok", True), (bad, True)]
    cols = Decoder(log, 0, last=True, stream=STREAM).pieces().joined()
    assert cols.error is None and cols.arrays[2].to_pylist() == [b"\xff", b"ok", bad]
    assert cols.arrays[4].to_pylist() == [None, "ok", None]
    assert messages_to_columns(messages)[4].to_pylist() == [None, "ok", None]


def _a_wrong_index_point(clock: ManualClock) -> tuple[Vault, list[Message], int]:
    """Three commits a second apart, and an index point inside the second unit's bytes, where no
    frame starts: the vault (its reader has proved nothing yet), the messages and that point."""
    vault = Vault(MemoryAccount(clock), clock=clock).ensure()
    with vault.writer(STREAM) as w:
        for i in range(3):
            w.append([Batch([NewMessage(b"m%d" % i, "k")])])
            clock.advance(1000)
    messages = list(vault.reader.scan(STREAM))
    wrong = messages[1].offset + 1
    assert vault.index is not None
    vault.index.record_index(STREAM, [IndexPoint(wrong, messages[1].timestamp, 1)], [])
    return Vault(vault.account, clock=clock), messages, wrong


def test_a_wrong_index_point_makes_no_good_offset_unreadable_and_no_bad_one_corrupt(
    clock: ManualClock,
) -> None:
    """FORMAT.md §7.3, §8: the index is not relied on for correctness. A point whose offset holds
    no frame sends the proof back to the start of the log, which proves a good offset all the
    same; and an offset equal to the point, which would need no walk, is checked by its header
    first: not a record boundary, not a corrupt log."""
    vault, messages, wrong = _a_wrong_index_point(clock)
    assert [m.value for m in vault.reader.read(STREAM, messages[2].offset).messages] == [b"m2"]
    fresh = Vault(vault.account, clock=clock).reader
    with pytest.raises(InvalidOffset, match="not the start of a record"):
        fresh.read(STREAM, wrong)


def test_a_time_seek_from_a_wrong_index_point_seeks_from_the_start(clock: ManualClock) -> None:
    vault, messages, _ = _a_wrong_index_point(clock)
    assert vault.reader.seek_time(STREAM, messages[2].timestamp) == messages[2].offset


@pytest.mark.parametrize("damage", ["unknown version", "count past the length"])
def test_a_walk_proves_nothing_past_a_frame_it_cannot_measure(clock: ManualClock, damage: str) -> None:
    """A walk measures a frame by its version's layout: a frame of a version it does not know is
    the clear error of §9, and past a unit whose count is not below its length no offset is proven."""
    vault = Vault(MemoryAccount(clock), clock=clock).ensure()
    with vault.writer(STREAM) as w:
        w.append([Batch([NewMessage(b"first", "k")])])
        w.append([Batch([NewMessage(b"second", "k")])])
    after = [m.offset for m in vault.reader.scan(STREAM)][1]
    container = vault.page_blobs
    assert isinstance(container, MemoryPageBlobs)
    data = container.blobs[STREAM].data
    if damage == "unknown version":
        data[VERSION_OFFSET] = 3
    else:
        struct.pack_into("<I", data, COUNT_OFFSET, after + 1)
    fresh = Vault(vault.account, clock=clock).reader  # nothing remembered: the offset must be proven
    expected = (
        (UnsupportedVersion, "version 3") if damage == "unknown version" else (InvalidOffset, "not the start")
    )
    with pytest.raises(expected[0], match=expected[1]):
        fresh.read(STREAM, after)


@pytest.mark.parametrize("frame", ["record", "unit"])
@pytest.mark.parametrize("past_the_end", ["nothing", "an uncommitted unit"])
def test_a_walk_led_to_a_header_the_committed_end_cuts_off_proves_nothing(
    frame: str, past_the_end: str
) -> None:
    """A damaged length (magic and offset intact: a walk reads no checksum) can send a walk to
    a position a few bytes before the committed end, past the offset it proves. Bytes at or past
    the committed end do not exist for a reader (FORMAT.md §7.2), so the header there is cut off:
    the offset is not a record boundary. A walk that read the same few bytes again and again, as
    one did where the blob ended there, never answered; one that read on past the end measured a
    unit a crashed append left there and "proved" an offset inside it."""

    def laid_out(tail: bytes) -> bytearray:  # three frames, the last value ending with ``tail``
        values = [b"v0" * 40, b"v1" * 40, b"v2" * 40 + tail]
        if frame == "record":
            return bytearray(encode([NewMessage(v, "k") for v in values], 0, TS))
        log = bytearray()
        for v in values:
            log += encode_unit([b"k"], [v], len(log), TS, codec=0, key_is_text=True)
        return log

    committed = len(laid_out(bytes(10)))
    # what a crashed append may leave past the end: a unit of eight messages at committed - 10
    # (so committed - 5 is one of its offsets), whose first 10 bytes the last value ends with
    uncommitted = encode_unit([b"k"] * 8, [b"u"] * 8, committed - 10, TS, codec=0, key_is_text=True)
    log = laid_out(uncommitted[:10])
    # a record's value_length (after its 32-byte header and 1-byte key) or a unit's stored_length
    length_at, before = (12, 32 + 1) if frame == "record" else (18, UNIT_HEADER_SIZE)
    struct.pack_into("<I", log, length_at, committed - 10 - before)  # the first frame now ends 10 bytes short
    if past_the_end == "an uncommitted unit":
        log += uncommitted[10:]
    reads: list[int] = []

    def read(start: int, length: int) -> bytes:
        reads.append(length)
        assert len(reads) < 100, "the walk does not end"
        return bytes(log[start : start + length])

    with pytest.raises(InvalidOffset, match="not the start of a record"):
        Boundaries(None).prove(STREAM, committed - 5, committed, read)
    assert len(reads) <= 2


def test_a_scan_to_an_offset_inside_a_unit_reads_nothing_past_the_committed_end(clock: ManualClock) -> None:
    """A scan that ends inside a unit decodes the whole unit; a damaged length that makes the unit
    run past the committed end is reported as that, not read on into bytes that do not exist."""
    vault = Vault(MemoryAccount(clock), clock=clock).ensure()
    with vault.writer(STREAM) as w:
        w.append([Batch([NewMessage(b"a" * 1000, "k") for _ in range(4)])])  # zstd: a few dozen bytes
    container = vault.page_blobs
    assert isinstance(container, MemoryPageBlobs)
    data = container.blobs[STREAM].data
    payload_length = struct.unpack_from("<I", data, PAYLOAD_LENGTH_OFFSET)[0]
    struct.pack_into("<I", data, STORED_LENGTH_OFFSET, payload_length)  # within its limits, past the end
    with pytest.raises(CorruptRecord, match="past the committed end"):
        list(Vault(vault.account, clock=clock).reader.scan(STREAM, 0, 2))


def test_a_read_with_a_tiny_max_bytes_returns_one_message_of_a_unit_then_the_next(clock: ManualClock) -> None:
    vault = Vault(MemoryAccount(clock), clock=clock).ensure()
    with vault.writer(STREAM) as w:
        w.append([Batch([NewMessage(b"v" * 10_000), NewMessage(b"w")])])
    first = vault.reader.read(STREAM, 0, max_bytes=1)
    assert [m.value for m in first.messages] == [b"v" * 10_000]  # never an empty page
    second = vault.reader.read(STREAM, first.next_offset, max_bytes=1)
    assert [m.value for m in second.messages] == [b"w"] and second.next_offset == second.committed


def test_a_unit_forged_inside_a_value_is_never_read(clock: ManualClock) -> None:
    vault = Vault(MemoryAccount(clock), clock=clock).ensure()
    with vault.writer(STREAM) as w:
        w.append([Batch([NewMessage(b"honest", "k")])])
        at = w.state.committed + UNIT_HEADER_SIZE + 16  # where the next value starts (empty key)
        noise = random.Random(3).randbytes(2000)  # incompressible: the carrier is stored as it is
        forged = encode_unit([b"forged"], [b"never produced"], at, 1, codec=0, key_is_text=True)
        w.append([Batch([NewMessage(forged + noise, b"")])])
    fresh = Vault(vault.account, clock=clock).reader  # nothing remembered: the offset must be proven
    with pytest.raises(InvalidOffset, match="not the start of a record"):
        fresh.read(STREAM, at)
    with pytest.raises(InvalidOffset):
        list(fresh.scan(STREAM, at))
    container = vault.page_blobs
    assert isinstance(container, MemoryPageBlobs)
    container.blobs[STREAM].data[at - 30] ^= 0xFF  # the carrier's header: its length is no proof now
    got = list(Vault(vault.account, clock=clock).reader.scan(STREAM, options=ScanOptions(skip_corrupt=True)))
    assert [m.value for m in got] == [b"honest"]  # not b"never produced"


def test_verify_reports_a_damaged_unit_and_reads_past_it(mixed: Vault) -> None:
    from vault_client.verify import verify_log

    assert verify_log(mixed.blob(STREAM)).ok
    b2 = mixed.index.committed_batches(STREAM, ["b2"])["b2"]
    container = mixed.page_blobs
    assert isinstance(container, MemoryPageBlobs)
    container.blobs[STREAM].data[b2.first_offset + 50] ^= 0x04
    report = verify_log(mixed.blob(STREAM))
    assert not report.ok and report.records == mixed.reader.state(STREAM).count - 300
    assert report.problems[0].offset == b2.first_offset and "corrupt" in report.problems[0].what


def test_a_read_that_stops_inside_a_unit_is_continued_from_the_unit_without_another_get(
    mixed: Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    reader = Vault(mixed.account, clock=mixed.clock).reader
    b0 = mixed.index.committed_batches(STREAM, ["b0"])["b0"]
    first = reader.read(STREAM, b0.first_offset, max_count=10)
    assert first.next_offset == b0.first_offset + 10  # inside the unit
    data, state = reader.fetch(STREAM, first.next_offset, 65536)  # as the read-ahead does
    assert state.read_at == b0.first_offset  # fetched from the unit's start, as decoding needs
    reads: list[int] = []
    original = MemoryPageBlob.read

    def counted(self: MemoryPageBlob, start: int, n: int) -> bytes:
        reads.append(start)
        return original(self, start, n)

    monkeypatch.setattr(MemoryPageBlob, "read", counted)
    page = reader.decode_checked_batches(STREAM, first.next_offset, data, state, max_bytes=65536, max_count=5)
    assert [m.offset for m in page.messages()] == list(range(b0.first_offset + 10, b0.first_offset + 15))
    assert reads == []
