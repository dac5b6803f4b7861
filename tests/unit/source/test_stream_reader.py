"""Unit tests of :mod:`eventhubs_spark.source.stream_reader`."""

from __future__ import annotations

import datetime as dt
import logging

import pytest

from eventhubs_spark.errors import DataLossError
from eventhubs_spark.lag import LagFiles
from eventhubs_spark.positions.partition_catalog import PartitionInfo
from eventhubs_spark.source import LAG_KEY, EventHubsStreamReader
from tests.unit.support.lag import CONN as lag_CONN
from tests.unit.support.lag import at, info, micros
from tests.unit.support.planning import CONN as planning_CONN
from tests.unit.support.planning import Table as planning_Table
from tests.unit.support.planning import ranges


class Table:
    """Partition id -> (next sequence number, last enqueued time)."""

    def __init__(self, partitions: dict[str, tuple[int, dt.datetime]]) -> None:
        self.partitions = partitions

    def partition_ids(self) -> list[str]:
        return sorted(self.partitions, key=int)

    def partition_properties(self, ids: list[str]) -> dict[str, PartitionInfo]:
        return {p: info(p, *self.partitions[p]) for p in ids}


def test_the_stream_reader_logs_shows_and_writes_each_triggers_lag_and_names_a_stalled_partition(tmp_path, caplog):
    table = lag_Table({"0": (100, at(10)), "1": (20, at(20))})
    options = {
        "eventhubs.connectionString": lag_CONN,
        "eventhubs.startingPosition": '{"seqNo": 0}',
        "maxEventsPerTrigger": "60",
        "eventhubs.checkpointLocation": str(tmp_path),
        "eventhubs.lag.stalledAfterBatches": "2",
    }
    reader = EventHubsStreamReader(options, metadata=lambda: table)
    start = reader.initialOffset()
    caplog.set_level(logging.INFO, logger="eventhubs_spark")
    end = reader.latestOffset(start, None)  # before any batch: the whole backlog is behind
    assert end["hub"] == {"0": 50, "1": 10}  # 60 split by backlog
    shown = reader.reportLatestOffset()[LAG_KEY]
    assert shown["eventsBehindLatest"] == {"0": 100, "1": 20} and shown["maxOffsetsBehindLatest"] == 100
    assert shown["secondsBehindLatest"] == {"0": None, "1": None}  # nothing read yet: no time to go by
    assert "behind latest: events total=120 max=100" in caplog.text
    # the batch's tasks tell the driver the last event each read (0: event 49, enqueued at +6 s)
    reader._lag.read("0", 50, micros(at(6)))
    reader._lag.read("1", 10, micros(at(15)))
    later = reader.latestOffset(end, None)
    assert later["hub"] == {"0": 100, "1": 20}
    shown = reader.reportLatestOffset()[LAG_KEY]
    assert shown["eventsBehindLatest"] == {"0": 50, "1": 10}
    assert shown["secondsBehindLatest"] == {"0": 4.0, "1": 5.0}
    assert not shown["stalledPartitions"]
    # Spark runs the next batches, but partition 1 never gets past 10 (as when its tasks cannot read)
    stuck = {"hub": {"0": 100, "1": 10}}
    reader.latestOffset(stuck, None)
    assert not reader.reportLatestOffset()[LAG_KEY]["stalledPartitions"]
    assert "is stalled" not in caplog.text
    reader.latestOffset(stuck, None)  # the second batch in a row that left it
    shown = reader.reportLatestOffset()[LAG_KEY]
    assert shown["stalledPartitions"] == ["1"] and shown["eventsBehindLatest"] == {"0": 0, "1": 10}
    assert "hub hub partition 1 is stalled: 10 events waiting, no progress for 2 batches" in caplog.text
    reader.stop()  # the files are written by a thread of their own: stop() waits for them
    written = LagFiles(str(tmp_path), "hub").reports()
    assert [r.partitions["0"].events for r in written] == [100, 50, 0, 0]
    assert written[-1].partitions["1"].stalled and not written[-2].partitions["1"].stalled


