"""The one retry policy: how long to wait between attempts, how many to make, under which deadline.

Every loop that tries again (a send, a management request, a position lookup, a receiver's reopen after
a dropped link) takes its waits from one :class:`RetryPolicy`, which users set with the
``eventhubs.retry.*`` options (:mod:`eventhubs_spark.options`): the first wait, the longest, the
jitter that keeps many tasks from retrying in step, and the most attempts. The deadline is the
operation's own (``eventhubs.operationTimeout`` for sends and management requests,
``eventhubs.receiverTimeout`` for reads): the policy never runs past it. Pure policy with an injected
clock, sleep and random source (aiokafka's and Azure's retry policies are the models), so it is tested
from tables of cases.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from eventhubs_spark import defaults
from eventhubs_spark.errors import EventHubsTimeoutError, describe_error, retriable

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """Waits that double from ``initial_delay`` up to ``max_delay``, each shortened by up to ``jitter`` (a
    fraction) at random; at most ``max_attempts`` attempts (0: as many as the deadline allows)."""

    max_attempts: int = defaults.RETRY_MAX_ATTEMPTS
    initial_delay: float = defaults.RETRY_INITIAL_DELAY
    max_delay: float = defaults.RETRY_MAX_DELAY
    jitter: float = defaults.RETRY_JITTER

    def backoff(self, rng: Callable[[], float] = random.random) -> Backoff:
        """A fresh sequence of waits for one operation."""
        return Backoff(self, rng)

    def call(
        self,
        attempt: Callable[[float], T],
        *,
        timeout: float,
        what: str,
        option: str = "eventhubs.operationTimeout",
        is_retriable: Callable[[BaseException], bool] = retriable,
        on_retry: Callable[[int, BaseException], None] | None = None,
        attempt_share: float = 1.0,
        max_attempt: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        rng: Callable[[], float] = random.random,
    ) -> T:
        """Call ``attempt(seconds_it_may_take)`` until it succeeds, a failure is not retriable, the attempts
        run out, or ``timeout`` (``option``) has passed.

        Each attempt may take ``attempt_share`` of the timeout (at most ``max_attempt`` seconds, at least
        one second), so an attempt that never returns is tried again in time. ``on_retry(attempt number,
        error)`` runs before each wait (e.g. to drop a connection). The end is an
        :class:`EventHubsTimeoutError` naming ``what``, the option and the last error, raised from it.
        """
        deadline = clock() + timeout
        waits = self.backoff(rng)
        said: BaseException | None = None  # the last error that was more than "the attempt took too long"
        per_attempt = max(1.0, timeout * attempt_share)
        if max_attempt is not None:
            per_attempt = min(per_attempt, max_attempt)
        while True:
            try:
                return attempt(max(0.1, min(deadline - clock(), per_attempt)))
            except Exception as exc:
                if not is_retriable(exc):
                    raise
                last: BaseException = exc
                if not isinstance(exc, TimeoutError):
                    said = exc
            tries = waits.tries + 1
            if on_retry is not None:
                on_retry(tries, last)
            delay = waits.next_delay()
            if delay is None or clock() + delay >= deadline:
                # An attempt cut short by the deadline says only that it timed out; what the service
                # answered before (throttled, busy, refused) is what the reader needs, so both are shown.
                cause = describe_error(last)
                if said is not None and said is not last:
                    cause += f" (before it: {describe_error(said)})"
                limit = f"{option} ({timeout:g} s, {tries} attempts)"
                if delay is None:
                    limit += f"; eventhubs.retry.maxAttempts is {self.max_attempts}"
                raise EventHubsTimeoutError(f"{what} did not succeed within {limit}; last error: {cause}") from last
            sleep(delay)


class Backoff:
    """One operation's waits under a :class:`RetryPolicy`: :meth:`next_delay` after each failed attempt,
    :meth:`reset` once it makes progress again (a reader that reads again need not wait long next time)."""

    def __init__(self, policy: RetryPolicy, rng: Callable[[], float] = random.random) -> None:
        self.policy = policy
        self.rng = rng
        self.tries = 0  # failed attempts so far
        self._delay = policy.initial_delay

    def next_delay(self) -> float | None:
        """How long to wait before the next attempt; None when the policy allows no more attempts."""
        self.tries += 1
        if self.policy.max_attempts and self.tries >= self.policy.max_attempts:
            return None
        delay = self._delay
        self._delay = min(self._delay * 2, self.policy.max_delay)
        return delay * (1.0 - self.policy.jitter * self.rng())

    def reset(self) -> None:
        self.tries = 0
        self._delay = self.policy.initial_delay
