"""A hub-to-hub stream written exactly once, in a driver process of its own (``local-cluster[2,1,1024]`` by default),
for the tests that SIGKILL its executors, its receiver services and the driver itself while batches are being written.

``python -m tests.integration.sink_app SOURCE TARGET OUT_DIR EXECUTOR_KILLS`` reads the source hub from its start
(``maxEventsPerTrigger`` 10,000, or ``SINK_APP_PER_TRIGGER``) through a stateless transform (bodies upper-cased, each
event to the partition it came from) into the target hub with ``eventhubs.sink.exactlyOnce``, checkpoints under
``OUT_DIR``, until the source is drained; then writes ``OUT_DIR/done``. With ``EXECUTOR_KILLS`` n, a thread SIGKILLs
an executor's JVM n times, each while a batch is being written (its tasks' marks are there, its fence is not), and
appends each pid to ``OUT_DIR/executor-kills``. ``SINK_APP_MASTER`` runs another master (``local[2]``: the executor is
the driver's JVM, so EXECUTOR_KILLS must be 0), and ``SINK_APP_SERVICE_KILLS`` n SIGKILLs a receiver service n times,
each while a batch is being written (pids appended to ``OUT_DIR/service-kills``). A fifth argument ``off`` writes at
least once instead (the same faults then store events twice: the test shows what the option prevents), a batch being
written then one Spark planned and did not commit.

``python -m tests.integration.sink_app connect TARGET OUT_DIR`` writes 42,000 rows to the target with ``df.write``
and ``eventhubs.sink.exactlyOnce`` through a Spark Connect client: a first run fails after its tasks sent 20,000
rows each (a null body further on), the second with the same write id sends the rest.
"""

from __future__ import annotations

import glob
import os
import random
import signal
import sys
import threading
import time
from pathlib import Path

PER_TRIGGER = 10_000


def writing(out: str) -> int | None:
    """The batch being written now, if any: exactly once, one with marks and no fence yet; at least once (no marks),
    one Spark planned (its offsets written) and has not committed."""
    for marks in glob.glob(os.path.join(out, "sink", "eventhubs-sink", "*", "marks-*")):
        batch = int(marks.rsplit("-", 1)[1])
        if not os.path.exists(os.path.join(os.path.dirname(marks), f"fence-{batch}.json")):
            return batch
    if os.path.exists(os.path.join(out, "at-least-once")):
        planned = glob.glob(os.path.join(out, "checkpoint", "offsets", "[0-9]*"))
        for batch in sorted(int(os.path.basename(p)) for p in planned):
            if not os.path.exists(os.path.join(out, "checkpoint", "commits", str(batch))):
                return batch
    return None


def kill_executors(spark: object, out: str, kills: int) -> None:
    from tests.integration.spark_app import executor_pids

    app = spark.sparkContext.applicationId  # type: ignore[attr-defined]
    hit: set[int] = set()
    while len(hit) < kills:
        batch = writing(out)
        pids = executor_pids(app)
        if batch is None or batch in hit or len(pids) < 2:
            time.sleep(0.05)
            continue
        time.sleep(random.uniform(0.0, 0.4))  # somewhere among the batch's sends
        victim = random.choice(pids)
        os.kill(victim, signal.SIGKILL)
        hit.add(batch)
        with open(os.path.join(out, "executor-kills"), "a") as f:
            f.write(f"{victim} batch {batch}\n")


def service_pids(jvms: list[int]) -> list[int]:
    """The receiver services watching any of these JVMs (each is started with ``--watch-pid`` of its executor's)."""
    wanted = {str(pid).encode() for pid in jvms}
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            args = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        watching = b"--watch-pid" in args and args[args.index(b"--watch-pid") + 1] in wanted
        if b"eventhubs_spark.executor.receiver_service" in args and watching:
            found.append(int(entry))
    return found


