"""The old Scala connector (azure-event-hubs-spark 2.3.22) at work on its own Spark 3.5, for
tests/integration/peers/test_old_connector.py and bench jvm (issue 47): ``.venv-spark3.5/bin/python tests/jvm/old_app.py
PLAN.json OUT.json``. It imports nothing of this project (it runs where only pyspark 3.5 is installed).

The plan (JSON) names the connection string (the emulator's, over TLS on 5671: the old connector knows no other
port and no plain AMQP), the trust store with the emulator's authority, the jars, and a list of steps, all run in
one Spark application (one JVM start):

- ``{"do": "batch", "name": N, "start": POSITION, "end": POSITION|null}``: a batch read; its (partition,
  sequence number) pairs.
- ``{"do": "stream", "name": N, "start": POSITION}``: a stream with one trigger into a memory sink; likewise.
- ``{"do": "migrate", "hub": H, "path": P, "start": POSITION, "max": M}``: a stream of hub H with one trigger of at
  most M events into parquet at P/data, its Spark checkpoint at P/checkpoint (which the connector resumes).
- ``{"do": "rows", "name": N, "hub": H}``: every event of hub H as rows (body in base64, partition, sequence
  number, partition key, properties).
- ``{"do": "time", "name": N, "hub": H}``: a whole batch read of hub H into the ``noop`` sink, timed (bench jvm):
  its seconds, events, and the CPU seconds of this process's tree (the JVM, its executor in local mode).
- ``{"do": "write", "hub": H, "rows": [...]}``: the old connector's sink writes the rows (body, and partitionId
  or partitionKey, and properties) to hub H.
- ``{"do": "time_write", "name": N, "hub": H, "events": E, "size": S}``: the old sink writes E events of S
  bytes, round-robin, timed as ``time`` (bench jvm).

``options`` (optional) are more of the old connector's options, given to every step (bench jvm sets its
``eventhubs.threadPoolSize``). POSITION is the old connector's own JSON: ``{"offset": "-1", "seqNo": -1,
"enqueuedTime": null, "isInclusive": true}``."""

from __future__ import annotations

import base64
import json
import sys
import time


