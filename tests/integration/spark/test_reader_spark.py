"""The reader end to end: real Spark (local[2]) against the emulator, checked event by event."""

from __future__ import annotations

import datetime as dt
import json
import re
import socket
import time
from pathlib import Path

import pytest

from tests.integration.sdk_helpers import receive, send, wait_until

pytestmark = pytest.mark.spark


def fill(eventhub, per_partition: dict[int, int], prefix: str = "e") -> set[str]:
    """Send ``n`` events to each partition; returns the bodies."""
    bodies = set()
    for p, n in per_partition.items():
        batch = [f"{prefix}-{p}-{i}" for i in range(n)]
        send(eventhub.connection_string, batch, partition_id=str(p))
        bodies.update(batch)
    return bodies


def stream(spark, eventhub, tmp: Path, trigger: dict | None = None, **options):
    """Start a stream from the hub into a parquet sink at ``tmp``; returns the query."""
    reader = spark.readStream.format("eventhubs").option("eventhubs.connectionString", eventhub.connection_string)
    for k, v in options.items():
        reader = reader.option(k.replace("__", "."), v)
    return (
        reader.load()
        .selectExpr("cast(body as string) as body", "partition", "sequenceNumber", "offset", "enqueuedTime")
        .writeStream.format("parquet")
        .option("path", str(tmp / "data"))
        .option("checkpointLocation", str(tmp / "checkpoint"))
        .trigger(**(trigger or {"availableNow": True}))
        .start()
    )


def run_available_now(spark, eventhub, tmp: Path, **options) -> list[dict]:
    query = stream(spark, eventhub, tmp, **options)
    query.awaitTermination(180)
    assert query.exception() is None, query.exception()
    return [p for p in query.recentProgress if p["numInputRows"] > 0]


def output(spark, tmp: Path, files: bool = False) -> list[str]:
    """The sink's committed rows; ``files=True`` reads its files directly, skipping its metadata log."""
    from pyspark.errors import AnalysisException

    path = str(tmp / "data" / "*.parquet") if files else str(tmp / "data")
    try:
        return [r.body for r in spark.read.parquet(path).collect()]
    except AnalysisException as exc:  # nothing committed yet
        text = str(exc)
        if "UNABLE_TO_INFER_SCHEMA" in text or "Unable to infer schema" in text or "PATH_NOT_FOUND" in text:
            return []
        raise


def test_batch_read_everything_with_the_full_schema(spark, eventhub):
    from azure.eventhub import EventData, EventHubProducerClient

    bodies = fill(eventhub, {0: 3, 1: 2})
    with EventHubProducerClient.from_connection_string(eventhub.connection_string) as producer:
        event = EventData("with-props")
        event.properties = {"kind": "x", "n": 5}
        producer.send_batch([event], partition_key="device-1")
    df = spark.read.format("eventhubs").option("eventhubs.connectionString", eventhub.connection_string).load()
    assert [f.name for f in df.schema.fields] == [
        "body", "partition", "offset", "sequenceNumber", "enqueuedTime", "publisher", "partitionKey", "properties",
        "systemProperties",
    ]  # fmt: skip
    rows = df.collect()
    assert sorted(bytes(r.body).decode() for r in rows) == sorted([*bodies, "with-props"])
    keyed = next(r for r in rows if bytes(r.body) == b"with-props")
    assert keyed.partitionKey == "device-1"
    assert keyed.properties == {"kind": "x", "n": "5"}
    assert isinstance(keyed.enqueuedTime, dt.datetime)
    first = next(r for r in rows if bytes(r.body) == b"e-0-0")
    assert (first.partition, first.sequenceNumber, first.offset) == ("0", 0, "0")


