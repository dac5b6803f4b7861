"""The example Spark Declarative Pipeline (``pipelines/eventhubs_to_tables``) run by ``spark-pipelines`` as a user
would: a dry run (analysis only: no event read, no table written), a run that fills the streaming tables and the
materialized view from the emulator's hub, and a second run that reads on from where the first stopped, each
event once. The engine (``pyspark.pipelines``) ships with Spark 4.1 and later; Spark 4.0 has none."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.integration.sdk_helpers import send

pytestmark = [pytest.mark.spark, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[3]
PIPELINE = ROOT / "pipelines" / "eventhubs_to_tables"


def _table(folder: Path, name: str) -> list[dict]:
    files = sorted((folder / "spark-warehouse" / name).glob("part-*.parquet"))
    return [row for f in files for row in pq.read_table(f).to_pylist()]


def _readings(start: int, count: int) -> list[str]:
    return [json.dumps({"device": f"d{i % 3}", "temperature": 20.0 + i % 7, "ts": "2026-11-28T12:00:00Z"})
            for i in range(start, start + count)]  # fmt: skip


@contextlib.contextmanager
def connect_port_lock() -> Iterator[None]:
    """One ``spark-pipelines`` run at a time across the test processes: its local Spark Connect server binds Connect's
    fixed port 15002 and its client finds no other (outside ``SPARK_TESTING``), and the compatibility runs of two
    Sparks each run this test, side by side (seen: one failed to bind 15002 while the other's server held it)."""
    with open(os.path.join(tempfile.gettempdir(), "eventhubs-spark-tests-connect-15002.lock"), "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.mark.partitions(2)
def test_the_example_pipeline_runs_dry_then_fills_its_tables_then_reads_on_each_event_once(eventhub, tmp_path):
    pytest.importorskip("pyspark.pipelines", reason="Spark 4.0 has no declarative pipelines engine")
    folder = tmp_path / "pipeline"
    shutil.copytree(PIPELINE, folder)
    spec = folder / "spark-pipeline.yml"
    spec.write_text(
        spec.read_text().replace("file:///tmp/eventhubs_to_tables-storage", (tmp_path / "storage").as_uri())
    )
    env = {**os.environ, "EVENTHUBS_CONNECTION_STRING": eventhub.connection_string, "PYSPARK_PYTHON": sys.executable}
    command = str(Path(sys.executable).parent / "spark-pipelines")

    def pipelines(verb: str) -> str:
        hive = ["--conf", "spark.sql.catalogImplementation=hive"]  # tables kept between runs (see the spec)
        with connect_port_lock():
            done = subprocess.run([command, *hive, verb], cwd=folder, env=env, capture_output=True, text=True,
                                  timeout=600)  # fmt: skip
        assert done.returncode == 0, f"spark-pipelines {verb}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        assert eventhub.connection_string.split("SharedAccessKey=")[1] not in done.stdout + done.stderr
        return done.stdout

    for p in range(2):
        send(eventhub.connection_string, _readings(p * 60, 60), partition_id=str(p))
    pipelines("dry-run")  # analysis only: the source's schema, no read
    assert not (folder / "spark-warehouse").exists() or not _table(folder, "events")
    assert eventhub.emulator.events_sent(eventhub.name) == 0, "a dry run read no event"
    out = pipelines("run")
    assert "Run is COMPLETED" in out, out[-3000:]
    events = _table(folder, "events")
    assert len(events) == 120 and len({(e["partition"], e["sequenceNumber"]) for e in events}) == 120
    readings = _table(folder, "readings")
    assert len(readings) == 120 and Counter(r["device"] for r in readings) == {"d0": 40, "d1": 40, "d2": 40}
    by_device = {r["device"]: r["readings"] for r in _table(folder, "readings_by_device")}
    assert by_device == {"d0": 40, "d1": 40, "d2": 40}
    # more events, a second run: the streaming tables read on from their checkpoints, the view is recomputed
    send(eventhub.connection_string, _readings(120, 30), partition_id="1")
    pipelines("run")
    events = _table(folder, "events")
    assert len(events) == 150 and len({(e["partition"], e["sequenceNumber"]) for e in events}) == 150
    assert sum(r["readings"] for r in _table(folder, "readings_by_device")) == 150
