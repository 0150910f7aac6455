"""The app's logic in process, on a memory account: staging, claim checks, the writer function
(drain, append, hand-back, poison), batch status, poison replay, the handlers' read paths and
formats and access decisions, the long polls of a read and of a POST, and a runtime's close.

The same vault_app code as in the Function App, over :mod:`vault_core.memory` (which passes the
queue, blob, page blob and table contracts of tests/test_contracts.py): milliseconds per test, no
host process. The HTTP handlers are called in process too (status codes, JSON errors, access
decisions), on a runtime of their own. What only a real host proves (routing, the trigger's
retries and maxDequeueCount, crashes, timeouts, real concurrency) stays in tests/test_app.py,
tests/test_poison.py and the fault tests; tests/README.md says which layer proves what.
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
import shutil
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from itertools import accumulate
from typing import Any
from urllib.parse import unquote

import pytest
from test_app import BAD_POSTS, BAD_READS

from vault_app import api, open_writers, writer_fn
from vault_app.batches import COMMITTED, REJECTED, STAGED, IdempotencyMismatch
from vault_app.claimcheck import claim_name
from vault_app.config import load_settings
from vault_app.envelope import INLINE_LIMIT, REFRESH_LIMIT, encode_claim, encode_messages, identify
from vault_app.http import Request, Response
from vault_app.instance import INSTANCE_ID_SETTING, Instance, lock_directory
from vault_app.open_writers import OWNER_BLOB_PREFIX, OpenWriters, Owner
from vault_app.poison import PAGE, Selector, list_poison, replay
from vault_app.runtime import Runtime
from vault_app.services import Services, StagingQueue
from vault_app.staging import Stager
from vault_app.writer_fn import StagingMessage, write_staged
from vault_client.results import offset_in_pieces
from vault_core.clock import ManualClock
from vault_core.errors import StreamLeased, StreamNotFound
from vault_core.memory import MemoryAccount
from vault_core.pagelog import CommittedBatch
from vault_core.recordformat import HEADER_SIZE, NewMessage, encode
from vault_core.stagedunits import staged_units
from vault_core.writer import Batch, WriterSettings

STREAM = "orders"
NOW_MS = 1_750_000_000_000


def memory_runtime(account: MemoryAccount) -> Runtime:
    """A runtime of its own on one memory account (vault and staging alike), one staging queue."""
    runtime = Runtime(Services(load_settings({"VAULT_STAGING_QUEUES": "1"}), connect=lambda _name: account))
    runtime.services.ensure()
    return runtime


@pytest.fixture
def runtime() -> Iterator[Runtime]:
    runtime = memory_runtime(MemoryAccount())
    yield runtime
    runtime.close()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def clocked_runtime(clock: ManualClock) -> Iterator[Runtime]:
    """:func:`runtime` on a memory account whose time is ``clock``'s."""
    runtime = memory_runtime(MemoryAccount(clock))
    yield runtime
    runtime.close()


@pytest.fixture
def services(runtime: Runtime) -> Services:
    return runtime.services


@pytest.fixture
def queue(services: Services) -> StagingQueue:
    return services.queue_for(STREAM)


def stage(services: Services, batch_id: str, values: list[str], stream: str = STREAM) -> str:
    status = Stager(services, clock=lambda: NOW_MS).stage(stream, batch_id, messages(values))
    assert status.status == STAGED
    return batch_id


def messages(values: list[str]) -> list[NewMessage]:
    return [NewMessage(v.encode(), "k") for v in values]


def run_trigger(runtime: Runtime, queue: StagingQueue) -> bool:
    """What the Functions host does once: receive one message, invoke the writer with it, and
    delete it when the invocation succeeds. False if the queue had nothing visible."""
    received = queue.staging.receive(1, 60)
    if not received:
        return False
    m = received[0]
    write_staged(runtime, queue, StagingMessage(m.id, m.body, 1, m.receipt))
    queue.staging.delete(m)
    return True


def values(services: Services, stream: str = STREAM) -> list[str]:
    return [m.value.decode() for m in services.vault.reader.scan(stream)]


def test_a_staged_batch_is_committed_once_and_its_status_follows_it(
    runtime: Runtime, services: Services, queue: StagingQueue
) -> None:
    stage(services, "b1", ["a", "b"])
    status = services.batch_table.status(STREAM, "b1")
    assert status is not None and status.status == STAGED
    assert run_trigger(runtime, queue) and not run_trigger(runtime, queue)
    assert values(services) == ["a", "b"]
    status = services.batch_table.status(STREAM, "b1")
    assert status is not None and status.status == COMMITTED and status.first_offset == 0


def test_a_retried_batch_is_answered_as_then_and_other_messages_under_its_id_are_refused(
    runtime: Runtime, services: Services, queue: StagingQueue
) -> None:
    stage(services, "b1", ["a"])
    again = Stager(services).stage(STREAM, "b1", messages(["a"]))
    assert again.status == STAGED and queue.staging.approximate_count() == 1  # not staged twice
    with pytest.raises(IdempotencyMismatch):
        Stager(services).stage(STREAM, "b1", messages(["other"]))
    run_trigger(runtime, queue)
    committed = Stager(services).stage(STREAM, "b1", messages(["a"]))
    assert committed.status == COMMITTED and queue.staging.approximate_count() == 0


def test_one_invocation_drains_the_queue_and_appends_every_stream_in_batch_order(
    runtime: Runtime, services: Services, queue: StagingQueue
) -> None:
    for i in range(5):
        stage(services, f"o{i}", [f"o{i}"])
        stage(services, f"p{i}", [f"p{i}"], stream="payments")
    assert run_trigger(runtime, queue)
    assert queue.staging.approximate_count() == 0  # the drained messages are deleted after the commit
    assert values(services) == [f"o{i}" for i in range(5)]
    assert values(services, "payments") == [f"p{i}" for i in range(5)]


def test_a_rounds_streams_are_appended_side_by_side(
    runtime: Runtime, services: Services, queue: StagingQueue
) -> None:
    """A round takes as long as its slowest stream, not all of them in turn: here each stream's
    append waits, once committed, until every stream of the round has committed, which streams
    appended one after the other never would."""
    streams = ["orders", "payments", "refunds"]
    for s in streams:
        stage(services, s, [s], stream=s)
    every_stream_committed = threading.Barrier(len(streams), timeout=10)

    def meet(point: str) -> None:
        if point == "after-commit":
            every_stream_committed.wait()

    runtime.fault_hook = meet
    assert run_trigger(runtime, queue)
    assert [values(services, s) for s in streams] == [[s] for s in streams]
    assert queue.staging.approximate_count() == 0


