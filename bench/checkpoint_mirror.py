"""A running stream's triggers with the blob checkpoint store on, at 32 and 1,024 partitions (issue 64).

With ``eventhubs.checkpointStore.*`` each trigger mirrors the batches before it: a blob a partition, as every Event
Hubs SDK keeps them, so 1,024 writes a trigger on a 1,024-partition hub. For each count, one hub holds the same
51,200 events of 200 bytes (bench ``partitions``' hubs) and a fresh ``local[2]`` Spark process reads it with a
processing-time trigger, ``maxEventsPerTrigger`` 12,800 (four batches), into the noop sink, three ways:

- ``no store``: the checkpoint store off, for reference;
- ``store``: the connector as it ships: the write overlaps the batch the trigger plans
  (:meth:`~eventhubs_spark.checkpoints.mirror.CheckpointMirror.mirror`, ``background``);
- ``store, written first``: the connector before that change (``checkpoints/mirror.py`` and
  ``source/stream_reader.py`` as at BEFORE, the rest as today, bench ``ab_read``'s worktrees): every write made
  before the trigger returns.

Per batch: Spark's ``latestOffset`` and ``walCommit`` durations; per run, the checkpoints the store holds after it
(every partition's, at the last batch's start or later). Azurite (one node process) is the blob service.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .ab_read import remove_worktrees, worktrees
from .partitions import EVENTS, PER_TRIGGER, _fill
from .results import record

COUNTS = tuple(int(c) for c in os.environ.get("EVENTHUBS_BENCH_MIRROR", "32,1024").split(","))
MODES = ("no store", "store", "store, written first")
BEFORE = "561a2dd"  # the commit before the mirror's writes overlapped the batch
CHANGED = ["eventhubs_spark/checkpoints/mirror.py", "eventhubs_spark/source/stream_reader.py"]


def child(conn: str, store: str, container: str, out: str, mode: str) -> None:
    """Runs in a fresh process (its tree first on PYTHONPATH, for Spark's Python workers too): one processing-time
    read of the hub until every event is read."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    reader = (
        spark.readStream.format("eventhubs").option("eventhubs.connectionString", conn)
        .option("eventhubs.startingPosition", '{"offset": "-1"}').option("maxEventsPerTrigger", str(PER_TRIGGER))
    )  # fmt: skip
    if mode != "no store":
        reader = reader.option("eventhubs.checkpointStore.connectionString", store).option(
            "eventhubs.checkpointStore.container", container
        )
    query = (
        reader.load().writeStream.format("noop").option("checkpointLocation", os.path.join(out, "checkpoint"))
        .trigger(processingTime="0 seconds").start()
    )  # fmt: skip
    deadline = time.monotonic() + 1800
    while time.monotonic() < deadline and sum(p["numInputRows"] for p in query.recentProgress) < EVENTS:
        time.sleep(0.2)
    time.sleep(2)  # a trigger after the last batch: it mirrors that batch
    query.stop()
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    Path(out, "result.json").write_text(json.dumps({
        "rows": sum(p["numInputRows"] for p in batches),
        "latestOffset": [p["durationMs"].get("latestOffset", 0) for p in batches],
        "walCommit": [p["durationMs"].get("walCommit", 0) for p in batches],
        "last start": json.loads(batches[-1]["sources"][0]["startOffset"]) if batches else {},
    }))  # fmt: skip
    spark.stop()


def _stored(store: str, container: str, namespace: str, hub: str) -> dict[str, int]:
    """The store's checkpoints of ``hub``: partition -> the next sequence number (the event named + 1)."""
    from eventhubs_spark.checkpoints.blob import BlobCheckpointStore

    listed = BlobCheckpointStore.from_connection_string(store, container).list_checkpoints(namespace, hub, "$Default")
    return {c.partition_id: c.sequence_number + 1 for c in listed if c.sequence_number is not None}


