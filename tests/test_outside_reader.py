"""FORMAT.md is enough to write a reader from: an independent reader written from it alone
(tests/outside_reader.py, no vault_core inside) reads what the reference writer writes exactly as
vault_core does. Mixed logs of version 1 records and version 2 units with every codec, text,
binary and empty keys, empty and large values, small units; the golden files; starts at every
kind of offset; and damage, which both refuse."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from tests import outside_reader as outside
from vault_core import codecs
from vault_core.errors import CorruptRecord, InvalidOffset, UnsupportedVersion
from vault_core.memory import BytesLog, MemoryAccount
from vault_core.reader import scan_log
from vault_core.recordformat import Message, NewMessage, encode
from vault_core.vault import Vault
from vault_core.writer import Batch, WriterSettings

DATA = Path(__file__).parent / "data"
STREAM = "conformance"


def _key(rng: random.Random) -> bytes | str:
    roll = rng.random()
    if roll < 0.2:
        return b""
    if roll < 0.5:
        return rng.randbytes(rng.randrange(0, 40))
    return f"user-{rng.randrange(1000)}"


def _value(rng: random.Random) -> bytes:
    roll = rng.random()
    if roll < 0.1:
        return b""
    if roll < 0.13:
        return rng.randbytes(rng.randrange(1, 60_000))  # incompressible: stored as it is
    text = bytes(rng.choice(b"abcdefgh {}:,") for _ in range(rng.randrange(1, 2_000)))
    return b'{"id":%d,"x":"%s"}' % (rng.randrange(10**9), text)


def _written(seed: int) -> Vault:
    """A stream of a few commits, each in a format, codec and unit size drawn at random."""
    rng = random.Random(seed)
    vault = Vault(MemoryAccount()).ensure()
    for _ in range(rng.randrange(1, 8)):
        settings = WriterSettings(
            record_format=rng.choice([1, 2, 2]),
            codec=rng.choice([codecs.CODEC_ZSTD, codecs.CODEC_LZ4, codecs.CODEC_NONE]),
            unit_bytes=rng.choice([1024, 16 * 1024, 1024 * 1024]),
        )
        batches = [
            Batch([NewMessage(_value(rng), _key(rng)) for _ in range(rng.randrange(1, 120))])
            for _ in range(rng.randrange(1, 4))
        ]
        with vault.writer(STREAM, settings) as w:
            w.append(batches)
    return vault


def _log(vault: Vault) -> bytes:
    blob = vault.blob(STREAM)
    return blob.read(0, blob.state().committed)


def _reference(data: bytes, start: int = 0) -> list[dict[str, Any]]:
    return [_fields(m) for m in scan_log(BytesLog(data, STREAM), start, len(data))]


def _fields(m: Message) -> dict[str, Any]:
    return {
        "offset": m.offset,
        "timestamp": m.timestamp,
        "key": m.key,
        "key_is_text": m.key_is_text,
        "value": m.value,
        "next_offset": m.next_offset,
    }


def _outside(data: bytes, start: int = 0) -> list[dict[str, Any]]:
    return [
        {k: m[k] for k in ("offset", "timestamp", "key", "key_is_text", "value", "next_offset")}
        for m in outside.read_log(data, start)
    ]


@pytest.mark.parametrize(
    "name", ["record-v1.bin", "unit-v2.bin", "unit-v2-zstd.bin", "unit-v2-lz4.bin", "stream-mixed.bin"]
)
def test_the_golden_files_read_alike(name: str) -> None:
    data = (DATA / name).read_bytes()
    if name in ("record-v1.bin", "unit-v2.bin"):  # laid out at offset 100: a 100-byte record before it
        data = encode([NewMessage(b"x" * 68)], 0, 1_700_000_000_000) + data
        assert len(data) - len((DATA / name).read_bytes()) == 100
    assert _outside(data) == _reference(data)


@pytest.mark.parametrize("seed", range(10))
def test_streams_the_writer_writes_read_alike_from_every_kind_of_offset(seed: int) -> None:
    vault = _written(seed)
    data = _log(vault)
    expected = _reference(data)
    assert _outside(data) == expected and expected
    rng = random.Random(seed)
    # a message inside a unit, the first of a frame, the committed end
    for i in {rng.randrange(len(expected)), 0, len(expected) - 1}:
        start = expected[i]["offset"]
        tail = [_fields(m) for m in vault.reader.scan(STREAM, from_offset=start)]
        assert _outside(data, start) == tail == expected[i:]
    assert _outside(data, len(data)) == []
    # offsets that are no message's: both refuse them as not a boundary
    offsets = {m["offset"] for m in expected}
    for bad in rng.sample([o for o in range(1, len(data)) if o not in offsets], 5):
        with pytest.raises(ValueError, match="not a record boundary"):
            outside.read_log(data, bad)
        with pytest.raises(InvalidOffset):
            vault.reader.read(STREAM, bad)


@pytest.mark.parametrize("seed", range(4))
def test_damage_is_refused_by_both(seed: int) -> None:
    """Every byte of a log is covered by a checksum or checked: a flipped bit or a log cut short
    (but where a frame ends) is refused by both readers, wherever it is."""
    data = _log(_written(100 + seed))
    rng = random.Random(seed)
    for _ in range(25):
        damaged = bytearray(data)
        if rng.random() < 0.5:
            damaged[rng.randrange(len(damaged))] ^= 1 << rng.randrange(8)
        else:
            del damaged[rng.randrange(1, len(damaged)) :]
        try:
            ours: list[dict[str, Any]] | None = _reference(bytes(damaged))
        except (CorruptRecord, UnsupportedVersion):
            ours = None
        try:
            theirs: list[dict[str, Any]] | None = _outside(bytes(damaged))
        except outside.Corrupt:
            theirs = None
        assert ours == theirs
        if ours is not None:  # only a log cut where a frame ends reads, as the shorter log it is
            assert len(damaged) < len(data) and ours == [
                m for m in _reference(data) if m["offset"] < len(damaged)
            ]
