"""Latency: from the send to the sink at 200 events/s with a ``0 seconds`` processing-time trigger.

A producer thread sends one event every 5 ms (round-robin over 4 partitions), its body the send
time. The query reads them in ``local[2]`` and a ``foreachBatch`` sink on the driver takes the
arrival time of every row; both clocks are this machine's. The first seconds (session and worker
start-up) are left out.
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from typing import Any

from .emulator_sdk import start_emulator
from .own_process import UNIX_SOCKET_CONF, measure
from .results import record

RATE = 200
WARMUP_S = 8.0
MEASURE_S = float(__import__("os").environ.get("LATENCY_MEASURE_S", "30"))


def _produce(conn: str, stop: threading.Event) -> int:
    from azure.eventhub import EventData, EventHubProducerClient

    sent = 0
    with EventHubProducerClient.from_connection_string(conn) as producer:
        ids = producer.get_partition_ids()
        interval = 1.0 / RATE
        next_at = time.perf_counter()
        while not stop.is_set():
            batch = producer.create_batch(partition_id=ids[sent % len(ids)])
            batch.add(EventData(repr(time.time())))
            producer.send_batch(batch)
            sent += 1
            next_at += interval
            delay = next_at - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
    return sent


class _Constant:
    """A trivial Python streaming source (60 constant rows a trigger, one task, no I/O): what Spark's own
    per-micro-batch cost is on this machine, measured in the same run as the connector."""

    @staticmethod
    def source() -> Any:
        from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

        class Reader(DataSourceStreamReader):
            def __init__(self) -> None:
                self.count = 0

            def initialOffset(self) -> dict[str, int]:
                return {"o": 0}

            def latestOffset(self) -> dict[str, int]:
                self.count += 60
                return {"o": self.count}

            def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
                return [InputPartition(end["o"] - start["o"])]

            def read(self, partition: Any) -> Any:
                for i in range(partition.value):
                    yield (str(i),)

            def commit(self, end: dict[str, int]) -> None:
                pass

        class Constant(DataSource):
            @classmethod
            def name(cls) -> str:
                return "bench_constant"

            def schema(self) -> str:
                return "body string"

            def streamReader(self, schema: Any) -> DataSourceStreamReader:
                return Reader()

        return Constant


def _phases(progress: list[Any]) -> dict[str, float]:
    """The median of each of Spark's micro-batch phases (``durationMs``: latestOffset, addBatch, walCommit, ...)."""
    keys = sorted({k for p in progress for k in p["durationMs"]})
    return {k: statistics.median(p["durationMs"].get(k, 0) for p in progress) for k in keys}


def _trivial_trigger_ms(spark: Any, seconds: float = 20.0, phases: dict[str, float] | None = None) -> float:
    import tempfile

    spark.dataSource.register(_Constant.source())
    with tempfile.TemporaryDirectory() as tmp:
        query = (
            spark.readStream.format("bench_constant").load()
            .writeStream.foreachBatch(lambda df, batch_id: df.select("body").collect())
            .option("checkpointLocation", tmp)
            .trigger(processingTime="0 seconds")
            .start()
        )  # fmt: skip
        time.sleep(seconds)
        progress = [p for p in query.recentProgress if p["numInputRows"] > 0][5:]
        query.stop()
    if phases is not None:
        phases.update(_phases(progress))
    return statistics.median(p["durationMs"].get("triggerExecution", 0) for p in progress)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# Spark's socket between the executor and its Python workers: its default, TCP on localhost, and a Unix
# domain socket (Spark 4.1+, README "Performance"). A setting of the Spark context, so each is measured
# in a process of its own (a pyspark process starts one JVM and keeps it).
SOCKETS = {"false": "TCP socket (Spark's default)", "true": "Unix domain socket (recommended, Spark 4.1+)"}


def _measure(unix_socket: str) -> dict[str, Any]:
    """One run in this process's Spark, workers on the given socket; the raw figures."""
    import tempfile

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    proc, conns = start_emulator({"latency": 4})
    conn = conns["latency"]
    spark = (
        SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
        .config(UNIX_SOCKET_CONF, unix_socket).getOrCreate()
    )  # fmt: skip
    spark.sparkContext.setLogLevel("ERROR")
    arrivals: list[tuple[float, float]] = []  # (sent, arrived)

    def on_batch(df: Any, batch_id: int) -> None:
        rows = df.select("body").collect()
        now = time.time()
        arrivals.extend((float(r.body), now) for r in rows)

    stop = threading.Event()
    sent_count: list[int] = []
    producer = threading.Thread(target=lambda: sent_count.append(_produce(conn, stop)), daemon=True)
    batches: list[Any] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            query = (
                spark.readStream.format("eventhubs")
                .option("eventhubs.connectionString", conn)
                .option("eventhubs.minEventsPerTask", "500")  # a quiet stream's ranges share tasks
                .load()
                .selectExpr("cast(body as string) as body")
                .writeStream.foreachBatch(on_batch)
                .option("checkpointLocation", tmp)
                .trigger(processingTime="0 seconds")
                .start()
            )
            time.sleep(5)  # the query starts at the end of the stream: wait until it runs
            producer.start()
            began = time.time()
            time.sleep(WARMUP_S + MEASURE_S)
            stop.set()
            producer.join(30)
            time.sleep(3)
            batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
            query.stop()
        trivial_phases: dict[str, float] = {}
        trivial = _trivial_trigger_ms(spark, phases=trivial_phases)
    finally:
        spark.stop()
        proc.terminate()
        proc.wait(30)
    measured = [(arrived - sent) * 1e3 for sent, arrived in arrivals if sent >= began + WARMUP_S]
    durations = [p["durationMs"].get("triggerExecution", 0) for p in batches]
    return {
        "p50": statistics.median(measured),
        "p90": _pct(measured, 0.9),
        "p99": _pct(measured, 0.99),
        "max": max(measured),
        "batch": statistics.median(durations) if durations else 0,
        "trivial": trivial,
        "rows": statistics.median([p["numInputRows"] for p in batches]) if batches else 0,
        "measured": len(measured),
        "sent": sent_count[0] if sent_count else None,
        "phases": _phases(batches),
        "trivial phases": trivial_phases,
    }


