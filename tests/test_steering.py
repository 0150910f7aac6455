"""Staging that bends: a batch goes to its stream's first healthy queue (vault_app.steering).

The choice itself is tested in-process with a manual clock; then the real Stager through the
throttling front (vault_local.throttle) on the session's Azurite, and a host whose whole staging
tier is over its target, whose producers get 503 with Retry-After and lose nothing.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import httpx
import pytest

from tests.conftest import isolated_host, key_header, wait_until
from vault_app import writer_fn
from vault_app.config import load_settings
from vault_app.drained import DrainedFile
from vault_app.envelope import decode
from vault_app.services import Services, StagingQueue
from vault_app.staging import Stager
from vault_app.steering import (
    FIRST_COOL_DOWN,
    LONGEST_COOL_DOWN,
    STICK_ATTEMPTS,
    STICK_PACE_SECONDS,
    TRIES_PER_BATCH,
    Steering,
    TierBusy,
    preference,
    send_steered,
)
from vault_app.writer_fn import DRAIN_RECEIVE_VISIBILITY, DRAIN_VISIBILITY, RENEW_LEFT_SHARE, DrainRenewer
from vault_core.errors import StorageFailure, StorageUnavailable, StreamLeased, StreamNotFound
from vault_core.queues import Queue, QueuedMessage
from vault_core.recordformat import NewMessage
from vault_core.vault import Vault
from vault_local.azurite import Azurite
from vault_local.throttle import Targets, ThrottlingFront


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_stream_prefers_its_home_queue_then_an_order_of_its_own() -> None:
    orders = {s: preference(s, 8) for s in ("orders", "payments", "a", "b", "c")}
    for stream, order in orders.items():
        assert sorted(order) == list(range(8))
        assert order == preference(stream, 8)  # the same on every instance
    assert orders["orders"][0] == 3_845_127_662 % 8  # the home queue of docs/ARCHITECTURE.md §2.3
    assert len({order[1] for order in orders.values()}) > 1  # leaving one queue spreads out


def test_a_refused_queue_is_passed_over_until_its_cool_down_ends_then_taken_back() -> None:
    clock = Clock()
    steering = Steering([0] * 4, clock)
    home, second, third = preference("s", 4)[:3]
    assert steering.candidates("s") == [home, second, third]
    steering.refused(home)
    assert steering.candidates("s")[0] == second
    clock.now += FIRST_COOL_DOWN
    assert steering.candidates("s")[0] == home  # due back: tried again
    steering.refused(home)  # still refusing: twice as long
    clock.now += FIRST_COOL_DOWN
    assert steering.candidates("s")[0] == second
    clock.now += FIRST_COOL_DOWN
    steering.accepted(home)  # it took one: healthy, and the cool-down starts over
    steering.refused(home)
    clock.now += FIRST_COOL_DOWN
    assert steering.candidates("s")[0] == home


def test_the_cool_down_stops_growing() -> None:
    clock = Clock()
    steering = Steering([0], clock)
    for _ in range(10):
        steering.refused(0)
    assert steering.retry_after() == LONGEST_COOL_DOWN
    clock.now += LONGEST_COOL_DOWN
    assert steering.unhealthy() == []


def test_an_account_with_two_queues_refusing_is_passed_over_as_a_whole() -> None:
    clock = Clock()
    steering = Steering([0, 0, 0, 1, 1, 1], clock)
    steering.refused(0)
    assert {steering.accounts[i] for i in steering.candidates("s")} >= {0}
    steering.refused(1)
    assert [steering.accounts[i] for i in steering.candidates("s")] == [1, 1, 1]


def test_every_queue_cooling_is_a_busy_tier_with_the_time_until_the_first_is_back() -> None:
    clock = Clock()
    steering = Steering([0, 0, 0, 0], clock)
    tried: list[int] = []

    def refuse(queue: int) -> None:
        tried.append(queue)
        raise StorageUnavailable("503 ServerBusy")

    paced: list[float] = []
    with pytest.raises(TierBusy) as busy:
        send_steered(steering, "s", refuse, retry_alone=refuse, sleep=paced.append)
    order = preference("s", 4)
    stuck = [order[0]] * STICK_ATTEMPTS  # the stream's own queue, until it stayed refused
    assert tried == stuck + order[1:TRIES_PER_BATCH]
    assert paced == [STICK_PACE_SECONDS] * (STICK_ATTEMPTS - 1)
    assert busy.value.retry_after == 1
    del tried[:]
    with pytest.raises(TierBusy):
        send_steered(steering, "s", refuse, retry_alone=refuse, sleep=paced.append)
    assert (
        tried == [order[3]] * STICK_ATTEMPTS
    )  # the one queue not yet refusing; the rest cool down untouched
    clock.now += 0.1
    del tried[:]
    with pytest.raises(TierBusy):  # all cooling: one probe of the queue due back first
        send_steered(steering, "s", refuse, retry_alone=refuse, sleep=paced.append)
    assert tried == [order[0]]
    assert send_steered(steering, "s", lambda q: None, retry_alone=refuse) == order[1]  # it took it
    assert steering.unhealthy() == [q for q in range(4) if q != order[1]]


def test_a_stream_sticks_to_its_queue_while_the_queue_is_merely_busy() -> None:
    steering = Steering([0] * 4, Clock())
    home = preference("s", 4)[0]
    tried: list[int] = []

    def busy(queue: int) -> None:  # refuses twice, then its next token comes in
        tried.append(queue)
        if len(tried) <= 2:
            raise StorageUnavailable("503 ServerBusy")

    assert send_steered(steering, "s", busy, retry_alone=busy, sleep=lambda _: None) == home
    assert tried == [home] * 3  # not steered onto another queue, whose writer would meet this one's
    assert steering.unhealthy() == []  # nor passed over by the next batches


def test_a_tier_of_one_queue_retries_there() -> None:
    steering = Steering([0])
    sent: list[int] = []
    assert send_steered(steering, "s", lambda q: None, retry_alone=sent.append) == 0
    assert sent == [0]


# -- through the throttling front ----------------------------------------------------------


@pytest.fixture
def front(azurite: Azurite) -> Iterator[tuple[ThrottlingFront, Clock]]:
    """A front whose buckets refill only when the test moves its clock: 2 messages a second per
    queue (factor 1,000), the account's 20 not binding."""
    clock = Clock()
    upstream = {"blob": azurite.blob_port, "queue": azurite.queue_port, "table": azurite.table_port}
    with ThrottlingFront(upstream, Targets(factor=1000), clock=clock) as f:
        yield f, clock


