"""Reading: the connector against the plain SDK draining the same partitions, same emulator, one run.

For each case (4 and 32 partitions, 200-byte and 2 KB events) one hub is filled round-robin, then:

* SDK: one ``EventHubConsumerClient.receive_batch`` over all partitions in one process (the SDK
  starts a consumer per partition), timed from the call until every event has arrived.
* Connector: ``spark.readStream.format("eventhubs")`` in ``local[2]`` with ``Trigger.AvailableNow``
  into the ``noop`` sink, one micro-batch, timed from ``start()`` until the query ends (planning and
  task start-up included). The session is warmed up first on another hub, so Python workers exist.

The emulator runs in its own process, so neither side shares its GIL with the server.
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

REPEATS = int(os.environ.get("EVENTHUBS_BENCH_REPEATS", "3"))
ALONE = "eventhubs.receiverService"
ALONE_GROUP = "alone"
CASES = [(4, 200, 200_000), (32, 200, 200_000), (4, 2048, 200_000), (32, 2048, 200_000), (4, 200, 1_000_000)]
# At 32 partitions a 200,000-event batch is 32 ranges of 6,250: the cases are also read with small ranges
# sharing tasks (eventhubs.minEventsPerTask), 4 tasks of 8 ranges, to show what Spark's per-task cost weighs.
PACKED = {"eventhubs.minEventsPerTask": "50000"}


TARGET = (
    "whole query, connector >= 3x the plain SDK consumer's events/s at 4 partitions, >= 2x at 32, >= 10x at "
    "1,000,000 events (issue 50)"
)


def target_ratio(partitions: int, events: int = 200_000) -> float:
    """The whole-query ratio to the SDK each case must reach (:data:`TARGET`)."""
    if events >= 1_000_000:
        return 10.0
    return 3.0 if partitions <= 4 else 2.0


def fill(conn: str, events: int, size: int) -> None:
    """Round-robin over every partition with full batches, as fast as the SDK sends."""
    from azure.eventhub import EventData, EventHubProducerClient

    body = b"x" * size
    with EventHubProducerClient.from_connection_string(conn) as producer:
        ids = producer.get_partition_ids()
        per = events // len(ids)
        for pid in ids:
            left = per + (1 if int(pid) < events % len(ids) else 0)
            while left:
                batch = producer.create_batch(partition_id=pid)
                while left:
                    try:
                        batch.add(EventData(body))
                    except ValueError:
                        break
                    left -= 1
                producer.send_batch(batch)


def sdk_drain(conn: str, events: int, prefetch: int = 1000, consumer_group: str = "sdk") -> float:
    from azure.eventhub import EventHubConsumerClient

    client = EventHubConsumerClient.from_connection_string(conn, consumer_group=consumer_group)
    count = 0
    lock = threading.Lock()
    done = threading.Event()

    def on_batch(ctx: Any, batch: list[Any]) -> None:
        nonlocal count
        with lock:
            count += len(batch)
            if count >= events:
                done.set()

    started = time.perf_counter()
    thread = threading.Thread(
        target=client.receive_batch,
        kwargs={
            "on_event_batch": on_batch,
            "starting_position": "-1",
            "prefetch": prefetch,
            "max_batch_size": prefetch,
            "max_wait_time": 1,
        },
        daemon=True,
    )
    thread.start()
    if not done.wait(900):
        raise RuntimeError(f"the SDK received {count} of {events} events")
    elapsed = time.perf_counter() - started
    client.close()
    thread.join(60)
    return elapsed


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class CpuTimes(dict[int, float]):
    """CPU seconds per process; ``later - earlier`` is the CPU the processes of ``later`` used since
    ``earlier`` (all of it for one started since). A process that ended in between drops out, with what it
    used in between: never the whole of its life subtracted, as one total would."""

    def __sub__(self, earlier: dict[int, float]) -> float:
        return sum(max(0.0, used - earlier.get(pid, 0.0)) for pid, used in self.items())


_KINDS = {"workers": (b"pyspark.daemon",), "service": (b"eventhubs_spark.executor.receiver_service",)}


def executor_python_cpu(kind: str | None = None) -> CpuTimes:
    """CPU seconds used so far by each of the executor's Python processes: Spark's Python workers (and
    their daemon) and the receiver service (``kind``: "workers" or "service" for one of them only); a daemon's
    include its workers that have exited (Spark ends idle ones): it reaped them, and the kernel added their
    CPU to its children's. Linux /proc; none elsewhere. Subtract two of them for the CPU in between."""
    marks = _KINDS[kind] if kind is not None else _KINDS["workers"] + _KINDS["service"]
    times = CpuTimes()
    for pid in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
            if not any(mark in cmd for mark in marks):
                continue
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        # utime + stime + cutime + cstime (the last two: reaped children's)
        times[int(pid)] = sum(int(x) for x in fields[11:15]) / _TICK
    return times


