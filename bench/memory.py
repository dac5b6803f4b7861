"""Read-ahead memory at 32 partitions (issue 28): the receiver service's resident memory with every
partition's read-ahead full, against the bound the README documents.

A stream over 32 partitions with a backlog of large events (16 KiB) in each reads one event per partition
a micro-batch, so between micro-batches every link reads ahead until its bounds stop it: with events this
large, ``eventhubs.readAhead.maxBytes`` is the bound that binds. The same query runs twice, each in a
Spark process of its own: with the bound under test, and with a bound so small that nothing is held
(the service's own footprint). This process samples the service's RSS five times a second.

The documented bound (README, "The receiver service"): what a partition holds stays within about twice
its bytes bound (messages wait in the socket reads they arrived in, frame headers included; a read is
cut down when its messages fill less than half of it), and what its link has in flight within the bound
again. So the service's read-ahead stays within 3 x maxBytes per partition.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .emulator_sdk import start_emulator
from .read import fill
from .receivers import _processes, resident_bytes
from .results import record

PARTITIONS = 32
EVENT_BYTES = 16 << 10
BOUND = 2 << 20  # eventhubs.readAhead.maxBytes under test (the default is 8 MB: 32 x 3 x 8 MB is more than
# this machine's emulator should hold for one bench)
SMALL = 64 << 10  # the footprint run's bound: a few events per partition
BACKLOG = 3 * BOUND // EVENT_BYTES + 64  # events per partition: more than the bound and the link's credit
SECONDS = 25  # how long each query runs once started


def child(conn: str, out: str, bound: int) -> None:
    """Runs in the child process: the query, one event per partition a micro-batch, for SECONDS."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    query = (
        spark.readStream.format("eventhubs").option("eventhubs.connectionString", conn)
        .option("eventhubs.startingPosition", '{"offset": "-1"}')
        .option("maxEventsPerTrigger", str(PARTITIONS)).option("eventhubs.readAhead.maxBytes", str(bound))
        .load().writeStream.format("noop").option("checkpointLocation", os.path.join(out, "checkpoint"))
        .trigger(processingTime="1 second").start()
    )  # fmt: skip
    time.sleep(SECONDS)
    query.stop()
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    Path(out, "result.json").write_text(json.dumps({"rows": rows, "batches": len(query.recentProgress)}))
    spark.stop()


def _services() -> set[int]:
    """Every receiver service on this machine (they run in sessions of their own)."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if b"eventhubs_spark.executor.receiver_service" in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.add(int(entry))
            except OSError:
                continue
    return found


def _wait_for_no_service(timeout: float = 60.0) -> None:
    """A service outlives its Spark by a few seconds: the next run must not measure the last one's."""
    deadline = time.monotonic() + timeout
    while _services():
        if time.monotonic() > deadline:
            raise RuntimeError(f"receiver services still running after {timeout:g} s: {sorted(_services())}")
        time.sleep(0.5)


def _service_rss(root: int) -> int:
    """The resident bytes of the query's receiver service (0 before it starts)."""
    for pid in _processes(root):
        try:
            if b"eventhubs_spark.executor.receiver_service" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return resident_bytes(pid)
        except OSError:
            continue
    return 0


def _run(conn: str, bound: int) -> dict[str, Any]:
    _wait_for_no_service()  # the only service seen during the run is then this query's
    with tempfile.TemporaryDirectory() as out:
        log_path = Path(out, "stderr.log")
        with open(log_path, "w") as log:
            app = subprocess.Popen(
                [sys.executable, "-c", f"from bench.memory import child; child({conn!r}, {out!r}, {bound})"],
                env={**os.environ, "PYSPARK_PYTHON": sys.executable}, stderr=log, stdout=subprocess.DEVNULL,
            )  # fmt: skip
            peak = samples = 0
            while app.poll() is None:
                rss = _service_rss(app.pid)
                if rss:
                    samples += 1
                    peak = max(peak, rss)
                time.sleep(0.2)
        if app.returncode != 0:
            raise RuntimeError(f"the query process failed: {log_path.read_text()[-3000:]}")
        result = json.loads(Path(out, "result.json").read_text())
    if not samples:
        raise RuntimeError("no receiver service was seen: nothing was measured")
    return {"readAhead.maxBytes": bound, "peak RSS, the service (MiB)": peak / 2**20, "samples": samples, **result}


def run() -> None:
    proc, conns = start_emulator({"bounded": PARTITIONS, "small": PARTITIONS})
    try:
        fill(conns["bounded"], PARTITIONS * BACKLOG, EVENT_BYTES)
        fill(conns["small"], PARTITIONS * (SECONDS + 64), EVENT_BYTES)  # more than the run reads, and its bound
        measured = _run(conns["bounded"], BOUND)
        footprint = _run(conns["small"], SMALL)
    finally:
        proc.terminate()
        proc.wait(30)
    held = measured["peak RSS, the service (MiB)"] - footprint["peak RSS, the service (MiB)"]
    bound_mib = PARTITIONS * 3 * BOUND / 2**20
    rows = [
        {**footprint, "what": "the service's footprint (a bound that holds a few events)"},
        {**measured, "what": "every partition's read-ahead full"},
    ]
    for row in rows:
        row["peak RSS, the service (MiB)"] = round(row["peak RSS, the service (MiB)"])
    record(
        "memory",
        {
            "target": "memory per executor with read-ahead at 32 partitions stays within its documented bound "
            "(issue 28)",
            "read-ahead held by the service at its peak (MiB)": round(held),
            "the documented bound, 32 partitions x 3 x readAhead.maxBytes (MiB)": round(bound_mib),
            "the bytes bound alone, 32 x readAhead.maxBytes (MiB)": round(PARTITIONS * BOUND / 2**20),
            "target met": held <= bound_mib,
        },
        rows,
        notes=(
            f"{PARTITIONS} partitions, each with a backlog of {BACKLOG} events of {EVENT_BYTES // 1024} KiB; a stream "
            f"reads one event per partition a micro-batch (maxEventsPerTrigger={PARTITIONS}, 1 s trigger, local[2], "
            f"noop sink) for {SECONDS} s, so every link reads ahead to its bound between micro-batches. Two Spark "
            "processes, each with its own receiver service: eventhubs.readAhead.maxBytes at the bound under test, "
            f"and at {SMALL // 1024} KiB (the service's own footprint). 'Held' is the difference of the two peaks. "
            "The bound: a partition holds at most about twice its bytes bound (messages wait in the socket reads "
            "they arrived in, frame headers included), and its link has at most the bound in flight."
        ),
    )