def test_a_query_schema_of_some_columns_reads_them_in_its_order_in_batch_and_stream(spark, eventhub, tmp_path):
    """Spark gives Python sources no column pruning: a query that needs a few columns names them in a schema
    of its own, in any order and case, and gets exactly those; one that does not fit fails naming the column."""
    from pyspark.errors import PySparkException

    bodies = fill(eventhub, {0: 3, 1: 2}, "cols")
    conn = eventhub.connection_string
    df = spark.read.format("eventhubs").schema("SequenceNumber long, body binary, partition string")
    df = df.option("eventhubs.connectionString", conn).load()
    assert df.columns == ["SequenceNumber", "body", "partition"]
    rows = df.collect()
    assert sorted(bytes(r.body).decode() for r in rows) == sorted(bodies)
    assert sorted((r.partition, r.SequenceNumber) for r in rows) == [("0", 0), ("0", 1), ("0", 2), ("1", 0), ("1", 1)]

    reader = spark.readStream.format("eventhubs").schema("body binary, enqueuedTime timestamp")
    query = (
        reader.option("eventhubs.connectionString", conn).option("eventhubs.startingPosition", '{"offset": "-1"}')
        .load().writeStream.format("parquet").option("path", str(tmp_path / "data"))
        .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start()
    )  # fmt: skip
    query.awaitTermination(180)
    assert query.exception() is None, query.exception()
    written = spark.read.parquet(str(tmp_path / "data"))
    assert written.columns == ["body", "enqueuedTime"]
    assert sorted(bytes(r.body).decode() for r in written.collect()) == sorted(bodies)
    assert written.where("enqueuedTime is null").count() == 0

    bad = spark.read.format("eventhubs").schema("body string").option("eventhubs.connectionString", conn).load()
    with pytest.raises((PySparkException, Exception)) as info:
        bad.collect()
    message = str(info.value)
    assert "column 'body' of the query's schema is string" in message and '.schema("body binary")' in message


def test_the_suite_reads_over_the_workers_unix_domain_socket_where_spark_has_one(spark, eventhub):
    """The package's spark-defaults.conf turns on spark.python.unix.domain.socket.enabled (README
    "Performance"), so on Spark 4.1+ every Spark test here reads and writes through it; Spark 4.0 has no such
    socket and ignores the setting, and the compat run on 4.0 and the local-cluster and Connect apps (Spark's
    defaults) keep the TCP socket covered."""
    import os

    import pyspark

    fill(eventhub, {0: 4, 1: 4}, "uds")
    assert (
        spark.read.format("eventhubs").option("eventhubs.connectionString", eventhub.connection_string).load().count()
        == 8
    )
    # Spark tells its Python daemon which socket to open through this variable
    seen = spark.sparkContext.parallelize([0], 1).map(lambda _: os.environ.get("PYTHON_UNIX_DOMAIN_ENABLED")).collect()
    unix = tuple(int(x) for x in pyspark.__version__.split(".")[:2]) >= (4, 1)
    assert [value and value.lower() for value in seen] == (["true"] if unix else [None])  # the JVM says "True"


def test_stream_restarts_lose_nothing_and_duplicate_nothing(spark, eventhub, tmp_path):
    expected = fill(eventhub, {0: 50, 1: 30, 2: 0, 3: 7}, "a")
    run_available_now(spark, eventhub, tmp_path, eventhubs__startingPosition='{"offset": "-1"}')
    assert sorted(output(spark, tmp_path)) == sorted(expected)
    expected |= fill(eventhub, {0: 5, 2: 12}, "b")
    run_available_now(spark, eventhub, tmp_path, eventhubs__startingPosition='{"offset": "-1"}')
    expected |= fill(eventhub, {1: 3, 3: 9}, "c")
    run_available_now(spark, eventhub, tmp_path, eventhubs__startingPosition='{"offset": "-1"}')
    got = output(spark, tmp_path)
    assert len(got) == len(set(got)) == len(expected)
    assert set(got) == expected


def test_continuous_trigger_with_live_events_and_a_restart(spark, eventhub, tmp_path):
    query = stream(spark, eventhub, tmp_path, trigger={"processingTime": "1 second"},
                   eventhubs__startingPosition='{"offset": "-1"}')  # fmt: skip
    try:
        expected = fill(eventhub, {0: 20, 3: 20}, "live")
        wait_until(lambda: len(output(spark, tmp_path)) >= 40, timeout=90, message="first events")
    finally:
        query.stop()
    expected |= fill(eventhub, {1: 10, 2: 10}, "after")
    query = stream(spark, eventhub, tmp_path, trigger={"processingTime": "1 second"})
    try:
        wait_until(lambda: len(output(spark, tmp_path)) >= 60, timeout=90, message="events after restart")
    finally:
        query.stop()
    got = output(spark, tmp_path)
    assert sorted(got) == sorted(expected)


