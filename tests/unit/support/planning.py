"""Helpers shared by the unit tests that came from test_planning.py."""

from __future__ import annotations

import datetime as dt

from eventhubs_spark.positions.partition_catalog import PartitionInfo

CONN = "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=n;SharedAccessKey=k;EntityPath=hub"


class Table:
    """A hub as a table: partition id -> (first retained sequence number, next sequence number)."""

    def __init__(self, partitions: dict[str, tuple[int, int]]) -> None:
        self.partitions = dict(partitions)
        self.listings = 0
        self.lookups = 0  # partition_properties calls: a trigger's lookup, a request per partition on a hub

    def partition_ids(self) -> list[str]:
        self.listings += 1
        return sorted(self.partitions, key=int)

    def partition_properties(self, partition_ids: list[str]) -> dict[str, PartitionInfo]:
        self.lookups += 1
        now = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
        return {
            pid: PartitionInfo(pid, begin, end - 1, str(end * 100), now, begin >= end)
            for pid, (begin, end) in ((p, self.partitions[p]) for p in partition_ids)
        }


def ranges(partitions: list) -> list[tuple[str, int, int]]:
    return [(r.partition, r.start, r.end) for p in partitions for r in p.requests]
