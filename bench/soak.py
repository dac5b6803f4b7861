"""Soak: a streaming query under steady load for ten minutes (``EVENTHUBS_SOAK_SECONDS`` to change).

A producer sends 500 events/s round-robin over 4 partitions. The query (``local[2]``, 1 s
processing-time trigger) hands every micro-batch to a ``foreachBatch`` sink on the driver, which
records each event's (partition, sequence number). Every 30 s the bench samples the resident memory
of the Spark Python workers. At the end it checks that every event sent was read exactly once, and
reports events per second and memory per minute, so a trend (a leak, a slowdown) shows.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

from .emulator_sdk import start_emulator
from .receivers import _python_rss as _python_worker_rss
from .results import record

RATE = 500


def run() -> None:
    import tempfile

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from azure.eventhub import EventData, EventHubProducerClient
    from pyspark.sql import SparkSession

    seconds = float(os.environ.get("EVENTHUBS_SOAK_SECONDS", "600"))
    proc, conns = start_emulator({"soak": 4})
    conn = conns["soak"]
    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    seen: dict[tuple[str, int], int] = {}
    read_at: list[tuple[float, int]] = []
    lock = threading.Lock()

    def on_batch(df: Any, batch_id: int) -> None:
        rows = df.select("partition", "sequenceNumber").collect()
        with lock:
            for r in rows:
                key = (r.partition, r.sequenceNumber)
                seen[key] = seen.get(key, 0) + 1
            read_at.append((time.monotonic(), len(rows)))

    stop = threading.Event()
    sent = [0]

    def produce() -> None:
        with EventHubProducerClient.from_connection_string(conn) as producer:
            ids = producer.get_partition_ids()
            tick, per_tick = 0.1, RATE // 10
            next_at = time.perf_counter()
            while not stop.is_set():
                for pid in ids:
                    batch = producer.create_batch(partition_id=pid)
                    for _ in range(per_tick // len(ids)):
                        batch.add(EventData(b"x" * 200))
                    producer.send_batch(batch)
                    sent[0] += per_tick // len(ids)
                next_at += tick
                time.sleep(max(0.0, next_at - time.perf_counter()))

    memory: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        query = (
            spark.readStream.format("eventhubs")
            .option("eventhubs.connectionString", conn)
            .option("eventhubs.startingPosition", '{"offset": "-1"}')
            .load()
            .writeStream.foreachBatch(on_batch)
            .option("checkpointLocation", tmp)
            .trigger(processingTime="1 second")
            .start()
        )
        producer = threading.Thread(target=produce, daemon=True)
        began = time.monotonic()
        producer.start()
        try:
            while time.monotonic() - began < seconds:
                time.sleep(30)
                rss = _python_worker_rss(os.getpid())
                memory.append((time.monotonic() - began, sum(rss.values()) / 2**20))
                with lock:
                    total = sum(n for _, n in read_at)
                print(f"{time.monotonic() - began:5.0f} s: sent {sent[0]}, read {total}, python workers "
                      f"{memory[-1][1]:.0f} MiB", flush=True)  # fmt: skip
        finally:
            stop.set()
            producer.join(30)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and sum(n for _, n in read_at) < sent[0]:
            time.sleep(1)
        query.stop()
    spark.stop()
    proc.terminate()
    proc.wait(30)
    duplicates = sum(1 for n in seen.values() if n > 1)
    rows = []
    for minute in range(int(seconds // 60)):
        lo, hi = began + minute * 60, began + (minute + 1) * 60
        events = sum(n for t, n in read_at if lo <= t < hi)
        mem = [m for t, m in memory if minute * 60 <= t < (minute + 1) * 60]
        rows.append({"minute": minute + 1, "events read": events, "events/s": events / 60,
                     "Python workers RSS (MiB)": max(mem) if mem else None})  # fmt: skip
    rates = [r["events/s"] for r in rows[1:]] or [0.0]
    mems = [m for _, m in memory] or [0.0]
    record(
        "soak",
        {
            "duration (s)": seconds,
            "events sent": sent[0],
            "distinct events read": len(seen),
            "read twice": duplicates,
            "every event read once": len(seen) == sent[0] and duplicates == 0,
            "events/s per minute, min..max (after the first)": f"{min(rates):.0f}..{max(rates):.0f}",
            "Python workers RSS, first..last sample (MiB)": f"{mems[0]:.0f}..{mems[-1]:.0f}",
        },
        rows,
        notes=f"{RATE} events/s of 200 bytes over 4 partitions; local[2]; 1 s trigger; foreachBatch sink.",
    )
