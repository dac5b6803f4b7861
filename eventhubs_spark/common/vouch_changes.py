"""A process-wide count of changes to what a receiver service's links can vouch for.

A running stream's driver asks each receiver service every trigger where its links' partitions end
(:mod:`eventhubs_spark.interprocess.partition_ends`), and an idle stream asks every 10 ms or so (Spark's polling
when no data came). Answering walks every receiver the service keeps: 1.3-2.5 ms of the service's CPU at 1,024
partitions, on the trigger's path, even when nothing moved. So whatever changes what a link vouches for counts here
(a link's newest event, its failure or end, its read-ahead filling or freed, a receiver taken by a task or given
back, a link opened), and a driver's connection that was told everything as of a count is answered "nothing new"
while the count stands (within a bound: :data:`eventhubs_spark.executor.home_listener.FULL_WALK_EVERY`).

The count is read before a walk and bumped after the change it stands for, so a change the walk missed moves the
count past what the walk was told as; two bumps that race may count once, which still moves it. A change that
forgot to count would at worst leave a driver with an end a moment behind (a vouch names an event that exists):
its events come in a later batch, never twice or lost.
"""

from __future__ import annotations


class _Count:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0


_COUNT = _Count()


def changed() -> None:
    """Something a link vouches for changed (called after the change)."""
    _COUNT.value += 1


def current() -> int:
    """The count now (read before looking at what the links vouch for)."""
    return _COUNT.value