def staging_services(azurite: Azurite, front: ThrottlingFront, queues: int) -> tuple[Services, Services]:
    """Staging through the front (the vault's tables straight to Azurite), and the same
    queues without it, for the test's own look (which must not take the queues' tokens)."""
    env = {
        "VaultStorage": azurite.connection_string,
        "VaultStaging0": front.connection_string(),
        "VAULT_STAGING_QUEUES": str(queues),
        "VAULT_QUEUE_PREFIX": f"st{uuid.uuid4().hex[:8]}",
    }
    direct = Services(load_settings({**env, "VaultStaging0": azurite.connection_string}))
    direct.ensure()
    return Services(load_settings(env)), direct


def test_the_stager_steers_away_from_a_throttled_queue_and_back_after_it_recovers(
    azurite: Azurite, front: tuple[ThrottlingFront, Clock], vault: Vault
) -> None:
    proxy, proxy_clock = front
    services, direct = staging_services(azurite, proxy, queues=4)
    steering_clock = Clock()
    services.__dict__["steering"] = Steering([q.account for q in services.queues], steering_clock)
    stream = f"steer-{uuid.uuid4().hex[:8]}"
    home, second = preference(stream, 4)[:2]
    stager = Stager(services, sleep=lambda _: None)  # the front's clock stands still: no token comes

    def stage(n: int) -> None:
        stager.stage(stream, f"b{n}", [NewMessage(b"m%d" % n, "k")])

    stage(1)
    stage(2)  # the home queue's 2 tokens of this second are spent
    stage(3)  # refused there (503 ServerBusy) at every paced attempt (its clock stands still): steered on
    assert services.steering.unhealthy() == [home]
    stage(4)  # home is cooling down: straight to the next queue, no attempt at home
    proxy_clock.now += 1.0  # home's bucket refills
    steering_clock.now += FIRST_COOL_DOWN  # and its cool-down ends
    stage(5)
    assert services.steering.unhealthy() == []

    def ids(queue: int) -> list[str]:
        return [decode(m.body).batch_id for m in direct.queues[queue].staging.peek(32)]

    assert ids(home) == ["b1", "b2", "b5"]
    assert ids(second) == ["b3", "b4"]
    counts = proxy.limiter.stats()["queue_messages"][f"devstoreaccount1/{services.queues[home].name}"]
    assert counts == {"admitted": 3, "refused": STICK_ATTEMPTS}
    assert all(services.batch_table.status(stream, f"b{n}").status == "staged" for n in range(1, 6))  # type: ignore[union-attr]