def _run(emulator: Any, azurite: Any, partitions: int, mode: str, tree: Path) -> dict[str, Any]:
    hub = f"m{partitions}"
    container = f"mirror{partitions}{MODES.index(mode)}{int(time.time())}"
    env = {**os.environ, "PYTHONPATH": str(tree), "PYSPARK_PYTHON": sys.executable}
    with tempfile.TemporaryDirectory() as out:
        code = (f"from bench.checkpoint_mirror import child; child({emulator.connection_string(hub)!r}, "
                f"{azurite.connection_string!r}, {container!r}, {out!r}, {mode!r})")  # fmt: skip
        with open(Path(out, "stderr.log"), "w") as log:
            ran = subprocess.run([sys.executable, "-c", code], stderr=log, stdout=subprocess.DEVNULL, cwd=tree, env=env)
            if ran.returncode:
                raise RuntimeError(f"{partitions} partitions, {mode}: {Path(out, 'stderr.log').read_text()[-3000:]}")
        result = json.loads(Path(out, "result.json").read_text())
    row: dict[str, Any] = {
        "partitions": partitions,
        "mode": mode,
        "rows": result["rows"],
        "latestOffset per batch (ms)": result["latestOffset"],
        "walCommit per batch (ms)": result["walCommit"],
        "later batches' latestOffset, median (ms)": statistics.median(result["latestOffset"][1:]),
    }
    if mode != "no store":
        stored = _stored(azurite.connection_string, container, emulator.fully_qualified_namespace, hub)
        start = result["last start"].get(hub, {})
        row["partitions in the store at the last batch's start or later"] = sum(
            1 for p, n in start.items() if stored.get(p, -1) >= n
        )
    return row


def run() -> None:
    from eventhubs_emulator import Emulator
    from tests.conftest import Azurite

    rows: list[dict[str, Any]] = []
    trees = worktrees(Path(tempfile.mkdtemp(prefix="eventhubs-mirror-")), BEFORE, CHANGED)
    azurite = Azurite()
    try:
        with Emulator({f"m{n}": n for n in COUNTS}) as emulator:
            for n in COUNTS:
                _fill(emulator.connection_string(f"m{n}"), n)
                for mode in MODES:
                    print(f"  {n} partitions, {mode} ...", flush=True)
                    rows.append(_run(emulator, azurite, n, mode, trees["A" if mode.endswith("first") else "B"]))
    finally:
        azurite.stop()
        remove_worktrees(trees)
    record("checkpoint_mirror", summary(rows), rows, notes=(
        f"{EVENTS:,} events of 200 bytes in each hub; each row a fresh local[2] Spark process reading it with a "
        f"processing-time trigger in micro-batches of {PER_TRIGGER:,} events into the noop sink, stopped once every "
        "event is read and a trigger after; the store in Azurite (one node process). Durations are Spark's own "
        "(StreamingQueryProgress durationMs). 'store, written first' forces every mirror write to finish before "
        "the trigger returns (the connector before). One run each on a 2-core machine: single figures swing."
    ))  # fmt: skip


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def row(n: int, mode: str) -> dict[str, Any]:
        return next(r for r in rows if r["partitions"] == n and r["mode"] == mode)

    top = max(COUNTS)
    out: dict[str, Any] = {
        "target": "latestOffset at 1,024 partitions <= 1 s in every micro-batch, with the checkpoint store on too "
        "(issue 64)",
        f"latestOffset at {top} partitions with the store, worst batch (ms)": max(
            row(top, "store")["latestOffset per batch (ms)"]
        ),
        f"latestOffset at {top} partitions, the store written first, worst batch (ms)": max(
            row(top, "store, written first")["latestOffset per batch (ms)"]
        ),
        "target met": max(row(top, "store")["latestOffset per batch (ms)"]) <= 1000,
    }
    for n in COUNTS:
        base = max(1.0, row(n, "no store")["later batches' latestOffset, median (ms)"])
        out[f"later batches' latestOffset at {n} partitions, store / no store (medians)"] = round(
            row(n, "store")["later batches' latestOffset, median (ms)"] / base, 2
        )
        out[f"later batches' latestOffset at {n} partitions, written first / no store (medians)"] = round(
            row(n, "store, written first")["later batches' latestOffset, median (ms)"] / base, 2
        )
    return out
