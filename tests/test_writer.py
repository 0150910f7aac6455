"""The writer and the reader's contract, one suite run on both backends: Azurite and memory.

What must hold whatever stores the pages: every field round-trips, batches straddling page and
4 MiB boundaries read back exactly, encoded batches append like messages and duplicates are
not appended, every offset a read returns reads back, one of two racing writers wins, the blob
grows in large steps, the index is rebuilt from the log, and an offset inside a value is refused.
What only one backend can show stays with it: tests/test_log.py (a real kill -9, a real 15 s
lease, storage faults through a proxy) and tests/test_writer_memory.py (crash points and lease
expiry on a ManualClock, in milliseconds).
"""

from __future__ import annotations

import random
import threading

import pytest

from vault_core import codecs
from vault_core import recordformat as fmt
from vault_core.clock import ManualClock
from vault_core.errors import InvalidOffset, StreamLeased
from vault_core.memory import MemoryAccount
from vault_core.pagelog import MAX_PAGE_WRITE, PAGE_SIZE
from vault_core.recordformat import HEADER_SIZE, NewMessage
from vault_core.rows import KeyRange
from vault_core.stagedunits import encode_units, message_fields, staged_units
from vault_core.vault import Vault
from vault_core.writer import MIN_GROWTH, Batch, WriterSettings

TS = 1_750_000_000_000


@pytest.fixture(params=["azurite", "memory"])
def vault(request: pytest.FixtureRequest) -> Vault:
    """A vault on a ManualClock, on the session's Azurite or in memory."""
    clock = ManualClock(TS)
    if request.param == "memory":
        return Vault(MemoryAccount(clock), clock=clock).ensure()
    session: Vault = request.getfixturevalue("vault")
    return Vault(session.account, clock=clock)


def msgs(n: int, size: int = 100, tag: str = "m") -> list[NewMessage]:
    # Random bodies (without the tag separator): as long in a compressed unit as in records.
    rng = random.Random(f"{tag}{n}{size}")
    return [
        NewMessage(f"{tag}-{i:06d}-".encode() + rng.randbytes(size).replace(b"-", b"+"), "k")
        for i in range(n)
    ]


def tags(vault: Vault, stream: str) -> list[bytes]:
    return [m.value.split(b"-")[0] for m in vault.reader.scan(stream)]


def test_round_trip_keeps_every_field(vault: Vault, stream: str) -> None:
    sent = [NewMessage(b"text", "key"), NewMessage(b"\x00\xff", b"\x01"), NewMessage(b"", b"")]
    with vault.writer(stream) as w:
        [result] = w.append([Batch(sent)])
    got = vault.reader.read(stream, 0).messages
    assert [(m.key, m.value, m.key_is_text) for m in got] == [
        (b"key", b"text", True),
        (b"\x01", b"\x00\xff", False),
        (b"", b"", False),
    ]
    assert {m.timestamp for m in got} == {TS}
    assert got[0].offset == result.first_offset == 0
    assert got[-1].next_offset == result.next_offset == vault.reader.state(stream).committed