# -- a host whose staging tier is over capacity --------------------------------------------


class PausableClock:
    """Monotonic time that stands still between pause() and resume()."""

    def __init__(self) -> None:
        self.paused_at: float | None = None
        self.lost = 0.0

    def __call__(self) -> float:
        return (time.monotonic() if self.paused_at is None else self.paused_at) - self.lost

    def pause(self) -> None:
        self.paused_at = time.monotonic()

    def resume(self) -> None:
        assert self.paused_at is not None
        self.lost += time.monotonic() - self.paused_at
        self.paused_at = None


@pytest.mark.slow  # waits for a throttled tier to take every batch, and the writer to commit them
def test_over_capacity_every_refused_post_is_503_with_retry_after_and_nothing_is_lost(
    azurite: Azurite, vault: Vault, tmp_path: Path
) -> None:
    upstream = {"blob": azurite.blob_port, "queue": azurite.queue_port, "table": azurite.table_port}
    # 2 queues of 10 requests/s each, holding at most 10 tokens; and while the 32 POSTs below
    # are sent the front's clock stands still, so at most 20 of them can be staged however fast
    # or slow this machine is: the tier is over capacity, for sure.
    clock = PausableClock()
    with ThrottlingFront(upstream, Targets(factor=200), clock=clock) as proxy:
        host = isolated_host(
            azurite,
            tmp_path,
            settings={"VaultStaging0": proxy.connection_string(), "VAULT_STAGING_QUEUES": "2"},
        ).start()
        try:
            streams = [f"sat-{uuid.uuid4().hex[:6]}-{i}" for i in range(4)]
            posts = [(s, f"k{n}") for s in streams for n in range(8)]

            def post(item: tuple[str, str]) -> tuple[int, str | None, dict[str, object]]:
                stream, key = item
                with httpx.Client(base_url=host.url, headers=key_header(host), timeout=30) as client:
                    r = client.post(
                        f"/streams/{stream}/messages",
                        json={"messages": [{"key": key, "value": f"{stream}/{key}"}]},
                        headers={"Idempotency-Key": key},
                    )
                    return r.status_code, r.headers.get("Retry-After"), r.json()

            clock.pause()
            with ThreadPoolExecutor(12) as pool:
                answers = list(pool.map(post, posts))
            clock.resume()
            statuses = sorted({a[0] for a in answers})
            refused = [a for a in answers if a[0] == 503]
            assert set(statuses) <= {202, 503}, answers
            assert refused, "the tier was never over capacity"
            assert all(
                a[1] is not None and int(a[1]) >= 1 and a[2]["error"] == "unavailable" for a in refused
            )
            # Producers retry what was refused (same Idempotency-Key) until every batch is staged.
            pending = [p for p, a in zip(posts, answers, strict=True) if a[0] != 202]
            while pending:
                time.sleep(0.5)  # the producers' pace, not a wait for something to happen
                pending = [p for p in pending if post(p)[0] != 202]
            for stream in streams:
                wait_until(_committed(vault, stream, 8), timeout=60, what=f"commits of {stream}")
                values = [m.value.decode() for m in vault.reader.scan(stream)]
                assert sorted(values) == sorted(f"{stream}/k{n}" for n in range(8))  # once each
        finally:
            host.stop()