def test_a_running_stream_plans_from_its_executors_links_and_reads_live_events_exactly_once(spark, eventhub, tmp_path):
    """Issue 64: a running stream's triggers take each partition's end from the receiver service whose open link
    reads it (one question a service), not from a properties request a partition. Events sent while it runs are
    all read, each once, and the hub is asked (nearly) nothing once the links are open: without the executors'
    word every trigger asked all 4 partitions."""
    import threading
    import time

    from azure.eventhub import EventData, EventHubProducerClient

    expected = fill(eventhub, {0: 5, 1: 5, 2: 5, 3: 5}, "before")
    query = stream(spark, eventhub, tmp_path, trigger={"processingTime": "0.5 seconds"},
                   eventhubs__startingPosition='{"offset": "-1"}')  # fmt: skip
    stop = threading.Event()
    sent: set[str] = set()
    # one producer, opened before the count starts: the hub's management requests are then the query's own
    producer_client = EventHubProducerClient.from_connection_string(eventhub.connection_string)
    for p in range(4):
        producer_client.send_batch([EventData(f"warm-{p}")], partition_id=str(p))
        expected.add(f"warm-{p}")

    def produce() -> None:
        round_ = 0
        while not stop.is_set():
            for p in range(4):
                bodies = [f"live{round_}-{p}-{i}" for i in range(3)]
                producer_client.send_batch([EventData(b) for b in bodies], partition_id=str(p))
                sent.update(bodies)
            round_ += 1
            time.sleep(0.2)

    try:
        wait_until(lambda: len(output(spark, tmp_path)) >= 24, timeout=90, message="the events sent before")
        wait_until(lambda: len(query.recentProgress) >= 3, timeout=60, message="triggers after the first batch")
        asked_before = eventhub.emulator.stats()["management_requests"]
        batches_before = query.lastProgress["batchId"]
        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        time.sleep(8)
        stop.set()
        producer.join(30)
        expected |= sent
        wait_until(lambda: len(output(spark, tmp_path)) >= len(expected), timeout=90, message="every live event")
        asked = eventhub.emulator.stats()["management_requests"] - asked_before
        batches = query.lastProgress["batchId"] - batches_before
    finally:
        stop.set()
        query.stop()
        producer_client.close()
    got = output(spark, tmp_path)
    assert len(got) == len(set(got)) and set(got) == expected, "every event once"
    assert batches >= 5, f"{batches} micro-batches while events arrived"
    assert asked <= batches, f"{asked} management requests over {batches} micro-batches (4 a trigger before)"


def test_default_stream_start_is_the_end_of_the_stream(spark, eventhub, tmp_path):
    fill(eventhub, {0: 10}, "old")
    assert run_available_now(spark, eventhub, tmp_path) == []
    fresh = fill(eventhub, {0: 4}, "new")
    run_available_now(spark, eventhub, tmp_path)
    assert sorted(output(spark, tmp_path)) == sorted(fresh)


def test_available_now_reads_what_was_there_in_limited_batches(spark, eventhub, tmp_path):
    from eventhubs_spark.source import HAS_ADMISSION_CONTROL

    expected = fill(eventhub, {0: 120, 1: 60, 2: 20, 3: 0})
    progress = run_available_now(
        spark, eventhub, tmp_path, eventhubs__startingPosition='{"offset": "-1"}', maxEventsPerTrigger="50"
    )
    if not HAS_ADMISSION_CONTROL:
        # Spark 4.0/4.1: AvailableNow takes the first limited answer as the end of the run; each run
        # reads one batch of at most maxEventsPerTrigger and the next run goes on from there.
        runs = [progress]
        for _ in range(3):
            runs.append(run_available_now(spark, eventhub, tmp_path, maxEventsPerTrigger="50"))
        assert [[p["numInputRows"] for p in run] for run in runs] == [[50], [50], [50], [50]]
        assert sorted(output(spark, tmp_path)) == sorted(expected)
        return
    assert [p["numInputRows"] for p in progress] == [50, 50, 50, 50]
    assert sorted(output(spark, tmp_path)) == sorted(expected)
    # the last batch's end offsets name every partition's end
    end = progress[-1]["sources"][0]["endOffset"]
    end = json.loads(end) if isinstance(end, str) else end
    assert end[eventhub.name] == {"0": 120, "1": 60, "2": 20, "3": 0}
    assert set(end) <= {eventhub.name, "@tasks"}, end  # beside the positions, how the batch's tasks were packed