def main(plan_path: str, out_path: str) -> None:
    from pyspark.sql import SparkSession

    with open(plan_path) as f:
        plan = json.load(f)
    trust = (
        f"-Djavax.net.ssl.trustStore={plan['trust_store']} -Djavax.net.ssl.trustStorePassword=changeit "
        "-Djavax.net.ssl.trustStoreType=PKCS12"
    )
    spark = (
        SparkSession.builder.master(plan.get("master", "local[2]"))
        .config("spark.jars", ",".join(plan["jars"]))
        .config("spark.driver.extraJavaOptions", trust)
        .config("spark.executor.extraJavaOptions", trust)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", plan.get("driver_memory", "1g"))
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.eventLog.enabled", "true" if plan.get("event_log") else "false")
        .config("spark.eventLog.dir", plan.get("event_log") or "/tmp")
        .config("spark.eventLog.compress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    jvm = spark.sparkContext._jvm

    def conf(hub: str | None = None) -> dict[str, str]:
        conn = plan["connection_string"] if hub is None else plan["namespace"] + f";EntityPath={hub}"
        return {
            **plan.get("options", {}),
            "eventhubs.connectionString": jvm.org.apache.spark.eventhubs.EventHubsUtils.encrypt(conn),
        }

    results: dict[str, object] = {}
    for step in plan["steps"]:
        do = step["do"]
        if do == "batch":
            reader = (
                spark.read.format("eventhubs")
                .options(**conf())
                .option("eventhubs.startingPosition", json.dumps(step["start"]))
            )
            if step.get("end") is not None:
                reader = reader.option("eventhubs.endingPosition", json.dumps(step["end"]))
            rows = reader.load().select("partition", "sequenceNumber").collect()
            results[step["name"]] = sorted([r.partition, r.sequenceNumber] for r in rows)
        elif do == "stream":
            name = f"old_{len(results)}"
            query = (
                spark.readStream.format("eventhubs").options(**conf())
                .option("eventhubs.startingPosition", json.dumps(step["start"])).load()
                .select("partition", "sequenceNumber").writeStream.format("memory").queryName(name)
                .trigger(once=True).start()
            )  # fmt: skip
            query.awaitTermination()
            results[step["name"]] = sorted([r.partition, r.sequenceNumber] for r in spark.table(name).collect())
        elif do == "migrate":
            query = (
                spark.readStream.format("eventhubs").options(**conf(step["hub"]))
                .option("eventhubs.startingPosition", json.dumps(step["start"]))
                .option("maxEventsPerTrigger", str(step["max"])).load()
                .selectExpr("cast(body as string) as body", "partition", "sequenceNumber")
                .writeStream.format("parquet").option("path", step["path"] + "/data")
                .option("checkpointLocation", step["path"] + "/checkpoint").trigger(once=True).start()
            )  # fmt: skip
            query.awaitTermination()
        elif do == "rows":
            start = json.dumps({"offset": "-1", "seqNo": -1, "enqueuedTime": None, "isInclusive": True})
            rows = (
                spark.read.format("eventhubs").options(**conf(step["hub"])).option("eventhubs.startingPosition", start)
                .load().collect()
            )  # fmt: skip
            results[step["name"]] = [
                {"body": base64.b64encode(bytes(r.body)).decode(), "partition": r.partition,
                 "sequenceNumber": r.sequenceNumber, "partitionKey": r.partitionKey,
                 "properties": dict(r.properties or {})}
                for r in rows
            ]  # fmt: skip
        elif do == "write":
            rows = step["rows"]
            schema = "body binary, partitionId string, partitionKey string, properties map<string,string>"
            data = [(base64.b64decode(r["body"]), r.get("partitionId"), r.get("partitionKey"), r.get("properties"))
                    for r in rows]  # fmt: skip
            df = spark.createDataFrame(data, schema)
            # the old sink takes either partitionId or partitionKey, not both columns: one write per kind
            for column, other in (("partitionId", "partitionKey"), ("partitionKey", "partitionId")):
                part = df.where(f"{column} is not null").drop(other)
                if part.count():
                    part.write.format("eventhubs").options(**conf(step["hub"])).save()
        elif do == "time":
            start = json.dumps({"offset": "-1", "seqNo": -1, "enqueuedTime": None, "isInclusive": True})
            end = json.dumps({"offset": "@latest", "seqNo": -1, "enqueuedTime": None, "isInclusive": True})
            df = (
                spark.read.format("eventhubs").options(**conf(step["hub"]))
                .option("eventhubs.startingPosition", start).option("eventhubs.endingPosition", end).load()
            )  # fmt: skip
            results[step["name"]] = timed(lambda df=df: df.write.format("noop").mode("overwrite").save())
        elif do == "time_write":
            df = sink_frame(spark, step["events"], step["size"])
            results[step["name"]] = timed(lambda df=df, hub=step["hub"]: df.write.format("eventhubs")
                                          .options(**conf(hub)).save())  # fmt: skip
        else:
            raise ValueError(f"unknown step {do!r}")
    spark.stop()
    if plan.get("event_log"):
        add_in_batch(results, plan["event_log"])
    with open(out_path, "w") as out:
        json.dump(results, out)


def sink_frame(spark: object, events: int, size: int) -> object:
    """The events a sink is timed with (bench jvm): ``events`` bodies of ``size`` bytes and no partition column
    (sent round-robin), made by Spark itself and cached, so the write's time is the sink's. Round-robin is the old
    sink's one fast and safe shape: with a partition column it keeps one partition sender per task and opens a
    new one, closing the last, for every row (its issue #331), and that close cancels the send still in flight:
    OperationCancelledException, "send cancelled as the Sender instance is Closed before the sendOperation
    completed"."""
    df = spark.range(events).selectExpr(f"cast(repeat('x', {size}) as binary) as body").cache()  # type: ignore[attr-defined]
    df.count()
    return df


def timed(action: object) -> dict[str, float]:
    """Run ``action`` (a query); its wall seconds, the CPU seconds of this process's tree, and its start and end
    on the clock Spark's event log uses (for ``add_in_batch``)."""
    cpu, began, wall = tree_cpu(), time.perf_counter(), time.time()
    action()  # type: ignore[operator]
    return {"seconds": time.perf_counter() - began, "cpu_seconds": tree_cpu() - cpu, "from": wall, "to": time.time()}


def add_in_batch(results: dict, event_log: str) -> None:
    """Each timed query's in-batch seconds: from its first stage's submission to its last stage's completion, read
    from Spark's event log (written in full once the application stops), so planning and the driver's set-up are
    left out the same way for every Spark and connector."""
    import glob
    import os

    stages: list[tuple[float, float]] = []
    for path in glob.glob(f"{event_log}/**/*", recursive=True):  # Spark 4 rolls its log in a folder
        if os.path.isdir(path) or path.endswith(".inprogress"):
            continue
        with open(path) as f:
            for line in f:
                if '"SparkListenerStageCompleted"' not in line:
                    continue
                info = json.loads(line)["Stage Info"]
                if "Submission Time" in info and "Completion Time" in info:
                    stages.append((info["Submission Time"] / 1000, info["Completion Time"] / 1000))
    for result in results.values():
        if not isinstance(result, dict) or "from" not in result:
            continue
        mine = [(a, b) for a, b in stages if result["from"] <= a <= result["to"]]
        if mine:
            result["in_batch_seconds"] = max(b for _, b in mine) - min(a for a, _ in mine)


def tree_cpu(root: int | None = None, also: str = "eventhubs_spark.executor.receiver_service") -> float:
    """CPU seconds used so far by ``root`` (this process) and every process below it (Linux ``/proc``), plus any
    process whose command line holds ``also`` (the connector's receiver service, which leaves its parent)."""
    import os

    root = os.getpid() if root is None else root
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    extra: set[int] = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        pid = int(name)
        parents[pid] = int(fields[1])
        times[pid] = (int(fields[11]) + int(fields[12])) / tick
        if also.encode() in cmdline:
            extra.add(pid)
    total = 0.0
    for pid, used in times.items():
        p, seen = pid, 0
        while p > 1 and p != root and seen < 64:
            p, seen = parents.get(p, 1), seen + 1
        if p == root or pid in extra:
            total += used
    return total


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
