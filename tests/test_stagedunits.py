"""Batches staged as version 2 units (docs/FORMAT.md §6.8, §11.7): the HTTP tier compresses them,
the writer checks them whole and copies the units that are full enough with a new offset and
time, and re-packs the rest; what a consumer reads is the same as for the same messages sent as
messages, and a log written from staged units is byte for byte the log written from messages.

All in process: pure functions over bytes, and the writer and reader over the in-memory twin
(tests/test_writer.py runs the same writer on Azurite).
"""

from __future__ import annotations

import random
import struct
import zlib
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vault_core import codecs
from vault_core.clock import ManualClock
from vault_core.errors import CorruptRecord, UnsupportedVersion
from vault_core.memory import MemoryAccount
from vault_core.prefix import CRC_COVERAGE_START, CRC_OFFSET, FLAG_COMPRESSION_MASK
from vault_core.recordformat import MAX_KEY_BYTES, NewMessage, decode, encode, encoded_batch
from vault_core.stagedunits import (
    COPY_FRACTION,
    copies_as_is,
    cut_units,
    encode_units,
    message_fields,
    staged_units,
    unit_fields,
)
from vault_core.unitformat import (
    FLAGS_OFFSET,
    STORED_LENGTH_OFFSET,
    UNIT_HEADER_SIZE,
    UNIT_TARGET_BYTES,
    UNIT_TARGET_MESSAGES,
    encode_unit,
    restamped_unit,
)
from vault_core.vault import Vault
from vault_core.writer import Batch, WriterSettings

TS = 1_750_000_000_000
STAGED_AT = 1_700_000_000_000
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ZSTD = codecs.CODEC_ZSTD


def events(n: int, tag: str, size: int = 100, key: str | bytes = "k") -> list[NewMessage]:
    rng = random.Random(f"{tag}{n}{size}")
    return [
        NewMessage(f'{{"tag":"{tag}","i":{i},"x":"{rng.randbytes(size // 2).hex()}"}}'.encode(), key)
        for i in range(n)
    ]


def staged(messages: list[NewMessage], batch_id: str | None = None, codec: int = ZSTD) -> Batch:
    """``messages`` as the HTTP tier stages them and the writer function gets them back."""
    body = encode_units(message_fields(messages), STAGED_AT, codec=codec)
    return Batch.of_units(staged_units(body), batch_id)


def vault() -> Vault:
    clock = ManualClock(TS)
    return Vault(MemoryAccount(clock), clock=clock).ensure()


def log_bytes(v: Vault, stream: str) -> bytes:
    return v.blob(stream).read(0, v.reader.state(stream).committed)


def read_back(v: Vault, stream: str) -> list[tuple[bytes, bytes, bool, int]]:
    return [(m.key, m.value, m.key_is_text, m.timestamp) for m in v.reader.scan(stream)]


# -- staging: units from offset 0, cut as the writer cuts ------------------------------------
@FAST
@given(
    pairs=st.lists(
        st.tuples(st.binary(max_size=MAX_KEY_BYTES), st.booleans(), st.binary(max_size=3000)), max_size=300
    ),
    unit_bytes=st.sampled_from([64, 4096, UNIT_TARGET_BYTES]),
    codec=st.sampled_from(sorted(codecs.CODEC_NAMES)),
)
def test_staged_units_hold_exactly_the_messages_cut_at_the_writer_s_bounds(
    pairs: list[tuple[bytes, bool, bytes]], unit_bytes: int, codec: int
) -> None:
    body = encode_units(pairs, STAGED_AT, codec=codec, unit_bytes=unit_bytes)
    units = staged_units(body)
    assert units.messages == len(pairs) and units.data == body
    assert [f for u in units.units for f in unit_fields(u)] == pairs
    for unit, (keys, _, text) in zip(units.units, cut_units(pairs, unit_bytes), strict=True):
        assert unit.size == len(keys) and unit.timestamp == STAGED_AT
        assert unit.payload_length <= unit_bytes or unit.size == 1
        assert all(t == text for _, t, _ in unit_fields(unit))
    messages, end = decode(body, 0, complete=True)  # a log from offset 0, as §6.8 says
    assert end == len(body) and [(m.key, m.value) for m in messages] == [(k, v) for k, _, v in pairs]