def test_trigger_available_now_option_reads_the_backlog_in_one_run_on_every_spark(spark, eventhub, tmp_path):
    """Spark 4.0/4.1 give the source no sign of its trigger: with eventhubs.triggerAvailableNow=true a run
    reads everything there is in its one batch. Spark 4.2+ reads it in capped batches (admission control)."""
    from eventhubs_spark.source import HAS_ADMISSION_CONTROL

    expected = fill(eventhub, {0: 120, 1: 60, 2: 20, 3: 0})
    options = {"eventhubs__startingPosition": '{"offset": "-1"}', "maxEventsPerTrigger": "50",
               "eventhubs__triggerAvailableNow": "true"}  # fmt: skip
    progress = run_available_now(spark, eventhub, tmp_path, **options)
    assert [p["numInputRows"] for p in progress] == ([50, 50, 50, 50] if HAS_ADMISSION_CONTROL else [200])
    assert sorted(output(spark, tmp_path)) == sorted(expected)
    later = fill(eventhub, {1: 30}, "later")
    progress = run_available_now(spark, eventhub, tmp_path, **options)  # the next run: what came since
    assert sum(p["numInputRows"] for p in progress) == 30
    assert sorted(output(spark, tmp_path)) == sorted(expected | later)


def test_rate_limit_splits_by_backlog_and_progress_shows_the_lag(spark, eventhub, tmp_path):
    from eventhubs_spark.source import HAS_ADMISSION_CONTROL

    fill(eventhub, {0: 300, 1: 100, 2: 1})
    query = stream(spark, eventhub, tmp_path, trigger={"processingTime": "500 milliseconds"},
                   eventhubs__startingPosition='{"offset": "-1"}', maxEventsPerTrigger="40")  # fmt: skip
    try:
        wait_until(lambda: len(output(spark, tmp_path)) == 401, timeout=120, message="all events")
    finally:
        query.stop()
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    assert all(p["numInputRows"] <= 40 for p in batches) and len(batches) >= 10
    rows = spark.read.parquet(str(tmp_path / "data")).groupBy("partition").count().collect()
    assert {r.partition: r["count"] for r in rows} == {"0": 300, "1": 100, "2": 1}

    def as_dict(value):
        if not isinstance(value, str):
            return value
        try:
            return json.loads(value)
        except json.JSONDecodeError:  # Spark 4.0 shows the source's dict as Python text
            import ast

            return ast.literal_eval(value)

    source = batches[0]["sources"][0]
    taken = as_dict(source["endOffset"])[eventhub.name]
    assert taken["2"] == 1 and taken["0"] > taken["1"] > 0  # proportional to backlog, nobody starved
    if HAS_ADMISSION_CONTROL:
        # the latest available offsets travel in the progress, so the lag is end vs latest
        assert as_dict(source["latestOffset"])[eventhub.name] == {"0": 300, "1": 100, "2": 1, "3": 0}


