"""A stream on ``local-cluster[3,1,1024]`` behind a firewall of its own (issue 46), run inside a network namespace
by the test or the bench: ``ip netns exec NS python -m tests.integration.firewall_app OUT [PLAN]``.

Everything runs in the namespace (the emulator in this process, Spark's driver and executors), on its loopback.
The driver's channel listens on :data:`PORT`. The plan says when an ``nftables`` rule drops every packet to that
port: ``mid`` adds it after :data:`BEFORE` micro-batches and takes it away :data:`DROPPED` seconds later;
``always`` has it from the start; ``homes-mid`` drops the homes' ports (eventhubs.executorPorts: where tasks and the
driver reach the executors' receiver services) instead, after :data:`BEFORE` micro-batches, for :data:`DROPPED`
seconds; ``none`` never; ``homes-off`` never, with ``eventhubs.partitionHomes=false``;
``bare`` has it from the start with homes and the receiver service off (what a sandbox leaves); ``all`` has it
from the start, drops the homes' ports (eventhubs.executorPorts) too, and leaves the receiver service no place to
start (the executors' private socket directory is a symbolic link, which the connector refuses): every
restriction at once, with every option left as it is; ``flood`` has no rule, but a stranger opens 1,000 connections
(half to the driver's channel, half to the first home's port), held and dropped in turns, some with a handshake
for a query it does not know, after :data:`BEFORE` micro-batches. 8 partitions (or
PARTITIONS) with a backlog, 100 events per partition and micro-batch, into parquet. ``result.json`` gets the rows
read (partition, sequence number), each batch's start and duration, when the rule came and went, and the
executors' logs' lines about the driver's reach.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import subprocess
import sys
import threading
import time

PORT = 21000  # outside the ephemeral range (32768-60999), where Spark's own ports are
HOMES = (20000, 20099)  # eventhubs.executorPorts, likewise
PARTITIONS = 8
EVENTS = 2400  # per partition: 24 batches of 800
BEFORE = 5
DROPPED = 30.0  # seconds the rule stays
RECHECK = 10  # seconds between the executors' re-checks (a minute by default: shortened, so the test is short)


def nft(*args: str) -> None:
    subprocess.run(["nft", *args], check=True)


def flood(result: dict[str, object], connections: int = 1000) -> None:
    """A stranger's flood on loopback: ``connections`` connections in all, at most 200 held at once, bounded in
    time; when it began and ended go into ``result``."""
    import socket

    result["flood_started"] = time.time()
    held: list[socket.socket] = []
    opened = 0
    deadline = time.monotonic() + 60
    while opened < connections and time.monotonic() < deadline:
        port = PORT if opened % 2 == 0 else HOMES[0]
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=2)
        except OSError:
            opened += 1  # refused or cut off: it counts as an attempt
            continue
        opened += 1
        if opened % 10 == 1:
            with contextlib.suppress(OSError):
                sock.sendall(b"EHS1" + b"\0" * 16 + b"\1" * 32)  # a handshake for a query nobody knows
        held.append(sock)
        if len(held) >= 200:
            for old in held[:100]:
                old.close()
            del held[:100]
        time.sleep(0.01)
    for sock in held:
        sock.close()
    result["flood_ended"] = time.time()
    result["flood_connections"] = opened


def main(out: str, plan: str = "mid", partitions: str = str(PARTITIONS), events: str = str(EVENTS)) -> None:
    count, per_partition = int(partitions), int(events)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["EVENTHUBS_SPARK_LOG_LEVEL"] = "INFO"
    import pyspark
    from pyspark.sql import SparkSession

    from eventhubs_emulator import Emulator
    from tests.integration.sdk_helpers import send

    nft("add", "table", "inet", "firewall")
    nft("add", "chain", "inet", "firewall", "input", "{ type filter hook input priority 0; }")

    def drop() -> float:
        nft("add", "rule", "inet", "firewall", "input", "tcp", "dport", str(PORT), "drop")
        return time.time()

    def drop_homes() -> float:
        nft("add", "rule", "inet", "firewall", "input", "tcp", "dport", f"{HOMES[0]}-{HOMES[1]}", "drop")
        return time.time()

    def allow() -> float:
        nft("flush", "chain", "inet", "firewall", "input")
        return time.time()

    emulator = Emulator({"walled": count}).start()
    for p in range(count):
        send(emulator.connection_string("walled"), [f"p{p}-{i}" for i in range(per_partition)], partition_id=str(p))
    tmp = os.path.join(out, "executor-tmp")
    os.makedirs(tmp)
    if plan == "all":  # no place for the receiver service: its private directory may not be a symbolic link
        os.symlink(out, os.path.join(tmp, f"ehs-{os.getuid()}"))
    from tests.integration.cluster_start import distinct_application_id

    with distinct_application_id():
        spark = (
            SparkSession.builder.master("local-cluster[3,1,1024]")
            .config("spark.executorEnv.TMPDIR", tmp)
            .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
            .config("spark.executorEnv.EVENTHUBS_SPARK_LOG_LEVEL", "INFO")
            .config("spark.executorEnv.EVENTHUBS_SPARK_RECHECK", str(RECHECK))
            .config("spark.ui.port", "4040")  # the namespace's own loopback: the tasks' run times, from its REST API
            .config("spark.sql.shuffle.partitions", "2")
            .getOrCreate()
        )
    result: dict[str, object] = {"plan": plan}
    if plan in ("always", "bare", "all"):
        result["dropped"] = drop()
    if plan == "all":
        drop_homes()
    extra = {
        "homes-off": {"eventhubs.partitionHomes": "false"},
        "bare": {"eventhubs.partitionHomes": "false", "eventhubs.receiverService": "off"},
    }.get(plan, {})
    query = (
        spark.readStream.format("eventhubs")
        .option("eventhubs.connectionString", emulator.connection_string("walled"))
        .option("eventhubs.startingPosition", '{"offset": "-1"}')
        .option("maxEventsPerTrigger", str(100 * count))
        .option("eventhubs.driverChannel.ports", str(PORT))
        .option("eventhubs.executorPorts", f"{HOMES[0]}-{HOMES[1]}")
        .options(**extra)
        .load()
        .selectExpr("partition", "sequenceNumber")
        .writeStream.format("parquet")
        .option("path", os.path.join(out, "data"))
        .option("checkpointLocation", os.path.join(out, "checkpoint"))
        # mid: a batch a second, so tasks still run well past the moment a told report's connection is found cut off
        # (driver_channel.UNACKED_LIMIT, then a probe): at full speed the backlog was read 7 s after the drop
        .trigger(processingTime="1 second" if plan == "mid" else "0 seconds")
        .start()
    )
    total = count * per_partition
    flooder: threading.Thread | None = None
    try:
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and query.exception() is None:
            progress = query.recentProgress
            done = sum(p["numInputRows"] for p in progress)
            started = len([p for p in progress if p["numInputRows"]]) >= BEFORE
            if plan == "mid" and "dropped" not in result and started:
                result["dropped"] = drop()
            if plan == "homes-mid" and "dropped" not in result and started:
                result["dropped"] = drop_homes()
            if plan == "flood" and flooder is None and started:
                flooder = threading.Thread(target=flood, args=(result,), daemon=True)
                flooder.start()
            dropped = float(result.get("dropped", time.time()))  # type: ignore[arg-type]
            if plan in ("mid", "homes-mid") and "allowed" not in result and time.time() - dropped >= DROPPED:
                result["allowed"] = allow()
            waiting = (plan in ("mid", "homes-mid") and "allowed" not in result) or (
                plan == "flood" and "flood_ended" not in result
            )
            if done >= total and not waiting:
                break
            time.sleep(0.2)
        assert query.exception() is None, query.exception()
        # a few more quiet triggers after the rule went, so the executors' re-check has its chance to be seen
        if plan == "mid":
            time.sleep(RECHECK + 5)
        batches = [
            {"batch": p["batchId"], "start": p["timestamp"], "rows": p["numInputRows"],
             "ms": p["durationMs"].get("triggerExecution", 0), "latestOffset": p["durationMs"].get("latestOffset", 0)}
            for p in query.recentProgress
        ]  # fmt: skip
    finally:
        query.stop()
        allow()
    result["batches"] = batches
    result["task_ms"] = task_run_times(spark)
    result["rows"] = [(r.partition, r.sequenceNumber) for r in spark.read.parquet(os.path.join(out, "data")).collect()]
    home = os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)
    work = os.path.join(home, "work", spark.sparkContext.applicationId)
    spark.stop()
    said = []
    for log in glob.glob(os.path.join(work, "*", "stderr")):
        with open(log, errors="replace") as f:
            said += [line.strip() for line in f if "query's driver" in line or "receiver service" in line]
    result["said"] = said
    shutil.rmtree(work, ignore_errors=True)
    emulator.stop()
    with open(os.path.join(out, "result.json"), "w") as f:
        json.dump(result, f)


def task_run_times(spark: object) -> list[int]:
    """Each finished task's executor run time (ms), from the application's REST API."""
    import urllib.request

    app = spark.sparkContext.applicationId  # type: ignore[attr-defined]
    url = f"http://127.0.0.1:4040/api/v1/applications/{app}/stages?details=true&status=complete"
    with urllib.request.urlopen(url, timeout=30) as answer:
        stages = json.loads(answer.read())
    return [int(task["taskMetrics"]["executorRunTime"]) for stage in stages
            for task in (stage.get("tasks") or {}).values() if task.get("taskMetrics")]  # fmt: skip


if __name__ == "__main__":
    main(*sys.argv[1:])
