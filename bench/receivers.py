"""Receivers across micro-batches: link attaches per partition, reuse and executor memory, with the
executor's receiver service and without it (each Python worker reading for itself), in one run.

Each mode runs the same query in a child process: ``local[4]``, 32 partitions, 50 micro-batches
(``Trigger.AvailableNow`` with ``maxEventsPerTrigger``), 200-byte events, noop sink. The emulator runs
in this process and counts every receiving link attached to each partition: what a client's reuse of
its links costs the service. This process samples the resident memory of the child's Spark Python
processes (daemon, workers) and of the receiver service five times a second.
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

from .read import fill
from .results import record

PARTITIONS = 32
BATCHES = 50
PER_PARTITION = 100  # events per partition per micro-batch
LINE = re.compile(r"via=(\w+) .*pid=(\d+) pool_hits=(\d+) pool_repositions=(\d+) pool_creates=(\d+)")


def child(conn: str, out: str, service: str) -> None:
    """Runs in the child process: an AvailableNow query of exactly BATCHES micro-batches."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.master("local[4]").config("spark.ui.enabled", "false").getOrCreate()
    query = (
        spark.readStream.format("eventhubs")
        .option("eventhubs.connectionString", conn)
        .option("eventhubs.startingPosition", '{"offset": "-1"}')
        .option("maxEventsPerTrigger", str(PARTITIONS * PER_PARTITION))
        .option("eventhubs.receiverService", service)
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", os.path.join(out, "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    durations = sorted(p["durationMs"].get("addBatch", 0) for p in batches)
    summary = {
        "batches": len(batches),
        "rows": sum(p["numInputRows"] for p in batches),
        "median_batch_ms": durations[len(durations) // 2] if durations else 0,
    }
    Path(out, "result.json").write_text(json.dumps(summary))
    spark.stop()


def _processes(root: int) -> list[int]:
    """``root``'s descendants, and every receiver service (it runs in a session of its own)."""
    children: dict[int, list[int]] = {}
    services = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                if b"eventhubs_spark.executor.receiver_service" in Path(f"/proc/{entry}/cmdline").read_bytes():
                    services.append(int(entry))
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        for c in children.get(pid, []):
            out.append(c)
            todo.append(c)
    return sorted(set(out) | set(services))


_SERVICES: set[int] = set()  # pids of receiver services seen while sampling


def _python_rss(root: int) -> dict[int, int]:
    """RSS in bytes of each Spark Python process and receiver service of the query."""
    rss = {}
    for pid in _processes(root):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            if not any(
                k in cmd for k in (b"pyspark.daemon", b"pyspark.worker", b"eventhubs_spark.executor.receiver_service")
            ):
                continue
            if b"eventhubs_spark.executor.receiver_service" in cmd:
                _SERVICES.add(pid)
            used = resident_bytes(pid)
            if used:
                rss[pid] = used
        except OSError:
            continue
    return rss


def resident_bytes(pid: int) -> int:
    """The process's resident memory (VmRSS) in bytes; OSError once it has gone."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0  # a zombie: no memory of its own left


def _run(emulator: Any, hub: str, service: str) -> dict[str, Any]:
    conn = emulator.connection_string(hub)
    before = emulator.consumer_attaches(hub)
    with tempfile.TemporaryDirectory() as out:
        env = {**os.environ, "EVENTHUBS_SPARK_LOG_LEVEL": "INFO", "PYSPARK_PYTHON": sys.executable}
        log_path = Path(out, "stderr.log")
        with open(log_path, "w") as log:
            app = subprocess.Popen(
                [sys.executable, "-c", f"from bench.receivers import child; child({conn!r}, {out!r}, {service!r})"],
                env=env, stderr=log, stdout=subprocess.DEVNULL,
            )  # fmt: skip
            peak_total, peak_service, peak_worker, samples = 0, 0, 0, 0
            _SERVICES.clear()
            while app.poll() is None:
                rss = _python_rss(app.pid)
                if rss:
                    samples += 1
                    peak_total = max(peak_total, sum(rss.values()))
                    peak_service = max([peak_service] + [v for p, v in rss.items() if p in _SERVICES])
                    peak_worker = max([peak_worker] + [v for p, v in rss.items() if p not in _SERVICES])
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
                last[f"{match.group(1)}:{match.group(2)}"] = tuple(int(match.group(i)) for i in (3, 4, 5))  # type: ignore[assignment]
    after = emulator.consumer_attaches(hub)
    attaches = sum(after.get(p, 0) - before.get(p, 0) for p in after)
    hits = sum(h for h, _, _ in last.values())
    total = sum(h + r + c for h, r, c in last.values())
    return {
        "mode": "receiver service per executor" if service == "true" else "each Python worker (no service)",
        "micro-batches": result["batches"],
        "events": result["rows"],
        "tasks": tasks,
        "link attaches": attaches,
        "attaches per partition": round(attaches / PARTITIONS, 2),
        "receiver reuse": round(hits / total, 3) if total else 0.0,
        "median batch (ms)": result["median_batch_ms"],
        "peak Python RSS (MiB)": round(peak_total / 2**20),
        "peak RSS, the service (MiB)": round(peak_service / 2**20),
        "peak RSS, one Spark Python process (MiB)": round(peak_worker / 2**20),
        "memory samples": samples,
    }


def run() -> None:
    from eventhubs_emulator import Emulator

    with Emulator({"with_service": PARTITIONS, "without_service": PARTITIONS}) as emulator:
        for hub in ("with_service", "without_service"):
            fill(emulator.connection_string(hub), PARTITIONS * PER_PARTITION * BATCHES, 200)
        rows = [_run(emulator, "with_service", "true"), _run(emulator, "without_service", "false")]
    service, workers = rows
    record(
        "receivers",
        {
            "partitions": PARTITIONS,
            "attaches per partition, with the service": service["attaches per partition"],
            "attaches per partition, without": workers["attaches per partition"],
            "target": "at most 1.5 attaches per partition over the run (issue 15)",
            "target met": service["attaches per partition"] <= 1.5,
            "peak RSS of the receiver service (MiB)": service["peak RSS, the service (MiB)"],
            "peak executor Python RSS, all processes, with / without the service (MiB)": (
                f"{service['peak Python RSS (MiB)']} / {workers['peak Python RSS (MiB)']}"
            ),
        },
        rows,
        notes=(
            f"local[4], {PER_PARTITION} events of 200 bytes per partition per micro-batch, {BATCHES} micro-batches, "
            "noop sink, the emulator in this process counting the receiving links attached to each partition. "
            "Without the service a task finds its partition's receiver only when it lands on the Python worker "
            "that read the partition's previous range (Spark hands tasks to an executor's workers in turn), and "
            "every miss attaches a new link and drops what the old one had read ahead. With it, every worker "
            "reads through the executor's one service. RSS adds up the Spark Python processes (daemon, workers) "
            "and the service, counting pages they share more than once; read-ahead is bounded per partition "
            "(eventhubs.readAhead.maxEvents, eventhubs.readAhead.maxBytes)."
        ),
    )
