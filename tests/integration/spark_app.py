"""A streaming query in a Spark of its own: ``local-cluster[3,1,1024]`` or Spark Connect ``local[2]``.

Run as ``python -m tests.integration.spark_app MODE CONNECTION_STRING OUT_DIR`` by the tests, because
one process holds one Spark context and the suite's shared session is plain ``local[2]``. It streams
the hub from its start with ``Trigger.AvailableNow`` in several micro-batches into parquet, then
writes ``result.json`` with the rows read and, for local-cluster, the receiver pool figures parsed
from the executors' logs.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import signal
import sys
import threading
import time
from pathlib import Path


def main(mode: str, connection: str, out: str, batch_size: str) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["EVENTHUBS_SPARK_LOG_LEVEL"] = "INFO"
    import pyspark
    from pyspark.sql import SparkSession

    if mode in ("local-cluster", "local-cluster-kill"):
        spark = (
            SparkSession.builder.master("local-cluster[3,1,1024]")
            .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
            .config("spark.executorEnv.EVENTHUBS_SPARK_LOG_LEVEL", "INFO")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .getOrCreate()
        )
    elif mode == "connect":
        spark = SparkSession.builder.remote("local[2]").getOrCreate()
        import eventhubs_spark

        eventhubs_spark.register(spark)  # ships the class to the server, as on a remote cluster
    else:
        raise SystemExit(f"unknown mode {mode!r}")

    def run() -> int:
        """One Trigger.AvailableNow run; returns its batches that read events."""
        query = (
            spark.readStream.format("eventhubs")
            .option("eventhubs.connectionString", connection)
            .option("eventhubs.startingPosition", '{"offset": "-1"}')
            .option("maxEventsPerTrigger", batch_size)
            .load()
            .selectExpr("cast(body as string) as body", "partition", "sequenceNumber")
            .writeStream.format("parquet")
            .option("path", os.path.join(out, "data"))
            .option("checkpointLocation", os.path.join(out, "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        return sum(1 for p in query.recentProgress if (getattr(p, "numInputRows", None) or p["numInputRows"] or 0) > 0)

    if mode == "local-cluster-kill":
        killer = threading.Thread(target=kill_an_executor, args=(spark, out), daemon=True)
        killer.start()
    batches = run()
    if tuple(int(x) for x in pyspark.__version__.split(".")[:2]) < (4, 2):
        # no admission control for Python sources: each AvailableNow run reads one capped batch
        while more := run():
            batches += more
    rows = [r.body for r in spark.read.parquet(os.path.join(out, "data")).collect()]
    result: dict[str, object] = {"rows": rows, "batches": batches}
    if mode == "local-cluster-kill":
        result["killed"] = Path(out, "killed").read_text() if Path(out, "killed").exists() else ""
    if mode in ("local-cluster", "local-cluster-kill"):
        # local-cluster workers keep each executor's log under SPARK_HOME/work/<application id>/<executor>/
        home = os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)
        work = os.path.join(home, "work", spark.sparkContext.applicationId)
        spark.stop()
        result["executors"] = len([e for e in glob.glob(os.path.join(work, "*")) if os.path.isdir(e)])
        result["pool"] = pool_figures(work)
        shutil.rmtree(work, ignore_errors=True)
    else:
        spark.stop()
    with open(os.path.join(out, "result.json"), "w") as f:
        json.dump(result, f)


def kill_an_executor(spark: object, out: str) -> None:
    """Once the query has committed two micro-batches, SIGKILL one executor's JVM (its Python workers and its
    receiver service go with it); notes the pid killed in ``out``/killed."""
    app = spark.sparkContext.applicationId  # type: ignore[attr-defined]
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        commits = glob.glob(os.path.join(out, "checkpoint", "commits", "[0-9]*"))
        if len(commits) >= 2:
            break
        time.sleep(0.1)
    for entry in sorted(os.listdir("/proc")):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if b"CoarseGrainedExecutorBackend" in cmd and app.encode() in cmd:
            os.kill(int(entry), signal.SIGKILL)
            Path(out, "killed").write_text(entry)
            return


LINE = re.compile(r"pid=(\d+) pool_hits=(\d+) pool_repositions=(\d+) pool_creates=(\d+)")


def pool_figures(work: str) -> dict[str, float]:
    """Sum the last pool figures of each process that read (a worker, or a receiver service: with homes, tasks
    on every executor log the figures of the home's service that served them), each process once, by pid."""
    last: dict[str, tuple[int, int, int]] = {}
    for path in glob.glob(os.path.join(work, "*", "stderr")):
        with open(path, errors="replace") as f:
            for line in f:
                m = LINE.search(line)
                if m:
                    figures = (int(m.group(2)), int(m.group(3)), int(m.group(4)))
                    if sum(figures) >= sum(last.get(m.group(1), (0, 0, 0))):  # a pool's counts only grow
                        last[m.group(1)] = figures
    hits = sum(v[0] for v in last.values())
    used = sum(sum(v) for v in last.values())
    return {"tasks": used, "hits": hits, "reuse_rate": hits / used if used else 0.0, "workers": len(last)}


if __name__ == "__main__":
    main(*sys.argv[1:])
