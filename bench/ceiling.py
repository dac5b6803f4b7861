"""Spark's own ceiling for a Python streaming source (issue 28), beside the connector in the same run.

The ceiling source hands Spark ready Arrow record batches of the connector's schema (the same event
sizes, built once per task, no I/O and no decoding): what Spark itself costs per row from a Python
source into the ``noop`` sink, in the query shape of bench ``read`` (``local[2]``, one
``Trigger.AvailableNow`` micro-batch, 4 partitions). The gap between the two 'in the batch' figures
is everything the connector does: receiving, the hop through the receiver service, decoding.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from typing import Any

from .emulator_sdk import start_emulator
from .read import REPEATS, connector_drain, fill, warm_up
from .results import record

PARTITIONS = 4
EVENTS = 200_000
# (event bytes, events): the read bench's batch, and one five times longer, where what a batch costs
# whatever its size (tasks starting, links attaching, the last tasks' tail on 2 cores) weighs a fifth as much
CASES = ((200, EVENTS), (2048, EVENTS), (200, 5 * EVENTS))


def _replay_source() -> Any:
    import pyarrow as pa
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    from eventhubs_spark.codec.schema import ARROW_SCHEMA, SCHEMA_DDL

    class Reader(DataSourceStreamReader):
        def __init__(self, options: dict[str, str]) -> None:
            self.size = int(options["size"])
            self.events = int(options["events"])

        def initialOffset(self) -> dict[str, int]:
            return {"o": 0}

        def latestOffset(self) -> dict[str, int]:
            return {"o": 1}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
            if start["o"] >= end["o"]:
                return []
            return [InputPartition(i) for i in range(PARTITIONS)]

        def read(self, partition: Any) -> Any:
            rows = 500  # about what a chunk of the connector holds
            n = self.events // PARTITIONS
            now = pa.scalar(1_700_000_000_000_000, pa.timestamp("us", tz="UTC"))
            batch = pa.RecordBatch.from_arrays(
                [
                    pa.array([b"x" * self.size] * rows, pa.binary()),
                    pa.repeat(pa.scalar(str(partition.value), pa.string()), rows),
                    pa.array([str(i * 300) for i in range(rows)], pa.string()),
                    pa.array(range(rows), pa.int64()),
                    pa.repeat(now, rows),
                    pa.nulls(rows, pa.string()),
                    pa.nulls(rows, pa.string()),
                    pa.array([[]] * rows, ARROW_SCHEMA.field("properties").type),
                    pa.array([[]] * rows, ARROW_SCHEMA.field("systemProperties").type),
                ],
                schema=ARROW_SCHEMA,
            )
            for _ in range(n // rows):
                yield batch
            if n % rows:
                yield batch.slice(0, n % rows)

        def commit(self, end: dict[str, int]) -> None:
            pass

    class Replay(DataSource):
        @classmethod
        def name(cls) -> str:
            return "bench_replay"

        def schema(self) -> str:
            return SCHEMA_DDL

        def streamReader(self, schema: Any) -> DataSourceStreamReader:
            return Reader(self.options)

    return Replay


def _replay_in_batch(spark: Any, size: int, tmp: str, events: int = EVENTS) -> float:
    return replay_drain(spark, size, tmp, events)[1]


def replay_drain(spark: Any, size: int, tmp: str, events: int = EVENTS) -> tuple[float, float]:
    """The ceiling source read as bench ``read`` reads the connector (its ``connector_drain``): seconds from ``start()``
    to the query's end, and seconds in the batch. The session must have the source registered (:func:`register`)."""
    started = time.perf_counter()
    query = (
        spark.readStream.format("bench_replay").option("size", str(size)).option("events", str(events)).load()
        .writeStream.format("noop").option("checkpointLocation", tmp).trigger(availableNow=True).start()
    )  # fmt: skip
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    read = sum(p["numInputRows"] for p in query.recentProgress)
    if read != events:
        raise RuntimeError(f"the replay source gave {read} of {events} rows")
    return elapsed, sum(p["durationMs"].get("addBatch", 0) for p in query.recentProgress) / 1000


def register(spark: Any) -> None:
    """Make the ceiling source (``bench_replay``) known to ``spark``."""
    spark.dataSource.register(_replay_source())


def run() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    proc, conns = start_emulator({f"s{s}n{n}": PARTITIONS for s, n in CASES} | {"warmup": PARTITIONS})
    spark = (
        SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false").getOrCreate()
    )  # fmt: skip
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    rows: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            warm_up(spark, conns["warmup"], tmp)
            _replay_in_batch(spark, 200, os.path.join(tmp, "warmup-replay"))
            for size, events in CASES:
                conn = conns[f"s{size}n{events}"]
                fill(conn, events, size)
                ours, replay = [], []
                for attempt in range(REPEATS):
                    where = os.path.join(tmp, f"ours-{size}-{events}-{attempt}")
                    ours.append(connector_drain(spark, conn, events, where)[1])
                    where = os.path.join(tmp, f"replay-{size}-{events}-{attempt}")
                    replay.append(_replay_in_batch(spark, size, where, events))
                o, r = statistics.median(ours), statistics.median(replay)
                rows.append({
                    "event bytes": size,
                    "events in the batch": events,
                    "connector events/s in the batch": events / o,
                    "ceiling: ready Arrow batches, rows/s in the batch": events / r,
                    "connector / ceiling": round(r / o, 2),
                    "connector, each run (s)": " ".join(f"{x:.2f}" for x in ours),
                    "ceiling, each run (s)": " ".join(f"{x:.2f}" for x in replay),
                })  # fmt: skip
    finally:
        spark.stop()
        proc.terminate()
    record(
        "ceiling",
        {
            "target": "half of Spark's own ceiling in the batch (issue 28: 200k events/s, 4 partitions, 200 B)",
            "connector / ceiling, 200 B": rows[0]["connector / ceiling"],
            "connector / ceiling, 2 KB": rows[1]["connector / ceiling"],
            "half of the ceiling reached, 200 B": rows[0]["connector / ceiling"] >= 0.5,
            f"connector events/s in a batch of {CASES[2][1]} events, 200 B": round(
                rows[2]["connector events/s in the batch"]
            ),
        },
        rows,
        notes=(
            f"{EVENTS} events (and, in the last row, five times as many) over {PARTITIONS} partitions, local[2], "
            "Trigger.AvailableNow, one micro-batch into the noop sink; 'in the batch' is the batch's own run time "
            "(Spark's addBatch). The ceiling source yields the same record batch (500 rows of the connector's "
            "schema, bodies of the same size) over and over: "
            f"Spark's cost of taking Arrow batches from a Python source and nothing else. {REPEATS} runs each, "
            "alternating, medians; the connector reads through the executor's receiver service (the default)."
        ),
    )
