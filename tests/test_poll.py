"""The one back-off and poll loop (vault_core.retry) that every waiting reader uses. Pure, fast."""

from __future__ import annotations

import threading
import time

from vault_core.retry import Backoff, backed_off, note_backoff, poll, remaining


def test_backoff_doubles_up_to_its_longest_and_resets() -> None:
    b = Backoff(0.05, 0.3)
    assert [b.next() for _ in range(5)] == [0.05, 0.1, 0.2, 0.3, 0.3]
    b.reset()
    assert b.next() == 0.05


def test_poll_returns_as_soon_as_done() -> None:
    values = iter(range(100))
    started = time.monotonic()
    assert poll(lambda: next(values), lambda v: v == 3, 10, first=0.001, longest=0.002) == 3
    assert time.monotonic() - started < 1


def test_poll_gives_the_last_value_when_the_wait_is_over() -> None:
    calls: list[float] = []
    started = time.monotonic()

    def fetch() -> int:
        calls.append(time.monotonic())
        return len(calls)

    got = poll(fetch, lambda v: False, 0.2, first=0.05)
    assert got == len(calls) >= 3 and 0.2 <= time.monotonic() - started < 1


def test_poll_without_a_wait_fetches_once() -> None:
    assert poll(lambda: "once", lambda v: False, 0) == "once"


def test_each_call_gets_a_fresh_request_budget_on_a_request_path_and_none_elsewhere() -> None:
    seen: list[float | None] = []
    poll(lambda: seen.append(remaining()), lambda v: True, 0, each_within=2.0)
    poll(lambda: seen.append(remaining()), lambda v: True, 0, each_within=None)
    assert seen[0] is not None and 1.5 < seen[0] <= 2.0 and seen[1] is None


def test_waits_on_refusing_storage_are_counted_per_thread() -> None:
    before = backed_off()
    note_backoff(0.5)
    elsewhere: list[float] = []
    other = threading.Thread(target=lambda: elsewhere.append(backed_off()))
    other.start()
    other.join()
    assert backed_off() - before == 0.5 and elsewhere == [0.0]  # an invocation counts its own