@pytest.mark.partitions(160)
def test_a_stream_over_many_partitions_plans_over_arrays_and_reads_every_event_once(spark, eventhub, tmp_path):
    """From 128 partitions the driver works each trigger out over arrays (lag/columns.py; the other tests'
    hubs are planned one partition at a time): a running stream on 160 partitions, a few of them with events, the
    rest empty, reads every event once within its rate limit, and its progress shows the lag of the partitions
    furthest behind (eventhubs.lag.progressPartitions) and the whole hub's summary."""
    import ast

    from eventhubs_spark.source import HAS_ADMISSION_CONTROL, LAG_KEY

    bodies = fill(eventhub, {0: 40, 37: 25, 128: 30, 159: 5})
    query = stream(spark, eventhub, tmp_path, trigger={"processingTime": "500 milliseconds"},
                   eventhubs__startingPosition='{"offset": "-1"}', maxEventsPerTrigger="30",
                   eventhubs__minEventsPerTask="500")  # fmt: skip
    try:
        wait_until(lambda: len(output(spark, tmp_path)) == len(bodies), timeout=180, message="all events")
        if HAS_ADMISSION_CONTROL:  # a trigger after the last event was read: nothing behind anywhere
            wait_until(lambda: query.lastProgress and query.lastProgress["numInputRows"] == 0, timeout=60,
                       message="a trigger with nothing left")  # fmt: skip
    finally:
        query.stop()
    got = output(spark, tmp_path)
    assert sorted(got) == sorted(bodies) and len(got) == len(bodies)
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    assert all(p["numInputRows"] <= 30 for p in batches) and len(batches) >= 4
    if HAS_ADMISSION_CONTROL:
        shown = query.lastProgress["sources"][0]["latestOffset"]
        doc = json.loads(shown) if isinstance(shown, str) and shown.startswith('{"') else shown
        doc = ast.literal_eval(doc) if isinstance(doc, str) else doc
        lag = doc[LAG_KEY]
        # eventhubs.lag.progressPartitions (100): nothing behind anywhere, so the first 100, in partition order
        assert len(lag["eventsBehindLatest"]) == 100 and set(lag["eventsBehindLatest"].values()) == {0}
        assert list(lag["eventsBehindLatest"]) == [str(i) for i in range(100)], "in partition order"
        assert lag["partitionsShown"].startswith("the 100 of 160 partitions furthest behind")
        assert lag["maxSecondsBehindLatest"] == 0.0 and lag["stalledPartitions"] == []
        assert doc[eventhub.name]["0"] == 40 and doc[eventhub.name]["159"] == 5 and doc[eventhub.name]["1"] == 0


def test_min_events_per_trigger_waits_then_max_trigger_delay_releases(spark, eventhub, tmp_path):
    fill(eventhub, {0: 3})
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "100ms")  # a progress event per idle trigger
    try:
        query = stream(spark, eventhub, tmp_path, trigger={"processingTime": "500 milliseconds"},
                       eventhubs__startingPosition='{"offset": "-1"}', minEventsPerTrigger="10",
                       maxTriggerDelay="6s")  # fmt: skip
    finally:
        spark.conf.unset("spark.sql.streaming.noDataProgressEventInterval")
    try:
        wait_until(lambda: len(query.recentProgress) >= 3, timeout=30, message="three triggers")
        assert [p["numInputRows"] for p in query.recentProgress[:3]] == [0, 0, 0]  # the triggers ran, read nothing
        assert output(spark, tmp_path) == []  # 3 < 10 and the delay has not passed
        wait_until(lambda: len(output(spark, tmp_path)) == 3, timeout=60, message="release after maxTriggerDelay")
        fill(eventhub, {1: 12}, "many")
        wait_until(lambda: len(output(spark, tmp_path)) == 15, timeout=60, message="enough events")
    finally:
        query.stop()