def run() -> None:
    runs = {unix_socket: measure("bench.latency", unix_socket) for unix_socket in SOCKETS}
    tcp, uds = runs["false"], runs["true"]
    rows = [
        {"figure": figure, **{SOCKETS[k]: round(r[key], 2) for k, r in runs.items()}}
        for figure, key in (
            ("send → sink p50 (ms)", "p50"), ("send → sink p90 (ms)", "p90"), ("send → sink p99 (ms)", "p99"),
            ("send → sink max (ms)", "max"), ("micro-batch median duration (ms)", "batch"),
            ("a trivial Python streaming source's micro-batch, same sink (ms)", "trivial"),
            ("events per micro-batch (median)", "rows"), ("events measured", "measured"),
        )
    ]  # fmt: skip
    ratios = {SOCKETS[k]: round(r["p50"] / r["batch"], 2) if r["batch"] else 0 for k, r in runs.items()}
    rows.append({"figure": "p50 / this query's micro-batch", **ratios})
    for phase in sorted({k for r in runs.values() for k in (*r["phases"], *r["trivial phases"])}):
        for label, key in (("this query", "phases"), ("trivial source", "trivial phases")):
            rows.append({"figure": f"{phase} (ms, median), {label}",
                         **{SOCKETS[k]: r[key].get(phase, 0) for k, r in runs.items()}})  # fmt: skip
    record(
        "latency",
        {
            "target": "p50 under 250 ms (issue 15; 500 ms before)",
            "p50 / p99 (ms), TCP socket (Spark's default)": f"{tcp['p50']:.0f} / {tcp['p99']:.0f}",
            "p50 / p99 (ms), Unix domain socket": f"{uds['p50']:.0f} / {uds['p99']:.0f}",
            "target met, TCP socket": tcp["p50"] < 250,
            "target met, Unix domain socket": uds["p50"] < 250,
            "micro-batch median (ms): this query / a trivial Python source, TCP socket": f"{tcp['batch']:.0f} / "
            f"{tcp['trivial']:.0f}",
            "micro-batch median (ms): this query / a trivial Python source, Unix domain socket": f"{uds['batch']:.0f}"
            f" / {uds['trivial']:.0f}",
            "micro-batch target": "within 1.1x a trivial Python source's (issue 64)",
            "micro-batch target met": all(r["batch"] <= 1.1 * r["trivial"] for r in (tcp, uds)),
        },
        rows,
        notes=(
            f"{RATE} events/s over 4 partitions for {MEASURE_S:g} s after {WARMUP_S:g} s of warm-up, local[2], "
            "trigger processingTime='0 seconds', eventhubs.minEventsPerTask=500, foreachBatch sink on the driver.\n\n"
            "Where the time goes: an event waits for the micro-batch that is running to end, then for its own, so "
            "latency is 1.3-1.5 micro-batch durations. The phase rows are Spark's own breakdown of a micro-batch "
            "(durationMs, medians) for this query and for the trivial source beside it: Spark's offset and commit "
            "log writes (walCommit, commitOffsets) are the same for both; what the connector adds is latestOffset "
            "(partition properties on the kept-open management link) and its task's share of addBatch (its "
            "tasks, Arrow to the JVM, the foreachBatch callback on the driver). A task reads its range from what "
            "the executor's receiver service read ahead (about 1 ms for 15 events, outside Spark). Every Python "
            "task costs Spark tens of milliseconds, so the few events per partition of each trigger share tasks "
            "(eventhubs.minEventsPerTask=500, set here; the default 0 keeps one task per partition as the old "
            "connector did): one or two tasks per trigger instead of four. The floor is Spark's own cost per "
            "micro-batch, measured in the same run with a trivial Python streaming source (constant rows, one "
            "task, the same sink): this machine's load moves it from hour to hour (from about 120 to 275 ms "
            "measured), and p50 cannot go below about 1.3 times it; what the connector controls is the gap "
            "between the two micro-batch figures.\n\n"
            "Each socket is measured in a Spark process of its own. Over Spark's default TCP socket between the "
            "executor and its Python workers, every Python task waits for its input (Nagle's algorithm on the "
            "JVM's side, delayed ACK on the worker's: up to 40 ms, bench task_cost); a Unix domain socket "
            "(spark.python.unix.domain.socket.enabled=true, Spark 4.1+) has no such wait, and the micro-batch is "
            "shorter by about that much for both sources.\n\n"
            "Earlier fixes, in order: reads ask for no more frames than the range needs (p50 11.5 s -> 1.5 s); "
            "old SDK consumers closed in the background (1.5 s -> 0.46 s); the receive path rewritten (one "
            "connection per namespace, read-ahead, the receiver service) and small ranges sharing tasks; the "
            "workers' objects frozen out of Spark's collection after each task (issue 28)."
        ),
    )


if __name__ == "__main__":
    # one socket's run (run() starts this): JSON on the last line
    import json

    print(json.dumps(_measure(sys.argv[1])))