@pytest.mark.parametrize("rounds_seconds", [writer_fn.DRAIN_ROUNDS_SECONDS, 0.0])
def test_batches_staged_while_the_writer_appends_are_drained_in_its_next_round(
    runtime: Runtime,
    services: Services,
    queue: StagingQueue,
    monkeypatch: pytest.MonkeyPatch,
    rounds_seconds: float,
) -> None:
    """While a round's drain found batches, the invocation drains again once it has appended
    them, rather than returning to the host to be triggered again; for DRAIN_ROUNDS_SECONDS."""
    monkeypatch.setattr(writer_fn, "DRAIN_ROUNDS_SECONDS", rounds_seconds)
    later = iter(["o2", "o3"])

    def stage_more(point: str) -> None:
        if point == "after-commit" and (b := next(later, None)):
            stage(services, b, [b])

    stage(services, "o0", ["o0"])
    stage(services, "o1", ["o1"])
    runtime.fault_hook = stage_more
    assert run_trigger(runtime, queue)
    if rounds_seconds:  # o2 staged during round 1, o3 during round 2; round 3 found none
        assert values(services) == ["o0", "o1", "o2", "o3"] and queue.staging.approximate_count() == 0
    else:
        assert values(services) == ["o0", "o1"] and queue.staging.approximate_count() == 1