def test_positions_of_every_kind_in_batch_reads(spark, eventhub):
    fill(eventhub, {0: 10})
    everything = receive(eventhub.connection_string, 10, partition_id="0", starting_position="-1")
    offset_4 = everything[4].offset
    time_6 = everything[6].enqueued_time

    def read(**options) -> list[int]:
        reader = spark.read.format("eventhubs").option("eventhubs.connectionString", eventhub.connection_string)
        for k, v in options.items():
            reader = reader.option(k.replace("__", "."), v)
        return sorted(r.sequenceNumber for r in reader.load().where("partition = '0'").collect())

    assert read(eventhubs__startingPosition='{"offset": "-1"}') == list(range(10))
    assert read(eventhubs__startingPosition='{"offset": "@latest"}') == []
    # as azure-event-hubs-spark: seqNo as it is, offsets inclusive by default, enqueued times strictly after
    assert read(eventhubs__startingPosition='{"seqNo": 3}') == list(range(3, 10))
    assert read(eventhubs__startingPosition='{"seqNo": 3, "isInclusive": false}') == list(range(3, 10))
    assert read(eventhubs__startingPosition=json.dumps({"offset": offset_4})) == list(range(4, 10))
    assert read(eventhubs__startingPosition=json.dumps({"offset": offset_4, "isInclusive": False})) == list(
        range(5, 10)
    )
    iso = time_6.isoformat()
    after_6 = [i for i, e in enumerate(everything) if e.enqueued_time > time_6]  # one send: often none
    assert read(eventhubs__startingPosition=json.dumps({"enqueuedTime": iso, "isInclusive": True})) == after_6
    assert read(eventhubs__startingPositions='{"0": {"seqNo": 7, "isInclusive": true}}') == [7, 8, 9]
    # ending positions: the named event is the first one not read
    assert read(eventhubs__startingPosition='{"seqNo": 2, "isInclusive": true}',
                eventhubs__endingPosition='{"seqNo": 5}') == [2, 3, 4]  # fmt: skip
    assert read(eventhubs__endingPositions='{"0": {"seqNo": 5, "isInclusive": true}}') == [0, 1, 2, 3, 4]
    assert read(eventhubs__endingPosition=json.dumps({"offset": offset_4})) == [0, 1, 2, 3]
    assert read(eventhubs__endingPosition=json.dumps({"offset": offset_4, "isInclusive": False})) == [0, 1, 2, 3, 4]


def test_stream_starting_positions_per_partition(spark, eventhub, tmp_path):
    fill(eventhub, {0: 10, 1: 10})
    positions = json.dumps({"0": {"seqNo": 7, "isInclusive": True}, "1": {"offset": "@latest"}})
    run_available_now(spark, eventhub, tmp_path, eventhubs__startingPositions=positions,
                      eventhubs__startingPosition='{"offset": "-1"}')  # fmt: skip
    assert sorted(output(spark, tmp_path)) == ["e-0-7", "e-0-8", "e-0-9"]


def test_split_of_a_large_partition_into_several_tasks(spark, eventhub):
    fill(eventhub, {0: 1000})
    df = (
        spark.read.format("eventhubs")
        .option("eventhubs.connectionString", eventhub.connection_string)
        .option("maxEventsPerPartition", "300")
        .option("eventhubs.useExclusiveReceiver", "false")
        .load()
    )
    assert df.rdd.getNumPartitions() == 4
    seqs = sorted(r.sequenceNumber for r in df.collect())
    assert seqs == list(range(1000))


def test_small_ranges_share_tasks_by_default_and_zero_keeps_one_task_per_partition(spark, eventhub, tmp_path):
    """By default the small ranges of a read share tasks of about eventhubs.minEventsPerTask events (here all four
    partitions' 660 events: one task), each still read in order, once; 0 keeps one Spark partition per Event Hubs
    partition, as the old connector. With eventhubs.minEventsPerTask set lower, a large range keeps its own task,
    and eventhubs.maxPartitionsPerTask bounds how many share one; through the receiver service too (a stream)."""
    from pyspark.sql.functions import spark_partition_id

    bodies = fill(eventhub, {0: 30, 1: 20, 2: 10, 3: 600})

    def batch_read(**options: str):
        reader = spark.read.format("eventhubs").option("eventhubs.connectionString", eventhub.connection_string)
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.load()

    assert batch_read().rdd.getNumPartitions() == 1
    assert batch_read(**{"eventhubs.minEventsPerTask": "0"}).rdd.getNumPartitions() == 4
    packed = batch_read(**{"eventhubs.minEventsPerTask": "100"})
    assert packed.rdd.getNumPartitions() == 2
    rows = packed.select("partition", "sequenceNumber", spark_partition_id().alias("task")).collect()
    tasks: dict[int, set[str]] = {}
    for r in rows:
        tasks.setdefault(r.task, set()).add(r.partition)
    assert sorted(map(sorted, tasks.values())) == [["0", "1", "2"], ["3"]]
    for partition, count in {"0": 30, "1": 20, "2": 10, "3": 600}.items():
        assert [r.sequenceNumber for r in rows if r.partition == partition] == list(range(count))
    bounded = batch_read(**{"eventhubs.minEventsPerTask": "100", "eventhubs.maxPartitionsPerTask": "2"})
    assert bounded.rdd.getNumPartitions() == 3, "at most two partitions per task: two tasks for 0-2, and 3"
    assert sorted(r.body for r in bounded.selectExpr("cast(body as string) as body").collect()) == sorted(bodies)
    run_available_now(spark, eventhub, tmp_path, eventhubs__startingPosition='{"offset": "-1"}',
                      eventhubs__minEventsPerTask="100", eventhubs__maxPartitionsPerTask="2",
                      eventhubs__receiverService="true")  # fmt: skip
    got = output(spark, tmp_path)
    assert sorted(got) == sorted(bodies) and len(got) == len(bodies)


