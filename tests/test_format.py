"""The record format: pure bytes, no storage."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest

from vault_core import recordformat as fmt
from vault_core.errors import (
    CorruptRecord,
    InvalidInput,
    InvalidStreamName,
    MessageTooLarge,
    UnsupportedVersion,
)
from vault_core.names import (
    validate_batch_id,
    validate_group_name,
    validate_producer_batch_id,
    validate_stream_name,
)
from vault_core.recordformat import NewMessage, decode, encode, message_id, parse_message_id
from vault_core.unitformat import encode_unit

DATA = Path(__file__).parent / "data"
TS = 1_700_000_000_000

ROUND_TRIPS = [
    ("text key", NewMessage(b"hello", "k")),
    ("binary key", NewMessage(b"\x00\xff", b"\x00\x01\xf5")),
    ("empty key and value", NewMessage(b"", b"")),
    ("unicode key", NewMessage("värde".encode(), "schlüssel-🔑")),
    ("maximum key", NewMessage(b"v", b"k" * fmt.MAX_KEY_BYTES)),
    ("maximum value", NewMessage(b"v" * fmt.MAX_VALUE_BYTES, "big")),
    ("value holding the sync marker", NewMessage(fmt.MAGIC * 20, b"")),
]


@pytest.mark.parametrize(("case", "message"), ROUND_TRIPS, ids=[c for c, _ in ROUND_TRIPS])
def test_every_field_round_trips(case: str, message: NewMessage) -> None:
    buf = encode([message], 4096, TS)
    [got], end = decode(buf, 4096)
    key, flags = message.key_bytes()
    assert (got.offset, got.timestamp, got.key, got.value, got.flags) == (4096, TS, key, message.value, flags)
    assert end == len(buf) == got.size == fmt.HEADER_SIZE + len(key) + len(message.value)
    assert got.key_is_text == isinstance(message.key, str)


def test_records_are_packed_without_padding() -> None:
    buf = encode([NewMessage(b"a"), NewMessage(b"bb", "k")], 0, TS)
    records, _ = decode(buf, 0)
    assert [r.offset for r in records] == [0, fmt.HEADER_SIZE + 1]
    assert len(buf) == 2 * fmt.HEADER_SIZE + 1 + 3


def test_golden_record_matches_the_documented_bytes() -> None:
    golden = (DATA / "record-v1.bin").read_bytes()
    assert encode([NewMessage(b"hello", "k")], 100, TS) == golden
    [m], _ = decode(golden, 100)
    assert (m.offset, m.timestamp, m.key, m.value, m.key_is_text) == (100, TS, b"k", b"hello", True)


def test_every_flipped_byte_is_detected() -> None:
    buf = bytearray(encode([NewMessage(b"payload", "key")], 0, TS))
    for i in range(len(buf)):
        corrupt = bytearray(buf)
        corrupt[i] ^= 0x01
        with pytest.raises((CorruptRecord, UnsupportedVersion)):
            decode(bytes(corrupt), 0, complete=True)


def test_encoded_batches_restamped_equal_records_encoded_in_place() -> None:
    messages = [m for _, m in ROUND_TRIPS]
    encoded = fmt.encoded_batch(encode(messages, 0, 1))
    assert len(encoded.starts) == len(messages) and encoded.starts[0] == 0
    buf = bytearray(b"committed bytes before the batch")
    at = len(buf)
    buf += encoded.data
    fmt.restamp(buf, at, encoded.starts, 70_000, TS)
    assert bytes(buf[at:]) == encode(messages, 70_000, TS)


def test_encoded_fields_are_the_fields_decode_checks() -> None:
    """What a version 2 writer takes from a claim-check body without checking it twice."""
    messages = [m for _, m in ROUND_TRIPS]
    data = encode(messages, 0, 1)
    records, _ = decode(data, 0, complete=True)
    expected = [(r.key, r.key_is_text, r.value) for r in records]
    assert list(fmt.encoded_fields(fmt.encoded_batch(data))) == expected
    assert {is_text for _, is_text, _ in expected} == {True, False}  # both kinds of key


def test_every_flipped_byte_of_an_encoded_batch_is_detected() -> None:
    buf = bytearray(encode([NewMessage(b"payload", "key"), NewMessage(b"two")], 0, TS))
    for i in range(len(buf)):
        corrupt = bytearray(buf)
        corrupt[i] ^= 0x01
        with pytest.raises((CorruptRecord, UnsupportedVersion)):
            fmt.encoded_batch(bytes(corrupt))
    with pytest.raises(CorruptRecord, match="partial record header"):
        fmt.encoded_batch(bytes(buf) + b"\xf5MV")
    with pytest.raises(CorruptRecord, match="runs past"):
        fmt.encoded_batch(bytes(buf[:-1]))


def test_an_encoded_batch_of_records_refuses_a_unit_among_them() -> None:
    """FORMAT.md §6.8: a claim-check body holds frames of one version. A unit after records
    (checksummed, so only a forged body) would otherwise be read as records by their headers."""
    records = encode([NewMessage(b"one", "k")], 0, TS)
    unit = encode_unit([b"k"], [b"two"], len(records), TS, codec=0, key_is_text=True)
    with pytest.raises(CorruptRecord, match="unit among version 1 records"):
        fmt.encoded_batch(records + unit)


def test_checksum_error_names_offset_and_both_checksums() -> None:
    buf = bytearray(encode([NewMessage(b"payload")], 512, TS))
    buf[-1] ^= 0xFF
    with pytest.raises(CorruptRecord) as info:
        decode(bytes(buf), 512, stream="s")
    assert info.value.offset == 512 and info.value.stored_crc != info.value.computed_crc
    assert "stream 's'" in str(info.value)


@pytest.mark.parametrize(
    ("field_offset", "value", "error"),
    [
        (fmt.VERSION_OFFSET, 3, UnsupportedVersion),  # 2 is a version 2 unit; 3 is unknown
        (fmt.FLAGS_OFFSET, 0x01, UnsupportedVersion),  # compression codec 1: reserved
        (fmt.FLAGS_OFFSET, 0x80, UnsupportedVersion),  # unknown flag bit
    ],
)
def test_unknown_versions_and_features_are_rejected_clearly(
    field_offset: int, value: int, error: type
) -> None:
    """A newer writer's record (its checksum holds) is §9's clear error; the same flags with a
    checksum that fails are damage, which a skipping reader may skip (FORMAT.md §7.2 step 6)."""
    buf = bytearray(encode([NewMessage(b"x")], 0, TS))
    buf[field_offset] = value
    struct.pack_into("<I", buf, fmt.CRC_OFFSET, zlib.crc32(buf[fmt.CRC_COVERAGE_START :]))
    with pytest.raises(error, match=r"not supported|does not know"):
        decode(bytes(buf), 0)
    if field_offset == fmt.FLAGS_OFFSET:
        buf[fmt.CRC_OFFSET] ^= 0xFF
        with pytest.raises(CorruptRecord, match="checksum mismatch"):
            decode(bytes(buf), 0)


def test_a_torn_record_is_left_for_more_bytes_not_returned() -> None:
    buf = encode([NewMessage(b"one"), NewMessage(b"two")], 0, TS)
    records, end = decode(buf[:-1], 0)
    assert [r.value for r in records] == [b"one"] and end == fmt.HEADER_SIZE + 3


def test_message_ids_sort_by_time_then_offset_and_round_trip() -> None:
    ids = [message_id(ts, off) for ts, off in [(1, 900), (2, 5), (2, 10), (TS, 0)]]
    assert ids == sorted(ids)
    assert parse_message_id(ids[-1]) == (TS, 0)
    for not_an_id in (ids[-1][:-1], ids[-1] + "0", "+" + ids[-1][1:], ids[-1][:12] + "00000000000_"):
        with pytest.raises(ValueError, match="24 hex digits"):
            parse_message_id(not_an_id)


@pytest.mark.parametrize(
    ("message", "what"),
    [
        (NewMessage(b"v", b"k" * (fmt.MAX_KEY_BYTES + 1)), "key"),
        (NewMessage(b"v" * (fmt.MAX_VALUE_BYTES + 1)), "value"),
    ],
)
def test_oversize_keys_and_values_are_rejected(message: NewMessage, what: str) -> None:
    with pytest.raises(MessageTooLarge, match=what):
        encode([message], 0, TS)


@pytest.mark.parametrize(
    "name",
    ["", "-lead", ".hidden", "a/b", "a\\b", "a#b", "a?b", "x" * 129, "sp ace", "ü", "trail.", "a..", "."],
)
def test_invalid_stream_names_are_rejected(name: str) -> None:
    with pytest.raises(InvalidStreamName, match="invalid stream name"):
        validate_stream_name(name)


@pytest.mark.parametrize("name", ["a", "orders", "Orders.v2", "a_b-c", "9", "x" * 128, "a..b", "v1.0_", "x-"])
def test_valid_stream_names_pass(name: str) -> None:
    assert validate_stream_name(name) == name


@pytest.mark.parametrize("bid", ["", "a:b", "a,b", "x" * 65, "a b"])
def test_invalid_batch_ids_are_rejected(bid: str) -> None:
    with pytest.raises(InvalidInput):
        validate_batch_id(bid)


@pytest.mark.parametrize(
    ("name", "stream", "group", "batch", "producer_batch"),
    [
        ("orders.v2", True, True, True, False),
        ("-lead", False, False, True, True),
        ("x" * 64, True, True, True, True),
        ("x" * 65, True, True, False, False),
        ("x" * 129, False, False, False, False),
        ("a/b", False, False, False, False),
    ],
)
def test_each_kind_of_name_keeps_its_own_rule(
    name: str, stream: bool, group: bool, batch: bool, producer_batch: bool
) -> None:
    """One helper checks every kind of name; each kind still has its own set and length."""
    for validate, valid in (
        (validate_stream_name, stream),
        (validate_group_name, group),
        (validate_batch_id, batch),
        (validate_producer_batch_id, producer_batch),
    ):
        if valid:
            assert validate(name) == name
        else:
            with pytest.raises(InvalidInput, match="invalid"):
                validate(name)
