"""Pushback soak: a stream through a namespace that throttles, detaches and black-holes (issue 38).

The emulator meters 2 throughput units (sends past 2,000 events/s refused as busy, deliveries held to
8,192 events/s), detaches every link of events every 30 s and black-holes every open connection for
20 s every 60 s. A producer pushes twice the ingress limit (4,000 events/s of 200 bytes over 8
partitions) and sends again what is refused; the hub starts with a backlog, so the reader is held
by the egress allowance at first. A streaming query (``local[2]``, 1 s trigger) writes (partition,
sequence number) to parquet. ``EVENTHUBS_PUSHBACK_SECONDS`` sets the length (default 600).

Reported: events the hub stored, events in the sink, lost and duplicated (both must be 0), sends
refused, the longest stretch in which the query read nothing while events waited, and the rate read
while backlogged as a fraction of the egress allowance (overall, and outside the black holes).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import sys
import tempfile
import time
from typing import Any

from .results import record

UNITS = 2
PARTITIONS = 8
PUSH = 4_000  # events/s the producer tries: twice the ingress allowance of 2 units
BACKLOG = 200_000  # events waiting before the query starts
DETACH_EVERY, HOLE_EVERY, HOLE_SECONDS = 30.0, 60.0, 20.0


def run() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from azure.eventhub import EventData, EventHubProducerClient
    from pyspark.sql import SparkSession

    from eventhubs_emulator import Emulator
    from eventhubs_emulator.metering import EGRESS_EVENTS

    seconds = float(os.environ.get("EVENTHUBS_PUSHBACK_SECONDS", "600"))
    egress_limit = EGRESS_EVENTS * UNITS
    # the faults run from the start; the backlog is made (unmetered) well before the first of them
    emulator = Emulator({"push": PARTITIONS}, detach_every=DETACH_EVERY, black_hole_every=HOLE_EVERY,
                        black_hole_seconds=HOLE_SECONDS).start()  # fmt: skip
    faults_began = time.monotonic()
    conn = emulator.connection_string("push")
    with EventHubProducerClient.from_connection_string(conn) as producer:
        for i in range(BACKLOG // 500):
            batch = producer.create_batch(partition_id=str(i % PARTITIONS))
            for _ in range(500):
                batch.add(EventData(b"b" * 200))
            producer.send_batch(batch)
    emulator.set_throughput_units(UNITS)
    limited = emulator

    import multiprocessing

    spawn = multiprocessing.get_context("spawn")  # its own process: the pace is not the driver's GIL's
    stop = spawn.Event()
    busy, failed = spawn.Value("l", 0), spawn.Value("l", 0)

    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")

    def stored() -> int:
        return sum(limited.partition_properties("push", p)["last_enqueued_sequence_number"] + 1
                   for p in range(PARTITIONS))  # fmt: skip

    samples: list[tuple[float, int, int]] = []  # (time since the faults began, read, stored)
    with tempfile.TemporaryDirectory() as tmp:
        query = (
            spark.readStream.format("eventhubs")
            .option("eventhubs.connectionString", conn)
            .option("eventhubs.startingPosition", '{"offset": "-1"}')
            .option("eventhubs.connectionIdleTimeout", "10s")
            .option("maxEventsPerTrigger", str(2 * egress_limit))
            .load()
            .selectExpr("partition", "sequenceNumber")
            .writeStream.format("parquet")
            .option("path", os.path.join(tmp, "out"))
            .option("checkpointLocation", os.path.join(tmp, "checkpoint"))
            .trigger(processingTime="1 second")
            .start()
        )
        thread = spawn.Process(target=produce, args=(conn, stop, busy, failed), daemon=True)
        began = time.monotonic()
        thread.start()

        def read_so_far() -> int:
            progress = query.lastProgress
            if not progress:
                return 0
            end = progress["sources"][0]["endOffset"]
            offsets = json.loads(end) if isinstance(end, str) else end
            return sum(int(v) for v in offsets.get("push", {}).values())

        try:
            last_print = 0.0
            while time.monotonic() - began < seconds:
                time.sleep(1.0)
                now = time.monotonic() - faults_began
                samples.append((now, read_so_far(), stored()))
                if now - last_print >= 30:
                    last_print = now
                    print(f"{now:5.0f} s: stored {samples[-1][2]}, read {samples[-1][1]}, refused sends "
                          f"{limited.throttling()['throttled_requests']}", flush=True)  # fmt: skip
        finally:
            stop.set()
            thread.join(30)
        total = stored()
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and read_so_far() < total:
            time.sleep(1)
        query.stop()
        if query.exception() is not None:
            print(f"the query failed: {query.exception()}", flush=True)
        rows = spark.read.parquet(os.path.join(tmp, "out")).collect()
    spark.stop()
    throttling = limited.throttling()
    faults = limited.stats()
    limited.stop()

    keys = [(r.partition, r.sequenceNumber) for r in rows]
    distinct = set(keys)
    expected = {(str(p), s) for p in range(PARTITIONS)
                for s in range(emulator.broker.hub("push").partition(str(p)).next_sequence_number)}  # fmt: skip
    lost = len(expected - distinct)
    duplicated = len(keys) - len(distinct)

    def in_hole(t: float) -> bool:
        return t >= HOLE_EVERY and (t % HOLE_EVERY) < HOLE_SECONDS

    stall = longest = 0.0
    backlogged_read = backlogged_time = clear_read = clear_time = 0.0
    for (t0, r0, s0), (t1, r1, _s1) in itertools.pairwise(samples):
        waiting = s0 - r0
        if r1 == r0 and waiting > 0:
            stall += t1 - t0
            longest = max(longest, stall)
        else:
            stall = 0.0
        if waiting > 2 * egress_limit and r0 > 0:  # backlogged, once the query's first batch is done
            backlogged_read += r1 - r0
            backlogged_time += t1 - t0
            if not in_hole(t0) and not in_hole(t1):
                clear_read += r1 - r0
                clear_time += t1 - t0
    fraction = backlogged_read / (backlogged_time * egress_limit) if backlogged_time else None
    clear_fraction = clear_read / (clear_time * egress_limit) if clear_time else None
    record(
        "pushback",
        {
            "duration (s)": seconds,
            "events stored by the hub": len(expected),
            "events in the sink": len(keys),
            "lost": lost,
            "duplicated": duplicated,
            "sends refused as busy (requests)": throttling.get("throttled_requests"),
            "producer sends refused as busy": busy.value,
            "producer sends that failed otherwise (black-holed, detached)": failed.value,
            "deliveries held for the egress allowance": throttling.get("egress_waits"),
            "forced detaches": faults.get("forced_detaches", 0),
            "connections black-holed": faults.get("black_holes", 0),
            "longest stall with events waiting (s)": round(longest, 1),
            "seconds backlogged": round(backlogged_time, 1),
            "read while backlogged / egress allowance": round(fraction, 3) if fraction is not None else None,
            "same, outside black holes": round(clear_fraction, 3) if clear_fraction is not None else None,
        },
        [{"t (s)": round(t), "read": r, "stored": s} for t, r, s in samples[:: max(1, len(samples) // 40)]],
        notes=(f"{UNITS} throughput units (egress {egress_limit} events/s), {PARTITIONS} partitions, a producer at "
               f"{PUSH} events/s of 200 bytes, {BACKLOG} events of backlog at the start; a forced detach every "
               f"{DETACH_EVERY:g} s, a {HOLE_SECONDS:g} s black hole every {HOLE_EVERY:g} s; local[2], 1 s trigger, "
               "parquet sink, eventhubs.connectionIdleTimeout=10s."),
    )  # fmt: skip


def produce(conn: str, stop: Any, busy: Any, failed: Any) -> None:
    """Twice the ingress allowance, in batches of 400, one partition after another (in a process of its own);
    a refused batch is sent again at the next tick, a broken connection replaced."""
    from azure.eventhub import EventData, EventHubProducerClient

    def client() -> Any:
        return EventHubProducerClient.from_connection_string(conn, retry_total=0, idle_timeout=10)

    producer = client()
    body = b"x" * 200
    tick = 400 / PUSH
    next_at = time.perf_counter()
    p = 0
    while not stop.is_set():
        try:
            batch = producer.create_batch(partition_id=str(p % PARTITIONS))
            for _ in range(400):
                batch.add(EventData(body))
            producer.send_batch(batch, timeout=10)
            p += 1
        except Exception as exc:
            if "server-busy" in str(exc):
                busy.value += 1
            else:
                failed.value += 1
                with contextlib.suppress(Exception):
                    producer.close()
                producer = client()
        next_at += tick
        time.sleep(max(0.0, next_at - time.perf_counter()))
    producer.close()
