"""The reader in real executor processes (local-cluster) and under Spark Connect, each in its own Spark."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .sdk_helpers import send

pytestmark = [pytest.mark.spark, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def run_app(mode: str, eventhub, tmp_path: Path) -> dict:
    expected = set()
    for p in range(eventhub.partitions):
        bodies = [f"{mode}-{p}-{i}" for i in range(250)]
        send(eventhub.connection_string, bodies, partition_id=str(p))
        expected.update(bodies)
    proc = subprocess.run(
        [sys.executable, "-m", "tests.integration.spark_app", mode, eventhub.connection_string, str(tmp_path), "100"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert len(result["rows"]) == len(expected) and set(result["rows"]) == expected
    assert result["batches"] == 10  # 1000 events, 100 per trigger
    return result


def test_local_cluster_reads_exactly_once_and_reports_receiver_reuse(eventhub, tmp_path):
    result = run_app("local-cluster", eventhub, tmp_path)
    assert result["executors"] == 2
    pool = result["pool"]
    assert pool["tasks"] == 40  # 10 micro-batches x 4 partitions, each task logged its pool figures
    assert pool["hits"] > 0, pool  # receivers were reused across micro-batches
    print(f"receiver pool reuse over local-cluster[2,1,1024]: {pool}")


def test_spark_connect(eventhub, tmp_path):
    run_app("connect", eventhub, tmp_path)