def test_batches_straddling_page_and_4mib_boundaries_read_back_exactly(vault: Vault, stream: str) -> None:
    rng = random.Random(7)
    sent: list[bytes] = []
    with vault.writer(stream) as w:
        for size in (1, 511, 513, 3 * MAX_PAGE_WRITE // 2, 7, MAX_PAGE_WRITE + 1, 300_000):
            batch: list[NewMessage] = []
            while sum(len(m.value) + HEADER_SIZE + 1 for m in batch) < size:
                batch.append(NewMessage(rng.randbytes(rng.randint(0, 70_000)), "k"))
            w.append([Batch(batch)])
            sent += [m.value for m in batch]
        assert w.state.committed % PAGE_SIZE != 0  # the log is not padded to pages
    assert [m.value for m in vault.reader.scan(stream)] == sent


def test_encoded_batches_append_like_messages_and_duplicates_are_not_appended(
    vault: Vault, stream: str
) -> None:
    """Claim-check bodies (records or units from offset 0) are copied and re-stamped, mixed with
    messages, in commits over several 4 MiB writes."""
    rng = random.Random(11)
    sent: list[bytes] = []
    batches = []
    for i, size in enumerate((3, 2 * MAX_PAGE_WRITE // 1000, 1, 700, 3000)):
        batch = [NewMessage(rng.randbytes(rng.randint(0, 2000)), f"k{i}") for _ in range(size)]
        sent += [m.value for m in batch]
        if i == 4:  # units, compressed where they were staged: the large ones copied as they are
            body = encode_units(message_fields(batch), 1, codec=codecs.CODEC_ZSTD)
            batches.append(Batch.of_units(staged_units(body), f"b{i}"))
        elif i % 2 == 0:
            batches.append(Batch.of_records(fmt.encoded_batch(fmt.encode(batch, 0, 1)), f"b{i}"))
        else:
            batches.append(Batch(batch, f"b{i}"))
    with vault.writer(stream) as w:
        results = w.append(batches)
        again = w.append([batches[1], Batch(msgs(1), "new"), batches[0], batches[4]])
    assert [r.count for r in results] == [3, 2 * MAX_PAGE_WRITE // 1000, 1, 700, 3000]
    assert [r.duplicate for r in results + again] == [False] * 5 + [True, False, True, True]
    assert again[0].first_offset == results[1].first_offset and again[2].first_offset == 0
    got = list(vault.reader.scan(stream))
    assert [m.value for m in got[:-1]] == sent and got[-1].value == msgs(1)[0].value
    assert {m.timestamp for m in got[:3]} == {results[0].timestamp}
    assert vault.reader.read(stream, results[2].first_offset, max_count=1).messages[0].key == b"k2"


def test_every_offset_a_read_returns_reads_back(vault: Vault, stream: str) -> None:
    rng = random.Random(3)
    with vault.writer(stream) as w:
        for i in range(30):
            w.append([Batch([NewMessage(rng.randbytes(rng.randint(0, 900)), f"{i}")] * rng.randint(1, 8))])
    everything = list(vault.reader.scan(stream))
    for expected in everything:
        got = vault.reader.read(stream, expected.offset, max_count=1)
        assert got.messages == [expected] and got.next_offset == expected.next_offset
    end = vault.reader.read(stream, everything[-1].next_offset)
    assert end.messages == [] and end.next_offset == end.committed
    offsets = {m.offset for m in everything}
    inside = next(x for x in range(everything[3].offset + 1, everything[-1].offset) if x not in offsets)
    with pytest.raises(InvalidOffset):
        vault.reader.read(stream, inside)


def test_only_one_of_two_racing_writers_wins(vault: Vault, stream: str) -> None:
    vault.writer(stream).close()  # create the blob, so both race for the lease only
    outcomes: list[str] = []
    start = threading.Barrier(2, timeout=60)
    tried = threading.Barrier(2, timeout=60)
    """Passed once both have asked for the lease: the winner holds it at least until then."""

    def race(tag: str) -> None:
        start.wait()
        try:
            w = vault.writer(stream)
        except StreamLeased:
            outcomes.append("leased")
            tried.wait()
            return
        tried.wait()
        w.append([Batch(msgs(100, tag=tag))])
        outcomes.append(tag)
        w.close()

    threads = [threading.Thread(target=race, args=(t,)) for t in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [o for o in outcomes if o != "leased"]
    assert len(winners) == 1 and sorted(outcomes) == sorted([winners[0], "leased"])
    assert tags(vault, stream) == [winners[0].encode()] * 100


def test_the_blob_grows_in_large_steps(vault: Vault, stream: str) -> None:
    sizes = set()
    with vault.writer(stream) as w:
        for _ in range(40):
            w.append([Batch(msgs(10, size=1000))])
            sizes.add(w.state.blob_size)
    assert sizes == {MIN_GROWTH}


@pytest.mark.parametrize(("record_format", "claim_checks"), [(1, False), (1, True), (2, False), (2, True)])
def test_the_index_is_rebuilt_from_the_log_when_lost(
    vault: Vault, stream: str, record_format: int, claim_checks: bool
) -> None:
    """Points placed while appending (messages, claim-check records, units) are the points a
    recovery derives from the log: one rule for both."""
    with vault.writer(stream, WriterSettings(index_spacing=8192, record_format=record_format)) as w:
        for i in range(30):  # a format 2 commit is one unit: points fall on unit positions
            batch = msgs(10, size=200, tag=f"c{i}")
            if not claim_checks:
                w.append([Batch(batch)])
            elif record_format == 1:
                w.append([Batch.of_records(fmt.encoded_batch(fmt.encode(batch, 0, 1)))])
            else:  # staged units: small ones, re-packed (a large one copied is tests/test_stagedunits.py's)
                w.append([Batch.of_units(staged_units(encode_units(message_fields(batch), 1, codec=1)))])
    before = vault.index.points(stream)
    for row in vault.index.index.query(KeyRange(stream)):
        vault.index.index.delete(row.partition, row.key)
    with vault.writer(stream, WriterSettings(index_spacing=8192)):
        pass
    assert vault.index.points(stream) == before and len(before) > 5


def test_an_offset_inside_a_value_is_refused_even_if_a_valid_record_sits_there(
    vault: Vault, stream: str
) -> None:
    with vault.writer(stream) as w:
        w.append([Batch([NewMessage(b"honest", "k")])])
        at = w.state.committed + HEADER_SIZE  # where the value starts (empty key)
        w.append([Batch([NewMessage(fmt.encode([NewMessage(b"never produced", "forged")], at, 1), b"")])])
    fresh = Vault(vault.account, clock=vault.clock).reader  # nothing remembered: it must prove it
    with pytest.raises(InvalidOffset, match="not the start of a record"):
        fresh.read(stream, at)
    with pytest.raises(InvalidOffset):
        list(fresh.scan(stream, at))
    assert fresh.read(stream, 0).messages[0].value == b"honest"