def test_a_trigger_waits_for_the_last_batchs_reports_still_on_their_way_before_it_works_out_the_lag():
    """Tasks tell the driver what they read and do not wait for it to be taken (issue 87): a report may still be on
    its way when Spark starts the next trigger, which waits for it (at most REPORTS_WAIT) before its figures."""
    import threading

    from eventhubs_spark.planning.partition_homes import QueryDriver

    table = lag_Table({"0": (100, at(10)), "1": (20, at(20))})
    options = {"eventhubs.connectionString": lag_CONN, "eventhubs.startingPosition": '{"seqNo": 0}',
               "maxEventsPerTrigger": "60"}  # fmt: skip
    reader = EventHubsStreamReader(options, metadata=lambda: table)
    reader._driver = QueryDriver("hub", bind="127.0.0.1", on_read=reader._task_read)
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, None)
        reader.partitions(start, end)  # the batch runs: partitions 0 [0, 50) and 1 [0, 10)
        reader._task_read("1", 10, micros(at(15)), "1010")  # told as its task ended
        late = threading.Timer(0.3, reader._task_read, ("0", 50, micros(at(6)), "4900"))  # still on its way
        late.start()
        reader.latestOffset(end, None)
        shown = reader.reportLatestOffset()[LAG_KEY]
        assert shown["secondsBehindLatest"] == {"0": 4.0, "1": 5.0}, "the report on its way was waited for"
    finally:
        late.cancel()
        reader._driver.close()


