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


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run() -> None:
    import tempfile

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    proc, conns = start_emulator({"latency": 4})
    conn = conns["latency"]
    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
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
    finally:
        spark.stop()
        proc.terminate()
        proc.wait(30)
    measured = [(arrived - sent) * 1e3 for sent, arrived in arrivals if sent >= began + WARMUP_S]
    durations = [p["durationMs"].get("triggerExecution", 0) for p in batches]
    p50, p99 = statistics.median(measured), _pct(measured, 0.99)
    record(
        "latency",
        {
            "target": "p50 under 500 ms",
            "p50 (ms)": round(p50),
            "p99 (ms)": round(p99),
            "target met": p50 < 500,
            "events measured": len(measured),
            "events sent": sent_count[0] if sent_count else None,
        },
        [
            {"figure": "send → sink p50 (ms)", "value": p50},
            {"figure": "send → sink p90 (ms)", "value": _pct(measured, 0.9)},
            {"figure": "send → sink p99 (ms)", "value": p99},
            {"figure": "send → sink max (ms)", "value": max(measured)},
            {"figure": "micro-batch median duration (ms)", "value": statistics.median(durations) if durations else 0},
            {
                "figure": "events per micro-batch (median)",
                "value": statistics.median([p["numInputRows"] for p in batches]) if batches else 0,
            },
        ],
        notes=(
            f"{RATE} events/s over 4 partitions for {MEASURE_S:g} s after {WARMUP_S:g} s of warm-up, local[2], "
            "trigger processingTime='0 seconds', foreachBatch sink on the driver.\n\n"
            "Where the time goes: an event waits for the micro-batch that is running to end, then for its own, so "
            "latency is about 1.5 micro-batch durations. Reading a range of 50-200 live events takes 2-20 ms. "
            "Fixed, in order: (1) the SDK's receive call read a whole prefetch window of frames (500) before "
            "returning whenever new events kept arriving, so a range of a few events waited up to 10 s at this rate; "
            "reads now ask for no more frames than the range needs (p50 11.5 s -> 1.5 s). (2) Spark gives Python "
            "sources no task placement, so a task often lands on the Python worker whose pooled receiver for the "
            "partition stands at an older position, and the receiver repositions: it closed its SDK consumer and "
            "opened another, and the SDK's close() waits up to 1 s for its keep-alive thread (it sleeps in 1 s "
            "steps). Measured: a new connection and first read take 3-6 ms on the emulator, a reposition took "
            "1,000 ms. The old consumer is now closed on a background thread: a reposition takes 3-8 ms, the "
            "median micro-batch went from 0.7-1.6 s to about 0.35 s and p50 from 1.5 s to under 0.5 s. A "
            "micro-batch of a trivial Python streaming source into the same sink takes about 0.3 s on this "
            "2-core machine (the JVM rate source 0.23 s): what is left is mostly Spark's own per-batch cost."
        ),
    )
