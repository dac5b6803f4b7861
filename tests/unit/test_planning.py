"""Planning against a table of partitions: the readers ask a PartitionMetadata, so no hub is needed."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from eventhubs_spark.errors import DataLossError, OptionError
from eventhubs_spark.positions.partition_catalog import PartitionCatalog, PartitionInfo
from eventhubs_spark.source import EventHubsBatchReader, EventHubsStreamReader

CONN = "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=n;SharedAccessKey=k;EntityPath=hub"


class Table:
    """A hub as a table: partition id -> (first retained sequence number, next sequence number)."""

    def __init__(self, partitions: dict[str, tuple[int, int]]) -> None:
        self.partitions = dict(partitions)
        self.listings = 0

    def partition_ids(self) -> list[str]:
        self.listings += 1
        return sorted(self.partitions, key=int)

    def partition_properties(self, partition_ids: list[str]) -> dict[str, PartitionInfo]:
        now = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
        return {
            pid: PartitionInfo(pid, begin, end - 1, str(end * 100), now, begin >= end)
            for pid, (begin, end) in ((p, self.partitions[p]) for p in partition_ids)
        }


def ranges(partitions: list) -> list[tuple[str, int, int]]:
    return [(r.partition, r.start, r.end) for p in partitions for r in p.requests]


def test_a_stream_plans_ranges_by_backlog_and_picks_up_added_partitions():
    table = Table({"0": (0, 30), "1": (0, 10)})
    options = {
        "eventhubs.connectionString": CONN,
        "eventhubs.startingPosition": '{"seqNo": 0}',
        "maxEventsPerTrigger": "20",
        "eventhubs.partitionDiscoveryInterval": "0s",
    }
    reader = EventHubsStreamReader(options, metadata=lambda: table)
    start = reader.initialOffset()
    assert start == {"hub": {"0": 0, "1": 0}}
    end = reader.latestOffset()  # the no-argument form (Spark 4.0/4.1): maxEventsPerTrigger applies as it is
    assert sum(end["hub"].values()) == 20 and end["hub"]["0"] > end["hub"]["1"] > 0
    assert ranges(reader.partitions(start, end)) == [("0", 0, end["hub"]["0"]), ("1", 0, end["hub"]["1"])]
    table.partitions["2"] = (5, 8)  # added to the hub: read from its first retained event
    later = reader.latestOffset()
    assert "2" in later["hub"]
    assert ("2", 5, later["hub"]["2"]) in ranges(reader.partitions(end, later))


def test_events_removed_before_they_were_read_fail_the_plan_naming_the_range():
    table = Table({"0": (0, 100)})
    reader = EventHubsStreamReader({"eventhubs.connectionString": CONN}, metadata=lambda: table)
    table.partitions["0"] = (40, 100)  # retention removed [0, 40)
    with pytest.raises(DataLossError, match=r"\[10, 40\)"):
        reader.partitions({"hub": {"0": 10}}, {"hub": {"0": 60}})
    quiet = EventHubsStreamReader(
        {"eventhubs.connectionString": CONN, "failOnDataLoss": "false"}, metadata=lambda: table
    )
    assert ranges(quiet.partitions({"hub": {"0": 10}}, {"hub": {"0": 60}})) == [("0", 40, 60)]


def test_a_batch_read_stops_at_the_end_it_found_and_checks_its_ending_positions():
    table = Table({"0": (0, 50), "1": (10, 20)})
    batch = EventHubsBatchReader({"eventhubs.connectionString": CONN}, metadata=lambda: table)
    assert ranges(batch.partitions()) == [("0", 0, 50), ("1", 10, 20)]
    ending = {"eventhubs.connectionString": CONN, "eventhubs.endingPositions": json.dumps({"1": {"seqNo": 15}})}
    assert ranges(EventHubsBatchReader(ending, metadata=lambda: table).partitions()) == [("0", 0, 50), ("1", 10, 15)]
    wrong = {"eventhubs.connectionString": CONN, "eventhubs.startingPositions": json.dumps({"7": {"seqNo": 1}})}
    with pytest.raises(OptionError, match="no partition"):
        EventHubsBatchReader(wrong, metadata=lambda: table).partitions()


def test_the_catalog_lists_ids_once_for_a_batch_and_again_after_the_interval_for_a_stream():
    table = Table({"0": (0, 1)})
    now = [0.0]
    catalog = PartitionCatalog("hub", lambda: table, clock=lambda: now[0])
    catalog.infos()
    catalog.infos()
    assert table.listings == 1
    now[0] = 30
    catalog.infos(refresh_ids_after=60)
    assert table.listings == 1
    now[0] = 61
    catalog.infos(refresh_ids_after=60)
    assert table.listings == 2 and catalog.ids == ["0"]