def connector_drain(spark: Any, conn: str, events: int, tmp: str, **options: str) -> tuple[float, float]:
    """Seconds from ``start()`` to the end of the query, and seconds Spark spent running the batches."""
    reader = spark.readStream.format("eventhubs").option("eventhubs.connectionString", conn)
    reader = reader.option("eventhubs.startingPosition", '{"offset": "-1"}').option("maxEventsPerTrigger", events)
    for key, value in options.items():
        reader = reader.option(key, value)
    started = time.perf_counter()
    query = (
        reader.load().writeStream.format("noop").option("checkpointLocation", tmp).trigger(availableNow=True).start()
    )
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    read = sum(p["numInputRows"] for p in query.recentProgress)
    if read != events:
        raise RuntimeError(f"the connector read {read} of {events} events")
    in_batches = sum(p["durationMs"].get("addBatch", 0) for p in query.recentProgress) / 1000
    return elapsed, in_batches


WARMUP_EVENTS = 200_000


def warm_up(spark: Any, conn: str, tmp: str) -> None:
    """Two reads of 200,000 events before anything is measured: the JVM compiles the code that takes Arrow
    batches from Python over its first several hundred thousand rows (the first such reads of a fresh
    Spark are about a third slower in the batch), and the measured runs should not pay for it."""
    fill(conn, WARMUP_EVENTS, 200)
    for attempt in range(2):
        connector_drain(spark, conn, WARMUP_EVENTS, os.path.join(tmp, f"warmup-{attempt}"))


# Spark ends a Python worker idle this long (PythonWorkerFactory's IDLE_WORKER_TIMEOUT_NS, a constant).
WORKER_IDLE_END = 60.0
KEEP_WARM_EVENTS = 2000


def keep_warm(spark: Any, conn: str, tmp: str) -> None:
    """A read of a few events of another hub right before a measured run, as a stream triggered at least once a
    minute has: Spark's Python workers are then the warm ones its batches find, not fresh ones whose start
    (about 1 s of CPU each, imports mostly) would land in the measurement by whether the SDK's run before took more
    or less than a minute. The fresh case is measured on its own (see run)."""
    reader = spark.readStream.format("eventhubs").option("eventhubs.connectionString", conn)
    reader = reader.option("eventhubs.startingPosition", '{"offset": "-1"}')
    reader = reader.option("maxEventsPerTrigger", KEEP_WARM_EVENTS)
    query = reader.load().writeStream.format("noop").option("checkpointLocation", tmp).trigger(once=True).start()
    query.awaitTermination()


