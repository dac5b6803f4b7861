"""Helpers shared by the unit tests that came from test_lag.py."""

from __future__ import annotations

import datetime as dt

from eventhubs_spark.lag import LagTracker
from eventhubs_spark.positions.partition_catalog import PartitionInfo

CONN = "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=n;SharedAccessKey=k;EntityPath=hub"


T0 = dt.datetime(2026, 11, 25, 12, 0, tzinfo=dt.timezone.utc)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def micros(when: dt.datetime) -> int:
    return int((when - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)).total_seconds() * 1_000_000)


def info(pid: str, end: int, last_time: dt.datetime | None, begin: int = 0) -> PartitionInfo:
    """A partition whose next sequence number is ``end`` (0: empty), its last event enqueued at ``last_time``."""
    return PartitionInfo(pid, begin, end - 1, str(end), last_time, end <= begin)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def tracker(**kwargs) -> tuple[LagTracker, Clock]:
    clock = Clock()
    return LagTracker("hub", clock=clock, wall=lambda: T0, **kwargs), clock
