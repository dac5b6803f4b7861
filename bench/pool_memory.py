"""Receiver reuse and peak executor Python memory at 32 partitions over 50 micro-batches.

The query runs in a child process (its Python workers log the receiver pool's counters to stderr
with ``EVENTHUBS_SPARK_LOG_LEVEL=INFO``, which the child's stderr file collects). This process
samples the resident memory of every Spark Python worker under the child five times a second.
Reuse rate = ranges whose pooled receiver already stood at the range's start / all ranges.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .emulator_sdk import start_emulator
from .read import fill
from .results import record

PARTITIONS = 32
BATCHES = 50
PER_PARTITION = 100  # events per partition per micro-batch
LINE = re.compile(r"pid=(\d+) pool_hits=(\d+) pool_repositions=(\d+) pool_creates=(\d+)")


def child(conn: str, out: str) -> None:
    """Runs in the child process: an AvailableNow query of exactly BATCHES micro-batches."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    query = (
        spark.readStream.format("eventhubs")
        .option("eventhubs.connectionString", conn)
        .option("eventhubs.startingPosition", '{"offset": "-1"}')
        .option("maxEventsPerTrigger", str(PARTITIONS * PER_PARTITION))
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", os.path.join(out, "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    summary = {"batches": len(batches), "rows": sum(p["numInputRows"] for p in batches)}
    Path(out, "result.json").write_text(json.dumps(summary))
    spark.stop()


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        for c in children.get(pid, []):
            out.append(c)
            todo.append(c)
    return out


def _python_worker_rss(root: int) -> dict[int, int]:
    """RSS in bytes of each Spark Python worker (daemon and forked workers) under ``root``."""
    rss = {}
    for pid in _descendants(root):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            if b"pyspark.daemon" not in cmd and b"pyspark.worker" not in cmd:
                continue
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss[pid] = int(line.split()[1]) * 1024
        except OSError:
            continue
    return rss


def run() -> None:
    proc, conns = start_emulator({"pool": PARTITIONS})
    conn = conns["pool"]
    try:
        fill(conn, PARTITIONS * PER_PARTITION * BATCHES, 200)
        with tempfile.TemporaryDirectory() as out:
            env = {**os.environ, "EVENTHUBS_SPARK_LOG_LEVEL": "INFO", "PYSPARK_PYTHON": sys.executable}
            log_path = Path(out, "stderr.log")
            with open(log_path, "w") as log:
                app = subprocess.Popen(
                    [sys.executable, "-c", f"from bench.pool_memory import child; child({conn!r}, {out!r})"],
                    env=env, stderr=log, stdout=subprocess.DEVNULL,
                )  # fmt: skip
                peak_total, peak_one, samples = 0, 0, 0
                while app.poll() is None:
                    rss = _python_worker_rss(app.pid)
                    if rss:
                        samples += 1
                        peak_total = max(peak_total, sum(rss.values()))
                        peak_one = max(peak_one, max(rss.values()))
                    time.sleep(0.2)
            if app.returncode != 0:
                raise RuntimeError(f"the query process failed: {log_path.read_text()[-3000:]}")
            result = json.loads(Path(out, "result.json").read_text())
            last: dict[str, tuple[int, int, int]] = {}
            tasks = 0
            for line in log_path.read_text(errors="replace").splitlines():
                match = LINE.search(line)
                if match:
                    tasks += 1
                    last[match.group(1)] = (int(match.group(2)), int(match.group(3)), int(match.group(4)))
    finally:
        proc.terminate()
        proc.wait(30)
    hits = sum(h for h, _, _ in last.values())
    total = sum(h + r + c for h, r, c in last.values())
    reuse = hits / total if total else 0.0
    rows: list[dict[str, Any]] = [
        {"figure": "micro-batches with data", "value": result["batches"]},
        {"figure": "events read", "value": result["rows"]},
        {"figure": "ranges read (tasks)", "value": tasks},
        {"figure": "Python worker processes that read", "value": len(last)},
        {"figure": "receiver reuse rate", "value": round(reuse, 3)},
        {"figure": "peak RSS, one Python worker (MiB)", "value": peak_one / 2**20},
        {"figure": "peak RSS, all Python workers (MiB)", "value": peak_total / 2**20},
    ]
    record(
        "pool_memory",
        {
            "partitions": PARTITIONS,
            "micro-batches": result["batches"],
            "receiver reuse rate": round(reuse, 3),
            "peak executor Python RSS (MiB, all workers)": round(peak_total / 2**20),
        },
        rows,
        notes=(
            f"local[2], {PER_PARTITION} events of 200 bytes per partition per micro-batch, noop sink; memory sampled "
            f"{samples} times. Tasks land on whichever Python worker is free, so a partition's receiver is reused "
            "only when its next range runs on the same worker. The RSS sum adds up every Spark Python process "
            "(daemons, the stream runner, forked workers) and counts pages they share more than once; the "
            "one-worker peak is the figure to watch for growth."
        ),
    )