def local_spark() -> Any:
    """The benches' ``local[2]`` session: no UI, no progress bars, errors only in the log."""
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def run() -> None:
    import tempfile

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    hubs = {f"p{p}s{s}e{e}": p for p, s, e in CASES} | {"warmup": 4}
    # The SDK reads with its own consumer group: the connector's pooled owner-level receivers stay attached
    # to $Default between runs, and a plain receiver may not join a group where an owner-level one reads.
    # The runs without the service read with a consumer group of their own too: owner-level receivers of both
    # modes on one group would displace each other at every alternation (the links left idle in the workers
    # by one mode, the service's by the other), and each run would pay the other's recovery.
    proc, conns = start_emulator(hubs, consumer_groups=("sdk", ALONE_GROUP))
    spark = local_spark()
    rows: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            warm_up(spark, conns["warmup"], tmp)
            for partitions, size, events in CASES:
                conn = conns[f"p{partitions}s{size}e{events}"]
                fill(conn, events, size)
                # Each side drains the same events REPEATS times, alternating, and the median run of each
                # is compared: on a noisy 2-core machine one pair of runs swings the ratio by 20-30%.
                sdk_runs, spark_runs, batch_runs, alone_runs, cpu_runs = [], [], [], [], []
                packed_runs: list[float] = []
                packed_cpu: list[float] = []
                for attempt in range(REPEATS):
                    # The previous round's SDK drain takes about a minute at a million events, as long as Spark lets
                    # a Python worker idle (WORKER_IDLE_END): keep_warm, not the order of the runs, is what keeps
                    # the measured run off fresh workers.
                    where = os.path.join(tmp, f"{partitions}-{size}-{events}-{attempt}")
                    keep_warm(spark, conns["warmup"], where + "-warm")
                    cpu_before = executor_python_cpu()
                    spark_s, batch_s = connector_drain(spark, conn, events, where)
                    cpu_runs.append((executor_python_cpu() - cpu_before) / events * 1e6)
                    spark_runs.append(spark_s)
                    batch_runs.append(batch_s)
                    # the same without the executor's receiver service: each Python worker reads for itself
                    alone = {ALONE: "false", "eventhubs.consumerGroup": ALONE_GROUP}
                    _, alone_s = connector_drain(spark, conn, events, where + "-alone", **alone)
                    alone_runs.append(alone_s)
                    if partitions >= 32:
                        cpu_before = executor_python_cpu()
                        _, packed_s = connector_drain(spark, conn, events, where + "-packed", **PACKED)
                        packed_cpu.append((executor_python_cpu() - cpu_before) / events * 1e6)
                        packed_runs.append(packed_s)
                    sdk_runs.append(sdk_drain(conn, events))
                fresh = ""
                if events >= 1_000_000:
                    # once more after Spark has ended its idle Python workers: the first batch of a query on an idle
                    # executor, and every batch of a stream triggered less often than once a minute
                    time.sleep(WORKER_IDLE_END + 5)
                    where = os.path.join(tmp, f"{partitions}-{size}-{events}-fresh")
                    cpu_before = executor_python_cpu()
                    fresh_s, fresh_batch_s = connector_drain(spark, conn, events, where)
                    fresh_cpu = (executor_python_cpu() - cpu_before) / events * 1e6
                    fresh = (
                        f"{statistics.median(sdk_runs) / fresh_s:.2f}x whole ({fresh_s:.2f} s), {fresh_batch_s:.2f} s "
                        f"in the batch, {fresh_cpu:.1f} µs CPU/event"
                    )
                sdk, spark_s, batch_s, alone_s = (
                    statistics.median(r) for r in (sdk_runs, spark_runs, batch_runs, alone_runs)
                )
                rows.append({
                    "partitions": partitions, "event bytes": size, "events": events,
                    "SDK receive_batch events/s": events / sdk, "connector events/s": events / spark_s,
                    "ratio": round(sdk / spark_s, 2),
                    "ratio, each run": " ".join(f"{a / b:.2f}" for a, b in zip(sdk_runs, spark_runs, strict=True)),
                    "connector events/s in the batch": events / batch_s, "ratio in the batch": round(sdk / batch_s, 2),
                    "in the batch, each worker reading for itself": events / alone_s,
                    "executor Python CPU per event (µs)": round(statistics.median(cpu_runs), 1),
                    "events per second of one Python worker's CPU": round(1e6 / statistics.median(cpu_runs)),
                    "small ranges sharing tasks: in the batch": (
                        f"{events / statistics.median(packed_runs):,.0f}" if packed_runs else "-"
                    ),
                    "small ranges sharing tasks: executor Python CPU per event (µs)": (
                        f"{statistics.median(packed_cpu):.1f}" if packed_cpu else "-"
                    ),
                    "one run on fresh Python workers (after a minute idle)": fresh or "-",
                })  # fmt: skip
                print(rows[-1], flush=True)
    finally:
        spark.stop()
        proc.terminate()
        proc.wait(30)
    worst = min(r["ratio"] for r in rows)
    record(
        "read_vs_sdk",
        {
            "target": TARGET,
            "worst ratio (connector / SDK)": worst,
            "target met": all(r["ratio"] >= target_ratio(r["partitions"], r["events"]) for r in rows),
            "issue 16: at least 100k events/s per Python worker (under 10 µs of its CPU per event), 4 "
            "partitions, 200 B": rows[0]["events per second of one Python worker's CPU"] >= 100_000,
        },
        rows,
        notes=(
            f"Each side ran {REPEATS} times per case, alternating; the table compares the median runs. Each "
            f"measured connector run follows a read of {KEEP_WARM_EVENTS:,} events of another hub, as a stream "
            "triggered at least once a minute has: Spark ends Python workers idle for a minute, and the SDK's drain "
            "of a million events takes about that long, so without it a run would find fresh workers or not by a "
            "second of the SDK's pace. The fresh case is measured once at 1,000,000 events ('one run on fresh Python "
            "workers'), after a minute idle: the first batch of a query on an idle executor, and every batch of a "
            "stream triggered less often than once a minute. "
            "SDK: one EventHubConsumerClient.receive_batch over all partitions (prefetch 1000), timed from the "
            "call to the last event. Connector: local[2], Trigger.AvailableNow, one micro-batch into the noop "
            "sink, timed from start() to the end of the query (planning and task start-up included); 'in the "
            "batch' divides by the batch's own run time (Spark's addBatch), leaving out the query's start-up and "
            "shut-down. 'Executor Python CPU per event' adds up the CPU time of the executor's Python processes "
            "over the query (Spark's Python workers and their daemon, and the receiver service: receiving, "
            "decoding, handing Arrow batches to the JVM, and the tasks' start; in local mode the driver's Python "
            "planning workers too), divided by the events; 'events per second of one Python worker's CPU' is its "
            "inverse, what one worker with a core of its own would read. During the batch both cores are busy "
            "(sampled: 85-100%): the emulator (about 0.9 µs of CPU per event since it encodes a run of deliveries at "
            "once, 2.2 before) and the JVM share them with the "
            "Python side, so 'in the batch' is lower than one worker's CPU would allow.\n\n"
            "Where the time goes: the receiver service's reading thread takes a partition's run of transfer "
            "frames from 256 KiB socket reads in one pass, the frames found and the sequence numbers read with "
            "numpy, and keeps the messages where they arrived (amqp/frame_reader.py); it sends each chunk to the "
            "task as the spans of those reads, 512 KiB ahead of the task, so both work at once "
            "(executor/receiver_service.py); the "
            "task decodes the chunks that have arrived (up to 4096 events or 4 MiB) as one, column by column by "
            "the layout its messages share (codec/layout.py: about 0.5 ms per chunk plus 0.4 µs per event). The "
            "link's "
            "credit (2000 events, bounded by the read-ahead bytes) keeps chunks large. 'Executor Python CPU' "
            "includes what Spark's Python worker costs per task: its full garbage collection after every task, "
            "most of a trivial Python source's 28 ms of Python CPU per task (bench task_cost), walks only what "
            "tasks made since once the connector has frozen the worker's long-lived objects out of it "
            "(process/runtime.py: the connector's tasks take 3.4 ms); "
            "the JVM's side of each task (about 30 ms of CPU here) stays, and at 32 "
            "partitions a batch of 200,000 events has 32 tasks: the 'small ranges sharing tasks' columns read the "
            "same batch with eventhubs.minEventsPerTask=50000 (4 tasks). Without the service (each worker "
            "reading for itself, with a consumer group of its own so that the two modes' owner-level links do not "
            "displace each other) "
            "there is one process less on the 2 cores. What remains outside the batch is Spark's streaming "
            "start-up, 1.1-1.6 s from start() to the first trigger here, the same for a trivial Python "
            "streaming source (most of it the driver's Python planner process starting: it compiles "
            "pyspark from its zip at each query). With 2 KB events Spark also moves ten times the bytes from "
            "the Python workers to the JVM.\n\n"
            "The machine has 2 cores shared by the emulator, the JVM and the Python workers: single runs of one "
            "case vary by up to 30% (see 'ratio, each run')."
        ),
    )
