"""The sink against the plain SDK's ``send_batch`` on the same rows, same emulator, one run.

Both write N events of S bytes to a 4-partition hub on an emulator running in its own process. The
SDK side packs ``EventDataBatch`` objects round-robin over the partitions in one process, as a
careful hand-written producer would; the connector side is ``df.write.format("eventhubs")`` from a
cached DataFrame in ``local[2]``, timed on a warm second run (the first run starts Python workers).
The same write with ``eventhubs.sink.exactlyOnce`` follows (a new write id: a first attempt, which stamps
every event and records where the hub ended), then that write run again with its write id: every row found
already stored by reading the hub back, nothing sent (the cost of a re-run per event read back). Last, the
exactly-once write again with another producer sending 1,000 events/s into the same hub meanwhile.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from typing import Any

from .emulator_sdk import _start_emulator, send_events
from .results import record

PARTITIONS = 4


def _hub_total(conn: str) -> int:
    from azure.eventhub import EventHubProducerClient

    with EventHubProducerClient.from_connection_string(conn) as producer:
        return sum(producer.get_partition_properties(p)["last_enqueued_sequence_number"] + 1
                   for p in producer.get_partition_ids())  # fmt: skip


def _other_producer(conn: str, stop: threading.Event) -> None:
    """Another application writing the same hub: 100 events of 200 bytes every 0.1 s until ``stop``."""
    from azure.eventhub import EventData, EventHubProducerClient

    with EventHubProducerClient.from_connection_string(conn) as producer:
        while not stop.wait(0.1):
            batch = producer.create_batch()
            for _ in range(100):
                batch.add(EventData(b"o" * 200))
            producer.send_batch(batch)


def run(events: int = 200_000, size: int = 200) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    proc, conn = _start_emulator()
    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    rows: list[dict[str, Any]] = []
    try:
        sdk_seconds = send_events(conn, events, size, round_robin=True)
        rows.append({"writer": "SDK send_batch (one process)", "events": events, "seconds": round(sdk_seconds, 2),
                     "events/s": events / sdk_seconds})  # fmt: skip
        df = spark.range(events).selectExpr(f"repeat('x', {size}) as body").cache()
        df.count()
        writer = df.write.format("eventhubs").option("eventhubs.connectionString", conn).mode("append")
        writer.save()  # warm-up: starts Python workers and producers
        before = _hub_total(conn)
        started = time.perf_counter()
        writer.save()
        spark_seconds = time.perf_counter() - started
        assert _hub_total(conn) - before == events, "the connector did not deliver every event"
        rows.append({"writer": "connector df.write (local[2])", "events": events, "seconds": round(spark_seconds, 2),
                     "events/s": events / spark_seconds})  # fmt: skip
        location = tempfile.mkdtemp(prefix="bench-sink-once-")
        once = writer.option("eventhubs.sink.exactlyOnce", "true").option("eventhubs.checkpointLocation", location)
        once.option("eventhubs.sink.writeId", "warm").save()
        before = _hub_total(conn)
        started = time.perf_counter()
        once.option("eventhubs.sink.writeId", "timed").save()
        once_seconds = time.perf_counter() - started
        assert _hub_total(conn) - before == events, "the exactly-once write did not deliver every event"
        rows.append({"writer": "connector df.write, eventhubs.sink.exactlyOnce (local[2])", "events": events,
                     "seconds": round(once_seconds, 2), "events/s": events / once_seconds})  # fmt: skip
        started = time.perf_counter()
        once.option("eventhubs.sink.writeId", "timed").save()  # run again: all found, nothing sent
        again_seconds = time.perf_counter() - started
        assert _hub_total(conn) - before == events, "the write run again sent events again"
        read_back = _hub_total(conn)
        before = _hub_total(conn)
        stop = threading.Event()
        other = threading.Thread(target=_other_producer, args=(conn, stop), daemon=True)
        other.start()
        started = time.perf_counter()
        once.option("eventhubs.sink.writeId", "beside-another").save()
        beside_seconds = time.perf_counter() - started
        stop.set()
        other.join(30)
        assert _hub_total(conn) - before >= events, "the exactly-once write beside another producer lost events"
        rows.append({"writer": "connector df.write, eventhubs.sink.exactlyOnce, another producer at 1,000 events/s",
                     "events": events, "seconds": round(beside_seconds, 2),
                     "events/s": events / beside_seconds})  # fmt: skip
        tasks = df.rdd.getNumPartitions()  # each task reads every partition from where the hub ended before the write
    finally:
        spark.stop()
        proc.terminate()
        proc.wait(30)
    ratio = rows[1]["events/s"] / rows[0]["events/s"]
    record(
        "sink_exactly_once",
        {
            "events": events,
            "event size (bytes)": size,
            "exactly once / at least once (events/s)": round(rows[2]["events/s"] / rows[1]["events/s"], 2),
            "a write run again: seconds": round(again_seconds, 2),
            "a write run again: microseconds per event read back": round(again_seconds / (tasks * events) * 1e6, 1),
            "target": "at least 0.9 with the hub written by this write alone, 0.8 beside another producer writing "
            "1,000 events/s into it (issue 65)",
            "beside another producer at 1,000 events/s / at least once (events/s)": round(
                rows[3]["events/s"] / rows[1]["events/s"], 2
            ),
            "target met": rows[2]["events/s"] / rows[1]["events/s"] >= 0.9
            and rows[3]["events/s"] / rows[1]["events/s"] >= 0.8,
        },
        rows[1:],
        notes=f"Same emulator, hub and cached DataFrame, one run after the at-least-once write. The run again reads "
        f"back the {events} events its {tasks} tasks wrote (each task every partition from its mark's ends; the hub "
        f"held {read_back} then) and sends none. Beside another producer: an SDK producer in this process sends "
        f"100 events of 200 B every 0.1 s into the same hub for the whole write.",
    )
    record(
        "sink_vs_sdk",
        {
            "events": events,
            "event size (bytes)": size,
            "connector / SDK send_batch (events/s)": round(ratio, 2),
            "target": "at least 1.0 (issue: at least equal to the plain SDK)",
        },
        rows,
        notes="Same emulator process and hub for both; the connector's figure is a warm run and includes "
        "Spark's job scheduling.",
    )