def test_units_close_at_the_byte_or_message_target_and_where_keys_change_kind() -> None:
    small = [(b"k", True, b"x" * 10)] * (UNIT_TARGET_MESSAGES + 5)
    assert [len(k) for k, _, _ in cut_units(small)] == [UNIT_TARGET_MESSAGES, 5]
    large = [(b"k", True, b"x" * 1000)] * 1100
    sizes = [len(k) for k, _, _ in cut_units(large)]
    assert sum(sizes) == 1100 and all(16 + 1009 * n <= UNIT_TARGET_BYTES for n in sizes[:-1])
    mixed = [(b"t", True, b"v"), (b"\x00", False, b"v"), (b"\x01", False, b"v"), (b"t", True, b"v")]
    assert [(len(k), text) for k, _, text in cut_units(mixed)] == [(1, True), (2, False), (1, True)]


def test_a_restamped_unit_reads_at_its_new_offset_and_time() -> None:
    msgs = events(50, "r")
    [unit] = staged_units(encode_units(message_fields(msgs), STAGED_AT, codec=ZSTD)).units
    moved = restamped_unit(unit, 4096, TS)
    assert moved[UNIT_HEADER_SIZE:] == bytes(unit.stored)  # the stored bytes are copied as they are
    got, end = decode(b"\x00" * 4096 + moved, 0, complete=True, start=4096)
    assert end == 4096 + len(moved)
    assert [(m.offset, m.timestamp, m.value) for m in got] == [
        (4096 + i, TS, m.value) for i, m in enumerate(msgs)
    ]


@pytest.mark.parametrize(
    ("damage", "error"),
    [
        ("flip a stored byte", CorruptRecord),
        ("flip the count", CorruptRecord),
        ("cut the last unit short", CorruptRecord),
        ("a version 1 record after the units", CorruptRecord),
        ("boundaries that lie, resealed", CorruptRecord),
        ("a codec this reader does not know, resealed", UnsupportedVersion),
    ],
)
def test_a_damaged_or_forged_staged_batch_is_refused_whole(damage: str, error: type[Exception]) -> None:
    """Everything a reader checks is checked before a writer copies a unit: a unit the writer
    copies is one every reader opens."""
    pairs = list(message_fields(events(600, "d")))
    body = bytearray(encode_units(pairs, STAGED_AT, codec=codecs.CODEC_NONE, unit_bytes=16 * 1024))
    if damage == "flip a stored byte":
        body[-1] ^= 0x20
    elif damage == "flip the count":
        body[FLAGS_OFFSET + 1] ^= 1
    elif damage == "cut the last unit short":
        del body[-1]
    elif damage == "a version 1 record after the units":
        body += encode([NewMessage(b"v", "k")], len(body), STAGED_AT)
    elif damage == "boundaries that lie, resealed":
        struct.pack_into("<I", body, UNIT_HEADER_SIZE + 4, 2)  # the second key's end: before the first
        struct.pack_into("<I", body, UNIT_HEADER_SIZE, 0)
        struct.pack_into("<I", body, UNIT_HEADER_SIZE + 4 * 2, 1)
        reseal(body)
    else:
        body[FLAGS_OFFSET] |= FLAG_COMPRESSION_MASK  # codec 7
        reseal(body)
    with pytest.raises(error):
        staged_units(bytes(body))


def reseal(unit: bytearray) -> None:
    """Recompute the first unit's crc, as a writer that lies about a field would."""
    stored = struct.unpack_from("<I", unit, STORED_LENGTH_OFFSET)[0]
    end = UNIT_HEADER_SIZE + stored
    struct.pack_into("<I", unit, CRC_OFFSET, zlib.crc32(unit[CRC_COVERAGE_START:end]))


def test_a_unit_is_copied_when_it_is_a_quarter_full_and_compressed_as_the_writer_compresses() -> None:
    def unit_of(n: int, size: int, codec: int = ZSTD):  # type: ignore[no-untyped-def]
        [unit] = staged_units(
            encode_units(message_fields(events(n, "c", size)), STAGED_AT, codec=codec)
        ).units
        return unit

    quarter = UNIT_TARGET_MESSAGES // COPY_FRACTION
    assert copies_as_is(unit_of(quarter, 10), ZSTD) and not copies_as_is(unit_of(quarter - 1, 10), ZSTD)
    by_bytes = unit_of(300, 1000)  # ~300 KiB: a quarter of the byte target
    assert by_bytes.size < quarter and copies_as_is(by_bytes, ZSTD)
    assert not copies_as_is(by_bytes, codecs.CODEC_LZ4)
    assert not copies_as_is(by_bytes, ZSTD, 4 * UNIT_TARGET_BYTES)
    stored = unit_of(quarter, 10, codecs.CODEC_NONE)  # as a unit that zstd did not make smaller is
    assert all(copies_as_is(stored, c) for c in codecs.CODEC_NAMES)


