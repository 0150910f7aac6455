"""One contract per interface, run against every implementation of it.

* :class:`~vault_core.pagelog.ReadableLog`: the page blob (Azurite), the page blob through a SAS,
  the API's raw log route (local host), the in-memory page blob.
* :class:`~vault_core.pagelog.PageLog` (the writer's side: leases, conditional writes): the page
  blob on Azurite and in memory.
* :class:`~vault_core.rows.Table`: Azure Tables (Azurite) and in memory.
* :class:`~vault_core.queueing.MessageQueue` (staging and poison queues): Azure Storage Queues
  (Azurite) and in memory.
* :class:`~vault_core.blobstore.BlobStore` (claim checks, owner-lease blobs): Azure Blob Storage
  (Azurite) and in memory.
* :class:`~vault_core.aio.AsyncReads` (what long polls and /health read as coroutines) and the
  account's read SAS: Azurite and in memory.
* :class:`~vault_client.sources.Source` (what a consumer reads pages from): the HTTP API and the
  blob read directly with the SAS the API hands out.

An implementation that passes its contract can stand in for another: that is what lets the
writer's protocol tests run in memory (tests/test_writer_memory.py), and the app's staging,
claim-check and writer-function logic run in process on a memory account.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import parse_qsl

import pytest

from vault_app.config import load_settings
from vault_app.services import AppStorage, Services
from vault_client.api import Access, ApiClient
from vault_client.direct import DirectSource, SasBlob
from vault_client.rawlog import ApiLog
from vault_client.sources import ApiSource, Source
from vault_core.aio import close_async_clients
from vault_core.azure import StorageAccount
from vault_core.blobstore import BlobStore
from vault_core.clock import ManualClock
from vault_core.errors import (
    LeaseLost,
    NotFound,
    StorageUnavailable,
    StreamLeased,
    StreamNotFound,
    VaultError,
)
from vault_core.memory import MemoryAccount
from vault_core.pagelog import PAGE_SIZE, CommitState, PageLog, ReadableLog
from vault_core.queueing import MessageQueue, QueuedMessage
from vault_core.reader import ScanOptions, StreamReader, scan_log
from vault_core.recordformat import Message, NewMessage, decode
from vault_core.rows import KeyRange, Table
from vault_core.vault import Vault
from vault_core.writer import Batch
from vault_local.process import HostProcess

TS = 1_750_000_000_000


def write(vault: Vault, stream: str, batches: int = 3, per_batch: int = 40) -> list[Message]:
    rng = random.Random(stream)  # values that do not compress: the byte counts below hold in format 2 too
    with vault.writer(stream) as w:
        for _ in range(batches):
            w.append([Batch([NewMessage(rng.randbytes(90), f"k{i}") for i in range(per_batch)])])
    return list(vault.reader.scan(stream))


@pytest.fixture
def memory_vault() -> Vault:
    clock = ManualClock(TS)
    return Vault(MemoryAccount(clock), clock=clock).ensure()


def sas_provider(vault: Vault, stream: str) -> Callable[[], Access]:
    def provide() -> Access:
        now = datetime.now(timezone.utc)
        expiry = now + timedelta(minutes=10)
        url, sas = vault.read_access(stream, start=now - timedelta(minutes=5), expiry=expiry)
        return Access(stream, url, sas, expiry)

    return provide


# -- ReadableLog -----------------------------------------------------------------------------
READABLE = ["blob", "sas", "api", "memory"]


@pytest.fixture(params=READABLE)
def opener(
    request: pytest.FixtureRequest, memory_vault: Vault
) -> Iterator[tuple[Vault, Callable[[str], Any]]]:
    """(the vault to write with, the implementation under test for a stream name)."""
    kind = request.param
    if kind == "memory":
        yield memory_vault, memory_vault.blob
        return
    vault: Vault = request.getfixturevalue("vault")
    if kind == "blob":
        yield vault, vault.blob
    elif kind == "sas":
        yield vault, lambda s: SasBlob(s, sas_provider(vault, s))
    else:
        host: HostProcess = request.getfixturevalue("vault_host")
        with ApiClient(host.url, host.key) as api:
            yield vault, lambda s: ApiLog(api, s)


def test_a_log_reports_its_commit_record(
    opener: tuple[Vault, Callable[[str], ReadableLog]], stream: str
) -> None:
    vault, open_log = opener
    written = write(vault, stream)
    log = open_log(stream)
    state = log.state()
    assert log.stream == stream
    assert (state.committed, state.count) == (written[-1].next_offset, len(written))
    assert state.first_ts == written[0].timestamp and state.last_ts == written[-1].timestamp


def test_a_log_reads_any_committed_range(
    opener: tuple[Vault, Callable[[str], ReadableLog]], stream: str
) -> None:
    vault, open_log = opener
    written = write(vault, stream)
    log, committed = open_log(stream), written[-1].next_offset
    everything = log.read(0, committed)
    assert decode(everything, 0, complete=True)[0] == written
    assert log.read(1000, 777) == everything[1000:1777]
    assert log.read(5, 0) == b""
    data, state = log.read_with_state(written[3].offset, 500)
    assert data == everything[written[3].offset : written[3].offset + 500] and state.committed == committed


def test_a_log_read_past_all_it_holds_is_empty_with_the_commit_record(
    opener: tuple[Vault, Callable[[str], ReadableLog]], stream: str
) -> None:
    vault, open_log = opener
    written = write(vault, stream, batches=1)
    data, state = open_log(stream).read_with_state(2**40, 100)
    assert data == b"" and state.committed == written[-1].next_offset


def test_a_missing_stream_is_stream_not_found(
    opener: tuple[Vault, Callable[[str], ReadableLog]], stream: str
) -> None:
    with pytest.raises(StreamNotFound):
        opener[1](stream + "-never").state()


def test_the_readers_read_every_implementation_alike(
    opener: tuple[Vault, Callable[[str], ReadableLog]], stream: str
) -> None:
    vault, open_log = opener
    written = write(vault, stream, batches=4)
    log = open_log(stream)
    assert list(scan_log(log, 0, log.state().committed, ScanOptions(chunk=4096, prefetch=3))) == written
    reader = StreamReader(lambda s: log, None)
    page = reader.read(stream, written[5].offset, max_count=3)
    assert page.messages == written[5:8] and page.next_offset == written[8].offset


# -- PageLog: the writer's side ------------------------------------------------------------------
@pytest.fixture(params=["azurite", "memory"])
def page_log(request: pytest.FixtureRequest, memory_vault: Vault, stream: str) -> PageLog:
    vault: Vault = memory_vault if request.param == "memory" else request.getfixturevalue("vault")
    return vault.blob(stream)


def test_creating_a_log_is_idempotent_and_starts_empty(page_log: PageLog) -> None:
    with pytest.raises(StreamNotFound):
        page_log.acquire_lease(15)
    page_log.create_if_missing()
    page_log.create_if_missing()
    state = page_log.state()
    assert (state.committed, state.count, state.batches) == (0, 0, ()) and state.etag


def test_pages_and_the_commit_record_are_written_under_the_lease_and_the_etag(page_log: PageLog) -> None:
    page_log.create_if_missing()
    lease = page_log.acquire_lease(15)
    created = str(page_log.state().etag)
    etag = page_log.resize(4 * PAGE_SIZE, lease, created)
    etag = page_log.write_pages(PAGE_SIZE, b"a" * PAGE_SIZE, lease, etag)
    with pytest.raises(LeaseLost):  # a stale ETag: the blob changed since
        page_log.write_pages(0, b"b" * PAGE_SIZE, lease, created)
    etag = page_log.commit(CommitState(committed=2 * PAGE_SIZE, count=1), lease, etag)
    data, state = page_log.read_with_state(0, 2 * PAGE_SIZE)
    assert data == bytes(PAGE_SIZE) + b"a" * PAGE_SIZE
    assert (state.committed, state.count, state.etag) == (2 * PAGE_SIZE, 1, etag)
    assert state.blob_size == 4 * PAGE_SIZE
    assert page_log.read(3 * PAGE_SIZE, 2 * PAGE_SIZE) == bytes(PAGE_SIZE)  # unwritten, up to the end
    etag = page_log.resize(PAGE_SIZE, lease, etag)  # a shrink drops the pages past the new end ...
    etag = page_log.resize(3 * PAGE_SIZE, lease, etag)
    assert page_log.read(0, 3 * PAGE_SIZE) == bytes(3 * PAGE_SIZE)  # ... and a growth adds zero pages
    lease.release()


def test_one_lease_at_a_time_and_a_broken_one_writes_nothing(page_log: PageLog) -> None:
    page_log.create_if_missing()
    first = page_log.acquire_lease(15)
    with pytest.raises(StreamLeased):
        page_log.acquire_lease(15)
    first.renew()
    page_log.break_lease()
    second = page_log.acquire_lease(15)
    with pytest.raises(LeaseLost):
        page_log.commit(CommitState(committed=0), first, str(page_log.state().etag))
    with pytest.raises(LeaseLost):
        first.renew()
    second.release()
    page_log.acquire_lease(15).release()  # released: free at once


def test_a_lease_id_that_holds_the_lease_takes_it_again_and_only_the_current_etag_writes(
    page_log: PageLog,
) -> None:
    """The successor of a dead writer under the same lease id takes the lease at once
    (docs/ARCHITECTURE.md §3.7); of two writers that share the id, the ETag lets one write."""
    page_log.create_if_missing()
    shared = str(uuid.uuid4())
    predecessor = page_log.acquire_lease(15, shared)
    for other in (None, str(uuid.uuid4())):
        with pytest.raises(StreamLeased):
            page_log.acquire_lease(15, other)
    successor = page_log.acquire_lease(15, shared)
    known = str(page_log.state().etag)
    page_log.resize(PAGE_SIZE, successor, known)
    with pytest.raises(LeaseLost):  # the predecessor's write, from the state it knew
        page_log.resize(2 * PAGE_SIZE, predecessor, known)
    assert page_log.state().blob_size == PAGE_SIZE
    successor.release()


# -- Table -----------------------------------------------------------------------------------
@pytest.fixture(params=["azurite", "memory"])
def backend(request: pytest.FixtureRequest) -> AppStorage:
    """The account under test: Azurite's (the session's), or a fresh one in memory."""
    if request.param == "memory":
        return MemoryAccount(ManualClock(TS))
    account: StorageAccount = request.getfixturevalue("account")
    return account


def fresh_name(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:12]}"


@pytest.fixture
def table(backend: AppStorage) -> Table:
    return backend.table(fresh_name("t"))


def test_a_missing_table_has_no_rows_to_get_and_cannot_be_queried(table: Table) -> None:
    assert table.get("p", "k") is None
    with pytest.raises(NotFound):
        table.query(KeyRange("p"))
    table.create_if_missing()
    table.create_if_missing()
    assert table.query(KeyRange("p")) == []


def test_rows_keep_their_types_and_inserts_never_overwrite(table: Table) -> None:
    table.create_if_missing()
    fields: dict[str, int | str | bool] = {
        "Big": 2**40 + 1,
        "Small": 7,
        "Text": "t",
        "Flag": True,
        "Empty": "",
    }
    etag = table.insert("p", "k", fields)
    assert etag and table.insert("p", "k", {"Big": 1}) is None
    row = table.get("p", "k")
    assert row is not None and row.etag == etag and (row.partition, row.key) == ("p", "k")
    assert {k: row.get(k) for k in fields} == fields
    assert row.number("Big") == 2**40 + 1 and row.optional_number("Empty") is None and row.number("None") == 0


def test_upserts_merge_or_replace_and_updates_are_conditional(table: Table) -> None:
    table.create_if_missing()
    table.upsert("p", "k", {"A": 1, "B": 2})
    table.upsert("p", "k", {"B": 3})  # merge: A stays
    assert (table.get("p", "k") or pytest.fail()).fields == {"A": 1, "B": 3}
    table.upsert("p", "k", {"C": 4}, merge=False)
    row = table.get("p", "k")
    assert row is not None and row.fields == {"C": 4}
    assert table.update("p", "missing", {"C": 5}) is None
    etag = table.update("p", "k", {"D": 6}, etag=row.etag)
    assert etag and (table.get("p", "k") or pytest.fail()).fields == {"C": 4, "D": 6}
    assert table.update("p", "k", {"E": 7}, etag=row.etag) is None  # changed since that ETag
    table.delete("p", "k")
    table.delete("p", "k")
    assert table.get("p", "k") is None


def test_queries_run_in_key_order_within_bounds(table: Table) -> None:
    table.create_if_missing()
    keys = [f"o{i:04d}" for i in range(0, 450, 3)]
    table.replace_all(
        "s", [(k, {"N": i}) for i, k in enumerate(reversed(keys))]
    )  # > 100: several transactions
    table.insert("other", "o0001", {"N": -1})
    assert [r.key for r in table.query(KeyRange("s"))] == keys
    assert [r.key for r in table.query(KeyRange("s", lo="o0010", hi="o0022"))] == [
        "o0012",
        "o0015",
        "o0018",
        "o0021",
    ]
    assert [r.key for r in table.query(KeyRange("s", lo="o0100"), top=2)] == ["o0102", "o0105"]
    assert [(r.partition, r.key) for r in table.query()][:2] == [("other", "o0001"), ("s", "o0000")]
    wanted = [*keys[:20], "o0001", "o9999"]  # more than one request's worth, and two that are not there
    assert sorted(r.key for r in table.rows("s", wanted)) == keys[:20]
    assert [r.get("N") for r in table.rows("other", ["o0001"])] == [-1]  # one key: a point read
    assert table.rows("s", ["o0001"]) == [] and table.rows("s", ["o9999", "o9999"]) == []


# -- MessageQueue ----------------------------------------------------------------------------
@pytest.fixture
def queue(backend: AppStorage) -> MessageQueue:
    return backend.queue(fresh_name("q"))


def test_a_missing_queue_holds_nothing_and_refuses_messages(queue: MessageQueue) -> None:
    assert queue.receive(5, 30) == [] and queue.peek(5) == []
    with pytest.raises(StorageUnavailable):
        queue.send("lost")
    with pytest.raises(NotFound):
        queue.approximate_count()
    queue.create_if_missing()
    queue.create_if_missing()
    assert queue.approximate_count() == 0


def test_a_received_message_is_hidden_until_released_and_deleted_by_its_latest_receipt(
    queue: MessageQueue,
) -> None:
    queue.create_if_missing()
    queue.send("a")
    queue.send("b")
    peeked = queue.peek(5)
    assert sorted(m.body for m in peeked) == ["a", "b"] and all(not m.receipt for m in peeked)
    assert all(m.inserted is not None for m in peeked)
    first = queue.receive(1, 60)
    assert len(first) == 1 and first[0].receipt
    (other,) = queue.peek(5)  # the received one is invisible now
    assert other.body != first[0].body
    second = queue.receive(5, 60)
    assert [m.body for m in second] == [other.body] and queue.receive(5, 60, retry=False) == []
    assert queue.approximate_count() == 2  # invisible messages still count
    stale = first[0].receipt
    queue.hide(first[0], 0)  # visible again at once, under a new receipt
    assert first[0].receipt != stale and [m.body for m in queue.peek(5)] == [first[0].body]
    with pytest.raises(VaultError):  # Azure: 400 PopReceiptMismatch
        queue.delete(QueuedMessage(first[0].id, first[0].body, stale))
    queue.delete(first[0])
    queue.delete(second[0], retry=False)  # one attempt (a writer pacing its own retries)
    with pytest.raises(NotFound):
        queue.hide(second[0], 0, retry=False)
    assert queue.peek(5) == [] and queue.approximate_count() == 0


def test_a_message_sent_for_later_is_not_delivered_before_then(queue: MessageQueue) -> None:
    queue.create_if_missing()
    queue.send("later", visible_in=60)
    assert queue.peek(5) == [] and queue.receive(5, 30) == [] and queue.approximate_count() == 1


def test_a_sent_message_is_held_by_its_sender_and_receives_count(queue: MessageQueue) -> None:
    """The writer re-sends a batch that went around before as a fresh message it holds at once
    (dequeue count 0 again): the send's receipt hides and deletes it like a received one's."""
    queue.create_if_missing()
    sent = queue.send("held", visible_in=60)
    assert sent.body == "held" and sent.receipt and sent.dequeue_count == 0
    queue.hide(sent, 0)
    (first,) = queue.receive(5, 60)
    assert first.id == sent.id and first.dequeue_count == 1
    queue.hide(first, 0)
    (again,) = queue.receive(5, 60)
    assert again.dequeue_count == 2 and queue.peek(5) == []
    queue.delete(again)
    assert queue.approximate_count() == 0


# -- BlobStore -------------------------------------------------------------------------------
@pytest.fixture
def blobs(backend: AppStorage) -> BlobStore:
    return backend.blob_container(fresh_name("c"))


def test_a_blob_is_written_once_read_back_and_deleted_at_best_effort(blobs: BlobStore) -> None:
    blobs.create_if_missing()
    blobs.create_if_missing()
    assert blobs.download("s/b/1.records") is None
    blobs.upload_new("s/b/1.records", b"first")
    with pytest.raises(VaultError):
        blobs.upload_new("s/b/1.records", b"second")
    blobs.upload_new("s/b/2.records", b"")
    assert blobs.download("s/b/1.records") == b"first" and blobs.download("s/b/2.records") == b""
    blobs.delete_many(["s/b/1.records", "s/b/never", "s/b/2.records"])
    assert blobs.download("s/b/1.records") is None and blobs.download("s/b/2.records") is None


def test_an_owner_blob_has_one_holder_at_a_time(blobs: BlobStore) -> None:
    blobs.create_if_missing()
    owner = blobs.lease_blob("owners/0-q")
    mine, theirs = str(uuid.uuid4()), str(uuid.uuid4())
    lease = owner.acquire(15, mine)  # the blob is created for its first holder
    assert lease is not None and lease.id == mine
    assert owner.acquire(15, theirs) is None
    again = owner.acquire(15, mine)  # the same holder again: still its lease
    assert again is not None and again.id == mine
    lease.renew()
    lease.release()
    taken = owner.acquire(15, theirs)
    assert taken is not None and taken.id == theirs
    assert owner.acquire(15, mine) is None
    taken.release()


def test_an_owner_blob_tells_others_when_its_holder_last_renewed(blobs: BlobStore) -> None:
    blobs.create_if_missing()
    owner = blobs.lease_blob(f"owners/{uuid.uuid4().hex[:8]}")
    assert owner.renewed_ms() is None  # no blob yet
    lease = owner.acquire(15, str(uuid.uuid4()))
    assert lease is not None and owner.renewed_ms() is None
    owner.mark_renewed(lease, 1_764_000_000_123)
    assert owner.renewed_ms() == 1_764_000_000_123
    lease.release()
    taken = owner.acquire(15, str(uuid.uuid4()))
    assert taken is not None
    with pytest.raises(LeaseLost):  # only its holder writes it
        owner.mark_renewed(lease, 1_764_000_000_456)
    assert owner.renewed_ms() == 1_764_000_000_123
    taken.release()


# -- AsyncReads (a long poll's and /health's reads) and a read SAS ---------------------------------
def test_the_async_reads_see_commit_records_queue_lengths_and_missing_streams(
    backend: AppStorage, stream: str
) -> None:
    vault = Vault(backend).ensure()
    write(vault, stream, batches=1, per_batch=3)
    queue = backend.queue(fresh_name("q"))
    queue.create_if_missing()
    queue.send("one")
    queue.send("two")
    state = vault.blob(stream).state()

    async def read() -> tuple[CommitState, dict[str, CommitState], int]:
        reads = Services(load_settings({})).async_reads(backend)
        try:
            with pytest.raises(StreamNotFound):
                await reads.commit_state(vault.container_name, fresh_name("missing-"))
            return (
                await reads.commit_state(vault.container_name, stream),
                await reads.commit_states(vault.container_name, 100_000),
                await reads.queue_length(queue.name),
            )
        finally:
            await close_async_clients()  # this loop ends with the test; the clients' sessions with it

    one, every, length = asyncio.run(read())
    assert (one.committed, one.count, one.etag) == (state.committed, state.count, state.etag)
    assert every[stream].committed == state.committed and length == 2


def test_a_read_sas_is_read_only_for_one_blob_from_start_to_expiry(backend: AppStorage) -> None:
    start = datetime(2026, 1, 2, 3, 4, 5, 600_000, tzinfo=timezone.utc)
    url, sas = backend.read_sas("streams", "s-1", start=start, expiry=start + timedelta(minutes=15))
    fields = dict(parse_qsl(sas))
    assert url.endswith("/streams/s-1")
    assert (fields["sp"], fields["sr"]) == ("r", "b")
    assert (fields["st"], fields["se"]) == ("2026-01-02T03:04:05Z", "2026-01-02T03:19:05Z")


# -- Source: where a consumer's pages come from ---------------------------------------------------
@pytest.fixture(params=["api", "direct"])
def source_for(request: pytest.FixtureRequest, vault_host: HostProcess) -> Iterator[Callable[[str], Source]]:
    with ApiClient(vault_host.url, vault_host.key) as api:
        if request.param == "api":
            yield lambda s: ApiSource(api, s, page_size=50)
        else:
            yield lambda s: DirectSource(s, lambda: api.access(s), page_size=50)


def test_a_source_pages_scans_and_seeks(
    source_for: Callable[[str], Source], vault: Vault, stream: str
) -> None:
    written = write(vault, stream, batches=3, per_batch=40)
    source = source_for(stream)
    try:
        assert source.committed() == written[-1].next_offset
        page = source.read(0)
        assert page.messages == written[:50] and page.next_offset == written[50].offset
        assert list(source.scan(written[10].offset, written[100].offset)) == written[10:100]
        assert source.seek_time(written[0].timestamp) == 0
        assert source.seek_time(written[-1].timestamp + 1) == written[-1].next_offset
    finally:
        source.close()


def test_a_source_waits_at_the_tail_then_answers_empty(
    source_for: Callable[[str], Source], vault: Vault, stream: str
) -> None:
    written = write(vault, stream, batches=1, per_batch=2)
    source = source_for(stream)
    try:
        started = time.monotonic()
        page = source.read(written[-1].next_offset, wait=0.5)
        assert page.messages == [] and page.next_offset == written[-1].next_offset
        assert 0.4 <= time.monotonic() - started < 5
    finally:
        source.close()


def test_a_source_of_a_missing_stream_is_stream_not_found(
    source_for: Callable[[str], Source], stream: str
) -> None:
    with pytest.raises(StreamNotFound):
        source_for(stream).committed()
