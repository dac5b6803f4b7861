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
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

from .emulator_sdk import _start_emulator, send_events
from .results import record

PARTITIONS = 4
ROUNDS = 5  # each write timed this many times, the order turning; medians (2.5 s writes: three swung by a tenth)


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
        location = tempfile.mkdtemp(prefix="bench-sink-once-")
        # a writer of its own: DataFrameWriter.option changes the writer it is called on
        once = df.write.format("eventhubs").option("eventhubs.connectionString", conn).mode("append")
        once = once.option("eventhubs.sink.exactlyOnce", "true").option("eventhubs.checkpointLocation", location)
        once.option("eventhubs.sink.writeId", "warm").save()

        def timed(kind: str, write_id: str) -> float:
            """One write of the cached rows: at least once ("plain"), exactly once ("once"), or exactly once
            while another producer writes the hub ("beside"); its seconds, every event checked in."""
            before = _hub_total(conn)
            stop = threading.Event()
            other = threading.Thread(target=_other_producer, args=(conn, stop), daemon=True)
            if kind == "beside":
                other.start()
            started = time.perf_counter()
            (writer if kind == "plain" else once.option("eventhubs.sink.writeId", write_id)).save()
            seconds = time.perf_counter() - started
            stop.set()
            if kind == "beside":
                other.join(30)
            added = _hub_total(conn) - before
            assert added == events if kind != "beside" else added >= events, f"{kind}: {added} of {events} events"
            return seconds

        kinds = ["plain", "once", "beside"]
        figures: dict[str, list[float]] = {kind: [] for kind in kinds}
        for r in range(ROUNDS):  # the order turns each round: a later write in a run is not favoured
            for kind in kinds[r % 3 :] + kinds[: r % 3]:
                figures[kind].append(timed(kind, f"timed-{kind}-{r}"))
        spark_seconds, once_seconds, beside_seconds = (statistics.median(figures[kind]) for kind in kinds)
        rows.append({"writer": "connector df.write (local[2])", "events": events, "seconds": round(spark_seconds, 2),
                     "events/s": events / spark_seconds})  # fmt: skip
        rows.append({"writer": "connector df.write, eventhubs.sink.exactlyOnce (local[2])", "events": events,
                     "seconds": round(once_seconds, 2), "events/s": events / once_seconds})  # fmt: skip
        rows.append({"writer": "connector df.write, eventhubs.sink.exactlyOnce, another producer at 1,000 events/s",
                     "events": events, "seconds": round(beside_seconds, 2),
                     "events/s": events / beside_seconds})  # fmt: skip
        timed("once", "again")  # written last, so running it again reads back its own events only
        before = _hub_total(conn)
        started = time.perf_counter()
        once.option("eventhubs.sink.writeId", "again").save()  # run again: all found, nothing sent
        again_seconds = time.perf_counter() - started
        assert _hub_total(conn) == before, "the write run again sent events again"
        read_back = before
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
        notes=(
            f"Same emulator, hub and cached DataFrame; each write {ROUNDS} times, the order turning each round, "
            "medians (one run each in a fixed order favoured the later writes: 0.96x one day, 1.11x another). "
            f"The run again reads back the {events} events its {tasks} tasks wrote (each task every partition from "
            f"its mark's ends; the hub held {read_back} then) and sends none. Beside another producer: an SDK "
            "producer in this process sends 100 events of 200 B every 0.1 s into the same hub for the whole write."
        ),
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