def _committed(vault: Vault, stream: str, count: int) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return vault.reader.state(stream).count >= count
        except StreamNotFound:
            return False

    return check


class _RefusingQueue:
    """A staging queue at its target: every visibility renewal is refused."""

    def __init__(self) -> None:
        self.renewals = 0
        self.retried = False

    def hide(self, message: QueuedMessage, seconds: int, *, retry: bool = True) -> None:
        self.renewals += 1
        self.retried |= retry
        raise StorageUnavailable("503 ServerBusy")


def test_the_writer_stops_a_round_of_renewals_at_the_first_refusal() -> None:
    refusing = _RefusingQueue()
    queue = StagingQueue(0, "q", cast(Queue, refusing), cast(Queue, refusing))
    renewer = DrainRenewer(queue, DrainedFile(None))
    renewer.hold([QueuedMessage(str(i), "{}", "r") for i in range(32)], since=time.monotonic() - 10)
    renewer.renew()
    assert refusing.renewals == 1  # not 32 requests to a queue that is already over its target
    assert not refusing.retried  # nor the SDK's back-off while the round holds its lock


class _RenewingQueue:
    def __init__(self) -> None:
        self.renewed: list[str] = []

    def hide(self, message: QueuedMessage, seconds: int, *, retry: bool = True) -> None:
        self.renewed.append(message.id)


def test_the_writer_renews_only_messages_with_a_third_of_their_visibility_left() -> None:
    """A message drained moments ago, or held for a normal append, has most of its visibility
    left: a later round renews it in time, this one spends no request on it."""
    renewing = _RenewingQueue()
    queue = StagingQueue(0, "q", cast(Queue, renewing), cast(Queue, renewing))
    renewer = DrainRenewer(queue, DrainedFile(None))
    held = DRAIN_VISIBILITY * (1 - RENEW_LEFT_SHARE)
    received = DRAIN_RECEIVE_VISIBILITY * (1 - RENEW_LEFT_SHARE)
    now = time.monotonic()
    renewer.hold([QueuedMessage("old", "{}", "r")], since=now - held)
    renewer.hold([QueuedMessage("appending", "{}", "r")], since=now - held + 2)
    renewer.hold([QueuedMessage("new", "{}", "r")])
    short = DRAIN_RECEIVE_VISIBILITY
    renewer.hold([QueuedMessage("drained", "{}", "r")], since=now - received, visibility=short)
    renewer.hold([QueuedMessage("just drained", "{}", "r")], since=now - 1, visibility=short)
    renewer.renew()
    assert sorted(renewing.renewed) == ["drained", "old"]
    renewer.renew()  # those two were just renewed, the others have more than a third left
    assert sorted(renewing.renewed) == ["drained", "old"]


class _FakeTime:
    """The writer's clock: a sleep moves it on at once."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class _DeletingQueue:
    """A staging queue that refuses the first ``refusals`` deletes with ``error``."""

    def __init__(self, refusals: int, error: Exception) -> None:
        self.refusals = refusals
        self.error = error
        self.attempts: list[bool] = []  # each attempt's ``retry``
        self.deleted = False

    def delete(self, message: QueuedMessage, *, retry: bool = True) -> None:
        self.attempts.append(retry)
        if len(self.attempts) <= self.refusals:
            raise self.error
        self.deleted = True


@pytest.fixture
def paced(monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer's paced attempts on a fake clock: one a second, for up to 4.5 s."""
    monkeypatch.setattr(writer_fn, "DELETE_PACE_SECONDS", 1.0)
    monkeypatch.setattr(writer_fn, "DELETE_PATIENCE_SECONDS", 4.5)
    monkeypatch.setattr(writer_fn, "time", _FakeTime())