def driver_jvms() -> list[int]:
    """This driver's JVM (a child of this process: pyspark starts it)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid():
                found.append(int(entry))
    return found


def kill_services(spark: object, out: str, kills: int) -> None:
    """SIGKILL the application's receiver services ``kills`` times, each while a batch is being written."""
    from tests.integration.spark_app import executor_pids

    app = spark.sparkContext.applicationId  # type: ignore[attr-defined]
    hit: set[int] = set()
    while len(hit) < kills:
        batch = writing(out)
        pids = service_pids(executor_pids(app) + driver_jvms())
        if batch is None or batch in hit or not pids:
            time.sleep(0.05)
            continue
        time.sleep(random.uniform(0.0, 0.4))
        victim = random.choice(pids)
        try:
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:
            continue
        hit.add(batch)
        with open(os.path.join(out, "service-kills"), "a") as f:
            f.write(f"{victim} batch {batch}\n")


def main(source: str, target: str, out: str, kills: int, once: bool = True) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    import pyspark
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from tests.integration.cluster_start import distinct_application_id
    from tests.integration.spark_app import executors_up

    master = os.environ.get("SINK_APP_MASTER", "local-cluster[2,1,1024]")
    builder = (
        SparkSession.builder.master(master)
        .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
        .config("spark.ui.enabled", "false")
    )
    if master.startswith("local-cluster"):
        with distinct_application_id():
            spark = builder.getOrCreate()
        executors_up(spark, 2)
    else:
        spark = builder.getOrCreate()
    if not once:
        Path(out, "at-least-once").touch()
    if kills:
        threading.Thread(target=kill_executors, args=(spark, out, kills), daemon=True).start()
    service_kills = int(os.environ.get("SINK_APP_SERVICE_KILLS", "0"))
    if service_kills:
        threading.Thread(target=kill_services, args=(spark, out, service_kills), daemon=True).start()
    per_trigger = os.environ.get("SINK_APP_PER_TRIGGER", str(PER_TRIGGER))

    def run() -> int:
        query = (
            spark.readStream.format("eventhubs")
            .option("eventhubs.connectionString", source)
            .option("eventhubs.startingPosition", '{"offset": "-1"}')
            .option("maxEventsPerTrigger", per_trigger)
            .option("eventhubs.connectionIdleTimeout", "5s")
            .load()
            .select(F.upper(F.col("body").cast("string")).alias("body"), F.col("partition").alias("partitionId"))
            .writeStream.format("eventhubs")
            .option("eventhubs.connectionString", target)
            .option("eventhubs.sink.exactlyOnce", str(once).lower())
            .option("eventhubs.checkpointLocation", os.path.join(out, "sink"))
            .option("eventhubs.connectionIdleTimeout", "5s")
            .option("checkpointLocation", os.path.join(out, "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        Path(out, "started").touch()
        query.awaitTermination()
        return sum(1 for p in query.recentProgress if (getattr(p, "numInputRows", None) or p["numInputRows"] or 0) > 0)

    run()
    if tuple(int(x) for x in pyspark.__version__.split(".")[:2]) < (4, 2):
        while run():  # no admission control for Python sources before 4.2: one capped batch per run
            pass
    Path(out, "done").touch()
    spark.stop()


def connect_main(target: str, out: str) -> None:
    """The df.write run again with its write id, through Spark Connect."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    import eventhubs_spark
    from tests.integration.spark_app import connect_session

    spark = connect_session()
    assert spark.__module__ == "pyspark.sql.connect.session", spark
    eventhubs_spark.register(spark)

    def write(poison: int) -> None:
        # SQL text, not pyspark.sql.functions: this process holds a classic session too, so those make its columns
        body = f"case when id = {poison} then null else concat('row-', cast(id as string)) end as body"
        (spark.range(0, 42_000, 1, 2).selectExpr(body)
         .write.format("eventhubs").option("eventhubs.connectionString", target)
         .option("eventhubs.sink.exactlyOnce", "true").option("eventhubs.checkpointLocation", os.path.join(out, "sink"))
         .option("eventhubs.sink.writeId", "connect-1").mode("append").save())  # fmt: skip

    try:
        write(20_990)
        raise SystemExit("the first run should have failed on its null body")
    except Exception as exc:  # the injected null
        if "body" not in str(exc):
            raise
    write(-1)
    Path(out, "done").touch()


if __name__ == "__main__":
    if sys.argv[1] == "connect":
        connect_main(sys.argv[2], sys.argv[3])
    else:
        main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), once=sys.argv[5:] != ["off"])