# -- the writer: copies, re-packs, and writes what messages would have written --------------
@FAST
@given(
    sizes=st.lists(st.integers(1, 2500), min_size=1, max_size=4),
    text=st.lists(st.booleans(), min_size=1, max_size=4),
    value=st.sampled_from([10, 100, 1000]),
)
def test_a_log_written_from_staged_units_is_the_log_written_from_the_messages(
    sizes: list[int], text: list[bool], value: int
) -> None:
    """One batch a commit: the staging cuts as the writer does, so the units it copies and the
    ones it re-packs come out byte for byte as the writer's own; offsets, times, ids, pieces too."""
    batches = [
        events(n, f"b{i}", value, "k" if text[i % len(text)] else bytes([i])) for i, n in enumerate(sizes)
    ]
    logs, results = [], []
    for as_units in (False, True):
        v = vault()
        with v.writer("s") as w:
            results.append(
                [w.append([staged(b) if as_units else Batch(b)])[0] for b in batches]
                + w.append([staged(batches[0]) if as_units else Batch(batches[0])])
            )
        logs.append(log_bytes(v, "s"))
        assert read_back(v, "s") == [
            (m.key_bytes()[0], m.value, isinstance(m.key, str), TS) for b in [*batches, batches[0]] for m in b
        ]
    assert logs[0] == logs[1] and results[0] == results[1]


def test_staged_units_mix_with_messages_and_records_in_one_commit_and_duplicates_are_not_appended() -> None:
    v = vault()
    small = events(3, "small")  # a unit too small to stand alone: re-packed with its neighbours
    big = events(1500, "big", key=b"\x07")  # a quarter full and more: copied as it is
    records = events(5, "records")
    batches = [
        Batch(events(2, "messages"), "m"),
        staged(small, "s"),
        staged(big, "big"),
        Batch.of_records(encoded_batch(encode(records, 0, 1)), "r"),
    ]
    with v.writer("s") as w:
        results = w.append(batches)
        again = w.append([batches[2], Batch(events(1, "new"), "new")])
    assert [r.count for r in results] == [2, 3, 1500, 5]
    assert [r.duplicate for r in again] == [True, False] and again[0] == replace(results[2], duplicate=True)
    got = list(v.reader.scan("s"))
    expected = [*events(2, "messages"), *small, *big, *records, *events(1, "new")]
    assert [(m.key, m.value) for m in got] == [(e.key_bytes()[0], e.value) for e in expected]
    # units: the messages and the small staged unit re-packed together, the big one, the records
    assert [r.pieces for r in results] == [
        ((0, 2),),
        ((2, 3),),
        ((results[2].first_offset, 1500),),
        ((results[3].first_offset, 5),),
    ]
    [copied] = staged(big).units.units  # type: ignore[union-attr]
    assert results[2].next_offset - results[2].first_offset == copied.length


def test_a_unit_compressed_with_another_codec_is_re_packed_with_the_writer_s() -> None:
    v = vault()
    with v.writer("s", WriterSettings(codec=codecs.CODEC_LZ4)) as w:
        w.append([staged(events(1000, "z"))])  # staged with zstd (the app's codec changed since)
    data = log_bytes(v, "s")
    assert data[FLAGS_OFFSET] & FLAG_COMPRESSION_MASK == codecs.CODEC_LZ4
    assert [m.value for m in v.reader.scan("s")] == [m.value for m in events(1000, "z")]


def test_a_version_1_writer_writes_the_messages_of_staged_units_as_records() -> None:
    """The app's format set back to 1 while batches staged as units wait: they are written as records."""
    v = vault()
    msgs = events(700, "one") + events(3, "bin", key=b"\x00\xff")
    with v.writer("s", WriterSettings(record_format=1)) as w:
        [result] = w.append([staged(msgs)])
    assert v.reader.state("s").format == 1 and result.count == 703 and result.pieces == ()
    assert read_back(v, "s") == [(m.key_bytes()[0], m.value, isinstance(m.key, str), TS) for m in msgs]


def test_encode_unit_and_staging_agree_on_one_unit() -> None:
    pairs = list(message_fields(events(10, "one")))
    unit = encode_unit(
        [k for k, _, _ in pairs], [v for _, _, v in pairs], 0, STAGED_AT, codec=ZSTD, key_is_text=True
    )
    assert encode_units(pairs, STAGED_AT, codec=ZSTD) == unit