@pytest.mark.parametrize(
    ("refusals", "error", "attempts", "deleted"),
    [
        (0, StorageUnavailable("503 ServerBusy"), 1, True),
        (3, StorageUnavailable("503 ServerBusy"), 4, True),  # one attempt per pace, then the token
        (1_000, StorageUnavailable("503 ServerBusy"), 5, False),  # patience runs out: redelivered
        (1, StorageFailure("stale", status=400, code="PopReceiptMismatch"), 1, False),  # no retry helps
    ],
)
@pytest.mark.usefixtures("paced")
def test_a_committed_batch_s_delete_is_retried_one_attempt_at_a_time_while_its_queue_refuses(
    refusals: int, error: Exception, attempts: int, deleted: bool
) -> None:
    deleting = _DeletingQueue(refusals, error)
    queue = StagingQueue(0, "q", cast(Queue, deleting), cast(Queue, deleting))
    writer_fn._delete_patiently(queue, QueuedMessage("1", "{}", "r"))
    assert deleting.deleted is deleted
    assert deleting.attempts == [False] * attempts  # never the SDK's exponential back-off


class _SendingQueue:
    """A staging queue that refuses the first ``refusals`` sends with ``error``."""

    def __init__(self, refusals: int, error: Exception) -> None:
        self.refusals = refusals
        self.error = error
        self.attempts: list[bool] = []  # each attempt's ``retry``

    def send(self, text: str, *, visible_in: int = 0, retry: bool = True) -> QueuedMessage:
        self.attempts.append(retry)
        if len(self.attempts) <= self.refusals:
            raise self.error
        return QueuedMessage("sent", text, "r")


def _services_with_home(home: StagingQueue) -> Services:
    """What ``_send_back`` asks of the services: the settings, and every stream's home queue."""
    return cast(Services, SimpleNamespace(settings=load_settings({}), queue_for=lambda stream: home))


@pytest.mark.parametrize(
    ("refusals", "error", "attempts", "taken"),
    [
        (0, StorageUnavailable("503 ServerBusy"), 1, True),
        (3, StorageUnavailable("503 ServerBusy"), 4, True),  # one attempt per pace, then the token
        (1_000, StorageUnavailable("503 ServerBusy"), 5, False),  # patience runs out: released
        (1, StorageFailure("bad", status=400, code="InvalidInput"), 1, False),  # no retry helps
    ],
)
@pytest.mark.usefixtures("paced")
def test_a_handed_back_batch_is_sent_one_attempt_at_a_time_while_its_queue_refuses(
    refusals: int, error: Exception, attempts: int, taken: bool
) -> None:
    """Its round waits for it: the SDK's back-offs held rounds for seconds with batches waiting
    in their queue and its requests unused (docs/CAPACITY.md §7.5)."""
    sending = _SendingQueue(refusals, error)
    queue = StagingQueue(0, "q", cast(Queue, sending), cast(Queue, sending))
    if taken:
        assert writer_fn._send_back(_services_with_home(queue), queue, "{}", error, None) is queue
    else:
        with pytest.raises(type(error)):
            writer_fn._send_back(_services_with_home(queue), queue, "{}", error, None)
    assert sending.attempts == [False] * attempts  # never the SDK's exponential back-off


@pytest.mark.usefixtures("paced")
def test_a_batch_handed_back_for_its_streams_lease_tries_its_home_queue_then_its_own_at_each_pace() -> None:
    busy = StorageUnavailable("503 ServerBusy")
    home_sending, own_sending = _SendingQueue(1_000, busy), _SendingQueue(1, busy)
    home = StagingQueue(0, "home", cast(Queue, home_sending), cast(Queue, home_sending))
    queue = StagingQueue(0, "q", cast(Queue, own_sending), cast(Queue, own_sending))
    leased = StreamLeased("leased by another writer")
    assert writer_fn._send_back(_services_with_home(home), queue, "{}", leased, "s") is queue
    assert home_sending.attempts == own_sending.attempts == [False, False]
