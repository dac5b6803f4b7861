"""Unit tests of :mod:`eventhubs_spark.source.planner`."""

from __future__ import annotations

import itertools
import logging

import pytest

from eventhubs_spark.errors import DataLossError
from eventhubs_spark.options import BATCH
from eventhubs_spark.planning.offset_ranges import Range
from eventhubs_spark.source.planner import Planner
from tests.unit.support.planning import CONN, Table


def test_ranges_become_tasks_of_at_most_max_events_per_partition_each_carrying_the_query_settings():
    table = Table({"0": (0, 250), "1": (0, 40)})
    options = {
        "eventhubs.connectionString": CONN,
        "maxEventsPerPartition": "100",
        "eventhubs.useExclusiveReceiver": "false",
    }
    planner = Planner(options, BATCH, lambda: table)
    tasks = planner.input_partitions([Range("0", 0, 250), Range("1", 0, 40), Range("2", 5, 5)], owner="q1")
    pieces = [(r.partition, r.start, r.end) for t in tasks for r in t.requests]
    zero = [(start, end) for partition, start, end in pieces if partition == "0"]
    assert len(zero) == 3 and zero[0][0] == 0 and zero[-1][1] == 250, "split evenly, each at most 100"
    assert all(end - start <= 100 for start, end in zero) and all(a[1] == b[0] for a, b in itertools.pairwise(zero))
    assert [p for p in pieces if p[0] != "0"] == [("1", 0, 40)], "an empty range makes no task"
    request = tasks[0].requests[0]
    assert request.settings.hub == "hub" and request.owner == "q1" and request.fail_on_data_loss


def test_a_range_that_starts_before_the_retained_events_fails_or_skips_as_fail_on_data_loss_says(caplog):
    table = Table({"0": (50, 100)})
    info = table.partition_properties(["0"])["0"]
    strict = Planner({"eventhubs.connectionString": CONN}, BATCH, lambda: table)
    assert strict.check_data_loss("0", 60, 90, info) == 60, "nothing missing"
    assert strict.check_data_loss("0", 10, 10, info) == 10, "nothing to read"
    with pytest.raises(DataLossError) as lost:
        strict.check_data_loss("0", 10, 90, info)
    assert "failOnDataLoss" in str(lost.value)
    lenient = Planner({"eventhubs.connectionString": CONN, "failOnDataLoss": "false"}, BATCH, lambda: table)
    with caplog.at_level(logging.WARNING, logger="eventhubs_spark"):
        assert lenient.check_data_loss("0", 10, 90, info) == 50
    assert "40 events [10, 50) were lost to retention" in caplog.text