@pytest.mark.partitions(2)
def test_partitions_added_while_the_query_runs(spark, eventhub, tmp_path):
    expected = fill(eventhub, {0: 5, 1: 5}, "before")
    query = stream(spark, eventhub, tmp_path, trigger={"processingTime": "500 milliseconds"},
                   eventhubs__startingPosition='{"offset": "-1"}',
                   eventhubs__partitionDiscoveryInterval="1s")  # fmt: skip
    try:
        wait_until(lambda: len(output(spark, tmp_path)) == 10, timeout=60, message="first events")
        eventhub.emulator.add_partitions(eventhub.name, 2)
        expected |= fill(eventhub, {2: 6, 3: 4}, "added")
        wait_until(lambda: len(output(spark, tmp_path)) == 20, timeout=60, message="events of new partitions")
    finally:
        query.stop()
    assert sorted(output(spark, tmp_path)) == sorted(expected)


def test_resume_from_an_old_connector_shaped_checkpoint(spark, eventhub, tmp_path):
    import shutil

    fill(eventhub, {p: 10 for p in range(4)}, "old")
    run_available_now(spark, eventhub, tmp_path, eventhubs__startingPosition='{"offset": "-1"}')
    offsets = tmp_path / "checkpoint" / "offsets"
    assert sorted(p.name for p in offsets.iterdir() if not p.name.startswith(".")) == ["0"]
    # Batch 0's end as azure-event-hubs-spark wrote it: {"<hub>":{"<partition>":<next seqNo>}}, further back.
    lines = (offsets / "0").read_text().splitlines()
    lines[-1] = '{"' + eventhub.name + '":{"3":5,"2":5,"1":5,"0":5}}'
    (offsets / "0").write_text("\n".join(lines) + "\n")
    for crc in offsets.glob(".*.crc"):
        crc.unlink()
    shutil.rmtree(tmp_path / "data")
    fill(eventhub, {p: 2 for p in range(4)}, "new")
    run_available_now(spark, eventhub, tmp_path)
    expected = {f"old-{p}-{i}" for p in range(4) for i in range(5, 10)} | {
        f"new-{p}-{i}" for p in range(4) for i in (0, 1)
    }
    got = output(spark, tmp_path, files=True)
    assert len(got) == len(expected) and set(got) == expected


def test_data_loss_fails_or_continues(spark, eventhub, tmp_path):
    fill(eventhub, {0: 10})
    run_available_now(spark, eventhub, tmp_path, eventhubs__startingPosition='{"offset": "-1"}')
    assert len(output(spark, tmp_path)) == 10
    fill(eventhub, {0: 10}, "gone")
    eventhub.emulator.trim(eventhub.name, 0, 15)
    query = stream(spark, eventhub, tmp_path)
    with pytest.raises(Exception, match="DataLossError"):
        query.awaitTermination(180)
    error = str(query.exception())
    assert f"hub '{eventhub.name}' partition 0" in error and "[10, 15)" in error and "failOnDataLoss" in error
    run_available_now(spark, eventhub, tmp_path, failOnDataLoss="false")
    got = output(spark, tmp_path)
    assert sorted(b for b in got if b.startswith("gone")) == sorted(f"gone-0-{i}" for i in range(5, 10))


