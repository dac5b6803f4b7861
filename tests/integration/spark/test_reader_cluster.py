"""The reader in real executor processes (local-cluster) and under Spark Connect, each in its own Spark."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.sdk_helpers import send

pytestmark = [pytest.mark.spark, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[3]


def run_app(mode: str, eventhub, tmp_path: Path) -> dict:
    expected = set()
    for p in range(eventhub.partitions):
        bodies = [f"{mode}-{p}-{i}" for i in range(250)]
        send(eventhub.connection_string, bodies, partition_id=str(p))
        expected.update(bodies)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.integration.spark_app",
            mode,
            eventhub.connection_string,
            str(tmp_path),
            str(25 * eventhub.partitions),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert len(result["rows"]) == len(expected) and set(result["rows"]) == expected
    assert result["batches"] == 10  # 250 events per partition, 25 per partition per trigger
    return result


@pytest.mark.partitions(6)
def test_local_cluster_reads_each_partition_once_from_its_home(eventhub, tmp_path):
    """Three executors: Spark runs each partition's task wherever a slot is free, yet each partition is read
    from Event Hubs by one link over the whole run (its home's), and the namespace sends each event once;
    every event reaches the sink once."""
    emulator = eventhub.emulator
    attaches_before, sent_before = emulator.consumer_attaches(eventhub.name), emulator.events_sent(eventhub.name)
    result = run_app("local-cluster", eventhub, tmp_path)
    assert result["executors"] == 3
    pool = result["pool"]
    assert pool["tasks"] == 60  # 10 micro-batches x 6 partitions, each task logged its pool figures
    assert pool["hits"] > 0, pool  # receivers were reused across micro-batches
    attaches = emulator.consumer_attaches(eventhub.name)
    attached = sum(attaches.get(p, 0) - attaches_before.get(p, 0) for p in attaches)
    sent, read = emulator.events_sent(eventhub.name) - sent_before, len(result["rows"])
    said = "\n".join(result["notes"][-30:]) or "(no executor or service said why)"
    print(f"local-cluster[3,1,1024]: {attached} link attaches for 6 partitions, {sent} events sent for {read}; {pool}"
          f"\n{said}")  # fmt: skip
    assert attached <= 6 * 1.2, f"{attached} link attaches for 6 partitions: partitions are read away from home\n{said}"
    # A link attached again (one is allowed: under load an idle link may be closed between micro-batches) is sent
    # again what the link before it had been sent ahead of the reads (its credit covers a partition's 250 here),
    # and nothing else: with one link per partition, each event is sent once.
    extra = (attached - 6) * 250
    assert sent <= read + extra, f"the namespace sent {sent} events for {read} read ({attached} link attaches)\n{said}"


def test_spark_connect(eventhub, tmp_path):
    run_app("connect", eventhub, tmp_path)


@pytest.mark.partitions(2)
def test_an_inferred_json_read_right_after_a_stream_on_local_cluster(eventhub, tmp_path):
    """Issue 90, item 1, on real executors: a stream's receivers stay pooled on the executors at their owner level;
    a read that infers its JSON schema right after it (its sampler on the driver, its tasks on the executors) loads
    and reads every event once, and so does a stream that infers right after both."""
    docs = [{"id": i, "device": f"d{i % 3}"} for i in range(40)]
    for p in range(2):
        send(eventhub.connection_string, [json.dumps(d) for d in docs[p::2]], partition_id=str(p))
    proc = subprocess.run([sys.executable, "-m", "tests.integration.json_cluster_app", eventhub.connection_string,
                           str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["streamed"] == 40
    assert result["fields"] == ["id", "device"]
    assert sorted(result["values"], key=lambda v: v["id"]) == docs
    assert sorted(result["streamed_again"], key=lambda v: v["id"]) == docs


def _cluster_run(mode: str, eventhub, out: Path, batch_size: int, options: dict[str, str]) -> dict:
    env = {**os.environ, "SPARK_APP_OPTIONS": json.dumps(options)}
    proc = subprocess.run([sys.executable, "-m", "tests.integration.spark_app", mode, eventhub.connection_string,
                           str(out), str(batch_size)], cwd=ROOT, capture_output=True, text=True, timeout=900,
                          env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads((out / "result.json").read_text())


@pytest.mark.partitions(64)
def test_a_quiet_64_partition_stream_packed_by_default_survives_a_kill_and_a_restart_that_packs_otherwise(
    spark, eventhub, tmp_path
):
    """Issue 87 on local-cluster: a quiet 64-partition stream (10 events a partition a micro-batch) with the defaults
    packs small ranges of one home into shared tasks. Its first run loses an executor to SIGKILL mid-stream (2
    executors, Spark's four attempts a task); the restart, on 3 executors with one task a partition
    (eventhubs.minEventsPerTask=0), packs the batch it resumes otherwise. Every event reaches the sink once, and
    the restart, undisturbed, attaches at most 1.2 links a partition."""
    emulator = eventhub.emulator
    sent: set[str] = set()

    def fill(tag: str, per_partition: int) -> None:
        # through the connector's sink (the SDK's producer waits about half a second on each new partition)
        rows = [(str(p), f"{tag}-{p}-{i}") for p in range(64) for i in range(per_partition)]
        (spark.createDataFrame(rows, "partitionId string, body string").write.format("eventhubs")
         .option("eventhubs.connectionString", eventhub.connection_string).mode("append").save())  # fmt: skip
        sent.update(body for _, body in rows)

    fill("first", 20)
    killed = _cluster_run("local-cluster-kills", eventhub, tmp_path, 640, {})
    assert killed["kills"], "no executor was killed mid-stream"
    fill("second", 10)
    attaches_before = emulator.consumer_attaches(eventhub.name)
    restarted = _cluster_run("local-cluster", eventhub, tmp_path, 640, {"eventhubs.minEventsPerTask": "0"})
    attaches = emulator.consumer_attaches(eventhub.name)
    rows = restarted["rows"]  # the sink's rows of both runs (one parquet table, one checkpoint)
    assert len(rows) == len(sent) and set(rows) == sent, (len(rows), len(set(rows)), len(sent))
    attached = sum(attaches.get(p, 0) - attaches_before.get(p, 0) for p in attaches)
    assert attached <= 64 * 1.2, f"{attached} link attaches for 64 partitions on the restart"