def test_a_stream_plans_ranges_by_backlog_and_picks_up_added_partitions():
    table = planning_Table({"0": (0, 30), "1": (0, 10)})
    options = {
        "eventhubs.connectionString": planning_CONN,
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
    table = planning_Table({"0": (0, 100)})
    reader = EventHubsStreamReader({"eventhubs.connectionString": planning_CONN}, metadata=lambda: table)
    table.partitions["0"] = (40, 100)  # retention removed [0, 40)
    with pytest.raises(DataLossError, match=r"\[10, 40\)"):
        reader.partitions({"hub": {"0": 10}}, {"hub": {"0": 60}})
    quiet = EventHubsStreamReader(
        {"eventhubs.connectionString": planning_CONN, "failOnDataLoss": "false"}, metadata=lambda: table
    )
    assert ranges(quiet.partitions({"hub": {"0": 10}}, {"hub": {"0": 60}})) == [("0", 40, 60)]


lag_Table = Table


@pytest.mark.parametrize("partitions", [4, 1024])
def test_a_first_batchs_links_are_kept_long_enough_for_its_many_tasks(partitions):
    """Issue 64: the first trigger has no measured interval, and its links were kept idle 10 s whatever the
    partition count; a 1,024-partition first batch took 40 s, so every link it opened was closed before the second
    batch and attached again (2.0 attaches a partition in bench partitions). Now the first batch is taken to cost a
    task per partition: a small hub keeps the minimum, a big one more (within the maximum)."""
    from eventhubs_spark.source.planner import (
        FIRST_BATCH_TASK_SECONDS,
        MAX_STREAM_IDLE_TIMEOUT,
        MIN_STREAM_IDLE_TIMEOUT,
    )

    table = planning_Table({str(p): (0, 10) for p in range(partitions)})
    options = {"eventhubs.connectionString": planning_CONN, "eventhubs.startingPosition": '{"seqNo": 0}'}
    reader = EventHubsStreamReader(options, metadata=lambda: table)
    reader.latestOffset(reader.initialOffset())
    first = reader.idle_timeout()
    batch = max(MIN_STREAM_IDLE_TIMEOUT, partitions * FIRST_BATCH_TASK_SECONDS)
    assert first == min(3 * batch + 2, MAX_STREAM_IDLE_TIMEOUT)
    if partitions == 4:
        assert first == 3 * MIN_STREAM_IDLE_TIMEOUT + 2, "a small hub: unchanged"
    else:
        assert first == MAX_STREAM_IDLE_TIMEOUT and first > 40, "longer than the first batch took at 1,024"


def test_an_available_now_run_plans_its_batches_from_the_ends_it_fetched_when_it_began():
    """Issue 64: a Trigger.AvailableNow run's end is fixed when it begins (Spark 4.2+ calls
    prepareForTriggerAvailableNow), so its batches need no lookups: at 1,024 partitions each is 1,024 requests.
    Events that arrive during the run are left to the next run; the lag figures count what is left of this one.
    A stream not in such a run still looks up every trigger."""
    pytest.importorskip("pyspark.sql.streaming.datasource", reason="Spark 4.2+ only")
    from pyspark.sql.streaming.datasource import ReadMaxRows

    table = planning_Table({"0": (0, 30), "1": (0, 10)})
    options = {"eventhubs.connectionString": planning_CONN, "eventhubs.startingPosition": '{"seqNo": 0}'}
    reader = EventHubsStreamReader(options, metadata=lambda: table)
    reader.prepareForTriggerAvailableNow()  # Spark calls it as it builds the query's plan, before initialOffset
    asked = table.lookups
    start = reader.initialOffset()
    table.partitions["0"] = (0, 50)  # arrives during the run: not this run's
    ends, shown = [], []
    offset = start
    while True:
        end = reader.latestOffset(offset, ReadMaxRows(16))
        shown.append(reader.reportLatestOffset()[LAG_KEY]["eventsBehindLatest"])
        if end == offset:
            break
        ends.append(end["hub"])
        reader.partitions(offset, end)
        offset = end
    assert asked == 1 and table.lookups == asked  # no lookup after the run's own
    sizes = [sum(e.values()) - sum(b.values()) for b, e in zip([start["hub"], *ends[:-1]], ends, strict=True)]
    assert ends[-1] == {"0": 30, "1": 10} and sizes == [16, 16, 8]
    assert shown[0] == {"0": 30, "1": 10} and shown[-1] == {"0": 0, "1": 0}  # what is left of the run
    # a stream not in an AvailableNow run (a new reader: the same query restarted with another trigger)
    stream = EventHubsStreamReader(options, metadata=lambda: table)
    before = table.lookups
    first = stream.latestOffset(stream.initialOffset(), ReadMaxRows(1000))
    stream.latestOffset(first, ReadMaxRows(1000))
    assert table.lookups - before >= 2 and first["hub"] == {"0": 50, "1": 10}


def test_a_big_hubs_stream_plans_reports_and_writes_the_same_over_arrays_as_one_partition_at_a_time(tmp_path):
    """From ARRAYS_FROM partitions planning works over arrays (lag/columns.py): a stream of 200
    partitions, trigger after trigger, gives Spark the same offsets, the same progress and the same lag files as the
    same stream planned one partition at a time, with stalls, task reads and a hub that grows."""
    from eventhubs_spark.planning import offset_ranges

    n = 200
    ends = {str(i): 40 + (i * 7) % 90 for i in range(n)}
    table = Table({p: (e, at(e)) for p, e in ends.items()})
    readers = []
    for name in ("arrays", "loops"):
        options = {
            "eventhubs.connectionString": lag_CONN,
            "eventhubs.startingPosition": '{"seqNo": 0}',
            "maxEventsPerTrigger": "3000",
            "eventhubs.checkpointLocation": str(tmp_path / name),
            "eventhubs.lag.stalledAfterBatches": "2",
            "eventhubs.driverChannel": "false",
        }
        readers.append(EventHubsStreamReader(options, metadata=lambda: table))
    arrays, loops = readers
    default = offset_ranges.ARRAYS_FROM

    def both(call):
        got = call(arrays)
        offset_ranges.ARRAYS_FROM = 10**9
        try:
            want = call(loops)
        finally:
            offset_ranges.ARRAYS_FROM = default
        assert got == want
        return got

    start = both(lambda r: r.initialOffset())
    for trigger in range(6):
        end = both(lambda r, s=start: r.latestOffset(s, None))
        assert both(lambda r: r.reportLatestOffset())[LAG_KEY]["eventsBehindLatest"]
        both(lambda r, s=start, e=end: ranges(r.partitions(s, e)))
        read = dict(end["hub"])
        for p in list(read)[: 150 if trigger % 2 else 120]:  # the tasks of some partitions tell the driver
            for reader in readers:
                reader._lag.read(p, read[p], micros(at(read[p] - 1)))
        read.update({str(i): start["hub"][str(i)] for i in range(190, n)})  # these never move: they stall
        start = {"hub": read}
        for i in range(0, n, 3):  # the hub grows
            ends[str(i)] += 5 + trigger
        table.partitions = {p: (e, at(e)) for p, e in ends.items()}
    shown = both(lambda r: r.reportLatestOffset())[LAG_KEY]
    assert shown["stalledPartitions"] == [str(i) for i in range(190, n)]
    # each took its path
    assert arrays._lag.tracker._moving_columns is not None and loops._lag.tracker._moving_columns is None
    for reader in readers:
        reader.stop()  # the lag files written
    files = [LagFiles(str(tmp_path / name), "hub").reports() for name in ("arrays", "loops")]
    assert len(files[0]) == 6 and [r.to_json() | {"time": 0} for r in files[0]] == [
        r.to_json() | {"time": 0} for r in files[1]
    ]


class CountingTable(Table):
    """Counts the partitions whose properties were asked for."""

    def __init__(self, partitions: dict[str, tuple[int, dt.datetime]]) -> None:
        super().__init__(partitions)
        self.asked = 0

    def partition_properties(self, ids: list[str]) -> dict[str, PartitionInfo]:
        self.asked += len(ids)
        return super().partition_properties(ids)


def test_a_first_trigger_plans_from_the_properties_its_initial_offset_fetched_a_moment_before(monkeypatch):
    """Spark calls the first latestOffset right after initialOffset: asking every partition again told nothing new
    (1,024 requests at 1,024 partitions). Once, and only within FETCHED_FOR seconds; later triggers ask."""
    from eventhubs_spark.source import stream_reader

    table = CountingTable({"0": (10, at(1)), "1": (20, at(2))})
    options = {"eventhubs.connectionString": lag_CONN, "eventhubs.startingPosition": '{"seqNo": 0}'}
    reader = EventHubsStreamReader(options, metadata=lambda: table)
    start = reader.initialOffset()
    assert reader.initialOffset() == start and table.asked == 2  # Spark calls it twice on a first start
    assert reader.latestOffset(start, None)["hub"] == {"0": 10, "1": 20} and table.asked == 2
    reader.latestOffset(start, None)
    assert table.asked == 4  # the next trigger asks again
    late = EventHubsStreamReader(options, metadata=lambda: table)
    start = late.initialOffset()
    now = stream_reader.time.monotonic()
    monkeypatch.setattr(stream_reader.time, "monotonic", lambda: now + stream_reader.FETCHED_FOR + 1)
    late.latestOffset(start, None)
    assert table.asked == 8  # too long after: asked again
    ready = EventHubsStreamReader(options, metadata=lambda: table)
    ready.initialOffset()
    monkeypatch.undo()
    ready.prepareForTriggerAvailableNow()  # Trigger.AvailableNow's run takes them as its end too
    assert table.asked == 10 and ready._target == {"0": 10, "1": 20}


def test_the_offsets_the_reader_gives_are_known_when_spark_hands_them_back_the_initial_one_included(monkeypatch):
    """Spark hands each offset back parsed from the JSON it wrote (the first trigger's start is the initial offset):
    reading 1,024 partitions' positions again was 0.3-1 ms of a trigger. One the reader did not give (a checkpoint
    of an earlier process) is read, and a changed one is not taken for the one given."""
    import json

    from eventhubs_spark.planning.offset_ranges import SourceOffset

    table = planning_Table({"0": (0, 30), "1": (0, 10)})
    options = {"eventhubs.connectionString": planning_CONN, "eventhubs.startingPosition": '{"seqNo": 0}',
               "maxEventsPerTrigger": "20"}  # fmt: skip
    reader = EventHubsStreamReader(options, metadata=lambda: table)
    real = SourceOffset.from_json
    read: list[object] = []
    monkeypatch.setattr(SourceOffset, "from_json", staticmethod(lambda doc, hub: read.append(doc) or real(doc, hub)))

    def spark(doc: dict) -> dict:
        return json.loads(json.dumps(doc))  # Spark's copy of what it was given

    start = spark(reader.initialOffset())
    end = spark(reader.latestOffset(start, None))
    assert ranges(reader.partitions(start, spark(end))) == [("0", 0, end["hub"]["0"]), ("1", 0, end["hub"]["1"])]
    reader.commit(spark(end))
    later = spark(reader.latestOffset(end, None))
    assert later["hub"] == {"0": 30, "1": 10} and read == []
    restarted = EventHubsStreamReader(options, metadata=lambda: table)
    assert restarted.latestOffset(spark(end), None) == later and read == [end]  # a checkpoint's: read
    changed = {"hub": {"0": end["hub"]["0"] - 1, "1": end["hub"]["1"]}}
    assert ranges(reader.partitions(changed, later))[0] == ("0", end["hub"]["0"] - 1, 30) and read[-1] == changed


def test_a_quiet_batch_runs_a_task_a_home_and_runs_again_packed_the_same_after_a_restart():
    """Issue 87: with two or more homes, a quiet batch's small ranges share a task per home (each task reads from
    one executor's receivers, and every home runs one), and the batch's offset keeps the executors it was packed by,
    so a restarted query whose executors are others packs the batch it runs again the same (the exactly-once sink
    names rows by task and place). Offsets without a batch planned are the same offset, "@tasks" and all: Spark
    would otherwise plan an empty batch to move from one to the other."""
    import json

    from eventhubs_spark.planning.offset_ranges import TASKS_KEY
    from eventhubs_spark.planning.partition_homes import QueryDriver
    from eventhubs_spark.planning.partition_placement import homes

    table = planning_Table({str(p): (0, 15) for p in range(8)})
    options = {"eventhubs.connectionString": planning_CONN, "eventhubs.startingPosition": '{"seqNo": 0}'}

    def service(executor: str, port: int) -> dict:
        return {"kind": "service", "executor": executor, "hosts": ["127.0.0.1"], "port": port, "jvm": f"h:{port}"}

    def spark(doc: dict) -> dict:
        return json.loads(json.dumps(doc))

    def packed(tasks: list) -> list[list[str]]:
        return [[r.partition for r in task.requests] for task in tasks]

    def reader_with(executors: list[str]) -> tuple[EventHubsStreamReader, QueryDriver]:
        reader = EventHubsStreamReader(options, metadata=lambda: table)
        driver = QueryDriver("hub", bind="127.0.0.1")
        for i, executor in enumerate(executors):
            driver.handle(service(executor, 2000 + i))
        reader._driver = driver
        return reader, driver

    reader, driver = reader_with(["a", "b"])
    restarted, other = reader_with(["c", "d", "e"])
    try:
        start = spark(reader.initialOffset())
        end = spark(reader.latestOffset(start, None))
        assert end[TASKS_KEY] == {"homes": ["a", "b"]} and end["hub"] == {str(p): 15 for p in range(8)}
        tasks = packed(reader.partitions(start, end))
        home_of = homes("hub", [str(p) for p in range(8)], ["a", "b"])
        assert len(tasks) == 2 and sorted(p for t in tasks for p in t) == sorted(home_of)
        assert all(len({home_of[p] for p in t}) == 1 for t in tasks), f"a task reads from one home: {tasks}"
        assert packed(restarted.partitions(start, end)) == tasks, "run again by other executors: packed the same"
        assert restarted.latestOffset(spark(end), None) == end, "restarted, nothing new: the checkpoint's offset"
        assert reader.latestOffset(end, None) == end, "no batch planned: the offset Spark holds, unchanged"
        assert packed(reader.partitions(start, {"hub": end["hub"], TASKS_KEY: {}})) == [[str(p) for p in range(8)]], (
            "packed by events alone (one executor): one task for all"
        )
        assert packed(reader.partitions(start, {"hub": end["hub"]})) == [[str(p)] for p in range(8)], (
            "an earlier version's offset, which says nothing of its packing: a task a partition, as it planned it"
        )
    finally:
        driver.close()
        other.close()


def test_a_streams_first_batch_spreads_its_small_ranges_so_every_executor_runs_a_task_and_announces_its_service():
    """Issue 87: while the driver knows no executor's service (the first batch), small ranges share at least
    FIRST_TASKS tasks, so each executor of a small cluster runs one and its service tells the driver, and the homes
    are placed over all of them from the start (one task would leave every partition homed on one executor, the
    others' services announced later and partitions moved, their read-ahead thrown away). One home: by events."""
    import json

    from eventhubs_spark.planning.offset_ranges import TASKS_KEY
    from eventhubs_spark.planning.partition_homes import QueryDriver
    from eventhubs_spark.source.stream_reader import FIRST_TASKS

    table = planning_Table({str(p): (0, 15) for p in range(32)})
    options = {"eventhubs.connectionString": planning_CONN, "eventhubs.startingPosition": '{"seqNo": 0}',
               "maxEventsPerTrigger": "160"}  # fmt: skip
    reader = EventHubsStreamReader(options, metadata=lambda: table)
    start = json.loads(json.dumps(reader.initialOffset()))
    first = json.loads(json.dumps(reader.latestOffset(start, None)))
    assert first[TASKS_KEY] == {"spread": FIRST_TASKS}
    driver = QueryDriver("hub", bind="127.0.0.1")
    try:
        reader._driver = driver
        assert len(reader.partitions(start, first)) == FIRST_TASKS
        driver.handle({"kind": "service", "executor": "a", "hosts": ["127.0.0.1"], "port": 2000, "jvm": "h:1"})
        second = json.loads(json.dumps(reader.latestOffset(first, None)))
        assert second[TASKS_KEY] == {} and len(reader.partitions(first, second)) == 1, "one home: by events alone"
    finally:
        driver.close()
    one_each = EventHubsStreamReader({**options, "eventhubs.minEventsPerTask": "0"}, metadata=lambda: table)
    planned = one_each.latestOffset(one_each.initialOffset(), None)
    assert TASKS_KEY not in planned, "a task a partition: nothing to keep"