def test_a_large_batch_travels_as_a_claim_check_blob_deleted_after_its_commit(
    runtime: Runtime, services: Services, queue: StagingQueue
) -> None:
    rng = random.Random(5)  # values no codec makes smaller: inline they would not fit either
    big = [rng.randbytes(1000).hex() + str(i) for i in range(3 * INLINE_LIMIT // 2000)]
    stage(services, "big", big)
    (staged,) = queue.staging.peek(1)
    claim = json.loads(staged.body)["claim"]
    assert services.claimcheck.download(claim) is not None
    run_trigger(runtime, queue)
    assert values(services) == big
    assert services.claimcheck.download(claim) is None


def events(n: int, tag: str) -> list[str]:
    """JSON events of ~100 bytes, each other: what a codec meets in a real batch."""
    rng = random.Random(tag)
    return [json.dumps({"tag": tag, "i": i, "id": rng.getrandbits(64), "x": rng.random()}) for i in range(n)]


def test_a_large_batch_is_staged_as_the_compressed_units_its_writer_copies(
    runtime: Runtime, services: Services, queue: StagingQueue
) -> None:
    """Format 2 (the default): the HTTP tier compresses, the writer copies the units as they are."""
    big = events(3000, "big")  # a full unit of 2,048 and a unit of 952: both copied
    stage(services, "big", big)
    pointer = json.loads(queue.staging.peek(1)[0].body)
    claim = pointer["claim"]
    assert pointer["v"] == 2  # a writer that knows only records refuses it (ARCHITECTURE.md §2.2)
    body = services.claimcheck.download(claim)
    assert body is not None and body[8] == 2  # units (FORMAT.md §6.8)
    staged = staged_units(body)
    assert [u.size for u in staged.units] == [2048, 952]
    assert len(body) < 0.5 * len(encode(messages(big), 0, NOW_MS))  # compressed where it is staged
    run_trigger(runtime, queue)
    assert values(services) == big
    log = services.vault.blob(STREAM).read(0, services.vault.reader.state(STREAM).committed)
    for unit in staged.units:  # each stored byte of the log's units is the staged unit's
        assert bytes(unit.stored) in log
    assert services.claimcheck.download(claim) is None


@pytest.mark.parametrize(("staged_as", "written_as"), [(1, 2), (2, 1)])
def test_a_claim_check_staged_in_one_format_is_written_by_a_writer_of_the_other(
    staged_as: int, written_as: int
) -> None:
    """The format setting changed while a batch waited: the writer takes the body it finds."""
    account = MemoryAccount()
    runtimes = [
        Runtime(
            Services(
                load_settings({"VAULT_STAGING_QUEUES": "1", "VAULT_RECORD_FORMAT": str(fmt)}),
                connect=lambda _name: account,
            )
        )
        for fmt in (staged_as, written_as)
    ]
    try:
        runtimes[0].services.ensure()
        batch = [*messages(events(1500, "switch")), NewMessage(b"with a binary key", b"\x00")]
        Stager(runtimes[0].services, clock=lambda: NOW_MS).stage(STREAM, "b", batch)
        writer = runtimes[1].services
        assert json.loads(writer.queue_for(STREAM).staging.peek(1)[0].body)["v"] == staged_as
        run_trigger(runtimes[1], writer.queue_for(STREAM))
        got = list(writer.vault.reader.scan(STREAM))
        assert [(m.key, m.value) for m in got] == [(m.key_bytes()[0], m.value) for m in batch]
        assert writer.vault.reader.state(STREAM).format == written_as
    finally:
        for r in runtimes:
            r.close()


def test_a_batch_over_the_inline_limit_whose_units_fit_travels_inline_as_units(
    runtime: Runtime, services: Services, queue: StagingQueue
) -> None:
    """1,000 events of ~100 B: 140 KB as inline messages, ~45 KB as compressed units: no blob."""
    batch = events(1000, "inline")
    stage(services, "inline", batch)
    (staged,) = queue.staging.peek(1)
    doc = json.loads(staged.body)
    assert (doc["v"], doc["n"], "claim" in doc) == (2, 1000, False) and len(staged.body) <= INLINE_LIMIT
    units = staged_units(base64.b64decode(doc["u"]))
    assert [u.size for u in units.units] == [1000]
    run_trigger(runtime, queue)
    assert values(services) == batch
    log = services.vault.blob(STREAM).read(0, services.vault.reader.state(STREAM).committed)
    assert bytes(units.units[0].stored) in log  # copied as it is
    status = services.batch_table.status(STREAM, "inline")
    assert status is not None and status.status == COMMITTED and status.count == 1000


def test_a_format_1_app_sends_the_same_batch_as_a_claim_check_of_records() -> None:
    runtime = Runtime(
        Services(
            load_settings({"VAULT_STAGING_QUEUES": "1", "VAULT_RECORD_FORMAT": "1"}),
            connect=lambda _name: MemoryAccount(),
        )
    )
    try:
        runtime.services.ensure()
        stage(runtime.services, "b", events(1000, "inline"))
        doc = json.loads(runtime.services.queue_for(STREAM).staging.peek(1)[0].body)
        assert doc["v"] == 1 and "claim" in doc
    finally:
        runtime.close()


@pytest.mark.parametrize("travels", ["inline", "claim check"])
def test_damaged_units_reject_their_batch_and_the_stream_keeps_flowing(
    runtime: Runtime, services: Services, queue: StagingQueue, travels: str
) -> None:
    """A unit whose checksum fails (or that does not open) is never copied into the log."""
    stage(services, "big", events(1000 if travels == "inline" else 3000, "damaged"))
    (staged,) = queue.staging.peek(1)
    doc = json.loads(staged.body)
    if travels == "inline":
        body = bytearray(base64.b64decode(doc["u"]))
        body[len(body) // 2] ^= 0x10
        doc["u"] = base64.b64encode(body).decode()
        queue.staging.delete(queue.staging.receive(1, 60)[0])
        queue.staging.send(json.dumps(doc))
    else:
        body = bytearray(services.claimcheck.download(doc["claim"]) or b"")
        body[len(body) // 2] ^= 0x10
        services.claimcheck.delete_many([doc["claim"]])
        services.claimcheck.upload_new(doc["claim"], bytes(body))
    stage(services, "ok", ["still flowing"])
    while run_trigger(runtime, queue):
        pass
    status = services.batch_table.status(STREAM, "big")
    assert status is not None and status.status == REJECTED and "corrupt" in (status.reason or "")
    assert values(services) == ["still flowing"] and queue.poison.approximate_count() == 1
    [listed] = list_poison(services, Selector()).messages
    if travels == "inline":  # the envelope itself does not verify: listed with why
        assert listed.parked.batch_id == "big" and "inline batch is corrupt" in (listed.parked.error or "")
    else:
        assert (listed.parked.count, listed.parked.claim_check) == (3000, True)


def test_a_redelivered_batch_is_appended_once_even_after_its_claim_check_blob_is_gone(
    runtime: Runtime, services: Services, queue: StagingQueue
) -> None:
    stage(services, "small", ["s"])
    stage(services, "big", ["z" * INLINE_LIMIT])
    redeliveries = [m.body for m in queue.staging.peek(5)]
    while run_trigger(runtime, queue):
        pass
    for body in redeliveries:  # a writer that died after its commit, before deleting the message
        queue.staging.send(body)
    while run_trigger(runtime, queue):
        pass
    assert values(services) == ["s", "z" * INLINE_LIMIT]
    assert queue.poison.approximate_count() == 0


def test_unwritable_batches_go_to_poison_with_a_reason_and_the_stream_keeps_flowing(
    runtime: Runtime, services: Services, queue: StagingQueue
) -> None:
    missing = json.dumps(
        {
            "v": 1,
            "id": "lost-claim",
            "stream": STREAM,
            "ts": 1,
            "claim": claim_name(STREAM, "lost-claim"),
            "n": 1,
        }
    )
    queue.staging.send("this is not an envelope")
    queue.staging.send(missing)
    stage(services, "ok", ["still flowing"])
    while run_trigger(runtime, queue):
        pass
    assert sorted(m.body for m in queue.poison.peek(10)) == sorted([missing, "this is not an envelope"])
    status = services.batch_table.status(STREAM, "lost-claim")
    assert status is not None and status.status == REJECTED and "claim-check blob" in (status.reason or "")
    assert values(services) == ["still flowing"]


class WriterDied(BaseException):
    """The writer's process killed in the middle of an invocation."""


def die_after_drain(point: str) -> None:
    """A runtime's fault hook: the writer dies once its drain is in."""
    if point == "after-drain":
        raise WriterDied


def test_batches_drained_by_writers_that_die_are_resent_fresh_and_never_counted_towards_poison(
    clock: ManualClock, clocked_runtime: Runtime
) -> None:
    """A drain's receive counts towards maxDequeueCount like the host's own: a batch drained by
    two writers that were killed would reach poison through no fault of its own. From its second
    receive on, a drained batch goes on as a fresh copy (dequeue count 0), up to REFRESH_LIMIT."""
    runtime = clocked_runtime
    services, queue = runtime.services, runtime.services.queue_for(STREAM)
    for b in ("b0", "b1", "b2"):
        stage(services, b, [b])
    runtime.fault_hook = die_after_drain
    for _death in range(2 * REFRESH_LIMIT + 1):  # a fresh copy's next drain is its first receive
        with pytest.raises(WriterDied):
            run_trigger(runtime, queue)  # b0 the trigger, b1 and b2 drained
        clock.advance(61_000)  # every message visible again
    counts = {json.loads(m.body)["id"]: json.loads(m.body).get("rf", 0) for m in queue.staging.peek(5)}
    assert counts == {"b0": 0, "b1": REFRESH_LIMIT, "b2": REFRESH_LIMIT}  # the trigger is the host's
    runtime.fault_hook = None
    while run_trigger(runtime, queue):
        pass
    assert values(services) == ["b0", "b1", "b2"] and queue.staging.approximate_count() == 0
    assert queue.poison.approximate_count() == 0


def test_batches_a_writer_drained_just_before_it_died_are_back_within_the_receives_short_visibility(
    clock: ManualClock, clocked_runtime: Runtime
) -> None:
    """Killed before its drain's reply is in, a writer leaves no receipts for its replacement: the
    batches come back when the receive's own visibility ends, 5 s, not DRAIN_VISIBILITY's 15."""
    runtime = clocked_runtime
    services, queue = runtime.services, runtime.services.queue_for(STREAM)
    for b in ("b0", "b1"):
        stage(services, b, [b])
    runtime.fault_hook = die_after_drain
    with pytest.raises(WriterDied):
        run_trigger(runtime, queue)  # b0 the trigger (the host's), b1 drained
    clock.advance(writer_fn.DRAIN_RECEIVE_VISIBILITY * 1000 - 1)
    assert queue.staging.peek(5) == []
    clock.advance(2)
    assert [json.loads(m.body)["id"] for m in queue.staging.peek(5)] == ["b1"]


def test_a_batch_whose_stream_another_writer_holds_goes_back_as_a_fresh_message_for_later(
    runtime: Runtime, services: Services, queue: StagingQueue
) -> None:
    stage(services, "b1", ["first"])
    run_trigger(runtime, queue)  # the stream exists
    runtime.writers.close_all()
    services.vault.blob(STREAM).acquire_lease(60)  # another writer
    stage(services, "b2", ["second"])
    run_trigger(runtime, queue)
    assert queue.staging.approximate_count() == 1 and queue.staging.peek(1) == []  # hidden for a while
    assert queue.poison.approximate_count() == 0 and values(services) == ["first"]


def test_a_steered_batch_whose_stream_another_writer_holds_goes_back_to_the_streams_home_queue() -> None:
    """Its home queue's owner most likely holds the stream: there it is appended in the next
    round, where this queue's writer would only meet the same lease again."""
    account = MemoryAccount()
    runtime = Runtime(Services(load_settings({"VAULT_STAGING_QUEUES": "2"}), connect=lambda _name: account))
    try:
        services = runtime.services
        services.ensure()
        home = services.queue_for(STREAM)
        (other,) = [q for q in services.queues if q is not home]
        stage(services, "b1", ["first"])
        run_trigger(runtime, home)  # the stream exists
        runtime.writers.close_all()
        services.vault.blob(STREAM).acquire_lease(60)  # another writer
        stage(services, "b2", ["steered"])
        (m,) = home.staging.receive(1, 60)  # as if steering had sent it to the other queue
        other.staging.send(m.body)
        home.staging.delete(m)
        run_trigger(runtime, other)
        assert other.staging.approximate_count() == 0 and home.staging.approximate_count() == 1
        assert values(services) == ["first"]
    finally:
        runtime.close()


def test_a_queue_another_instance_owns_gets_its_batch_back_at_once(
    runtime: Runtime, services: Services, queue: StagingQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer_fn, "NOT_OWNER_PAUSE_SECONDS", 0)
    owner = services.claimcheck.lease_blob(f"{OWNER_BLOB_PREFIX}{queue.account}/{queue.name}")
    assert owner.acquire(60, "another-instance") is not None
    stage(services, "b1", ["a"])
    run_trigger(runtime, queue)
    assert [json.loads(m.body)["id"] for m in queue.staging.peek(5)] == ["b1"]  # visible to the owner
    assert services.vault.index.committed_batches(STREAM, ["b1"]) == {}


def test_a_queue_whose_dead_owners_lease_runs_out_is_taken_over_as_it_runs_out(
    runtime: Runtime, services: Services, queue: StagingQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An owner writes down each renewal of its lease: another instance that gets a batch of the
    queue when the lease is due to run out waits for that moment and takes the queue over then,
    rather than at a poll up to a pass's pause later; one not due yet is passed on at once."""
    monkeypatch.setattr(open_writers, "WRITER_LEASE_SECONDS", 1)  # as if 15 s had nearly passed
    owner = services.claimcheck.lease_blob(f"{OWNER_BLOB_PREFIX}{queue.account}/{queue.name}")
    lease = owner.acquire(1, "an-instance-that-died")
    assert lease is not None
    renewed = time.time()
    owner.mark_renewed(lease, int(renewed * 1000))
    assert runtime.writers.own_when_free(services, queue, within=0.5) is None  # not due: no wait
    assert runtime.writers.own_when_free(services, queue, within=2) is Owner.THIS_PROCESS
    assert 1.0 <= time.time() - renewed < 1.0 + open_writers.TAKEOVER_WINDOW_SECONDS
    runtime.writers.done(queue)


def test_a_dead_owners_stream_lease_is_broken_by_the_instance_that_took_its_queue_as_it_ran_out(
    runtime: Runtime, services: Services, queue: StagingQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dead owner's last append renewed the stream's lease after its last owner renewal: its
    batches are appended at once, not handed back until that lease runs out too."""
    stage(services, "b0", ["first"])
    run_trigger(runtime, queue)  # the stream exists
    runtime.writers.close_all()
    monkeypatch.setattr(open_writers, "WRITER_LEASE_SECONDS", 1)  # as if 15 s had nearly passed
    owner = services.claimcheck.lease_blob(f"{OWNER_BLOB_PREFIX}{queue.account}/{queue.name}")
    lease = owner.acquire(1, "an-instance-that-died")
    assert lease is not None
    owner.mark_renewed(lease, time.time_ns() // 1_000_000)
    services.vault.blob(STREAM).acquire_lease(60, "an-instance-that-died")
    stage(services, "b1", ["second"])
    run_trigger(runtime, queue)
    assert values(services) == ["first", "second"] and queue.staging.approximate_count() == 0


def test_a_queue_a_live_sibling_process_owns_gets_its_batch_back_at_once_and_without_the_pause(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Azure sends a queue's invocations to the workers of an instance in turn (§3.7): one that
    does not own the queue passes the batch on and returns at once, since the host runs one
    invocation of a queue per instance and the owner gets the next one in its turn."""
    monkeypatch.setattr(writer_fn, "NOT_OWNER_PAUSE_SECONDS", 600)  # paused: the join times out
    env = {"VAULT_STAGING_QUEUES": "1", INSTANCE_ID_SETTING: f"sibling-{uuid.uuid4().hex}"}
    account = MemoryAccount()
    runtime = Runtime(Services(load_settings(env), connect=lambda _name: account))
    services = runtime.services
    services.ensure()
    queue = services.queue_for(STREAM)
    sibling = Instance.from_env(env).try_lock(f"{OWNER_BLOB_PREFIX}{queue.account}/{queue.name}")
    try:
        assert sibling is not None
        stage(services, "b1", ["a"])
        invocation = threading.Thread(target=run_trigger, args=(runtime, queue), daemon=True)
        invocation.start()
        invocation.join(30)
        assert not invocation.is_alive(), "the invocation paused"
        assert [json.loads(m.body)["id"] for m in queue.staging.peek(5)] == ["b1"]  # for the owner
        assert services.vault.index.committed_batches(STREAM, ["b1"]) == {}
    finally:
        if sibling is not None:
            sibling.release()
        runtime.close()
        shutil.rmtree(lock_directory(env[INSTANCE_ID_SETTING]), ignore_errors=True)


def test_a_writer_opened_ahead_serves_the_next_append_and_one_no_append_took_stays_open_or_lets_go(
    runtime: Runtime, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A queue's owner opens its trigger's stream while it drains (§3.7): the append takes that
    writer rather than opening another; one left over is kept like any open writer, and one
    whose open failed (the stream leased elsewhere) gives its lock up."""
    writers = runtime.writers
    opened: list[str] = []
    real_open = OpenWriters._open_writer

    def counted_open(*args: Any) -> Any:
        opened.append(args[2])
        return real_open(*args)

    monkeypatch.setattr(OpenWriters, "_open_writer", staticmethod(counted_open))
    writers.open_ahead(services, "ahead")
    writers.open_ahead(services, "ahead")  # opening already: nothing more
    writers.append(services, "ahead", [Batch(messages(["a"]), "b1")])
    writers.keep_opened("ahead")  # the append took it: nothing left to keep
    writers.open_ahead(services, "ahead")  # open here: nothing to do
    writers.open_ahead(services, "unused")
    writers.keep_opened("unused")
    assert opened == ["ahead", "unused"] and sorted(writers._open) == ["ahead", "unused"]
    elsewhere = services.vault.blob("elsewhere")
    elsewhere.create_if_missing()
    elsewhere.acquire_lease(60, "another-instance")
    writers.open_ahead(services, "elsewhere")
    writers.keep_opened("elsewhere")
    assert "elsewhere" not in writers._open and "elsewhere" not in writers._streams
    with pytest.raises(StreamLeased):
        writers.append(services, "elsewhere", [Batch(messages(["b"]), "b2")])
    assert values(services, "ahead") == ["a"]


def test_an_append_whose_open_ahead_met_a_lease_looks_again(runtime: Runtime, services: Services) -> None:
    """A new owner opens a dead owner's stream while it drains, and may meet the dead owner's
    lease then; the drain can outlast that lease, so the append tries again rather than handing
    every drained batch of the stream back on the open's stale answer."""
    blob = services.vault.blob("was-leased")
    blob.create_if_missing()
    lease = blob.acquire_lease(15, "a-dead-instance")
    runtime.writers.open_ahead(services, "was-leased")
    opening = runtime.writers._opening["was-leased"]
    with pytest.raises(StreamLeased):
        opening.result(10)
    lease.release()  # ran out during the drain
    runtime.writers.append(services, "was-leased", [Batch(messages(["c"]), "b3")])
    assert values(services, "was-leased") == ["c"]


def test_poison_is_listed_and_a_replayed_batch_is_staged_again_and_committed_once(
    runtime: Runtime, services: Services, queue: StagingQueue
) -> None:
    parked = encode_messages("parked", STREAM, NOW_MS, messages(["late"]))
    queue.poison.send(parked)
    queue.poison.send("not a batch")
    services.batch_table.reject(STREAM, "parked", "storage was down")
    listing = list_poison(services)
    assert sorted(str(m.parked.batch_id) for m in listing.messages) == ["None", "parked"]
    report = replay(services, Selector())
    assert [p.batch_id for p in report.replayed] == ["parked"] and len(report.invalid) == 1
    status = services.batch_table.status(STREAM, "parked")
    assert status is not None and status.status == STAGED
    assert [m.body for m in queue.poison.peek(5)] == ["not a batch"]  # never replayed, still listed
    while run_trigger(runtime, queue):
        pass
    assert values(services) == ["late"] and replay(services).replayed == []


def test_a_replayed_batch_without_a_status_row_gets_none(
    runtime: Runtime, services: Services, queue: StagingQueue
) -> None:
    """A row without the batch's digest would make a producer's retry of it look like another batch."""
    queue.poison.send(encode_messages("rowless", STREAM, NOW_MS, messages(["v"])))
    [listed] = list_poison(services, Selector(batch_id="rowless")).messages
    assert listed.status is None
    assert [p.batch_id for p in replay(services, Selector(batch_id="rowless")).replayed] == ["rowless"]
    assert services.batches.get("rowless", STREAM) is None
    while run_trigger(runtime, queue):
        pass
    status = services.batch_table.status(STREAM, "rowless")
    assert status is not None and status.status == COMMITTED
    assert services.batches.get("rowless", STREAM) is None


def test_a_replayed_batch_that_still_cannot_be_written_returns_to_poison_rejected(
    runtime: Runtime, services: Services, queue: StagingQueue
) -> None:
    queue.poison.send(encode_claim("gone", STREAM, NOW_MS, claim_name(STREAM, "gone"), 3))
    services.batch_table.reject(STREAM, "gone", "first failure")
    assert len(replay(services).replayed) == 1 and queue.poison.peek(5) == []
    while run_trigger(runtime, queue):  # the blob is gone: the writer fails it again
        pass
    [back] = list_poison(services).messages
    assert back.parked.batch_id == "gone" and back.parked.claim_check and back.parked.count == 3
    assert back.status is not None and back.status.status == REJECTED
    assert "claim-check blob" in (back.status.reason or "")


def test_units_an_earlier_writer_parked_in_poison_are_appended_once_when_replayed(
    runtime: Runtime, services: Services, queue: StagingQueue
) -> None:
    """docs/OPERATING.md, "Deploying a release over a running one": a writer that knows only
    envelope version 1 refuses units to poison and rejects the batch; replayed after the rollout,
    the batch is appended once."""
    batch = events(1000, "parked")
    stage(services, "parked", batch)  # inline units, envelope version 2
    parked = queue.staging.receive(1, 60)[0]
    queue.poison.send(parked.body)  # what the earlier writer does with it
    queue.staging.delete(parked)
    services.batch_table.reject(STREAM, "parked", "unknown staging envelope version 2")
    assert [p.batch_id for p in replay(services).replayed] == ["parked"]
    while run_trigger(runtime, queue):
        pass
    assert values(services) == batch and queue.poison.approximate_count() == 0
    status = services.batch_table.status(STREAM, "parked")
    assert status is not None and status.status == COMMITTED


def test_the_stream_filter_replays_only_that_streams_batches_even_past_one_page(
    runtime: Runtime, services: Services, queue: StagingQueue
) -> None:
    for i in range(PAGE + 2):  # more than one page ahead of the wanted ones
        queue.poison.send(encode_messages(f"o{i}", "other", NOW_MS, messages([f"o{i}"])))
    for i in range(2):
        queue.poison.send(encode_messages(f"w{i}", STREAM, NOW_MS, messages([f"w{i}"])))
    listing = list_poison(services)
    assert listing.queues[0].truncated and listing.queues[0].peeked == PAGE
    report = replay(services, Selector(stream=STREAM))
    assert sorted(str(p.batch_id) for p in report.replayed) == ["w0", "w1"] and report.complete
    assert report.skipped == PAGE + 2 and queue.poison.approximate_count() == PAGE + 2
    while run_trigger(runtime, queue):
        pass
    assert sorted(values(services)) == ["w0", "w1"]
    with pytest.raises(StreamNotFound):  # nothing of the other stream moved
        values(services, "other")


# -- the HTTP handlers, called in process ------------------------------------------------------
ADMIN_KEY, WRITER_KEY = "admin-key-0123456789abcdef", "writer-key-0123456789abcdef"


@pytest.fixture
def handlers() -> Iterator[Runtime]:
    """A runtime with authentication on: key ``admin`` may do anything, ``writer`` may write ``orders``."""
    runtime = handlers_runtime()
    yield runtime
    runtime.close()


def handlers_runtime(**settings: str) -> Runtime:
    """The runtime of :func:`handlers`, with more ``settings``."""
    account = MemoryAccount()
    env = {
        "VAULT_STAGING_QUEUES": "1",
        "VAULT_FUNCTION_KEYS": json.dumps({"admin": ADMIN_KEY, "writer": WRITER_KEY}),
        "VAULT_ACCESS_POLICY": json.dumps(
            {
                "grants": [
                    {"key": "admin", "allow": ["admin"], "streams": ["*"]},
                    {"key": "writer", "allow": ["write"], "streams": [STREAM]},
                ]
            }
        ),
        **settings,
    }
    runtime = Runtime(Services(load_settings(env), connect=lambda _name: account))
    runtime.services.ensure()
    return runtime


def call(
    runtime: Runtime,
    handler: Callable[[Runtime, Request], Awaitable[Response]],
    key: str | None,
    **parts: Any,
) -> tuple[int, Any]:
    headers = {"x-functions-key": key} if key else {}
    headers.update(parts.pop("headers", {}))

    async def run() -> Response:
        return await handler(runtime, Request(headers=headers, **parts))

    response = asyncio.run(run())
    body: Any = response.body
    if response.mimetype == "application/json":
        body = json.loads(response.body)
    return response.status, body


def test_the_handlers_stage_a_post_and_serve_its_status_and_messages(handlers: Runtime) -> None:
    route = {"stream": STREAM}
    body = json.dumps({"messages": [{"key": "k", "value": "hello"}, {"value": "world"}]}).encode()
    status, doc = call(handlers, api.post_messages, WRITER_KEY, method="POST", route=route, body=body)
    assert status == 202 and doc["status"] == STAGED
    queue = handlers.services.queue_for(STREAM)
    assert run_trigger(handlers, queue)
    batch = {"stream": STREAM, "id": doc["batch_id"]}
    status, found = call(handlers, api.get_stream_batch, ADMIN_KEY, method="GET", route=batch)
    assert status == 200 and found["status"] == COMMITTED and found["count"] == 2
    status, page = call(handlers, api.get_messages, ADMIN_KEY, method="GET", route=route, query={"from": "0"})
    assert status == 200 and [m["value"] for m in page["messages"]] == ["hello", "world"]
    assert page["next_offset"] == page["committed"] > 0
    ndjson = {"accept": "application/x-ndjson"}
    status, lines = call(handlers, api.get_messages, ADMIN_KEY, method="GET", route=route, headers=ndjson)
    assert status == 200 and [json.loads(line)["key"] for line in lines.splitlines()] == ["k", ""]


@pytest.mark.parametrize("record_format", [2, 1])
def test_a_write_only_producer_learns_every_offset_from_the_wait_answer(record_format: int) -> None:
    """Format 2: the answer's pieces place each message (a batch in two units here), and the
    batch's status has the same; format 1: the record sizes do, as before. No read of the stream."""
    runtime = handlers_runtime(VAULT_RECORD_FORMAT=str(record_format))
    try:
        sent = [f"{i:05d}" + "x" * 200 for i in range(2500)]  # 2,500 messages: a unit closes at 2,048
        body = json.dumps({"messages": [{"key": "k", "value": v} for v in sent]}).encode()
        queue = runtime.services.queue_for(STREAM)

        def write_once_staged() -> None:
            while not run_trigger(runtime, queue):
                time.sleep(0.01)

        async def post_and_write() -> Response:
            post = Request(
                method="POST",
                route={"stream": STREAM},
                query={"wait": "10"},
                body=body,
                headers={"x-functions-key": WRITER_KEY},
            )
            answer, _ = await asyncio.gather(
                api.post_messages(runtime, post), asyncio.to_thread(write_once_staged)
            )
            return answer

        response = asyncio.run(post_and_write())
        doc = json.loads(response.body)
        assert response.status == 200 and doc["status"] == COMMITTED
        offsets = [m.offset for m in runtime.services.vault.reader.scan(STREAM)]
        if record_format == 2:
            assert len(doc["pieces"]) == 2
            assert [offset_in_pieces(doc["pieces"], i) for i in range(len(sent))] == offsets
        else:
            assert "pieces" not in doc
            assert list(accumulate((HEADER_SIZE + 1 + len(v) for v in sent[:-1]), initial=0)) == [
                o - doc["first_offset"] for o in offsets
            ]
        batch = {"stream": STREAM, "id": doc["batch_id"]}
        assert call(runtime, api.get_stream_batch, ADMIN_KEY, method="GET", route=batch) == (200, doc)
    finally:
        runtime.close()


def test_pages_read_ahead_by_the_size_of_the_last_are_the_pages_of_plain_reads(handlers: Runtime) -> None:
    """A sequential consumer's next range is prefetched as large as its last page (not
    max_bytes); a page that needs more, here where large messages come, is read on past it."""
    rng = random.Random(7)
    sizes = [rng.choice([30, 120, 400]) if i % 700 else 60_000 for i in range(3000)]
    with handlers.services.vault.writer(STREAM) as w:
        sent = [NewMessage(rng.randbytes(n), "k") for n in sizes]
        w.append([Batch(sent[i : i + 500]) for i in range(0, 3000, 500)])
    reader = handlers.services.vault.reader
    offset, limit, max_bytes = 0, 250, 300_000
    route, query = {"stream": STREAM}, {"limit": str(limit), "max_bytes": str(max_bytes)}
    while offset < reader.state(STREAM).committed:
        query["from"] = str(offset)
        status, page = call(handlers, api.get_messages, ADMIN_KEY, method="GET", route=route, query=query)
        plain = reader.read(STREAM, offset, max_bytes=max_bytes, max_count=limit)
        assert status == 200 and [m["offset"] for m in page["messages"]] == [m.offset for m in plain.messages]
        assert page["next_offset"] == plain.next_offset
        offset = plain.next_offset


# The read formats (test_app.py kept one over real HTTP: a Range read's 206 and Content-Range).
def commit(runtime: Runtime, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """POST ``messages`` to :data:`STREAM` as the admin, let the writer commit them; their batch's status."""
    body = json.dumps({"messages": messages}).encode()
    route = {"stream": STREAM}
    status, doc = call(runtime, api.post_messages, ADMIN_KEY, method="POST", route=route, body=body)
    assert status == 202, doc
    assert run_trigger(runtime, runtime.services.queue_for(STREAM))
    batch = {"stream": STREAM, "id": doc["batch_id"]}
    status, done = call(runtime, api.get_stream_batch, ADMIN_KEY, method="GET", route=batch)
    assert status == 200 and done["status"] == COMMITTED, done
    return dict(done)


def read_page(runtime: Runtime, query: dict[str, object]) -> dict[str, Any]:
    """A JSON page of :data:`STREAM`'s messages, read as the admin."""
    route, params = {"stream": STREAM}, {k: str(v) for k, v in query.items()}
    status, page = call(runtime, api.get_messages, ADMIN_KEY, method="GET", route=route, query=params)
    assert status == 200, page
    return dict(page)


def test_ndjson_reads_carry_offsets_in_headers(handlers: Runtime) -> None:
    commit(handlers, [{"value": "n1"}, {"value": "n2"}])
    ndjson = {"accept": "application/x-ndjson"}
    answer = asyncio.run(
        handle(handlers, api.get_messages, method="GET", route={"stream": STREAM}, headers=ndjson)
    )
    lines = [json.loads(x) for x in answer.body.decode().splitlines()]
    assert answer.status == 200 and [m["value"] for m in lines] == ["n1", "n2"]
    assert answer.mimetype == "application/x-ndjson"
    assert int(answer.headers["X-Next-Offset"]) == int(answer.headers["X-Committed"])


def test_binary_values_round_trip_as_base64(handlers: Runtime) -> None:
    raw = bytes(range(256))
    key = base64.b64encode(b"\xff\x00").decode()
    value = base64.b64encode(raw).decode()
    commit(handlers, [{"value": value, "encoding": "base64", "key": key, "key_encoding": "base64"}])
    [m] = read_page(handlers, {"from": 0})["messages"]
    assert m["value_encoding"] == "base64" and base64.b64decode(m["value"]) == raw
    assert base64.b64decode(m["key"]) == b"\xff\x00"


def test_encoding_base64_returns_every_value_base64_and_keys_as_they_are(handlers: Runtime) -> None:
    """API.md: ``?encoding=base64`` is the value's encoding; a key keeps its own ``key_encoding``."""
    commit(
        handlers,
        [
            {"value": "text", "key": "k"},
            {"value": "AP8=", "encoding": "base64", "key": "/w==", "key_encoding": "base64"},
        ],
    )
    text, binary = read_page(handlers, {"from": 0, "encoding": "base64"})["messages"]
    assert (text["value_encoding"], base64.b64decode(text["value"])) == ("base64", b"text")
    assert (text["key_encoding"], text["key"]) == ("utf-8", "k")
    assert (binary["value_encoding"], base64.b64decode(binary["value"])) == ("base64", b"\x00\xff")
    assert (binary["key_encoding"], base64.b64decode(binary["key"])) == ("base64", b"\xff")
    plain, _ = read_page(handlers, {"from": 0})["messages"]
    assert (plain["value_encoding"], plain["value"]) == ("utf-8", "text")


def test_time_seeks_start_at_the_first_message_at_or_after_the_time(handlers: Runtime) -> None:
    first = commit(handlers, [{"value": "early"}])
    time.sleep(0.05)
    second = commit(handlers, [{"value": "late"}])
    assert second["timestamp"] > first["timestamp"]
    assert [m["value"] for m in read_page(handlers, {"at": second["timestamp"]})["messages"]] == ["late"]
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(first["timestamp"] / 1000 - 5)) + "Z"
    assert [m["value"] for m in read_page(handlers, {"at": iso})["messages"]] == ["early", "late"]


def test_max_bytes_smaller_than_the_next_record_answers_with_that_record(handlers: Runtime) -> None:
    commit(handlers, [{"value": "v" * 10_000}, {"value": "w"}])
    first = read_page(handlers, {"from": 0, "max_bytes": 1})
    assert [m["value"] for m in first["messages"]] == ["v" * 10_000]  # never an empty page
    second = read_page(handlers, {"from": first["next_offset"], "max_bytes": 1})
    assert [m["value"] for m in second["messages"]] == ["w"]


def test_a_record_forged_inside_a_value_cannot_be_read_as_a_message(handlers: Runtime) -> None:
    honest = commit(handlers, [{"value": "honest"}])
    at = honest["next_offset"] + HEADER_SIZE  # the next value's start
    forged = encode([NewMessage(b"never produced", "forged")], at, 1)
    commit(handlers, [{"key": "", "value": base64.b64encode(forged).decode(), "encoding": "base64"}])
    route = {"stream": STREAM}
    status, doc = call(
        handlers, api.get_messages, ADMIN_KEY, method="GET", route=route, query={"from": str(at)}
    )
    assert status == 400 and doc["error"] == "invalid_offset"
    assert [m["value_encoding"] for m in read_page(handlers, {"from": 0})["messages"]] == [
        "utf-8",
        "base64",
    ]


def test_the_catalog_and_health_list_every_staging_queue_to_admins() -> None:
    runtime = handlers_runtime(VAULT_STAGING_QUEUES="3")
    try:
        names = runtime.services.settings.queue_names
        assert len(names) == 3
        status, catalog = call(runtime, api.list_streams, ADMIN_KEY, method="GET")
        assert status == 200 and [q["queue"] for q in catalog["queues"]] == names
        status, health = call(runtime, api.health, ADMIN_KEY, method="GET")
        assert status == 200 and health["status"] == "ok" and [q["queue"] for q in health["queues"]] == names
        assert health["poison_messages"] == sum(q["poison_messages"] for q in health["queues"]) == 0
        status, health = call(runtime, api.health, WRITER_KEY, method="GET")
        assert status == 200 and health["status"] == "ok" and "queues" not in health
    finally:
        runtime.close()


def test_the_handlers_refuse_bad_input_and_unknown_batches_with_json_errors(handlers: Runtime) -> None:
    route = {"stream": STREAM}
    status, doc = call(handlers, api.post_messages, ADMIN_KEY, method="POST", route=route, body=b"{not json")
    assert status == 400 and doc.keys() == {"error", "message"}
    assert handlers.services.queue_for(STREAM).staging.approximate_count() == 0  # nothing staged
    missing = {"stream": STREAM, "id": "never"}
    status, doc = call(handlers, api.get_stream_batch, ADMIN_KEY, method="GET", route=missing)
    assert status == 404 and doc["error"] == "not_found"
    status, doc = call(handlers, api.get_messages, ADMIN_KEY, method="GET", route=route, query={"limit": "x"})
    assert status == 400 and "limit" in doc["message"]


def test_the_handlers_decide_access_before_they_touch_storage(handlers: Runtime) -> None:
    route = {"stream": STREAM}
    status, doc = call(handlers, api.get_messages, None, method="GET", route=route)
    assert status == 401 and doc["error"] == "unauthorized"
    status, doc = call(handlers, api.get_messages, WRITER_KEY, method="GET", route=route)  # write only
    assert status == 403 and doc["error"] == "forbidden"
    status, doc = call(handlers, api.get_messages, "not-a-key-of-this-app-at-all", method="GET", route=route)
    assert status == 401
    other = {"stream": "payments"}
    body = json.dumps({"messages": [{"value": "x"}]}).encode()
    status, doc = call(handlers, api.post_messages, WRITER_KEY, method="POST", route=other, body=body)
    assert status == 403 and handlers.services.queue_for("payments").staging.approximate_count() == 0
    status, doc = call(handlers, api.whoami, WRITER_KEY, method="GET")
    assert status == 200 and doc["principal"]["kind"] == "key" and doc["permissions"]["write"] == [STREAM]


# Every refusal of bad input (test_app.py's cases), in process: test_app.py sends a few of them
# over real HTTP.
@pytest.mark.parametrize(("case", "body", "ctype", "status"), BAD_POSTS, ids=[c[0] for c in BAD_POSTS])
def test_bad_input_gets_a_clear_4xx_and_stages_nothing(
    handlers: Runtime, case: str, body: bytes, ctype: str, status: int
) -> None:
    route = {"stream": STREAM}
    headers = {"content-type": ctype}
    answer, doc = call(
        handlers, api.post_messages, ADMIN_KEY, method="POST", route=route, body=body, headers=headers
    )
    assert answer == status, doc
    assert doc["error"] in ("bad_request", "too_large") and doc["message"]
    assert handlers.services.queue_for(STREAM).staging.approximate_count() == 0  # nothing staged
    assert call(handlers, api.get_stream, ADMIN_KEY, method="GET", route=route)[0] == 404  # nor written


READ_HANDLERS = {"messages": api.get_messages, "log": api.get_log}


def read_route(path: str) -> tuple[Callable[[Runtime, Request], Awaitable[Response]], dict[str, str]]:
    """The handler and route parameters of a read's path, as the Functions host routes it (a
    route parameter percent-decoded)."""
    parts = [unquote(part) for part in path.strip("/").split("/")]
    if parts[0] == "batches":
        return api.get_batch, {"id": parts[1]}
    return READ_HANDLERS[parts[2]], {"stream": parts[1]}


@pytest.mark.parametrize(
    ("case", "path", "params", "status", "code"), BAD_READS, ids=[c[0] for c in BAD_READS]
)
def test_bad_reads_get_a_clear_4xx(
    handlers: Runtime, case: str, path: str, params: dict[str, str], status: int, code: str
) -> None:
    """On a stream holding one committed message, which the bad reads only read."""
    body = json.dumps({"messages": [{"value": "something"}]}).encode()
    assert (
        call(handlers, api.post_messages, ADMIN_KEY, method="POST", route={"stream": STREAM}, body=body)[0]
        == 202
    )
    assert run_trigger(handlers, handlers.services.queue_for(STREAM))
    bad_range = f"bytes={'9' * 5000}-" if "digits" in case else "lines=1-2"
    headers = {"range": bad_range} if path.endswith("/log") else {}
    handler, route = read_route(path.replace("{s}", STREAM))
    answer = asyncio.run(handle(handlers, handler, method="GET", route=route, query=params, headers=headers))
    assert answer.status == status, answer.body
    assert json.loads(answer.body)["error"] == code
    assert answer.headers["X-Content-Type-Options"] == "nosniff"


async def handle(
    runtime: Runtime, handler: Callable[[Runtime, Request], Awaitable[Response]], **parts: Any
) -> Response:
    """A request of the admin, on the running event loop (for waits alongside)."""
    headers = {"x-functions-key": ADMIN_KEY, **parts.pop("headers", {})}
    return await handler(runtime, Request(headers=headers, **parts))


def test_long_polls_wait_on_the_tail_watch_and_answer_with_the_commit(
    handlers: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The long polls in process: the memory account's async reads stand in for the SDK's async
    clients (the contract suite holds them alike), so the waits run here as on a host. The
    producer's wait reads the commit record only through the tail watch: its checks of the
    batch table take the record the watch has just read instead of reading it again."""
    route = {"stream": STREAM}
    table = handlers.services.batch_table
    record_reads: list[str] = []
    read_record = table.latest_commit

    def counted(stream: str) -> Sequence[CommittedBatch]:
        record_reads.append(stream)
        return read_record(stream)

    monkeypatch.setattr(table, "latest_commit", counted)
    queue = handlers.services.queue_for(STREAM)
    body = json.dumps({"messages": [{"value": "first"}]}).encode()
    assert call(handlers, api.post_messages, ADMIN_KEY, method="POST", route=route, body=body)[0] == 202
    assert run_trigger(handlers, queue)
    end = call(handlers, api.get_messages, ADMIN_KEY, method="GET", route=route)[1]["next_offset"]

    def commit_when_staged() -> bool:
        deadline = time.monotonic() + 10
        while queue.staging.approximate_count() == 0 and time.monotonic() < deadline:
            time.sleep(0.01)  # the POST stages in a thread of its own: on a loaded machine, later
        return run_trigger(handlers, queue)

    async def scenario() -> tuple[Response, Response, float]:
        started = time.monotonic()
        read = asyncio.create_task(
            handle(
                handlers, api.get_messages, method="GET", route=route, query={"from": str(end), "wait": "20"}
            )
        )
        second = json.dumps({"messages": [{"value": "second"}]}).encode()
        post = asyncio.create_task(
            handle(handlers, api.post_messages, method="POST", route=route, query={"wait": "20"}, body=second)
        )
        await asyncio.sleep(0.3)
        assert not read.done() and not post.done()  # both wait: nothing new is committed yet
        assert await asyncio.to_thread(commit_when_staged)  # the writer commits "second"
        page, status = await asyncio.wait_for(asyncio.gather(read, post), 10)
        return page, status, time.monotonic() - started

    page, status, took = asyncio.run(scenario())
    assert page.status == 200 and [m["value"] for m in json.loads(page.body)["messages"]] == ["second"]
    assert status.status == 200 and json.loads(status.body)["status"] == COMMITTED
    assert took < 10  # answered by the commit, not by the end of the wait
    assert record_reads == []


def test_a_long_poll_with_nothing_new_answers_an_empty_page_when_its_wait_ends(handlers: Runtime) -> None:
    route = {"stream": STREAM}
    body = json.dumps({"messages": [{"value": "only"}]}).encode()
    call(handlers, api.post_messages, ADMIN_KEY, method="POST", route=route, body=body)
    run_trigger(handlers, handlers.services.queue_for(STREAM))
    end = call(handlers, api.get_messages, ADMIN_KEY, method="GET", route=route)[1]["next_offset"]
    started = time.monotonic()
    status, page = call(
        handlers,
        api.get_messages,
        ADMIN_KEY,
        method="GET",
        route=route,
        query={"from": str(end), "wait": "0.3"},
    )
    assert status == 200 and page["messages"] == [] and page["next_offset"] == end
    assert time.monotonic() - started >= 0.3


def test_a_closed_runtime_leaves_no_thread_of_its_own_running() -> None:
    """Its writers, pools and read-ahead end with it: nothing leaks into the next runtime."""
    before = set(threading.enumerate())
    account = MemoryAccount()
    runtime = Runtime(Services(load_settings({"VAULT_STAGING_QUEUES": "1"}), connect=lambda _name: account))
    runtime.services.ensure()
    try:
        stage(runtime.services, "b1", ["x" * 3000 for _ in range(50)])
        assert run_trigger(runtime, runtime.services.queue_for(STREAM))  # an open writer and its threads
        vault, offset = runtime.services.vault, 0
        with vault.writer(
            "reads", WriterSettings(record_format=1)
        ) as w:  # format 1: pages of a few records each
            w.append([Batch([NewMessage(bytes(1000), "k") for _ in range(40)])])
        for _ in range(3):  # a sequential reader: the read-ahead prefetches on its own threads
            data, state = runtime.read_ahead.fetch(vault.reader, "reads", offset, 4096)
            result = vault.reader.decode_checked_batches("reads", offset, data, state, max_bytes=4096)
            runtime.read_ahead.done(vault.reader, "reads", offset, result.next_offset, result.committed, 4096)
            offset = result.next_offset
        started = set(threading.enumerate()) - before
        assert {t.name.split("_")[0] for t in started} >= {
            "mv-readahead",
            "mv-index-orders",
            "mv-pages-orders",
        }
    finally:
        runtime.close()
    for t in started:
        t.join(timeout=10)
    assert [t.name for t in started if t.is_alive()] == []
    assert runtime.read_ahead.held_bytes == 0


@pytest.mark.parametrize(
    ("body", "found"),
    [
        (encode_messages("b-1", STREAM, NOW_MS, messages(["v"])), (STREAM, "b-1")),
        (json.dumps({"v": 9, "id": "b-2", "stream": STREAM}), (STREAM, "b-2")),  # not an envelope we know
        (json.dumps({"id": "a:b", "stream": "bad name"}), (None, None)),  # names that could not be looked up
        (json.dumps(["id", "stream"]), (None, None)),
        ("not JSON", (None, None)),
    ],
)
def test_a_queue_message_is_identified_as_far_as_it_can_be_read(
    body: str, found: tuple[str | None, ...]
) -> None:
    assert identify(body) == found


def test_the_raw_log_of_an_empty_stream_a_reversed_range_and_a_blob_shorter_than_its_commit(
    handlers: Runtime,
) -> None:
    """/log at its edges: an empty stream read without Range is 200 with no bytes (API.md: the
    first 16 MiB); a range that ends before it starts is a 416 that says so; a blob holding fewer
    bytes than its commit record says are committed (damage, FORMAT.md §6.4) is 500
    storage_error, never a 206 whose body is shorter than its Content-Range."""
    vault = handlers.services.vault
    with vault.writer(STREAM):
        pass  # the stream exists, nothing committed
    handler, route = read_route(f"/streams/{STREAM}/log")
    empty = asyncio.run(handle(handlers, handler, method="GET", route=route))
    assert (empty.status, empty.body, empty.headers["X-Committed"]) == (200, b"", "0")
    with vault.writer(STREAM) as w:
        w.append([Batch([NewMessage(b"x" * 100, "k")])])
    reversed_range = asyncio.run(
        handle(handlers, handler, method="GET", route=route, headers={"range": "bytes=5-3"})
    )
    assert (
        reversed_range.status == 416 and "ends before it starts" in json.loads(reversed_range.body)["message"]
    )
    blob = vault.page_blobs.blobs[STREAM]  # type: ignore[attr-defined]
    blob.metadata["mv_committed"] = str(blob.size + 1000)
    for asked in ("bytes=-10", f"bytes={blob.size - 5}-"):
        short = asyncio.run(handle(handlers, handler, method="GET", route=route, headers={"range": asked}))
        assert short.status == 500 and json.loads(short.body)["error"] == "storage_error", short.body
