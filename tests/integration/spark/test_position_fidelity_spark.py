"""Every row of the position table, read by Spark: the same JSON selects the same events as
azure-event-hubs-spark did, as a start and as an end, in the single and the per-partition options."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import time

import pytest

from tests.integration.sdk_helpers import send
from tests.unit.planning.test_position_lookup import ROWS
from tests.unit.support.position_fidelity import COUNT, fill

pytestmark = pytest.mark.spark
_hubs = itertools.count()


@pytest.fixture(scope="module")
def hub(eventhubs_emulator):
    name = f"positions{next(_hubs)}"
    eventhubs_emulator.add_hub(name, 1)
    conn = eventhubs_emulator.connection_string(name)
    for i in range(COUNT):
        send(conn, [f"e{i}"], partition_id="0")
        time.sleep(0.005)  # a distinct enqueued time per event
    return conn


@pytest.fixture(scope="module")
def events(spark, hub):
    rows = spark.read.format("eventhubs").option("eventhubs.connectionString", hub).load().collect()
    rows = sorted(rows, key=lambda r: r.sequenceNumber)
    assert [r.sequenceNumber for r in rows] == list(range(COUNT))
    assert len({r.enqueuedTime for r in rows}) == COUNT
    return rows


def read(spark, hub: str, **options: str) -> list[int]:
    reader = spark.read.format("eventhubs").option("eventhubs.connectionString", hub)
    for key, value in options.items():
        reader = reader.option(key, value)
    return sorted(r.sequenceNumber for r in reader.load().collect())


@pytest.mark.parametrize(("index", "row"), list(enumerate(ROWS)))
def test_a_row_reads_what_the_old_connector_read(spark, hub, events, index, row):
    text, start, end = row
    offsets = [r.offset for r in events]
    times = [r.enqueuedTime.astimezone(dt.timezone.utc) for r in events]
    position = fill(text, offsets, times)
    per_partition = json.dumps({"0": json.loads(position)})
    # Alternate the single and the per-partition options, so each form is checked for starts and ends.
    start_option = ("eventhubs.startingPosition", position) if index % 2 else ("eventhubs.startingPositions",
                                                                                per_partition)  # fmt: skip
    end_option = ("eventhubs.endingPositions", per_partition) if index % 2 else ("eventhubs.endingPosition", position)
    assert read(spark, hub, **dict([start_option])) == list(range(start, COUNT)), f"{text} as a start"
    assert read(spark, hub, **dict([end_option])) == list(range(0, end)), f"{text} as an end"
