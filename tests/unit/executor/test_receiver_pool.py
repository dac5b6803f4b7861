"""Unit tests of :mod:`eventhubs_spark.executor.receiver_pool`."""

from __future__ import annotations

from eventhubs_spark.auth.settings import parse_connection_string
from eventhubs_spark.executor.receiver_pool import ReceiverPool
from eventhubs_spark.interprocess.task_ranges import ReceiverConfig
from tests.unit.support.displacement import SETTINGS
from tests.unit.support.reader import CONN


def test_idle_receivers_close_after_the_time_their_task_gave_even_without_another_task():
    clock = Clock()
    pool = ReceiverPool(idle_timeout=300, clock=clock, factory=FakeReceiver)
    config = ReceiverConfig()
    short = pool.acquire(SETTINGS, config, "0", 0, idle_timeout=5)
    long = pool.acquire(SETTINGS, config, "1", 0, idle_timeout=60)
    busy = pool.acquire(SETTINGS, config, "2", 0, idle_timeout=1)
    pool.release(short, True)
    pool.release(long, True)
    clock.now = 5.5
    assert pool.reap() == 1 and short.closed and not long.closed
    clock.now = 1000
    assert pool.reap() == 1 and long.closed
    assert not busy.closed, "a receiver in use is never closed"
    pool.release(busy, True)
    assert pool.reap() == 0, "idle time counts from the release"
    clock.now = 1001.5
    assert pool.reap() == 1 and busy.closed and len(pool) == 0


class FakeReceiver:
    def __init__(self, settings, config, partition):
        self.settings, self.config, self.partition = settings, config, partition
        self.position = None
        self.closed = False

    def close(self):
        self.closed = True

    def newest_end(self):
        return None  # vouches for nothing (tests of what receivers vouch for: test_partition_receiver.py)


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_pool_reuses_expires_and_invalidates():
    clock = Clock()
    pool = ReceiverPool(capacity=2, idle_timeout=10, clock=clock, factory=FakeReceiver)
    settings = parse_connection_string(CONN)
    config = ReceiverConfig()
    first = pool.acquire(settings, config, "0", start=0)
    first.position = 100
    pool.release(first, healthy=True)
    again = pool.acquire(settings, config, "0", start=100)
    assert again is first and pool.stats.hits == 1
    pool.release(again, healthy=True)
    # a task retry never reuses
    retried = pool.acquire(settings, config, "0", start=100, retry=True)
    assert retried is not first and first.closed
    pool.release(retried, healthy=False)
    assert retried.closed and len(pool) == 0
    # an entry in use is never evicted, even over capacity
    a = pool.acquire(settings, config, "1", 0)
    b = pool.acquire(settings, config, "2", 0)
    c = pool.acquire(settings, config, "3", 0)
    assert not (a.closed or b.closed or c.closed)
    for r in (a, b, c):
        pool.release(r, healthy=True)
    assert len(pool) == 2
    clock.now = 100
    d = pool.acquire(settings, config, "4", 0)
    assert len(pool) == 1 and pool.stats.evictions >= 3
    pool.release(d, True)
    assert 0 < pool.stats.reuse_rate() < 1


def test_a_pool_serving_1024_partitions_attaches_each_once_over_many_micro_batches():
    """The default capacity holds every partition of the largest hub: no evict-and-reattach each micro-batch."""
    clock = Clock()
    pool = ReceiverPool(idle_timeout=60, clock=clock, factory=FakeReceiver)
    settings = parse_connection_string(CONN)
    config = ReceiverConfig()
    for batch in range(4):
        for p in range(1024):
            receiver = pool.acquire(settings, config, str(p), start=batch * 10)
            receiver.position = (batch + 1) * 10
            pool.release(receiver, healthy=True)
        clock.now += 5  # the next trigger, within the idle time-out
    assert pool.stats.creates == 1024 and pool.stats.evictions == 0 and pool.stats.hits == 3 * 1024