def test_bad_options_fail_clearly_through_spark(spark, eventhub):
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    def error_of(**options) -> str:
        reader = spark.read.format("eventhubs")
        for k, v in options.items():
            reader = reader.option(k.replace("__", "."), v)
        with pytest.raises((PySparkException, Py4JJavaError, Exception)) as info:
            reader.load().collect()
        return str(info.value)

    assert "eventhubs.connectionString (or eventhubs.namespace) is required" in error_of()
    message = error_of(eventhubs__connectionString=eventhub.connection_string, maxEventsPerTrigger="5")
    assert "maxEventsPerTrigger applies to streaming reads" in message
    message = error_of(eventhubs__connectionString=eventhub.connection_string, eventhubs__startingPosition="{bad")
    assert "eventhubs.startingPosition: not valid JSON" in message and '{"offset": "-1"}' in message
    secret = eventhub.connection_string.split("SharedAccessKey=")[1].split(";")[0]
    message = error_of(eventhubs__connectionString=eventhub.connection_string.replace("EntityPath", "Entity"))
    assert "EntityPath" in message and secret not in message


MISTAKES = {
    "missing consumer group": (
        "consumer group 'nosuchgroup' was not found",
        {"eventhubs.consumerGroup": "nosuchgroup"},
    ),
    "wrong port": ("refused the connection", {}),
    "wrong key": ("could not sign in to", {}),
}


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_a_wrong_setting_fails_in_seconds_once_with_our_message_first(spark, tmp_path, mistake):
    """Each mistake a newcomer makes with a real namespace's details fails on the driver before any task runs, in
    seconds (a refused port is a wrong address on the query's first contact, not a blip to retry; a missing
    consumer group is found by one link's attach), once, and the exception a user reads carries our message within
    three lines of Spark's own header line, for a batch read's action and a stream's start, on every Spark (it was
    35-60 s in, after task retries, 54 lines down)."""
    from eventhubs_emulator import Emulator

    ours, options = MISTAKES[mistake]
    with Emulator({"hub": 1}, keys={"reader": "cmlnaHQta2V5"}) as emu:
        conn = emu.connection_string("hub")
        if mistake == "wrong port":
            with socket.socket() as probe:  # a port nothing listens on
                probe.bind(("127.0.0.1", 0))
                conn = conn.replace(f":{emu.port}", f":{probe.getsockname()[1]}")
        if mistake == "wrong key":
            conn = conn.replace("SharedAccessKey=cmlnaHQta2V5", "SharedAccessKey=d3Jvbmcta2V5")
        send(emu.connection_string("hub"), ["x"], partition_id="0")
        # the session's Python workers warm (a first action of a session starts them: seconds that are not ours)
        spark.read.format("eventhubs").option("eventhubs.connectionString", emu.connection_string("hub")).load().count()

        def read(stream: bool):
            reader = spark.readStream if stream else spark.read
            return (reader.format("eventhubs").option("eventhubs.connectionString", conn)
                    .option("eventhubs.startingPosition", '{"offset": "-1"}').options(**options).load())  # fmt: skip

        started = time.monotonic()
        with pytest.raises(Exception, match=re.escape(ours)) as batch:
            read(stream=False).collect()
        batch_seconds = time.monotonic() - started
        query = read(stream=True).writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp")).start()
        started = time.monotonic()
        try:
            with pytest.raises(Exception, match=re.escape(ours)) as stream:
                query.awaitTermination(120)
        finally:
            query.stop()
        stream_seconds = time.monotonic() - started

    def line_of(exc: BaseException) -> int:
        lines = str(exc).splitlines()
        return next(i for i, line in enumerate(lines) if ours in line)  # lines below the header (line 0)

    print(f"{mistake}: batch {batch_seconds:.1f} s, line {line_of(batch.value)}; stream {stream_seconds:.1f} s, "
          f"line {line_of(stream.value)}")  # fmt: skip
    assert batch_seconds < 10 and stream_seconds < 10, (batch_seconds, stream_seconds)
    assert line_of(batch.value) <= 3 and line_of(stream.value) <= 3, str(stream.value)[:2000]
    assert str(batch.value).count(ours) == 1 and str(stream.value).count(ours) == 1
