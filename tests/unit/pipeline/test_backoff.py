"""The one backoff rule (pipeline.backoff): waits that double up to a cap, optional jitter, an optional
limit of failures; counted by the caller (`delay`) or by the helper (`next`, `reset`)."""

from __future__ import annotations

import pytest

from framewire.pipeline.backoff import Backoff

pytestmark = pytest.mark.timeout(10)


def test_waits_double_up_to_the_cap() -> None:
    backoff = Backoff(0.5, 5.0)
    assert [backoff.delay(n) for n in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    assert backoff.delay(0) == 0.5  # before any failure: the first wait
    assert Backoff(1, 60).delay(10_000) == 60  # no overflow however long it has failed


def test_jitter_shortens_each_wait_by_at_most_its_fraction() -> None:
    jittered = Backoff(1.0, 8.0, jitter=0.25)
    assert [jittered.delay(n, rand=lambda: 1.0) for n in (1, 2, 4, 9)] == [0.75, 1.5, 6.0, 6.0]
    assert [jittered.delay(n, rand=lambda: 0.0) for n in (1, 2, 4)] == [1.0, 2.0, 8.0]
    assert all(0.75 <= jittered.delay(1) <= 1.0 for _ in range(100))
    assert Backoff(1.0, 8.0).delay(1, rand=lambda: 1.0) == 1.0  # no jitter: exact


def test_next_counts_failures_and_reset_starts_again() -> None:
    backoff = Backoff(0.5, 3.0)
    assert [backoff.next() for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert backoff.failures == 5
    backoff.reset()
    assert backoff.failures == 0 and backoff.next() == 0.5


def test_max_attempts_gives_up_at_the_limit_and_none_never_does() -> None:
    limited = Backoff(0.1, 1.0, max_attempts=3)
    assert [limited.gives_up(n) for n in (1, 2, 3, 4)] == [False, False, True, True]
    assert not any(Backoff(0.1, 1.0).gives_up(n) for n in (1, 100, 10_000))


def test_two_backoffs_with_the_same_numbers_are_equal_whatever_they_counted() -> None:
    used = Backoff(1.0, 4.0, jitter=0.2)
    used.next()
    assert used == Backoff(1.0, 4.0, jitter=0.2) != Backoff(1.0, 4.0)
