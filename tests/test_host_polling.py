"""The local host paces a queue trigger as the Functions host does (vault_local.polling)."""

from __future__ import annotations

import random

import pytest

from vault_local.polling import (
    HOST_RETRIES,
    MINIMUM_POLLING_INTERVAL,
    PollingDelay,
    host_retry_policy,
    retry_delay,
)


def test_a_refused_or_empty_poll_waits_longer_each_time_up_to_the_longest() -> None:
    random.seed(24)
    delay = PollingDelay(2.0)
    waits = [delay.next() for _ in range(8)]
    assert waits[0] == MINIMUM_POLLING_INTERVAL
    # The shortest plus a doubling increment of the shortest, within ±20 %: 0.2, 0.3, 0.5, 0.9, 1.7 s.
    for n, wait in enumerate(waits[1:5], start=1):
        increment = 2 ** (n - 1) * MINIMUM_POLLING_INTERVAL
        assert (
            MINIMUM_POLLING_INTERVAL + 0.8 * increment <= wait <= MINIMUM_POLLING_INTERVAL + 1.2 * increment
        )
    assert waits == sorted(waits)
    assert waits[-1] == 2.0  # maxPollingInterval


def test_the_first_wait_after_a_poll_that_found_messages_is_the_shortest_again() -> None:
    delay = PollingDelay(2.0)
    for _ in range(10):
        delay.next()
    delay.found()
    assert delay.next() == MINIMUM_POLLING_INTERVAL
    assert delay.next() > MINIMUM_POLLING_INTERVAL  # and it grows again from there


def test_the_host_retries_a_refused_call_three_times_after_about_0_8_1_6_and_3_2_seconds() -> None:
    for retry, base in ((1, 0.8), (2, 1.6), (3, 3.2)):
        assert all(0.8 * base <= retry_delay(retry) <= 1.2 * base for _ in range(20))
    policy = host_retry_policy()
    assert policy.total_retries == HOST_RETRIES
    # The storage SDK counts the retry before it sleeps: its first back-off has count 1.
    assert 0.64 <= policy.get_backoff_time({"count": 1}) <= 0.96


def test_polling_waits_need_an_order() -> None:
    with pytest.raises(ValueError):
        PollingDelay(0.05)
