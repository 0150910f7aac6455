"""A stream written by the previous release (0.1, commit 195f3a2: record format 1 only) is read
identically by this code, and stays so when this writer appends format 2 units to it.

The stream is tests/data/stream-release-0.1.json, captured from the old tree by
tests/helpers/capture_release_stream.py: its page blob's committed bytes, size and commit record
(metadata), its index and catalog rows, and every message the old reader scanned. Each test
restores it into a fresh stream on the session's Azurite, as the old writer left it.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from vault_client.verify import verify_log
from vault_core.azure import StorageAccount
from vault_core.index import CATALOG_PARTITION
from vault_core.pagelog import MAX_PAGE_WRITE, PAGE_SIZE, CommitState
from vault_core.reader import StreamReader
from vault_core.recordformat import NewMessage
from vault_core.vault import Vault
from vault_core.writer import Batch, WriterSettings

FIXTURE: dict[str, Any] = json.loads((Path(__file__).parent / "data" / "stream-release-0.1.json").read_text())

Recorded = tuple[int, int, bytes, bytes, int]
"""A message as the old reader returned it: offset, timestamp, key, value, flags."""

OLD: list[Recorded] = [
    (offset, ts, base64.b64decode(key), base64.b64decode(value), flags)
    for offset, ts, key, value, flags in FIXTURE["messages"]
]
OLD_END = int(FIXTURE["metadata"]["mv_committed"])


def restore(account: StorageAccount, vault: Vault, stream: str) -> None:
    """The old release's stream under a new name: blob bytes, commit record, index and catalog rows."""
    data = base64.b64decode(FIXTURE["committed_bytes"])
    data += bytes(-len(data) % PAGE_SIZE)
    blob = account.page_blobs(vault.container_name).client.get_blob_client(stream)
    blob.create_page_blob(size=FIXTURE["blob_size"], metadata=FIXTURE["metadata"])
    for pos in range(0, len(data), MAX_PAGE_WRITE):
        chunk = data[pos : pos + MAX_PAGE_WRITE]
        blob.upload_page(chunk, offset=pos, length=len(chunk))
    vault.index.index.replace_all(stream, [(r["key"], r["fields"]) for r in FIXTURE["index_rows"]])
    [catalog] = FIXTURE["catalog_rows"]
    vault.index.catalog.upsert(CATALOG_PARTITION, stream, catalog["fields"], merge=False)


def scanned(vault: Vault, stream: str) -> list[Recorded]:
    return [(m.offset, m.timestamp, m.key, m.value, m.flags) for m in vault.reader.scan(stream)]


class Snapshot:
    """A stream's committed log as one GET read it: a reader over it decodes from every offset
    without a request to Azurite per offset (the bytes are the same; committed bytes never change)."""

    def __init__(self, vault: Vault, stream: str) -> None:
        self.stream = stream
        self._state = vault.blob(stream).state()
        self._data = vault.blob(stream).read(0, self._state.committed)

    def state(self) -> CommitState:
        return self._state

    def read(self, start: int, length: int) -> bytes:
        return self._data[start : start + length]

    def read_with_state(self, start: int, length: int) -> tuple[bytes, CommitState]:
        return self.read(start, length), self._state


