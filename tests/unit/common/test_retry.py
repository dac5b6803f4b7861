"""Unit tests of :mod:`eventhubs_spark.common.retry`."""

from __future__ import annotations

import pytest

from eventhubs_spark.common.retry import RetryPolicy
from eventhubs_spark.errors import (
    AuthenticationFailedError,
    EventHubsTimeoutError,
    TransientError,
)

STEADY = RetryPolicy(jitter=0.0)  # the waits as the policy's table says, without their random shortening


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_retries_transient_failures_until_one_succeeds():
    clock = Clock()
    calls: list[float] = []
    retried: list[int] = []

    def attempt(seconds: float) -> str:
        calls.append(seconds)
        if len(calls) < 3:
            raise TransientError("server busy")
        return "ok"

    result = STEADY.call(
        attempt, timeout=30, what="x", on_retry=lambda n, e: retried.append(n), clock=clock, sleep=clock.sleep
    )
    assert result == "ok" and retried == [1, 2] and clock.sleeps == [0.1, 0.2]


def test_ends_after_the_timeout_naming_what_the_option_and_the_last_error():
    clock = Clock()

    def attempt(seconds: float) -> None:
        clock.now += 1
        raise TransientError("503 server busy")

    with pytest.raises(EventHubsTimeoutError) as info:
        STEADY.call(attempt, timeout=10, what="management request for hub 'h'", clock=clock, sleep=clock.sleep)
    text = str(info.value)
    assert text.startswith("management request for hub 'h' did not succeed within eventhubs.operationTimeout (10 s")
    assert "503 server busy" in text and isinstance(info.value.__cause__, TransientError)
    assert clock.now <= 10 + 5, "no wait runs past the deadline"


def test_an_attempt_cut_short_still_shows_what_the_service_said_before():
    """Under load the last attempt may only time out (asyncio's TimeoutError has no text): the message
    says so, and keeps the service's earlier answer."""
    clock = Clock()
    errors = iter([TransientError("503 server busy"), TimeoutError()] * 20)

    def attempt(seconds: float) -> None:
        clock.now += 1
        raise next(errors)

    with pytest.raises(EventHubsTimeoutError) as info:
        STEADY.call(attempt, timeout=10, what="x", clock=clock, sleep=clock.sleep)
    text = str(info.value)
    assert "last error: the attempt timed out (before it: 503 server busy)" in text, text


def test_a_failure_that_cannot_heal_is_raised_at_once():
    calls = []

    def attempt(seconds: float) -> None:
        calls.append(seconds)
        raise AuthenticationFailedError("wrong key")

    with pytest.raises(AuthenticationFailedError):
        STEADY.call(attempt, timeout=60, what="x", sleep=lambda s: None)
    assert len(calls) == 1


def test_each_attempt_gets_its_share_of_the_deadline():
    clock = Clock()
    shares = []

    def attempt(seconds: float) -> None:
        shares.append(seconds)
        clock.now += seconds
        raise TimeoutError("no answer")

    with pytest.raises(EventHubsTimeoutError):
        STEADY.call(attempt, timeout=300, what="x", attempt_share=1 / 3, max_attempt=30, clock=clock, sleep=clock.sleep)
    assert shares[0] == 30 and len(shares) > 3, "an unanswered attempt is tried again in time"


@pytest.mark.parametrize(
    ("policy", "draws", "waits"),
    [
        (RetryPolicy(initial_delay=0.1, max_delay=2.0, jitter=0.0), [0.5] * 7, [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]),
        (RetryPolicy(initial_delay=1.0, max_delay=4.0, jitter=0.5), [0.0, 1.0, 0.5], [1.0, 1.0, 3.0]),
        (RetryPolicy(initial_delay=0.1, max_delay=5.0, jitter=0.2, max_attempts=3), [0.0] * 3, [0.1, 0.2, None]),
    ],
)
def test_the_policys_waits_double_to_the_cap_shortened_by_the_jitter_and_stop_at_the_attempts(policy, draws, waits):
    rng = iter(draws)
    backoff = policy.backoff(rng=lambda: next(rng, 0.5))
    got = [backoff.next_delay() for _ in waits]
    assert [None if g is None else round(g, 9) for g in got] == waits
    backoff.reset()
    assert backoff.tries == 0 and backoff.next_delay() is not None


def test_the_most_attempts_end_a_call_before_its_deadline_naming_the_option():
    calls = []

    def attempt(seconds: float) -> None:
        calls.append(seconds)
        raise TransientError("server busy")

    with pytest.raises(EventHubsTimeoutError, match=r"eventhubs.retry.maxAttempts is 3.*server busy"):
        RetryPolicy(max_attempts=3).call(attempt, timeout=600, what="x", sleep=lambda s: None)
    assert len(calls) == 3