def read_each(vault: Vault, stream: str, expected: list[Recorded]) -> None:
    """A read from every message's offset starts with that message and goes on in order: through
    Azurite from a few offsets, and from every one over a snapshot of the same bytes."""
    snapshot = Snapshot(vault, stream)
    over_snapshot = StreamReader(lambda name: snapshot, vault.index)
    every = range(len(expected))
    for reader, picks in (
        (vault.reader, sorted({0, 1, len(expected) // 2, len(expected) - 1})),
        (over_snapshot, every),
    ):
        for i in picks:
            got = reader.read(stream, expected[i][0], max_count=2)
            assert [(m.offset, m.timestamp, m.key, m.value, m.flags) for m in got.messages] == expected[
                i : i + 2
            ]


def seeks(vault: Vault, stream: str, expected: list[Recorded], committed: int) -> None:
    """seek_time finds the first message at or after each recorded time (and the end past the last)."""
    for ts in sorted({m[1] for m in expected}):
        first = next(m[0] for m in expected if m[1] >= ts)
        assert vault.reader.seek_time(stream, ts) == first
        assert vault.reader.seek_time(stream, ts - 1) == next(m[0] for m in expected if m[1] >= ts - 1)
    assert vault.reader.seek_time(stream, expected[-1][1] + 1) == committed


def test_fixture_is_a_release_stream() -> None:
    """What the fixture must hold for the tests below to mean anything."""
    assert FIXTURE["metadata"].get("mv_format", "1") == "1"
    assert len(OLD) == int(FIXTURE["metadata"]["mv_count"]) >= 250
    assert len({m[1] for m in OLD}) >= 4  # several commits, at several times
    assert any(m[2] == b"" for m in OLD) and any(m[3] == b"" for m in OLD)
    assert len({m[4] for m in OLD}) == 2  # binary and text keys
    assert any(r["key"].startswith("o") for r in FIXTURE["index_rows"])  # index points


def test_release_stream_reads_identically(account: StorageAccount, vault: Vault, stream: str) -> None:
    restore(account, vault, stream)
    state = vault.reader.state(stream)
    assert (state.format, state.committed, state.count) == (1, OLD_END, len(OLD))
    assert scanned(vault, stream) == OLD
    read_each(vault, stream, OLD)
    seeks(vault, stream, OLD, OLD_END)
    report = verify_log(vault.blob(stream))
    assert report.ok, report.problems
    assert (report.records, report.first_ts, report.last_ts) == (len(OLD), OLD[0][1], OLD[-1][1])


def test_new_writer_appends_format_2_to_release_stream(
    account: StorageAccount, vault: Vault, stream: str
) -> None:
    restore(account, vault, stream)
    [b2] = [r["fields"] for r in FIXTURE["index_rows"] if r["key"] == "bb-2"]  # an older commit's batch
    new = [NewMessage(f"after upgrade {i}".encode(), f"new-{i % 3}") for i in range(40)]
    with vault.writer(stream, WriterSettings(index_spacing=FIXTURE["index_spacing"])) as w:
        [again, fresh] = w.append([Batch(OLD_BATCH_AGAIN), Batch(new[:30], "after-1")])
        [more] = w.append([Batch([NewMessage(b"", b"\x00bin"), NewMessage(b"\xff" * 300, b"")])])
    # A writer that opens the mixed blob again (its recovery reads the format 2 tail) appends too.
    with vault.writer(stream, WriterSettings(index_spacing=FIXTURE["index_spacing"])) as w:
        [last, dup] = w.append([Batch(new[30:]), Batch(OLD_BATCH_AGAIN, "b-2")])

    assert (dup.duplicate, dup.first_offset, dup.next_offset) == (True, b2["First"], b2["Next"])
    assert dup.count == b2["Count"]

    state = vault.reader.state(stream)
    assert state.format == 2
    assert state.count == len(OLD) + len(OLD_BATCH_AGAIN) + 30 + 2 + 10
    everything = scanned(vault, stream)
    assert everything[: len(OLD)] == OLD  # old offsets, times, keys and values unchanged
    added = everything[len(OLD) :]
    assert added[0][0] == OLD_END
    assert [(m[2], m[3]) for m in added] == [
        *((m.key_bytes()[0], m.value) for m in OLD_BATCH_AGAIN),
        *((m.key_bytes()[0], m.value) for m in new[:30]),
        (b"\x00bin", b""),
        (b"", b"\xff" * 300),
        *((m.key_bytes()[0], m.value) for m in new[30:]),
    ]
    assert [m[0] for m in added] == sorted({m[0] for m in added})
    assert (again.first_offset, again.next_offset) == (OLD_END, fresh.first_offset)
    assert (fresh.next_offset, more.next_offset) == (more.first_offset, last.first_offset)
    assert last.next_offset == state.committed

    read_each(vault, stream, everything)
    seeks(vault, stream, everything, state.committed)
    report = verify_log(vault.blob(stream))
    assert report.ok, report.problems
    assert report.records == state.count


OLD_BATCH_AGAIN = [NewMessage(b"same values as an old batch", "greeting"), NewMessage(b"", b"")]
